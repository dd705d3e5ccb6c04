/* test_route_api.c — the routed loop's contract beyond greedy policies (issue 12): a trained-style MLP router equals
 * a slow reference; sampling at temperature > 0 is seeded by position, so a generation split over two calls equals
 * one call; text held back to the end reaches on_text, never a fake token; stats are zeroed even when the call
 * fails at once; n_prompt + n_predict cannot overflow; every token carries its log-probability. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "router/router_internal.h"
#include "support/demo_pair.h"
#include "support/fixtures.h"
#include "tokroute.h"
#include "train/train_fixture.h"

#define N_GEN 40


static tr_context *new_ctx(const tr_model *m) { return demo_context(m, 2); }

static tr_llm_backend *new_backend(const tr_model *llm) { return demo_backend(llm, 2, NULL); }


/* A one-layer MLP router over the hidden state plus the given features (and those of `context` previous
 * positions), deterministic pseudo-random weights. */
/* What the ngram feature's table is built from in these tests (the prompt below, then a continuation). */
#define NGRAM_TEXT "Tom and his dog went to the park. Tom and his dog went to the park. The dog was happy. Tom " \
                   "was happy too. They played in the park and then they went home. The sun was big and warm."

static tr_router *small_mlp_features(const demo_pair *p, unsigned features, int32_t context) {
    const tr_model_info *si = tr_model_get_info(p->slm);
    tr_ngram_table *table = NULL;
    if (features & TR_FEATURE_NGRAM) {
        int32_t text[256];
        const int32_t n = demo_prompt_tokens(p->slm, NGRAM_TEXT, text, 256);
        int32_t gain[256]; /* expected gains that vary with the position, so the gain means do too */
        for (int32_t q = 0; q < n; q++) gain[q] = q % 3 ? (q * 7919) % 65537 : -1;
        const int32_t *seqs[1] = {text}, *gains[1] = {gain};
        ngram_counts *c = NULL;
        assert_int_equal(ngram_counts_build(seqs, gains, &n, 1, NGRAM_ORDER, 1, &c), TR_OK);
        assert_int_equal(ngram_counts_table(c, &table), TR_OK);
        ngram_counts_free(c);
    }
    const int32_t in = tr_router_input_width(features, 0, si->n_embd, context);
    int32_t sizes[3] = {in, 8, 1};
    float *w0 = malloc((size_t)in * 8 * sizeof *w0), b0[8], w1[8], b1[1] = {0.0f};
    uint32_t x = 12345;
    for (int32_t i = 0; i < in * 8; i++) {
        x = x * 1664525u + 1013904223u;
        w0[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.6f;
    }
    for (int i = 0; i < 8; i++) b0[i] = 0.05f * (float)i, w1[i] = i % 2 ? 0.7f : -0.5f;
    const float *ws[2] = {w0, w1}, *bs[2] = {b0, b1};
    tr_mlp_router_desc d = {.n_layers = 2, .sizes = sizes, .weights = ws, .biases = bs,
                            .features = features, .tau = 0.5f, .slm_name = si->name,
                            .slm_n_embd = si->n_embd, .slm_n_vocab = si->n_vocab, .context = context,
                            .ngram = table};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    free(w0);
    ngram_table_free(table);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, si, &r), TR_OK);
    remove(path);
    return r;
}

static tr_router *small_mlp(const demo_pair *p) { return small_mlp_features(p, TR_FEATURE_MAXPROB, 0); }

