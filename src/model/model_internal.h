/* model_internal.h — the loaded form of a model (weights bound to the file's tensors, hyperparameters) and of a
 * context (KV cache, activation buffers, outputs), shared by the loader, the forward pass and the context code. */
#ifndef TR_MODEL_INTERNAL_H
#define TR_MODEL_INTERNAL_H

#include "kernels/kernels.h"
#include "tokroute.h"

typedef struct layer_weights {
    const float *attn_norm;                 /* [n_embd] */
    weight_matrix wq, wk, wv, wo;           /* rows = output size, cols = input size */
    const float *bq, *bk, *bv;              /* optional biases (qwen2) */
    const float *q_norm, *k_norm;           /* per-head RMSNorm weights [head_dim] (qwen3) */
    const float *ffn_norm;                  /* [n_embd] */
    weight_matrix w_gate, w_up, w_down;
    const float *attn_post_norm, *ffn_post_norm; /* gemma3: RMSNorm of the attention / FFN output before the
                                                  * residual add [n_embd]; NULL elsewhere */
    int32_t window;                         /* gemma3 sliding-window layer: a query at position p sees positions
                                             * p - window + 1 .. p (llama.cpp's LLAMA_SWA_TYPE_STANDARD); 0: all */
    bool no_rope;                           /* smollm3's every fourth layer: queries and keys not rotated */
    int32_t n_ff;                           /* this layer's FFN width when the file gives one per layer (gemma4's
                                             * double-wide layers); 0: info.n_ff */
    const struct tr_model *geometry;        /* this layer's attention geometry when it differs from the model's
                                             * (gemma4's sliding layers' head size): a copy of the model with
                                             * info.head_dim / n_head_kv, q_dim, kv_dim, rope_dim and kq_scale set;
                                             * its KV cache is laid out for it (kv_layer_view); NULL: the model's */
} layer_weights;

struct tr_model {
    tr_model_info info;
    const struct arch_ops *arch; /* the family (arch.h, families.c) */
    void *family;             /* the family's own weights and hyperparameters (qwen35.h's qwen35_model ...) */
    tr_gguf *gguf;            /* owns the mapping (or the buffer below) */
    void *file_copy;          /* when use_mmap is false */
    char arch_name[16];
    char name[128];
    int32_t q_dim, kv_dim;    /* n_head * head_dim, n_head_kv * head_dim */
    int32_t rope_dim;         /* leading dimensions of each head that rotate */
    bool rope_neox;           /* rotate halves (qwen) instead of adjacent pairs (llama) */
    float rope_freq_scale;    /* 1 / linear scaling factor */
    const float *rope_freqs;  /* optional per-pair divisors [rope_dim/2] (Llama 3.1+) */
    weight_matrix tok_embd;   /* rows = n_vocab, cols = n_embd */
    weight_matrix output;     /* tok_embd when tied */
    const float *output_norm;
    layer_weights *layers;
    void *repacked;           /* mapping holding the matrices repacked at load (model_load.c) */
    size_t repacked_bytes;
    void *converted;          /* the matrices converted to a faster exact type at load (model_load.c), or NULL */
    float **owned_f32;        /* 1-D tensors converted to F32 at load */
    int n_owned;
    tr_vocab *vocab;
    tr_kv_type kv_type;       /* contexts' and sessions' cache unless their params name one (never DEFAULT) */
    float kq_scale;           /* attention scores' scale: 1/sqrt(head_dim); 1 for gemma3, whose Q carries it */
    /* knobs of the shared decoder layer (decoder.c), set by families (gemma3's first); neutral by default */
    float embd_scale;         /* token embeddings times sqrt(n_embd) (1 elsewhere) */
    float q_scale;            /* queries times gemma3's f_attention_scale after RoPE (1 elsewhere) */
    float rope_theta_swa;     /* RoPE base of the sliding-window layers (scale 1, no rope_freqs) */
    bool rope_swa;            /* sliding-window layers use that second base: activations hold two RoPE tables */
    bool gelu;                /* GeGLU feed-forward (gelu(gate) * up) instead of SwiGLU */
    float logit_softcap;      /* final logits = c * tanh(logits / c) when c > 0 */
    const bool *no_kv;        /* [n_layer] layers without a KV cache (qwen35's recurrent ones), or NULL */
    uint64_t lookup_bytes;    /* bytes of the row-lookup tables (lookup_table), of which a token reads one row */
    uint64_t lookup_row_bytes;    /* one row of each */
};

