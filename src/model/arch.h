/* arch.h — the architecture interface: what a model family (one file under src/model/, arch_<family>.c) tells the
 * engine, and what the engine gives every family. The engine (model_load.c, forward.c, context.c, forward_multi.c)
 * never names a family: it finds the file's general.architecture in the table (families.c), lets the family read
 * its hyperparameters and bind its tensors, and runs its layers over "spans" (one sequence's rows in a pass), the
 * same code for one sequence (tr_context_eval) and for the server's batched pass (multi_forward).
 *
 * Per-sequence state beyond the KV cache (a recurrent state, a convolution window) is declared as a number of
 * floats; the engine keeps it per sequence (seq_state.c) with its checkpoints, truncates it with the KV cache, and
 * replays the kept tokens a rollback needs before the next evaluation, so speculation, draft trees, routing and the
 * server's sessions work for every family without knowing which.
 *
 * Adding a family: see README.md, "Adding an architecture".
 */
#ifndef TR_MODEL_ARCH_H
#define TR_MODEL_ARCH_H

#include <math.h>

#include "model/model_internal.h"
#include "model/synth.h"

/* ---------------------------------------------------------------- per-sequence state (seq_state.c) */

/* Checkpoints kept per sequence (see seq_state.c for which positions get them). */
#define SEQ_CHECKPOINTS 8

/* The state of one sequence beyond its KV cache: the live state after its first `pos` tokens (pos <= the
 * sequence's n_past; positions pos..n_past are replayed from the kept token ids before the next evaluation) and
 * checkpoints of it. Its layout inside the `floats` is the family's. */
typedef struct seq_state {
    int32_t pos;
    size_t floats;                /* floats of one state (the family's state_floats) */
    float *live;
    float *ckpt[SEQ_CHECKPOINTS]; /* allocated on first use */
    int32_t ckpt_pos[SEQ_CHECKPOINTS]; /* -1: empty */
    /* the checkpoints the chunk being evaluated writes: slot per token (-1 none), set by seq_state_plan */
    int8_t *plan;                 /* [plan_cap] */
    int32_t plan_cap, plan_start, plan_n;
} seq_state;

/* NULL in *out (and TR_OK) for a family that keeps no state. */
tr_status seq_state_create(const tr_model *m, seq_state **out);
void seq_state_free(seq_state *s);
/* Bytes a sequence's state and all its checkpoints may take (0 for a family without state). */
size_t seq_state_bytes(const tr_model *m);
/* Before evaluating n tokens at positions s->pos..: picks which of them get a checkpoint of the state before them
 * (plan[t] = slot) and evicts older ones to make room. A layer that advances its part of the state over token t
 * copies that part into ckpt[plan[t]] first (seq_state_slot). */
void seq_state_plan(seq_state *s, int32_t n);
/* The checkpoint token t of the chunk being evaluated must fill, or NULL. */
static inline float *seq_state_slot(const seq_state *s, int32_t t) {
    const int slot = t < s->plan_n ? s->plan[t] : -1;
    return slot >= 0 ? s->ckpt[slot] : NULL;
}
/* After the chunk: the planned checkpoints hold their states, pos advances by n. */
void seq_state_commit(seq_state *s, int32_t n);
/* After a failed chunk: the live state is partly advanced, so it restarts from nothing (pos 0, no checkpoints);
 * the next evaluation replays every kept token. */
void seq_state_reset(seq_state *s);
/* The sequence now keeps only its first n_past tokens: the live state returns to the newest checkpoint at or before
 * n_past (the empty state at 0 if none) unless it is already there or earlier; later checkpoints are dropped. */
void seq_state_truncate(seq_state *s, int32_t n_past);

/* ---------------------------------------------------------------- the interface */

/* One sequence's rows in a pass: rows [row, row + n) of the activations, at positions n_past.., its KV cache and
 * its state (NULL when the family keeps none). */
typedef struct seq_span {
    int32_t row, n, n_past;
    kv_cache *kv;
    seq_state *state;
} seq_span;