/* Fresh contexts at every step, the whole sequence from scratch; the given router decides. */
static void slow_reference(const demo_pair *p, tr_router *router, const int32_t *prompt, int32_t n_prompt, float tau,
                           int32_t *out, float *scores) {
    int32_t seq[256];
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    int32_t len = n_prompt;
    const tr_model_info *si = tr_model_get_info(p->slm);
    for (int32_t i = 0; i < N_GEN; i++) {
        tr_context *s = new_ctx(p->slm);
        assert_int_equal(tr_context_eval(s, seq, len, TR_EVAL_LOGITS_LAST), TR_OK);
        assert_int_equal(tr_router_score(router, tr_context_hidden(s, -1), si->n_embd, tr_context_logits(s, -1),
                                         si->n_vocab, &scores[i]), TR_OK);
        int32_t tok = tr_argmax(tr_context_logits(s, -1), si->n_vocab);
        if (scores[i] < tau) {
            tr_context *l = new_ctx(p->llm);
            assert_int_equal(tr_context_eval(l, seq, len, TR_EVAL_LOGITS_LAST), TR_OK);
            tok = tr_argmax(tr_context_logits(l, -1), si->n_vocab);
            tr_context_free(l);
        }
        tr_context_free(s);
        out[i] = seq[len++] = tok;
    }
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void mlp_router_equals_slow_reference(void **state) {
    demo_pair *p = *state;
    tr_router *router = small_mlp(p);
    int32_t prompt[64], out[N_GEN], ref[N_GEN];
    float scores[N_GEN], sorted[N_GEN];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Tom and his dog went to the park.", prompt, 64);
    /* First pass with tau 0 only to learn the score range; then tau at the median of the SLM-only path's scores. */
    slow_reference(p, router, prompt, n_prompt, 0.0f, ref, scores);
    memcpy(sorted, scores, sizeof sorted);
    qsort(sorted, N_GEN, sizeof *sorted, cmp_float);
    const float tau = sorted[N_GEN / 2];
    slow_reference(p, router, prompt, n_prompt, tau, ref, scores);
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm);
    tr_route_params rp = tr_route_default_params();
    rp.tau = tau;
    rp.n_predict = N_GEN;
    rp.stop_at_eog = false;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, out, N_GEN, &st), TR_OK);
    assert_memory_equal(out, ref, sizeof ref);
    int32_t routed = 0;
    for (int i = 0; i < N_GEN; i++) routed += scores[i] < tau;
    fprintf(stderr, "MLP router: %d of %d routed at tau %.4f\n", routed, N_GEN, tau);
    assert_true(routed >= 3 && routed <= N_GEN - 3);
    assert_int_equal(st.n_routed, routed);
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
    tr_router_free(router);
}

static tr_route_params sampled(float tau, int32_t n) {
    tr_route_params rp = tr_route_default_params();
    rp.tau = tau;
    rp.n_predict = n;
    rp.stop_at_eog = false;
    rp.sampling.temperature = 0.9f;
    rp.sampling.top_k = 0;
    rp.sampling.top_p = 1.0f;
    rp.sampling.seed = 42;
    return rp;
}

/* Temperature > 0, routed: deterministic for a seed, different for another, LLM tokens are the LLM's argmax, and
 * a generation split over two calls (a conversation's turns) equals one call: draws depend on the position. */
static void temperature_above_zero(void **state) {
    demo_pair *p = *state;
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm);
    int32_t prompt[128], a[N_GEN], b[N_GEN], c[N_GEN], greedy[N_GEN];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 64);
    tr_route_params rp = sampled(0.4f, N_GEN);
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, a, N_GEN, &st), TR_OK);
    assert_true(st.n_routed > 0);
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, b, N_GEN, &st), TR_OK);
    assert_memory_equal(a, b, sizeof a);
    rp.sampling.seed = 43;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, c, N_GEN, &st), TR_OK);
    assert_memory_not_equal(a, c, sizeof a);
    rp.sampling.temperature = 0.0f;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, greedy, N_GEN, &st), TR_OK);
    assert_memory_not_equal(a, greedy, sizeof a);
    /* Split: N_GEN/2 tokens, then the rest from prompt + those. SLM-only, so the only randomness is the SLM's. */
    rp = sampled(0.0f, N_GEN);
    rp.mode = TR_MODE_SLM;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, a, N_GEN, &st), TR_OK);
    rp.n_predict = N_GEN / 2;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, b, N_GEN, &st), TR_OK);
    memcpy(prompt + n_prompt, b, (size_t)(N_GEN / 2) * sizeof *b);
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt + N_GEN / 2, &rp, b + N_GEN / 2, N_GEN / 2,
                                       &st), TR_OK);
    assert_memory_equal(a, b, sizeof a);
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
    tr_router_free(router);
}

typedef struct texts {
    char token_text[4096], all_text[4096];
    size_t token_len, all_len;
    int tail_calls, bad_index;
} texts;

static bool on_token(void *user, const tr_route_token *t) {
    texts *x = user;
    if (t->index < 0 || t->id < 0) x->bad_index++;
    memcpy(x->token_text + x->token_len, t->text, t->text_len);
    x->token_len += t->text_len;
    return true;
}

static bool on_text(void *user, const char *text, size_t len, const tr_route_token *t) {
    texts *x = user;
    x->tail_calls += t == NULL;
    memcpy(x->all_text + x->all_len, text, len);
    x->all_len += len;
    x->all_text[x->all_len] = '\0';
    return true;
}