/* Whether layer il keeps a KV cache (every layer but qwen35's recurrent ones), and how many do. */
static inline bool layer_has_kv(const tr_model *m, int il) { return !m->no_kv || !m->no_kv[il]; }
static inline int32_t n_kv_layers(const tr_model *m) {
    int32_t n = 0;
    for (int il = 0; il < m->info.n_layer; il++) n += layer_has_kv(m, il);
    return n;
}

/* The model whose head size, KV heads and attention scale layer il uses (layer_weights.geometry). */
static inline const tr_model *layer_geometry(const tr_model *m, int il) {
    return m->layers && m->layers[il].geometry ? m->layers[il].geometry : m;
}

/* KV cache, per layer and KV head: K rows by position; for F16/F32, V transposed (one row per head dimension), so
 * attention is two plain matrix products (see attention.c). A Q8_0 cache keeps V by position too (its blocks run
 * along head_dim: a position's row is whole blocks, see kernels/kv_q8.h). Truncating only moves n_past: positions
 * past it are overwritten by the next eval. */
typedef struct kv_cache {
    tr_kv_type type;   /* F16, F32 or Q8_0 */
    int32_t n_ctx;
    size_t elt;        /* bytes per element: 2 (F16) or 4 (F32); 0 for Q8_0 */
    int q8_block;      /* Q8_0: values per block (32, or 16/8 for narrower heads) */
    int rot_k, rot_v;  /* Q8_0: Walsh-Hadamard runs of Q/K and of V/output (0: none; see kernels/kv_q8.h) */
    size_t row_bytes;  /* one (head, position) row of K (and of V for Q8_0) */
    size_t layer_bytes;
    uint8_t **k, **v;  /* [n_layer]: K as [n_head_kv][n_ctx][row], V as [n_head_kv][head_dim][n_ctx] or (Q8_0)
                        * [n_head_kv][n_ctx][row] */
} kv_cache;

/* context.c: the storage of a cache of type `type` (resolved: not DEFAULT) and n_ctx positions on model m (no
 * memory allocated); TR_ERR_ARG for a type outside the enum, TR_ERR_UNSUPPORTED for Q8_0 on a head_dim that is
 * not a multiple of 8. */
tr_status kv_cache_layout(const tr_model *m, tr_kv_type type, int32_t n_ctx, kv_cache *kv);
/* Layer il's view of a cache laid out for the model (kv itself unless the layer has its own geometry: then its
 * row and layer sizes, same storage), and the bytes one of its K or V buffers takes. */
void kv_layer_view(const tr_model *m, const kv_cache *kv, int il, kv_cache *out);
size_t kv_layer_bytes(const tr_model *m, const kv_cache *kv, int il);
/* K and V of every layer that keeps a cache. */
size_t kv_cache_bytes(const tr_model *m, const kv_cache *kv);
/* The type a context or session on m uses when asked for `type` (DEFAULT: the model's). */
tr_kv_type kv_type_resolve(const tr_model *m, tr_kv_type type);
/* Writes position pos of every KV head of the layer (K and V rows [n_head_kv][head_dim] in float; a Q8_0 cache
 * rotates them in place first). */
void kv_store(const kv_cache *kv, int layer, int32_t pos, float *k, float *v, int32_t n_heads, int32_t hd);

/* Activation buffers sized for one chunk of up to n_batch tokens. */
typedef struct activations {
    int32_t cap;                 /* tokens */
    float *x, *xb, *q, *k, *v, *att, *gate, *up;
    float *rope_cos, *rope_sin;  /* [cap][rope_dim/2]; gemma3's sliding-window table after it (rope_table_floats) */
    float *att_q, *att_scores, *att_o; /* attention blocks (attention_scratch_floats in all) */
    matmul_scratch *att_scratch;       /* [n_threads] quantized queries of a Q8_0 cache's products, per thread */
    int n_att_scratch;
} activations;

struct tr_context {
    const tr_model *model;
    tr_context_params params;
    thread_pool *pool;
    matmul_scratch scratch;
    kv_cache kv;
    activations act;
    int32_t n_past;
    int32_t *tokens;       /* [n_ctx] tokens in the cache */
    int64_t n_evaluated;
    /* outputs of the last eval */
    int32_t n_last;        /* tokens in the last eval */
    float *hidden;         /* [n_last][n_embd] */
    size_t hidden_cap;     /* floats */
    float *logits;         /* rows of n_vocab */
    size_t logits_cap;     /* floats */
    int32_t logits_first;  /* batch index of logits row 0; rows cover [logits_first, logits_first + n_logits) */
    int32_t n_logits;
    struct seq_state *state;  /* the family's per-sequence state and its checkpoints (seq_state.c), or NULL */
    void *family_buf;         /* the family's activation buffers (arch_ops.buffers_init), or NULL */
    bool parallel_rows;       /* row-wise steps over the pool (the batched engine's view); else on the caller */
};

