/* multi.h — evaluation of several independent sequences in one forward pass (the server's batching). Each
 * sequence owns only its KV cache (kv_seq); one engine (multi_engine) owns the thread pool, the activation buffers
 * and the scratch shared by every pass. */
#ifndef TR_MODEL_MULTI_H
#define TR_MODEL_MULTI_H

#include "model/model_internal.h"

/* One sequence's KV cache. Capacity grows by doubling up to max_ctx (a relayout copy), so a session costs memory
 * for the positions it uses, not for a full context. */
typedef struct kv_seq {
    const tr_model *model;
    kv_cache kv;        /* kv.n_ctx is the current capacity */
    int32_t max_ctx;    /* capacity never grows past this */
    int32_t n_past;
    int32_t *tokens;    /* [capacity] tokens in the cache */
    struct seq_state *state; /* the family's state beyond the KV cache and its checkpoints (seq_state.c), or NULL */
} kv_seq;

/* Bytes of K and V for a capacity of n_ctx positions, in the model's KV type (tr_model_params.kv_type). */
size_t kv_seq_bytes_for(const tr_model *m, int32_t n_ctx);
tr_status kv_seq_create(const tr_model *m, int32_t initial_ctx, int32_t max_ctx, kv_seq **out);
void kv_seq_free(kv_seq *s);
size_t kv_seq_bytes(const kv_seq *s);
/* Capacity this sequence would have to hold n positions (>= n, a power-of-two step, <= max_ctx); 0 if n > max. */
int32_t kv_seq_capacity_for(const kv_seq *s, int32_t n);
/* Grows the cache to hold at least n positions (keeps the first n_past). */
tr_status kv_seq_reserve(kv_seq *s, int32_t n);
void kv_seq_truncate(kv_seq *s, int32_t n_past);

typedef struct multi_engine multi_engine;
/* max_rows: most tokens (over all sequences) in one pass; max_ctx: longest sequence. */
tr_status multi_engine_create(const tr_model *m, int32_t n_threads, int32_t max_rows, int32_t max_ctx,
                              multi_engine **out);
void multi_engine_free(multi_engine *e);
int32_t multi_engine_max_rows(const multi_engine *e);
/* The engine's threads, idle between passes: the caller of multi_forward may run its own work on them then. */
thread_pool *multi_engine_pool(multi_engine *e);

/* Appends tokens[i][0..n_tokens[i]) to sequence seqs[i] (each reserved beforehand to hold them) for i < n_seq,
 * all in one pass, and writes the logits of each sequence's last new token to logits_out[i * n_vocab]. Sum of
 * n_tokens must be <= max_rows, every n_tokens[i] >= 1, ids checked by the caller. On failure no n_past moves. */
tr_status multi_forward(multi_engine *e, kv_seq *const *seqs, const int32_t *const *tokens, const int32_t *n_tokens,
                        int32_t n_seq, float *logits_out);

#endif /* TR_MODEL_MULTI_H */