/* The end of the text is held back as a possible start of a stop string and released at the end: on_text gets it
 * with no token; on_token never sees a fake token. */
static void tail_text_has_its_own_signal(void **state) {
    demo_pair *p = *state;
    tr_context *ctx = new_ctx(p->slm);
    int32_t prompt[64];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 64);
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_SLM;
    rp.n_predict = 6; /* ", there was a little girl" */
    rp.stop_at_eog = false;
    texts full = {0};
    rp.on_token = on_token;
    rp.on_text = on_text;
    rp.user = &full;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, NULL, 0, NULL), TR_OK);
    assert_int_equal(full.tail_calls, 0);
    /* A stop string starting with the text's last character and never completed holds that character back. */
    char stop[8] = {full.all_text[full.all_len - 1], '\x01', 0};
    const char *stops[1] = {stop};
    rp.stop = stops;
    rp.n_stop = 1;
    texts cut = {0};
    rp.user = &cut;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, NULL, 0, NULL), TR_OK);
    assert_int_equal(cut.bad_index, 0);
    assert_int_equal(cut.tail_calls, 1);
    assert_int_equal(cut.token_len, full.all_len - 1);
    assert_string_equal(cut.all_text, full.all_text);
    tr_context_free(ctx);
}

static void stats_zeroed_and_no_overflow(void **state) {
    demo_pair *p = *state;
    tr_context *ctx = new_ctx(p->slm);
    int32_t prompt[2] = {1, 403};
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_SLM;
    tr_route_stats st;
    memset(&st, 0x5a, sizeof st);
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, 0, &rp, NULL, 0, &st), TR_ERR_ARG);
    assert_int_equal(st.n_tokens, 0);
    assert_int_equal(st.n_prompt, 0);
    assert_true(st.total_ms == 0.0);
    assert_int_equal(st.n_fallback, 0);
    /* n_prompt + n_predict above INT32_MAX must not wrap around and pass the context check. */
    rp.n_predict = INT32_MAX;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, 2, &rp, NULL, 0, &st), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "exceed the SLM context")); /* refused up front, nothing generated */
    assert_int_equal(st.n_tokens, 0);
    tr_context_free(ctx);
}

typedef struct lp_rec {
    int32_t n;
    float logprob[N_GEN];
    int32_t id[N_GEN];
} lp_rec;

static bool record_lp(void *user, const tr_route_token *t) {
    lp_rec *r = user;
    r->logprob[r->n] = t->logprob;
    r->id[r->n++] = t->id;
    return true;
}

/* log-softmax from a fresh evaluation, in double precision. */
static double ref_logprob(const tr_model *m, const int32_t *seq, int32_t len, int32_t id) {
    tr_context *c = new_ctx(m);
    assert_int_equal(tr_context_eval(c, seq, len, TR_EVAL_LOGITS_LAST), TR_OK);
    const float *l = tr_context_logits(c, -1);
    const int32_t V = tr_model_get_info(m)->n_vocab;
    double mx = l[0], sum = 0;
    for (int32_t i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int32_t i = 0; i < V; i++) sum += exp(l[i] - mx);
    const double r = l[id] - mx - log(sum);
    tr_context_free(c);
    return r;
}

static void tokens_carry_logprobs(void **state) {
    demo_pair *p = *state;
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm);
    int32_t seq[128];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "The little bird", seq, 64);
    for (int mode = 0; mode < 2; mode++) {
        tr_route_params rp = tr_route_default_params();
        rp.mode = mode ? TR_MODE_LLM : TR_MODE_SLM;
        rp.n_predict = 12;
        rp.stop_at_eog = false;
        lp_rec r = {0};
        rp.on_token = record_lp;
        rp.user = &r;
        assert_int_equal(tr_route_generate(ctx, NULL, llm, seq, n_prompt, &rp, NULL, 0, NULL), TR_OK);
        int32_t full[128];
        memcpy(full, seq, (size_t)n_prompt * sizeof *seq);
        for (int32_t i = 0; i < r.n; i++) {
            const double want = ref_logprob(mode ? p->llm : p->slm, full, n_prompt + i, r.id[i]);
            assert_true(r.logprob[i] <= 0.0f);
            assert_true(fabs(r.logprob[i] - want) < 1e-3);
            full[n_prompt + i] = r.id[i];
        }
    }
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
}

typedef struct scored {
    int32_t n;
    int32_t ids[N_GEN];
    float scores[N_GEN];
} scored;