/* forward.c: evaluates tokens[0..n) at positions n_past.. (n <= act.cap), after replaying the kept tokens a
 * rollback left to its per-sequence state; writes the final hidden states (after output_norm) to hidden_out
 * [n][n_embd] and, for rows [logits_from, n), logits to logits_out. */
tr_status forward_chunk(tr_context *ctx, const int32_t *tokens, int32_t n, float *hidden_out, int32_t logits_from,
                        float *logits_out);

/* model_load.c: a tensor by name (NULL when absent and not required); a 2-D weight of ne = [cols, rows] in a type
 * the kernels multiply; a 1-D tensor of n elements converted to an owned F32 array; the first n values of a tensor
 * already checked, converted the same way (layouts' loaders share them). */
tr_status find_tensor(tr_model *m, const char *name, bool required, const tr_gguf_tensor **out);
tr_status bind_matrix(tr_model *m, const char *name, int64_t cols, int64_t rows, bool required, weight_matrix *out);
tr_status bind_vector(tr_model *m, const char *name, int64_t n, bool required, const float **out);
tr_status own_f32_copy(tr_model *m, const char *name, const tr_gguf_tensor *t, int64_t n, float **out);
/* Declares a bound matrix a row-lookup table (token_embd when the output does not reuse it, gemma4's per-layer
 * token embeddings): a decoded token reads one of its rows, not all of it (tr_model_info.token_read_bytes). */
void lookup_table(tr_model *m, const weight_matrix *w);

/* Runs fn on the context's pool, or inline on the caller when the job is too small to repay waking workers
 * (work counts multiply-adds, roughly). */
void run_parallel(tr_context *ctx, pool_task fn, void *arg, int64_t work);
/* gate[i] = silu(gate[i]) * up[i], and gate[i] = gelu(gate[i]) * up[i] as ggml computes it (tanh approximation read
 * from an F16 table), over the context's threads (decoder.c). */
void silu_mul_parallel(tr_context *ctx, float *gate, const float *up, int64_t n);
void gelu_mul_parallel(tr_context *ctx, float *gate, const float *up, int64_t n);

/* ops.c */
void rms_norm(float *out, const float *x, const float *w, int64_t n, float eps);
void silu_mul(float *gate, const float *up, int64_t n);
void add_vec(float *acc, const float *x, int64_t n);
void softmax_inplace(float *x, int64_t n);
void rope_tables(const tr_model *m, int32_t pos0, int32_t n, float *cos_out, float *sin_out);
void rope_apply(const tr_model *m, float *vec, int32_t n_heads, const float *cos_row, const float *sin_row);
/* Floats of one of rope_cos / rope_sin for cap tokens: a table per RoPE base (two when m->rope_swa). */
static inline size_t rope_table_floats(const tr_model *m, int32_t cap) {
    return (size_t)cap * (size_t)(m->rope_dim / 2) * (m->rope_swa ? 2 : 1);
}

/* attention.c: for each token t of the chunk (position n_past + t), every query head attends over cached positions
 * 0..n_past+t. q: [n][q_dim], out: [n][q_dim]. */
tr_status attention(tr_context *ctx, int layer, const float *q, int32_t n, float *out);
size_t attention_scratch_floats(const tr_model *m, int32_t n_ctx);
/* Splits a scratch of attention_scratch_floats into the query block (base), scores and outputs. */
void attention_blocks(const tr_model *m, int32_t n_ctx, float *base, float **scores, float **out);
/* Per-thread scratches for attention (n of them), and their release. */
tr_status attention_scratch_alloc(activations *A, int n);
void attention_scratch_free(activations *A);
/* Byte offsets into a layer's K and V: K row of (head g, position), V element (head g, dimension d, position) —
 * for Q8_0, V's row of (head g, position) with d = 0. */
size_t kv_head_offset_k(const kv_cache *kv, int32_t g, int32_t pos, int32_t hd);
size_t kv_head_offset_v(const kv_cache *kv, int32_t g, int32_t d, int32_t pos, int32_t hd);

#endif /* TR_MODEL_INTERNAL_H */
