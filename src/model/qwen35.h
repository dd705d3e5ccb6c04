/* qwen35.h — the qwen35 family's own weights and hyperparameters (Qwen3.5: Gated DeltaNet linear-attention layers
 * interleaved with gated full-attention layers, as llama.cpp of 2026-09 runs it; arch_qwen35.c), kept in
 * tr_model.family. */
#ifndef TR_MODEL_QWEN35_H
#define TR_MODEL_QWEN35_H

#include "model/arch.h"

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

#endif /* TR_MODEL_QWEN35_H */