static bool record_score(void *user, const tr_route_token *t) {
    scored *s = user;
    assert_true(s->n < N_GEN);
    s->ids[s->n] = t->id;
    s->scores[s->n++] = t->score;
    return true;
}

static void run_scored(const demo_pair *p, tr_router *router, const int32_t *prompt, int32_t n_prompt, float tau,
                       int32_t depth, int32_t lookahead, scored *out) {
    memset(out, 0, sizeof *out);
    tr_context *ctx = new_ctx(p->slm);
    tr_llm_backend *llm = new_backend(p->llm);
    tr_route_params rp = tr_route_default_params();
    rp.tau = tau;
    rp.n_predict = N_GEN;
    rp.stop_at_eog = false;
    rp.speculate_depth = depth;
    rp.lookahead = lookahead;
    rp.on_token = record_score;
    rp.user = out;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, llm, prompt, n_prompt, &rp, NULL, 0, &st), TR_OK);
    assert_int_equal(out->n, N_GEN);
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
}

/* The finished sequence as collect would store it (one example, positions 1..n-1, teacher forced), for
 * training's input rows. */
typedef struct collected_seq {
    tr_context *tf;
    const int32_t *seq;
    int32_t n_vocab, n_embd;
} collected_seq;

static void fill_collected(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)ex;
    (void)topk;
    const collected_seq *c = user;
    const float *logits = tr_context_logits(c->tf, pos - 1);
    r->truth = r->llm_top1 = c->seq[pos];
    r->slm_top1 = tr_argmax(logits, c->n_vocab);
    r->slm_p_top1 = r->llm_p_top1 = r->slm_p_truth = r->llm_p_truth = 0.5f;
    router_logit_features(TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN, 0, logits, c->n_vocab,
                          r->stats);
    memcpy(hidden, tr_context_hidden(c->tf, pos - 1), (size_t)c->n_embd * sizeof *hidden);
}

/* A router reading the previous positions (context 2) keeps per-sequence state, and one reading the tokens
 * (induction, ngram) is given each branch's: each generated token's score equals the score of the finished sequence
 * evaluated in one pass and scored position by position after the prompt's last positions were shown to it, and
 * the score training's input row gives when that sequence is collected as data; with speculation and lookahead
 * (tokens scored ahead, then rolled back) the scores are the synchronous loop's, bit for bit; and a second
 * generation does not read the first one's positions. */
