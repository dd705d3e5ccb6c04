/* router_internal.h — what the files of src/router share: the statistics of a logit row (policy.c), the MLP
 * network and its forward pass (mlp.c), and loading an MLP router file into it (router_file.c). router.c puts them
 * behind the public tr_router handle.
 */
#ifndef TR_ROUTER_INTERNAL_H
#define TR_ROUTER_INTERNAL_H

#include "kernels/kernels.h"
#include "tokroute.h"

#define ROUTER_ARCH "tokroute-router"
#define ROUTER_MAX_LAYERS 64
#define ROUTER_MAX_WIDTH (1 << 20)
#define ROUTER_DEFAULT_TAU 0.5f
#define ROUTER_LOGIT_FEATURES (TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN | TR_FEATURE_TOPK_LOGPROBS)
#define ROUTER_FEATURE_ALL \
    (ROUTER_LOGIT_FEATURES | TR_FEATURE_TOKEN_EMBEDDING | TR_FEATURE_INDUCTION | TR_FEATURE_NGRAM)
/* Features that read the sequence's tokens (tr_router_tokens). */
#define ROUTER_TOKEN_FEATURES (TR_FEATURE_INDUCTION | TR_FEATURE_NGRAM)
#define ROUTER_INDUCTION_MATCH_MAX 8 /* tokens of an occurrence's match counted (the one at p-1 included) */

/* ---------------------------------------------------------------- policy.c */

/* Softmax statistics of one row of logits at temperature 1. All three lie in [0, 1]. A row with a NaN or +inf
 * logit, or with every logit -inf, has no distribution: valid is false and the three are 0 (callers then score 0,
 * so the token goes to the LLM). */
typedef struct logit_stats {
    float maxprob;      /* top-1 probability */
    float margin;       /* top-1 minus top-2 probability (1 when n_vocab is 1) */
    float entropy_norm; /* entropy / ln(n_vocab); 0 when n_vocab is 1 */
    bool valid;
} logit_stats;

void logit_stats_compute(const float *logits, int32_t n_vocab, logit_stats *out);
#if TR_HAVE_X86
/* policy_avx2.c, n a multiple of 8, needing AVX2 and FMA: per lane j the two largest of logits[j], logits[j+8], ...
 * (8 each) and whether any logit is NaN or +inf; */
void logit_top2_avx2(const float *logits, int32_t n, float *m1_lanes, float *m2_lanes, int *bad);
/* and s = sum exp(l_i - m) and t = sum (l_i - m) exp(l_i - m) over n logits. */
void logit_sums_avx2(const float *logits, int32_t n, float m, double *s, double *t);
#endif
/* Score of a training-free policy (not TR_POLICY_MLP), in [0, 1]. */
float policy_score(tr_policy policy, const logit_stats *st);

/* ---------------------------------------------------------------- features.c */

#define ROUTER_TOPK_FLOOR (-50.0f) /* top-k log-probs below this are stored as this */
/* The values the features add after the hidden state, from one row of logits, in the fixed order maxprob,
 * entropy, margin, top-k log-probs. Writes tr_router_feature_width(features, topk) floats; all 0 when the
 * logits are not a distribution. Collect stores exactly these, so training and scoring see the same numbers. */
void router_logit_features(unsigned features, int32_t topk, const float *logits, int32_t n_vocab, float *out);
/* The bit for a name, 0 when unknown. */
unsigned feature_from_name(const char *name);
/* Row id of the SLM's token embedding table as n_embd floats (TR_FEATURE_TOKEN_EMBEDDING). */
tr_status slm_token_embedding(const tr_model *slm, int32_t id, float *out);
/* TR_FEATURE_INDUCTION's TR_ROUTER_INDUCTION_VALUES values for position p, tok[q] the token at position q for
 * q < p (position 0, BOS, is never read). x = tok[p-1], the token the SLM just read; among its earlier
 * occurrences q in 1..p-2, the one whose preceding tokens match those before p-1 longest (m = 1 + matches, at
 * most ROUTER_INDUCTION_MATCH_MAX, q-m >= 1; ties: the latest), c = tok[q+1]. Values: found, m / 8, m >= 2,
 * c == slm_top1, found and c != slm_top1, ln(1 + p-1-q) (0 if none), ln(1 + occurrences of x). */