typedef struct arch_ops {
    const char *name;    /* general.architecture */
    tr_arch id;
    bool rope_neox;      /* rotate the halves of a head (NEOX) instead of adjacent pairs */
    const char *output_norm;  /* the final norm's tensor (NULL: "output_norm.weight") */
    /* After the common hyperparameters (model_load.c's read_hparams) and the embeddings, output norm and output
     * matrix: reads the family's own hyperparameters and binds and checks every layer's tensors (m->layers is
     * allocated; family data goes in m->family). */
    tr_status (*load)(tr_model *m);
    void (*unload)(tr_model *m);                               /* frees m->family; may be NULL */
    /* Matrices beyond layer_weights' seven to repack (room for 8 per layer); may be NULL. */
    size_t (*repack_list)(tr_model *m, weight_matrix **todo);
    size_t (*state_floats)(const tr_model *m);                 /* per-sequence state; NULL: none */
    /* Per-context buffers for passes of up to cap rows (in ctx->family_buf); both may be NULL. */
    tr_status (*buffers_init)(tr_context *ctx, int32_t cap);
    void (*buffers_free)(tr_context *ctx);
    /* After the token embeddings of rows [row, row + n) (A->x, scaled): what the family keeps per token for its
     * layers (gemma4's per-layer inputs); may be NULL. */
    tr_status (*embed_rows)(tr_context *ctx, const int32_t *tokens, int32_t row, int32_t n);
    /* RoPE tables of rows [row, row + n) at positions pos0.. (rope_rows_default: one table). */
    void (*rope_rows)(const tr_model *m, activations *A, int32_t row, int32_t n, int32_t pos0);
    /* Layer il over the pass's n rows (A->x in and out), spans in row order; the per-sequence state of every
     * span was planned for its rows. */
    tr_status (*layer)(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp);
    /* Elementwise on `count` logits (any slice of a pass's rows: the engine splits them among its threads); may be
     * NULL. */
    void (*logits_post)(const tr_model *m, float *logits, int64_t count);
    /* `tokroute synth` (synth.h): the family's shapes, the metadata they add to the common hyperparameters (may be
     * NULL) and a layer's tensors (NULL: the shared decoder layer's, synth_decoder_layer). */
    const synth_shape *shapes;
    int n_shapes;
    tr_status (*synth_hparams)(tr_gguf_writer *w, const synth_shape *s);
    void (*synth_layer)(synth_plan *pl, const synth_shape *s, int il);
} arch_ops;

/* families.c: the family whose general.architecture is `name`, or NULL; the names of all, ", "-separated, into
 * out (cap bytes). */
const arch_ops *arch_find(const char *name);
void arch_names(char *out, size_t cap);
/* The families in table order (n of them). */
const arch_ops *const *arch_all(size_t *n);

/* ---------------------------------------------------------------- what families share (decoder.c) */

/* Which optional parts a decoder layer has (bind_decoder_layer). */
typedef struct decoder_parts {
    bool qkv_bias;     /* attn_q/k/v.bias required (qwen2; optional otherwise) */
    bool qk_norm;      /* attn_q_norm / attn_k_norm required (qwen3, gemma3) */
    bool post_norms;   /* post_attention_norm / post_ffw_norm (gemma3) */
} decoder_parts;

/* Binds layer il's attention and FFN tensors by llama.cpp's names; its FFN alone (ffn_norm, gate, up, down). */
tr_status bind_decoder_layer(tr_model *m, int il, decoder_parts parts);
tr_status bind_decoder_ffn(tr_model *m, int il);
/* The standard transformer layer: RMSNorm → Q/K/V (+bias) → [per-head Q/K RMSNorm] → RoPE (per layer: none,
 * the main table or the sliding-window one) → [× q_scale] → KV cache → attention → output → [post-norm] →
 * residual → RMSNorm → SwiGLU / GeGLU FFN → [post-norm] → residual. */
tr_status decoder_layer(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp);
/* The same layer around another token mixer: RMSNorm (attn_norm) → mixer (A->xb in, A->xb out) → [post-norm] →
 * residual → FFN → residual. decoder_attention is the layer's own mixer. */
typedef tr_status (*mixer_fn)(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp);
tr_status decoder_block(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp, mixer_fn mixer);
tr_status decoder_attention(tr_context *ctx, int il, int32_t n, const seq_span *sp, int32_t n_sp);
/* Causal depthwise convolution of K taps over C channels of n rows (rows[t * stride + c], in place), as
 * ggml_ssm_conv: each channel's window is the K - 1 inputs before (kept in the sequence's state at `offset`,
 * [C][K - 1], oldest first) and the row's own; the sum in tap order, optionally through SiLU. Planned checkpoints
 * get the window before their token. Over the pool by channels. */
void causal_conv(tr_context *ctx, const float *kernel, int32_t K, int32_t C, seq_state *state, size_t offset,
                 float *rows, int64_t stride, int32_t n, bool silu);
static inline float siluf(float x) { return x / (1.0f + expf(-x)); }
/* Final logit softcapping, logits = c · tanh(logits / c) when m->logit_softcap = c > 0 (gemma3, gemma4). */
void logits_softcap(const tr_model *m, float *logits, int64_t count);
void rope_rows_default(const tr_model *m, activations *A, int32_t row, int32_t n, int32_t pos0);
/* Runs fn(ctx, il, sp, t) for every row t of the pass, shared among the threads by rows (each row's arithmetic is
 * what one thread would do, so the result does not depend on the split). */
typedef void (*row_fn)(tr_context *ctx, int il, const seq_span *sp, int32_t t, void *arg);
void run_rows(tr_context *ctx, int il, const seq_span *sp, int32_t n_sp, int32_t n, row_fn fn, void *arg,
              int64_t work_per_row);
/* The SwiGLU / GeGLU feed-forward of layer il over the n rows of A->xb (RMSNorm'd), output in A->xb. */
tr_status decoder_ffn(tr_context *ctx, int il, int32_t n);

#endif /* TR_MODEL_ARCH_H */
