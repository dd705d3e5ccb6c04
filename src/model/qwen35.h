/* qwen35.h — the qwen35 layout (Qwen3.5): Gated DeltaNet linear-attention layers interleaved with gated
 * full-attention layers, as llama.cpp of 2026-09 runs it (src/models/qwen35.cpp, delta-net-base.cpp). The layout's
 * loader, forward pass and replay live in arch_qwen35.c; the per-sequence recurrent state with its checkpoints in
 * deltanet.c. */
#ifndef TR_MODEL_QWEN35_H
#define TR_MODEL_QWEN35_H

#include "model/model_internal.h"
#include "model/multi.h"

/* One Gated DeltaNet layer's weights (llama.cpp's tensor names in the comments). */
typedef struct deltanet_weights {
    weight_matrix w_qkv;    /* attn_qkv:  [conv_dim rows][n_embd]: q (key_dim), k (key_dim), v (value_dim) */
    weight_matrix w_z;      /* attn_gate: [value_dim][n_embd], the output gate */
    weight_matrix w_beta;   /* ssm_beta:  [n_v_heads][n_embd] */
    weight_matrix w_alpha;  /* ssm_alpha: [n_v_heads][n_embd] */
    weight_matrix w_out;    /* ssm_out:   [n_embd][value_dim] */
    const float *conv;      /* ssm_conv1d: [conv_dim][d_conv] */
    const float *dt_bias;   /* ssm_dt.bias [n_v_heads] */
    const float *a;         /* ssm_a [n_v_heads]: -exp(A_log) */
    const float *norm;      /* ssm_norm [d_state] */
} deltanet_weights;

typedef struct qwen35_model {
    int32_t d_conv;              /* ssm.conv_kernel: taps of the causal convolution */
    int32_t d_state;             /* ssm.state_size: head size of q, k and v */
    int32_t n_k_heads;           /* ssm.group_count */
    int32_t n_v_heads;           /* ssm.time_step_rank */
    int32_t key_dim, value_dim;  /* d_state * n_k_heads, d_state * n_v_heads */
    int32_t conv_dim;            /* 2 * key_dim + value_dim */
    int32_t n_recurrent;         /* Gated DeltaNet layers */
    int32_t *rec_index;          /* [n_layer] index among the recurrent layers, -1 for a full-attention layer */
    bool *no_kv;                 /* [n_layer] true for the recurrent layers (they keep no KV cache) */
    deltanet_weights *dn;        /* [n_layer] (set at the recurrent layers) */
    uint8_t *rope_static;        /* [rope_dim / 2] pairs no M-RoPE section claims: they stay unrotated */
} qwen35_model;

typedef struct qwen35_scratch qwen35_scratch;

/* ---------------------------------------------------------------- the recurrent state (deltanet.c) */

/* Checkpoints kept per sequence (see deltanet.c for which positions get them). */
#define DN_CHECKPOINTS 8

/* The recurrent part of one sequence: the live state after its first `pos` tokens (pos <= the sequence's n_past;
 * positions pos..n_past are replayed from the kept token ids before the next evaluation) and checkpoints of it. */
typedef struct deltanet_state {
    const tr_model *model;
    int32_t pos;
    size_t floats;               /* floats of one state: every recurrent layer's conv, then every layer's delta */
    float *live;
    float *ckpt[DN_CHECKPOINTS]; /* allocated on first use */
    int32_t ckpt_pos[DN_CHECKPOINTS]; /* -1: empty */
    /* the checkpoints the chunk being evaluated writes: slot per token (-1 none), set by deltanet_plan */
    int8_t *plan;                /* [plan_cap] */
    int32_t plan_cap, plan_start, plan_n;
} deltanet_state;

tr_status deltanet_state_create(const tr_model *m, deltanet_state **out);
void deltanet_state_free(deltanet_state *s);
/* Bytes a sequence's recurrent state and all its checkpoints may take. */
size_t deltanet_state_bytes(const tr_model *m);
/* The live state's conv window of recurrent layer r ([conv_dim][d_conv - 1], oldest first) and its delta-rule
 * matrices ([n_v_heads][d_state (v)][d_state (k)]); the same inside a checkpoint via deltanet_slot_*. */
float *deltanet_conv(const deltanet_state *s, float *base, int32_t r);
float *deltanet_delta(const deltanet_state *s, float *base, int32_t r);
/* Before evaluating n tokens at positions s->pos..: picks which of them get a checkpoint of the state before them
 * (plan[t] = slot) and evicts older ones to make room. TR_ERR_NOMEM leaves the state as it was. */
tr_status deltanet_plan(deltanet_state *s, int32_t n);
/* After the chunk: the planned checkpoints hold their states, pos advances by n. */
void deltanet_commit(deltanet_state *s, int32_t n);
/* After a failed chunk: the live state is partly advanced, so it restarts from nothing (pos 0, no checkpoints);
 * the next evaluation replays every kept token. */
void deltanet_reset(deltanet_state *s);
/* The sequence now keeps only its first n_past tokens: the live state returns to the newest checkpoint at or before
 * n_past (the empty state at 0 if none) unless it is already there or earlier; later checkpoints are dropped. */
void deltanet_truncate(deltanet_state *s, int32_t n_past);

/* ---------------------------------------------------------------- the layout (arch_qwen35.c) */

/* model_load.c: reads the ssm.* / full_attention_interval / rope.dimension_sections metadata (after the common
 * hyperparameters) and binds every layer's tensors. */
tr_status qwen35_load(tr_model *m);
void qwen35_free(tr_model *m);
/* Adds the recurrent layers' matrices to `todo` (room for 5 per layer) for repacking; returns how many. */
size_t qwen35_repack_list(tr_model *m, weight_matrix **todo);

/* Per-context buffers (tr_context.q35) and the context's recurrent state (tr_context.dn). */
tr_status qwen35_context_init(tr_context *ctx, int32_t cap, bool with_state);
void qwen35_context_free(tr_context *ctx);

/* forward.c's forward_chunk for this layout (replays pending tokens first). */
tr_status qwen35_forward_chunk(tr_context *ctx, const int32_t *tokens, int32_t n, float *hidden_out,
                               int32_t logits_from, float *logits_out);
/* tr_context_eval: brings the recurrent state up to n_past by replaying the kept tokens after its checkpoint. */
tr_status qwen35_replay_context(tr_context *ctx);
/* forward_multi.c's multi_forward for this layout; `view` is the engine's borrowed context. */
tr_status qwen35_multi_forward(tr_context *view, kv_seq *const *seqs, const int32_t *const *tokens,
                               const int32_t *n_tokens, int32_t n_seq, float *logits_out);

#endif /* TR_MODEL_QWEN35_H */