static void scores_as_trained(demo_pair *p, unsigned features) {
    tr_router *router = small_mlp_features(p, features, 2);
    assert_int_equal(tr_router_context(router), 2);
    const tr_model_info *si = tr_model_get_info(p->slm);
    int32_t prompt[64];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Tom and his dog went to the park.", prompt, 64);
    scored first, sync, spec;
    run_scored(p, router, prompt, n_prompt, 0.0f, 0, 0, &first);
    float sorted[N_GEN];
    memcpy(sorted, first.scores, sizeof sorted);
    qsort(sorted, N_GEN, sizeof *sorted, cmp_float);
    const float tau = sorted[N_GEN / 3];
    run_scored(p, router, prompt, n_prompt, tau, 0, 0, &sync);
    run_scored(p, router, prompt, n_prompt, tau, 6, 3, &spec);
    assert_memory_equal(spec.ids, sync.ids, sizeof sync.ids);
    assert_memory_equal(spec.scores, sync.scores, sizeof sync.scores);
    int32_t routed = 0;
    for (int i = 0; i < N_GEN; i++) routed += sync.scores[i] < tau;
    assert_true(routed >= 3);
    /* The finished sequence, teacher forced: one pass, every position's logits. */
    int32_t seq[64 + N_GEN];
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    memcpy(seq + n_prompt, sync.ids, sizeof sync.ids);
    tr_context *tf = new_ctx(p->slm);
    assert_int_equal(tr_context_eval(tf, seq, n_prompt + N_GEN - 1, TR_EVAL_LOGITS_ALL), TR_OK);
    tr_router_reset(router);
    assert_int_equal(tr_router_tokens(router, seq, n_prompt + N_GEN), TR_OK);
    for (int32_t q = n_prompt - 2; q < n_prompt; q++)
        assert_int_equal(tr_router_observe(router, q, tr_context_hidden(tf, q - 1), si->n_embd,
                                           tr_context_logits(tf, q - 1), si->n_vocab), TR_OK);
    float worst = 0, blind_worst = 0;
    for (int32_t i = 0; i < N_GEN; i++) {
        const int32_t q = n_prompt + i;
        float s;
        assert_int_equal(tr_router_score_at(router, q, tr_context_hidden(tf, q - 1), si->n_embd,
                                            tr_context_logits(tf, q - 1), si->n_vocab, &s), TR_OK);
        worst = fmaxf(worst, fabsf(s - sync.scores[i]));
    }
    /* Against the same positions without the previous ones: what a router without its state would score. */
    for (int32_t i = 0; i < N_GEN; i++) {
        const int32_t q = n_prompt + i;
        float s;
        tr_router_reset(router);
        assert_int_equal(tr_router_tokens(router, seq, q), TR_OK);
        assert_int_equal(tr_router_score_at(router, q, tr_context_hidden(tf, q - 1), si->n_embd,
                                            tr_context_logits(tf, q - 1), si->n_vocab, &s), TR_OK);
        blind_worst = fmaxf(blind_worst, fabsf(s - sync.scores[i]));
    }
    fprintf(stderr, "context router: %d of %d routed; scores within %.2g of the teacher-forced sequence's (%.2g "
            "without the previous positions)\n", routed, N_GEN, (double)worst, (double)blind_worst);
    assert_true(worst < 1e-4f);
    assert_true(blind_worst > 1e-2f);
    /* The sequence collected as data: training's rows score as generation did. */
    const char *dir = temp_path("");
    const collected_seq c = {.tf = tf, .seq = seq, .n_vocab = si->n_vocab, .n_embd = si->n_embd};
    const toy_spec spec_data = {.n_embd = (uint32_t)si->n_embd, .n_vocab = (uint32_t)si->n_vocab, .topk = 1,
                                .n_examples = 1, .per_example = n_prompt + N_GEN - 1};
    assert_int_equal(toy_write(dir, &spec_data, fill_collected, (void *)&c), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    float *trained = malloc((size_t)spec_data.per_example * sizeof *trained);
    assert_int_equal(tr_train_data_scores(d, router, trained), TR_OK);
    float trained_worst = 0;
    for (int32_t i = 0; i < N_GEN; i++) trained_worst = fmaxf(trained_worst, fabsf(trained[n_prompt + i - 1] - sync.scores[i]));
    fprintf(stderr, "training's rows within %.2g of the generation's scores\n", (double)trained_worst);
    assert_true(trained_worst < 1e-4f);
    if (features & TR_FEATURE_INDUCTION) { /* the tokens matter: a sequence's repeats are found */
        int32_t found = 0;
        for (int32_t q = n_prompt; q < n_prompt + N_GEN; q++) {
            float v[TR_ROUTER_INDUCTION_VALUES];
            router_induction_values(seq, q, 0, v);
            found += v[0] == 1.0f;
        }
        assert_true(found >= 3);
    }
    if (features & TR_FEATURE_NGRAM) { /* the table matters: contexts of the generation are held, with gains */
        int32_t found = 0, gained = 0;
        for (int32_t q = n_prompt; q < n_prompt + N_GEN; q++) {
            float v[TR_ROUTER_NGRAM_VALUES];
            router_ngram_lookup(router_mlp(router)->ngram, seq, q, 0, v);
            found += v[0] == 1.0f;
            gained += v[6] > 0.0f;
        }
        assert_true(found >= 3);
        assert_true(gained >= 3);
    }
    free(trained);
    tr_train_data_free(d);
    toy_remove(dir);
    tr_context_free(tf);
    tr_router_free(router);
}

static void context_router_scores_as_trained(void **state) { scores_as_trained(*state, TR_FEATURE_MAXPROB); }

static void induction_router_scores_as_trained(void **state) {
    scores_as_trained(*state, TR_FEATURE_MAXPROB | TR_FEATURE_INDUCTION);
}

/* With the n-gram table too (its values after induction's): calibrate's rows read the router's table. */
static void ngram_router_scores_as_trained(void **state) {
    scores_as_trained(*state, TR_FEATURE_MAXPROB | TR_FEATURE_INDUCTION | TR_FEATURE_NGRAM);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mlp_router_equals_slow_reference),
        cmocka_unit_test(context_router_scores_as_trained),
        cmocka_unit_test(induction_router_scores_as_trained),
        cmocka_unit_test(ngram_router_scores_as_trained),
        cmocka_unit_test(temperature_above_zero),
        cmocka_unit_test(tail_text_has_its_own_signal),
        cmocka_unit_test(stats_zeroed_and_no_overflow),
        cmocka_unit_test(tokens_carry_logprobs),
    };
    return cmocka_run_group_tests(tests, demo_pair_setup, demo_pair_teardown);
}