void router_induction_values(const int32_t *tok, int64_t p, int32_t slm_top1, float *out);
/* The values read from the sequence's tokens, after the context positions: induction's, then ngram's. */
int32_t router_token_values_width(unsigned features);

/* ---------------------------------------------------------------- ngram.c */

#define NGRAM_ORDER 6               /* K: the orders the trainer's tables hold (1..K) */
#define NGRAM_MIN_COUNT 5           /* contexts seen fewer times are left out */
#define NGRAM_ORDER_MAX 8           /* the most a router file may hold */
#define NGRAM_START (-1)            /* position 0 in a context, whatever its token */
#define NGRAM_EXACT_MAX (1 << 24)   /* token ids and counts stay below this (exact in an F32) */
#define NGRAM_STATS 6               /* the columns of ngram.<k>.stats */
#define NGRAM_GAIN_SCALE 65536.0    /* an expected gain g counts as the integer llround(g * scale) */

/* One context's counts (a row of ngram.<k>.stats, in this order): C, its top follower t1 seen M1 times, the
 * second t2 seen M2 times (t2 = -1, M2 = 0 when there is one follower; ties go to the smaller id), and the mean
 * expected gain of the positions that followed it (ngram_gain_mean). */
typedef struct ngram_stats {
    int32_t count, t1, m1, t2, m2;
    float gain_mean;
} ngram_stats;
typedef struct ngram_order_table {
    int64_t n;
    int32_t *context;               /* [n][k], nearest token first, sorted lexicographically */
    ngram_stats *stats;             /* [n] */
} ngram_order_table;
struct tr_ngram_table {
    int32_t order, min_count;
    ngram_order_table orders[NGRAM_ORDER_MAX]; /* orders[k - 1]: contexts of k tokens */
};

/* TR_FEATURE_NGRAM's values from the counts of the context used (of order k of the table's order; s NULL: no
 * context found): found = 1, the share of C that followed with slm_top1 when it is t1 or t2 (else 0), M1 / C,
 * slm_top1 == t1, ln(1 + C), k / order, the context's mean expected gain. Divisions and the log in double, then
 * rounded to float. The one place the values are defined: training (leave-one-example-out counts) and the router
 * (the table) both call it. */
void router_ngram_values(const ngram_stats *s, int32_t k, int32_t order, int32_t slm_top1, float *out);
/* An expected gain g in [0, 1] as the integer the table sums (llround(g * NGRAM_GAIN_SCALE)), so that leaving an
 * example out is exact integer subtraction. */
int32_t ngram_gain_quantize(float g);
/* The mean of n quantized gains summing to sum (0 when n = 0): what ngram.<k>.stats's last column holds, computed
 * the same way by the table and by training's leave-one-example-out rows. */
float ngram_gain_mean(int64_t sum, int64_t n);
/* The order-k context of position p (tok[q] the token at q; position 0 read as NGRAM_START), nearest first. */
void ngram_context_at(const int32_t *tok, int64_t p, int32_t k, int32_t *ctx);
/* The values at position p from the table: the highest order whose context it holds. */
void router_ngram_lookup(const tr_ngram_table *t, const int32_t *tok, int64_t p, int32_t slm_top1, float *out);
void ngram_table_free(tr_ngram_table *t);
int64_t ngram_table_contexts(const tr_ngram_table *t);
/* The bytes its tensors take in a router file. */
int64_t ngram_table_bytes(const tr_ngram_table *t);
/* Every rule of the file format (ngram.c's header) on a table in memory; TR_ERR_FORMAT naming the one broken. */
tr_status ngram_table_check(const tr_ngram_table *t, int64_t n_vocab);
/* Reads and checks the table's tensors (order and min_count from the file's keys). */
tr_status ngram_table_read(const tr_gguf *g, int32_t order, int32_t min_count, int64_t n_vocab,
                           tr_ngram_table **out);
/* Whether a tensor name is one of a table of this order's. */
bool ngram_tensor_name(const char *name, int32_t order);
tr_status ngram_table_add_tensors(tr_gguf_writer *w, const tr_ngram_table *t);

/* ---------------------------------------------------------------- mlp.c */

