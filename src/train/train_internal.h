/* train_internal.h — what the files of src/train share: the collected-data file format (data_file.c), the
 * in-memory training data (data_file.c), labels (labels.c), data format names (examples.c) and the trainer's
 * network (trainer_internal.h). Examples are read by the evaluation's dataset module (src/eval/dataset.h).
 *
 * A collect folder holds three files (docs/train.md):
 *   positions.bin  a 512-byte header (collect_header) then fixed-size records, one per predicted position,
 *                  grouped by example in collection order;
 *   tokens.bin     an 8-byte magic then per example: u32 example, u32 count, i32 ids[count] (BOS, the prompt and
 *                  the stored part: what the induction feature reads; folders collected before it lack it, and
 *                  then an example's tokens are its records' references when they start at position 1);
 *   index.bin      an 8-byte magic then one 16-byte entry per completed example (example, n_positions, offset).
 * An example's records and tokens are appended and flushed first, its index entry after: on resume, index
 * entries whose records lie inside positions.bin are kept, anything after the last one is cut off (tokens.bin
 * after that example's entry), and collection continues with the next example. Everything is little-endian.
 */
#ifndef TR_TRAIN_INTERNAL_H
#define TR_TRAIN_INTERNAL_H

#include <stdio.h>

#include "tokroute.h"

#define COLLECT_MAGIC "TRCOLLCT"
#define COLLECT_INDEX_MAGIC "TRCINDEX"
#define COLLECT_VERSION 1u
#define COLLECT_HEADER_BYTES 512u
#define COLLECT_NAME_BYTES 64
#define COLLECT_RECORD_FIXED 64u   /* bytes before the top-k log-probs */
#define COLLECT_INDEX_ENTRY 16u
#define COLLECT_LAST_OFFSET 52     /* header byte offset of `last` (a field a resume may change) */
#define COLLECT_SLM_PATH_OFFSET 224 /* header byte offset of slm_path (a resume may change it: the file may move) */
#define COLLECT_PATH_BYTES 256
#define COLLECT_MAX_EMBD (1 << 16)
#define COLLECT_N_STATS 3          /* maxprob, entropy, margin */
#define COLLECT_N_PROBS 6
#define COLLECT_DATA_FILE "positions.bin"
#define COLLECT_INDEX_FILE "index.bin"
#define COLLECT_TOKENS_FILE "tokens.bin"
#define COLLECT_TOKENS_MAGIC "TRCTOKNS"
#define COLLECT_MAX_TOKENS (1 << 24)

/* Header of positions.bin: everything that must match for a resume to continue the same collect. */
typedef struct collect_header {
    uint32_t version, header_bytes, record_bytes;
    uint32_t n_embd, n_vocab, topk, rollouts;
    uint32_t format, round, max_tokens;
    int32_t first, last;
    uint64_t seed;
    uint64_t data_hash;            /* FNV-1a 64 of the dataset file (0: none) */
    uint32_t llm_n_embd, prompt_tokens;
    float tau;
    uint32_t chat_template;        /* tr_chat_template the question-answering prompts were rendered with */
    uint32_t llm_topk;             /* the LLM's top ids read per position (0: the whole distribution, before 0.x) */
    char slm_name[COLLECT_NAME_BYTES], llm_name[COLLECT_NAME_BYTES];
    char slm_path[COLLECT_PATH_BYTES]; /* the SLM file collect ran with, absolute ("": not recorded) */
} collect_header;

/* One predicted position as collected. Log-probs of the top-k and the hidden state follow it in the file. */
typedef struct collect_record {
    uint32_t example, position;    /* the token at `position` of the example is predicted from those before */
    int32_t truth, slm_top1, llm_top1;
    float slm_p_top1, llm_p_top1, slm_p_truth, llm_p_truth;
    float stats[COLLECT_N_STATS];  /* maxprob, entropy (H / ln V), margin: router_logit_features' values */
    int32_t rollout_slm, rollout_llm; /* reference matches of the K-token continuations (-1: not rolled out) */
    float llm_p_slm_top1;          /* the LLM's probability of the SLM's top-1 token */
    float slm_p_llm_top1;          /* the SLM's probability of the LLM's top-1 token */
} collect_record;