/* Layer i maps sizes[i] inputs to sizes[i+1] outputs: weights[i] is [sizes[i+1]][sizes[i]] row-major F32 (the
 * GGUF tensor's ne = [in, out]), biases[i] has sizes[i+1] entries. All weights live in one block owned here. */
typedef struct mlp_net {
    int32_t n_layers;
    int32_t sizes[ROUTER_MAX_LAYERS + 1];
    float *weights[ROUTER_MAX_LAYERS];
    float *biases[ROUTER_MAX_LAYERS];
    float *block;              /* every weight and bias */
    float *input;              /* [sizes[0]]: hidden state, then features */
    float *act[2];             /* ping-pong activations, each the widest layer */
    matmul_scratch scratch;    /* F32 products never grow it; kept so the call cannot allocate by surprise */
    thread_pool *pool;         /* optional (tr_router_set_threads); not owned by the net */
    unsigned features;         /* tr_router_feature bits */
    int32_t topk;              /* k of TR_FEATURE_TOPK_LOGPROBS (0 when unused) */
    int32_t context;           /* previous positions read (0: none) */
    /* Per-sequence state of a router with context: the inputs of the positions scored or observed so far (hidden
     * state and logit features, tr_router_context_width floats each), slot position % ring_size, tagged with the
     * position (-1: empty). A position scored again (after speculation is rolled back) overwrites its slot, so a
     * score only ever reads the latest inputs of positions p-1 .. p-context. */
    int32_t ring_size, context_width;
    float *ring;               /* [ring_size][context_width] */
    int64_t *ring_pos;         /* [ring_size] */
    int64_t last_position;     /* the latest position scored or observed (-1: none since the reset) */
    const tr_model *slm;       /* tr_router_set_slm: token embeddings (not owned) */
    int32_t *tokens;           /* ROUTER_TOKEN_FEATURES: the sequence's tokens (tr_router_tokens), a copy */
    tr_ngram_table *ngram;     /* TR_FEATURE_NGRAM: the table (owned) */
    int64_t n_tokens, tokens_cap;
    float tau;
    char *slm_name;
    int32_t slm_n_embd, slm_n_vocab;
} mlp_net;

/* Allocates the weight block and the scratch for the given shape (sizes checked by the caller); weights and biases
 * are then filled in place. */
tr_status mlp_alloc(mlp_net *net, int32_t n_layers, const int32_t *sizes);
void mlp_free(mlp_net *net);
/* Positions ahead of the oldest one a score may still read that the ring keeps: speculation scores at most
 * speculate_depth (<= 1024) positions plus a lookahead (<= TR_LOOKAHEAD_MAX) ahead before rolling back. */
#define ROUTER_RING_AHEAD (1024 + TR_LOOKAHEAD_MAX + 1)
/* Allocates the per-sequence ring of a net with context (after its sizes and features are known). */
tr_status mlp_alloc_ring(mlp_net *net);
/* Forgets every position (a new sequence). */
void mlp_reset(mlp_net *net);
/* Forward pass for the given position of the sequence. hidden has slm_n_embd entries; logits (slm_n_vocab
 * entries) is read only when the net has features; the token-embedding feature needs net->slm and induction
 * net->tokens up to position (both checked by the caller). With context, reads the ring's positions before it (zeros where absent) and stores this position's
 * inputs there. Allocates nothing. */
float mlp_forward(mlp_net *net, int64_t position, const float *hidden, const float *logits, int32_t n_vocab);
/* Stores a position's inputs in the ring without scoring it (prompt positions). */
void mlp_observe(mlp_net *net, int64_t position, const float *hidden, const float *logits, int32_t n_vocab);
/* Forward pass over a ready input vector of sizes[0] values (training data already holds the features). */
float mlp_forward_input(mlp_net *net, const float *input);

/* ---------------------------------------------------------------- router_file.c */

/* Reads and validates a router file into net (zeroed on entry; left freed on failure). */
tr_status router_file_load(const char *path, mlp_net *net);

/* ---------------------------------------------------------------- router.c */

/* The network of an MLP router (NULL for policies). */
mlp_net *router_mlp(tr_router *router);

#endif /* TR_ROUTER_INTERNAL_H */