uint32_t collect_record_bytes(uint32_t n_embd, uint32_t topk);
void collect_header_encode(const collect_header *h, unsigned char *buf);   /* COLLECT_HEADER_BYTES */
/* Decodes and validates (magic, version, sizes in bounds); message set on failure. */
tr_status collect_header_decode(const unsigned char *buf, size_t n, collect_header *h);
void collect_record_encode(const collect_record *r, const float *topk, const float *hidden, uint32_t n_topk,
                           uint32_t n_embd, unsigned char *buf);

/* ---------------------------------------------------------------- in-memory data (data_file.c) */

/* Struct of arrays over every position of every folder added, in order. feats holds COLLECT_N_STATS + topk
 * values per position (the stored router_logit_features row), hidden n_embd. group numbers examples across
 * folders (the validation split keeps whole examples together). */
struct tr_train_data {
    int32_t n_embd, n_vocab, topk, rollouts, n_feats;
    int64_t n, cap;
    int32_t n_groups;
    int32_t *group, *truth, *slm_top1, *llm_top1, *rollout_slm, *rollout_llm;
    int32_t *example, *position;   /* as stored in the records (tr_train_data_position) */
    float *probs;                  /* [n][COLLECT_N_PROBS]: slm_p_top1, llm_p_top1, slm_p_truth, llm_p_truth,
                                      llm_p_slm_top1, slm_p_llm_top1 */
    float *feats;                  /* [n][n_feats] */
    float *hidden;                 /* [n][n_embd] */
    /* Each example's tokens (position q at [group_tokens[g] + q]; -1 at q = 0 when derived from records, whose
     * BOS is not stored), group_tokens[g] = -1 when unknown (a prompt not stored and no tokens.bin). */
    int32_t *tokens;
    int64_t n_tokens, tokens_cap;
    float *extra; /* screening: TOKROUTE_EXTRA values per row from each folder's extra.f32 */
    int64_t *group_tokens;
    int32_t *group_n_tokens;
    int32_t *example_of_group;     /* the example index each group was collected as */
    int32_t groups_cap;
    char slm_name[COLLECT_NAME_BYTES];
    char slm_path[COLLECT_PATH_BYTES]; /* the first folder's */
};

/* ---------------------------------------------------------------- labels.c */

/* Training target of position i under a mode: 1 (SLM preferred), 0 (LLM preferred), in between for the expected
 * mode, or -1 (dropped). */
float label_of(const tr_train_data *d, int64_t i, tr_label_mode mode);
/* Label from the raw values (exposed for collect's statistics and tests of the rule). */
int label_rule(int32_t truth, int32_t slm_top1, int32_t llm_top1, int32_t rollout_slm, int32_t rollout_llm,
               tr_label_mode mode);
/* Positions j in [0, n) where cont[j] == ref[j]. */
int32_t rollout_matches(const int32_t *cont, const int32_t *ref, int32_t n);

/* Input row of position i as a router with these features reads it: hidden state, then the chosen features (the
 * token embedding from slm, which may be NULL without that feature), then for each of the context previous
 * positions p-1, p-2, ... of the same example its hidden state and logit features (zeros where the example has no
 * such record: before its first predicted position), then the induction values from the example's tokens. */
tr_status train_input_row(const tr_train_data *d, int64_t i, unsigned features, int32_t topk, int32_t context,
                          const tr_model *slm, float *out);
/* TR_OK when every position's tokens before it are known (what TR_FEATURE_INDUCTION reads); else a message
 * naming an example without them and what to do. */
tr_status train_data_check_tokens(const tr_train_data *d);

/* ---------------------------------------------------------------- examples.c */

uint64_t fnv1a64(const void *data, size_t n, uint64_t h);
#define FNV1A64_INIT 0xcbf29ce484222325ull
/* FNV-1a 64 of a whole file (collect records which data file it read). */
tr_status file_hash(const char *path, uint64_t *hash);
/* A whole file in a malloc'd buffer (data_file.c): *data (freed by the caller) and *size; an error names the path. */
tr_status train_read_file(const char *path, unsigned char **data, size_t *size);

#endif /* TR_TRAIN_INTERNAL_H */
