/* arch_qwen35.c — the qwen35 layout (Qwen3.5 0.8B / 2B ...), following llama.cpp's src/models/qwen35.cpp and
 * delta-net-base.cpp of 2026-09 and ggml's CPU ops they use.
 *
 * Every layer: x += mixer(RMSNorm(x)); x += SwiGLU(RMSNorm_post(x)) (post_attention_norm is the FFN's pre-norm):
 * the shared decoder block (decoder.c) around this file's two mixers.
 * The mixer is, at layer il, a full-attention block when (il + 1) % full_attention_interval == 0 (or as
 * attention.recurrent_layers says), else a Gated DeltaNet block:
 *
 *  - full attention: attn_q gives per head [query | gate] (2 × head_dim), queries and keys get per-head RMSNorm,
 *    NEOX RoPE on the first rope.dimension_count dimensions (llama.cpp's interleaved M-RoPE, which for text tokens,
 *    whose t/h/w positions are all the token's, is plain RoPE; pairs no section claims take the 4th position, 0,
 *    and stay unrotated), attention over the KV cache, output × sigmoid(gate), attn_output.
 *  - Gated DeltaNet: attn_qkv → a causal depthwise convolution of d_conv taps over the last d_conv-1 inputs kept
 *    per sequence (ggml_ssm_conv) → SiLU → q, k (n_k_heads heads) and v (n_v_heads heads) of d_state each; q and k
 *    L2-normalised (x / sqrt(sum x² + eps)); decay g = softplus(ssm_alpha·x + ssm_dt.bias) × ssm_a, beta =
 *    sigmoid(ssm_beta·x); per value head h (key head h % n_k_heads, as ggml broadcasts) the delta rule on the state
 *    S [d_state (v)][d_state (k)]: S *= exp(g); S[j] += beta (v[j] - S[j]·k) k; o[j] = S[j]·q / sqrt(d_state)
 *    (ggml_gated_delta_net); then RMSNorm(o) × ssm_norm × SiLU(attn_gate·x) per head, and ssm_out.
 *
 * The recurrence runs token by token inside a chunk (the projections are batched), threads splitting the heads
 * (and the convolution's channels). The recurrent layers' convolution windows and delta-rule matrices are the
 * family's per-sequence state (arch_ops.state_floats), checkpointed and rolled back by seq_state.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/delta_rule.h"
#include "model/qwen35.h"

/* Per-context buffers for a chunk of up to cap rows. */
struct qwen35_scratch {
    int32_t cap;
    float *qg;            /* [cap][2 q_dim]: attention queries and gates as attn_q writes them */
    float *qkv;           /* [cap][conv_dim]: DeltaNet input, then (in place) its convolution */
    float *z;             /* [cap][value_dim] */
    float *beta, *alpha;  /* [cap][n_v_heads]: raw, then sigmoid(beta) and the decay g */
    float *o;             /* [cap][value_dim] */
};

static const qwen35_model *Q(const tr_model *m) { return m->family; }

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static float softplusf(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* ---------------------------------------------------------------- loading */

static tr_status get_int(const tr_model *m, const char *suffix, bool required, int64_t lo, int64_t hi, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (!tr_gguf_get_int(m->gguf, key, out)) {
        if (required) return tr_fail(TR_ERR_FORMAT, "missing %s", key);
        return TR_OK;
    }
    if (*out < lo || *out > hi)
        return tr_fail(TR_ERR_FORMAT, "%s = %" PRId64 " (%" PRId64 "..%" PRId64 " supported)", key, *out, lo, hi);
    return TR_OK;
}

/* Which layers are recurrent: attention.recurrent_layers if present, else all but every full_attention_interval-th. */
static tr_status read_layer_kinds(tr_model *m, qwen35_model *q) {
    const int32_t n_layer = m->info.n_layer;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
    const int64_t kv = tr_gguf_find_kv(m->gguf, key);
    int64_t interval = 4;
    tr_status st = TR_OK;
    if (kv < 0 && (st = get_int(m, "full_attention_interval", false, 1, 1 << 20, &interval)) != TR_OK) return st;
    if (kv >= 0 &&
        (tr_gguf_kv_type(m->gguf, kv) != TR_GGUF_ARRAY || tr_gguf_kv_array_len(m->gguf, kv) < (uint64_t)n_layer))
        return tr_fail(TR_ERR_UNSUPPORTED, "%s must be an array of at least %d flags", key, n_layer);
    for (int32_t il = 0; il < n_layer; il++) {
        int64_t v = (il + 1) % interval != 0;
        if (kv >= 0 && !tr_gguf_arr_int(m->gguf, kv, (uint64_t)il, &v))
            return tr_fail(TR_ERR_UNSUPPORTED, "%s must be an array of at least %d flags", key, n_layer);
        q->no_kv[il] = v != 0;
        q->rec_index[il] = v ? q->n_recurrent++ : -1;
    }
    return TR_OK;
}

/* rope.dimension_sections (4 integers): with interleaved M-RoPE, pair i of the rotated dimensions takes the t, h or
 * w position (all the token's) when its sector i % sum claims it for one, else the 4th position (0: no rotation). */
static tr_status read_rope_sections(tr_model *m, qwen35_model *q) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch_name);
    const int64_t kv = tr_gguf_find_kv(m->gguf, key);
    int64_t sec[4] = {0};
    if (kv < 0 || tr_gguf_kv_type(m->gguf, kv) != TR_GGUF_ARRAY || tr_gguf_kv_array_len(m->gguf, kv) < 3 ||
        tr_gguf_kv_array_len(m->gguf, kv) > 4)
        return tr_fail(TR_ERR_FORMAT, "missing %s (3 or 4 integers)", key);
    int64_t sum = 0;
    for (uint64_t i = 0; i < tr_gguf_kv_array_len(m->gguf, kv); i++) {
        if (!tr_gguf_arr_int(m->gguf, kv, i, &sec[i]) || sec[i] < 0 || sec[i] > 4096)
            return tr_fail(TR_ERR_FORMAT, "%s[%d] is not a size", key, (int)i);
        sum += sec[i];
    }
    if (sum == 0 || (sec[0] == 0 && sec[1] == 0 && sec[2] == 0))
        return tr_fail(TR_ERR_FORMAT, "%s has no t/h/w section", key);
    const int32_t half = m->rope_dim / 2;
    if (!(q->rope_static = calloc((size_t)half, 1))) return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < half; i++) {
        const int64_t sector = i % sum;
        const bool t = sector % 3 == 0 && sector < 3 * sec[0], h = sector % 3 == 1 && sector < 3 * sec[1],
                   w = sector % 3 == 2 && sector < 3 * sec[2];
        q->rope_static[i] = !(t || h || w);
    }
    return TR_OK;
}

static tr_status bind_recurrent(tr_model *m, qwen35_model *q, int il) {
    const int64_t dim = m->info.n_embd;
    deltanet_weights *D = &q->dn[il];
    char name[96];
    tr_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = bind_matrix(m, NAME("attn_qkv.weight"), dim, q->conv_dim, true, &D->w_qkv)) ||
        (st = bind_matrix(m, NAME("attn_gate.weight"), dim, q->value_dim, true, &D->w_z)) ||
        (st = bind_matrix(m, NAME("ssm_beta.weight"), dim, q->n_v_heads, true, &D->w_beta)) ||
        (st = bind_matrix(m, NAME("ssm_alpha.weight"), dim, q->n_v_heads, true, &D->w_alpha)) ||
        (st = bind_matrix(m, NAME("ssm_out.weight"), q->value_dim, dim, true, &D->w_out)) ||
        (st = bind_vector(m, NAME("ssm_dt.bias"), q->n_v_heads, true, &D->dt_bias)) ||
        (st = bind_vector(m, NAME("ssm_a"), q->n_v_heads, true, &D->a)) ||
        (st = bind_vector(m, NAME("ssm_norm.weight"), q->d_state, true, &D->norm)))
        return st;
    /* the convolution kernel: 2-D [d_conv, conv_dim], read like a vector of all its values */
    const tr_gguf_tensor *t;
    if ((st = find_tensor(m, NAME("ssm_conv1d.weight"), true, &t)) != TR_OK) return st;
    if (t->n_dims != 2 || t->ne[0] != q->d_conv || t->ne[1] != q->conv_dim)
        return tr_fail(TR_ERR_FORMAT, "tensor '%s' has shape [%" PRId64 ", %" PRId64 "] (%d-D), expected [%d, %d]",
                       name, t->ne[0], t->ne[1], t->n_dims, q->d_conv, q->conv_dim);
    float *conv;
    if ((st = own_f32_copy(m, name, t, (int64_t)q->d_conv * q->conv_dim, &conv)) != TR_OK) return st;
    D->conv = conv;
#undef NAME
    return TR_OK;
}

static tr_status bind_attention(tr_model *m, int il) {
    const tr_model_info *in = &m->info;
    layer_weights *L = &m->layers[il];
    char name[96];
    tr_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = bind_matrix(m, NAME("attn_q.weight"), in->n_embd, 2 * (int64_t)m->q_dim, true, &L->wq)) ||
        (st = bind_matrix(m, NAME("attn_k.weight"), in->n_embd, m->kv_dim, true, &L->wk)) ||
        (st = bind_matrix(m, NAME("attn_v.weight"), in->n_embd, m->kv_dim, true, &L->wv)) ||
        (st = bind_matrix(m, NAME("attn_output.weight"), m->q_dim, in->n_embd, true, &L->wo)) ||
        (st = bind_vector(m, NAME("attn_q_norm.weight"), in->head_dim, true, &L->q_norm)) ||
        (st = bind_vector(m, NAME("attn_k_norm.weight"), in->head_dim, true, &L->k_norm)))
        return st;
#undef NAME
    return TR_OK;
}

static tr_status bind_layer(tr_model *m, qwen35_model *q, int il) {
    const tr_model_info *in = &m->info;
    layer_weights *L = &m->layers[il];
    char name[96];
    tr_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((st = bind_vector(m, NAME("attn_norm.weight"), in->n_embd, true, &L->attn_norm)) ||
        (st = bind_vector(m, NAME("post_attention_norm.weight"), in->n_embd, true, &L->ffn_norm)) ||
        (st = bind_matrix(m, NAME("ffn_gate.weight"), in->n_embd, in->n_ff, true, &L->w_gate)) ||
        (st = bind_matrix(m, NAME("ffn_up.weight"), in->n_embd, in->n_ff, true, &L->w_up)) ||
        (st = bind_matrix(m, NAME("ffn_down.weight"), in->n_ff, in->n_embd, true, &L->w_down)))
        return st;
#undef NAME
    return q->rec_index[il] >= 0 ? bind_recurrent(m, q, il) : bind_attention(m, il);
}

static tr_status load(tr_model *m) {
    /* llama.cpp's converter appends the multi-token-prediction block(s) to block_count (nextn_predict_layers); the
     * trunk is the layers before them, and the MTP tensors stay unused as in llama.cpp's main pass */
    int64_t nextn = 0;
    tr_status st = get_int(m, "nextn_predict_layers", false, 0, m->info.n_layer - 1, &nextn);
    if (st != TR_OK) return st;
    m->info.n_layer -= (int32_t)nextn;
    const int32_t n_layer = m->info.n_layer;
    qwen35_model *q = calloc(1, sizeof *q);
    if (!q) return tr_fail(TR_ERR_NOMEM, "out of memory");
    m->family = q;
    q->rec_index = malloc((size_t)n_layer * sizeof *q->rec_index);
    q->no_kv = calloc((size_t)n_layer, sizeof *q->no_kv);
    q->dn = calloc((size_t)n_layer, sizeof *q->dn);
    if (!q->rec_index || !q->no_kv || !q->dn) return tr_fail(TR_ERR_NOMEM, "out of memory");
    int64_t d_conv, d_inner, d_state, n_v, n_k;
    if ((st = get_int(m, "ssm.conv_kernel", true, 2, 64, &d_conv)) ||
        (st = get_int(m, "ssm.state_size", true, 1, 1024, &d_state)) ||
        (st = get_int(m, "ssm.time_step_rank", true, 1, 1024, &n_v)) ||
        (st = get_int(m, "ssm.group_count", true, 1, 1024, &n_k)) ||
        (st = get_int(m, "ssm.inner_size", true, 1, 1 << 20, &d_inner)))
        return st;
    if (n_v % n_k != 0)
        return tr_fail(TR_ERR_FORMAT, "ssm.time_step_rank %" PRId64 " (value heads) is not a multiple of "
                       "ssm.group_count %" PRId64 " (key heads)", n_v, n_k);
    if (d_inner != d_state * n_v)
        return tr_fail(TR_ERR_FORMAT, "ssm.inner_size %" PRId64 " differs from state_size × time_step_rank = %" PRId64,
                       d_inner, d_state * n_v);
    if (m->rope_dim > m->info.head_dim)
        return tr_fail(TR_ERR_FORMAT, "rope.dimension_count %d exceeds the head size %d", m->rope_dim, m->info.head_dim);
    q->d_conv = (int32_t)d_conv;
    q->d_state = (int32_t)d_state;
    q->n_v_heads = (int32_t)n_v;
    q->n_k_heads = (int32_t)n_k;
    q->key_dim = q->d_state * q->n_k_heads;
    q->value_dim = q->d_state * q->n_v_heads;
    q->conv_dim = 2 * q->key_dim + q->value_dim;
    if ((st = read_layer_kinds(m, q)) != TR_OK || (st = read_rope_sections(m, q)) != TR_OK ||
        (st = bind_vector(m, "rope_freqs.weight", m->rope_dim / 2, false, &m->rope_freqs)) != TR_OK)
        return st;
    for (int il = 0; il < n_layer; il++)
        if ((st = bind_layer(m, q, il)) != TR_OK) return st;
    m->no_kv = q->no_kv;
    return TR_OK;
}

static void unload(tr_model *m) {
    qwen35_model *q = m->family;
    if (!q) return;
    free(q->rec_index);
    free(q->no_kv);
    free(q->dn);
    free(q->rope_static);
    free(q);
    m->family = NULL;
    m->no_kv = NULL;
}

static size_t repack_list(tr_model *m, weight_matrix **todo) {
    size_t n = 0;
    qwen35_model *q = m->family;
    for (int il = 0; il < m->info.n_layer; il++) {
        if (q->rec_index[il] < 0) continue;
        deltanet_weights *D = &q->dn[il];
        weight_matrix *ws[] = {&D->w_qkv, &D->w_z, &D->w_beta, &D->w_alpha, &D->w_out};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (weight_repack_wanted(ws[i])) todo[n++] = ws[i];
    }
    return n;
}

/* ---------------------------------------------------------------- per-context buffers */

static tr_status buffers_init(tr_context *ctx, int32_t cap) {
    const tr_model *m = ctx->model;
    const qwen35_model *q = Q(m);
    qwen35_scratch *B = calloc(1, sizeof *B);
    if (!B) return tr_fail(TR_ERR_NOMEM, "out of memory");
    ctx->family_buf = B;
    const size_t c = (size_t)cap;
    B->cap = cap;
    B->qg = malloc(c * 2 * (size_t)m->q_dim * sizeof(float));
    B->qkv = malloc(c * (size_t)q->conv_dim * sizeof(float));
    B->z = malloc(c * (size_t)q->value_dim * sizeof(float));
    B->beta = malloc(c * (size_t)q->n_v_heads * sizeof(float));
    B->alpha = malloc(c * (size_t)q->n_v_heads * sizeof(float));
    B->o = malloc(c * (size_t)q->value_dim * sizeof(float));
    if (!B->qg || !B->qkv || !B->z || !B->beta || !B->alpha || !B->o)
        return tr_fail(TR_ERR_NOMEM, "out of memory for the qwen35 buffers (batch %d)", cap);
    return TR_OK;
}

static void buffers_free(tr_context *ctx) {
    qwen35_scratch *B = ctx->family_buf;
    if (B) {
        float *bufs[] = {B->qg, B->qkv, B->z, B->beta, B->alpha, B->o};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
        free(B);
    }
    ctx->family_buf = NULL;
}

/* ---------------------------------------------------------------- the per-sequence state */

/* One state: every recurrent layer's conv window ([conv_dim][d_conv - 1], oldest first), then every layer's
 * delta-rule matrices ([n_v_heads][d_state (v)][d_state (k)]). */
static size_t conv_floats(const qwen35_model *q) { return (size_t)q->conv_dim * (size_t)(q->d_conv - 1); }
static size_t delta_floats(const qwen35_model *q) {
    return (size_t)q->n_v_heads * (size_t)q->d_state * (size_t)q->d_state;
}

static size_t state_floats(const tr_model *m) {
    const qwen35_model *q = Q(m);
    return (size_t)q->n_recurrent * (conv_floats(q) + delta_floats(q));
}

/* Recurrent layer r's delta-rule matrices inside a state (the live one or a checkpoint); its conv window is at
 * r * conv_floats. */
static float *state_delta(const qwen35_model *q, float *base, int32_t r) {
    return base + (size_t)q->n_recurrent * conv_floats(q) + (size_t)r * delta_floats(q);
}

/* ---------------------------------------------------------------- Gated DeltaNet */

typedef struct delta_job {
    const qwen35_model *q;
    seq_state *dn;
    int32_t r;
    const float *qkv;     /* the span's rows [n][conv_dim] (after conv, q and k normalised) */
    const float *g, *beta; /* [n][n_v_heads] */
    float *o;             /* [n][value_dim] */
    int32_t n;
} delta_job;

/* The delta rule per value head, token after token; planned checkpoints copy the head's state first. */
static void delta_task(void *arg, int ith, int nth) {
    const delta_job *j = arg;
    const qwen35_model *q = j->q;
    const int32_t H = q->n_v_heads, S = q->d_state;
    const int32_t per = (H + nth - 1) / nth, lo = ith * per, hi = lo + per < H ? lo + per : H;
    const float scale = 1.0f / sqrtf((float)S);
    const delta_rule_fn step = delta_rule_for(S);
    for (int32_t h = lo; h < hi; h++) {
        float *st = state_delta(q, j->dn->live, j->r) + (size_t)h * S * S;
        const int32_t kh = h % q->n_k_heads;
        for (int32_t t = 0; t < j->n; t++) {
            float *ckpt = seq_state_slot(j->dn, t);
            if (ckpt) memcpy(state_delta(q, ckpt, j->r) + (size_t)h * S * S, st, (size_t)S * S * sizeof *st);
            const float *row = j->qkv + (size_t)t * q->conv_dim;
            const float *qv = row + (size_t)kh * S, *kv = row + q->key_dim + (size_t)kh * S,
                        *vv = row + 2 * (size_t)q->key_dim + (size_t)h * S;
            const float decay = expf(j->g[(size_t)t * H + h]), b = j->beta[(size_t)t * H + h];
            float *out = j->o + (size_t)t * q->value_dim + (size_t)h * S;
            step(st, S, qv, kv, vv, decay, b, scale, out);
        }
    }
}

/* x / sqrt(sum x² + eps), as llama.cpp's build_gdn_l2_norm: RMSNorm with eps/n, scaled by 1/sqrt(n). */
static void l2_norm(float *x, int32_t n, float eps) {
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps / (float)n), post = 1.0f / sqrtf((float)n);
    for (int32_t i = 0; i < n; i++) x[i] = x[i] * scale * post;
}

static tr_status deltanet_layer(tr_context *view, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = view->model;
    const qwen35_model *q = Q(m);
    const deltanet_weights *D = &q->dn[il];
    const int32_t r = q->rec_index[il], H = q->n_v_heads, S = q->d_state;
    activations *A = &view->act;
    qwen35_scratch *B = view->family_buf;
    const float eps = m->info.norm_eps;
    const weight_matrix *ws[4] = {&D->w_qkv, &D->w_z, &D->w_beta, &D->w_alpha};
    float *outs[4] = {B->qkv, B->z, B->beta, B->alpha};
    const int64_t ld[4] = {q->conv_dim, q->value_dim, H, H};
    tr_status st = matmul_multi(view->pool, ws, 4, A->xb, n, outs, ld, &view->scratch);
    if (st != TR_OK) return st;
    for (int32_t s = 0; s < n_sp; s++) /* then SiLU */
        causal_conv(view, D->conv, q->d_conv, q->conv_dim, sp[s].state, (size_t)r * conv_floats(q),
                    B->qkv + (size_t)sp[s].row * q->conv_dim, q->conv_dim, sp[s].n, true);
    for (int32_t t = 0; t < n; t++) {
        float *row = B->qkv + (size_t)t * q->conv_dim;
        for (int32_t h = 0; h < q->n_k_heads; h++) {
            l2_norm(row + (size_t)h * S, S, eps);
            l2_norm(row + q->key_dim + (size_t)h * S, S, eps);
        }
        for (int32_t h = 0; h < H; h++) {
            float *a = B->alpha + (size_t)t * H + h, *b = B->beta + (size_t)t * H + h;
            *a = softplusf(*a + D->dt_bias[h]) * D->a[h];
            *b = sigmoidf(*b);
        }
    }
    for (int32_t s = 0; s < n_sp; s++) {
        const size_t row = (size_t)sp[s].row;
        delta_job dj = {q, sp[s].state, r, B->qkv + row * q->conv_dim, B->alpha + row * H, B->beta + row * H,
                        B->o + row * q->value_dim, sp[s].n};
        run_parallel(view, delta_task, &dj, (int64_t)sp[s].n * H * S * S * 4);
    }
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < H; h++) {
            float *o = B->o + (size_t)t * q->value_dim + (size_t)h * S;
            const float *z = B->z + (size_t)t * q->value_dim + (size_t)h * S;
            rms_norm(o, o, D->norm, S, eps);
            for (int32_t i = 0; i < S; i++) o[i] *= siluf(z[i]);
        }
    return matmul(view->pool, &D->w_out, B->o, n, A->xb, m->info.n_embd, &view->scratch);
}

/* ---------------------------------------------------------------- gated full attention */

static void head_norm(float *rows, const float *w, int32_t n, int32_t n_heads, int32_t hd, float eps) {
    for (int64_t i = 0; i < (int64_t)n * n_heads; i++) rms_norm(rows + i * hd, rows + i * hd, w, hd, eps);
}

static tr_status attention_layer(tr_context *view, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    const tr_model *m = view->model;
    const layer_weights *L = &m->layers[il];
    activations *A = &view->act;
    qwen35_scratch *B = view->family_buf;
    const int32_t hd = m->info.head_dim, n_head = m->info.n_head, half = m->rope_dim / 2;
    const float eps = m->info.norm_eps;
    const weight_matrix *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {B->qg, A->k, A->v};
    const int64_t qkv_ld[3] = {2 * (int64_t)m->q_dim, m->kv_dim, m->kv_dim};
    tr_status st = matmul_multi(view->pool, qkv, 3, A->xb, n, qkv_out, qkv_ld, &view->scratch);
    if (st != TR_OK) return st;
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < n_head; h++)
            memcpy(A->q + (size_t)t * m->q_dim + (size_t)h * hd, B->qg + ((size_t)t * 2 * n_head + 2 * h) * hd,
                   (size_t)hd * sizeof(float));
    head_norm(A->q, L->q_norm, n, n_head, hd, eps);
    head_norm(A->k, L->k_norm, n, m->info.n_head_kv, hd, eps);
    const int32_t saved_past = view->n_past;
    const kv_cache saved_kv = view->kv;
    for (int32_t s = 0; s < n_sp && st == TR_OK; s++) {
        for (int32_t t = sp[s].row; t < sp[s].row + sp[s].n; t++) {
            const float *c = A->rope_cos + (int64_t)t * half, *sn = A->rope_sin + (int64_t)t * half;
            rope_apply(m, A->q + (int64_t)t * m->q_dim, n_head, c, sn);
            rope_apply(m, A->k + (int64_t)t * m->kv_dim, m->info.n_head_kv, c, sn);
            kv_store(sp[s].kv, il, sp[s].n_past + t - sp[s].row, A->k + (int64_t)t * m->kv_dim,
                     A->v + (int64_t)t * m->kv_dim, m->info.n_head_kv, hd);
        }
        view->kv = *sp[s].kv;
        view->n_past = sp[s].n_past;
        st = attention(view, il, A->q + (int64_t)sp[s].row * m->q_dim, sp[s].n, A->att + (int64_t)sp[s].row * m->q_dim);
    }
    view->n_past = saved_past;
    view->kv = saved_kv;
    if (st != TR_OK) return st;
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < n_head; h++) {
            float *o = A->att + (size_t)t * m->q_dim + (size_t)h * hd;
            const float *g = B->qg + ((size_t)t * 2 * n_head + 2 * h + 1) * hd;
            for (int32_t i = 0; i < hd; i++) o[i] *= sigmoidf(g[i]);
        }
    return matmul(view->pool, &L->wo, A->att, n, A->xb, m->info.n_embd, &view->scratch);
}

/* ---------------------------------------------------------------- the layer */

/* The shared decoder block (post_attention_norm bound as its FFN pre-norm) around the layer's mixer. */
static tr_status layer(tr_context *view, int il, int32_t n, const seq_span *sp, int32_t n_sp) {
    return decoder_block(view, il, n, sp, n_sp, Q(view->model)->rec_index[il] >= 0 ? deltanet_layer : attention_layer);
}

/* RoPE tables; pairs no M-RoPE section claims stay unrotated. */
static void rope_rows(const tr_model *m, activations *A, int32_t row, int32_t n, int32_t pos0) {
    const int32_t half = m->rope_dim / 2;
    rope_rows_default(m, A, row, n, pos0);
    float *c = A->rope_cos + (int64_t)row * half, *s = A->rope_sin + (int64_t)row * half;
    for (int32_t t = 0; t < n; t++)
        for (int32_t i = 0; i < half; i++)
            if (Q(m)->rope_static[i]) c[(int64_t)t * half + i] = 1.0f, s[(int64_t)t * half + i] = 0.0f;
}

/* ---------------------------------------------------------------- synthetic shapes */

/* The Gated DeltaNet and RoPE sizes of a shape. The real ones: Qwen3.5-0.8B / 2B's HF configs
 * (linear_conv_kernel_dim 4, linear_key_head_dim = linear_value_head_dim 128, 16 key and 16 value heads,
 * full_attention_interval 4, partial_rotary_factor 0.25 of head_dim 256, mrope_section [11, 11, 10]: llama.cpp's
 * converter default), as far as they could be checked here (llama.cpp's loader: 24 layers, n_embd 1024 = 0.8B,
 * else 2B); the two small ones are for tests (value heads twice the key heads; the second leaves a RoPE pair to the
 * unrotated 4th section). */
typedef struct synth_sizes {
    int32_t d_conv, d_state, n_k_heads, n_v_heads, interval, sections[4];
} synth_sizes;

static const synth_sizes real = {4, 128, 16, 16, 4, {11, 11, 10, 0}};
static const synth_sizes tiny = {4, 32, 4, 8, 4, {3, 3, 2, 0}}, small = {4, 32, 4, 4, 4, {1, 2, 2, 0}};
static const synth_shape shapes[] = {
    {"qwen3.5-0.8b", 1024, 24, 8, 2, 256, 3584, 248320, 262144, 10000000.0f, 1e-6f, true, false, true, false, 64,
     &real},
    {"qwen3.5-2b", 2048, 24, 8, 2, 256, 6144, 248320, 262144, 10000000.0f, 1e-6f, true, false, true, false, 64, &real},
    {"qwen3.5-tiny", 128, 4, 4, 2, 64, 256, 512, 512, 10000000.0f, 1e-6f, true, false, true, false, 16, &tiny},
    {"qwen3.5-small", 192, 8, 6, 2, 64, 384, 512, 512, 10000000.0f, 1e-6f, true, false, true, false, 16, &small},
};

static tr_status synth_hparams(tr_gguf_writer *w, const synth_shape *s) {
    const synth_sizes *z = s->extra;
    tr_status st = synth_set_u32(w, "qwen35", "ssm.conv_kernel", (uint32_t)z->d_conv, TR_OK);
    st = synth_set_u32(w, "qwen35", "ssm.state_size", (uint32_t)z->d_state, st);
    st = synth_set_u32(w, "qwen35", "ssm.group_count", (uint32_t)z->n_k_heads, st);
    st = synth_set_u32(w, "qwen35", "ssm.time_step_rank", (uint32_t)z->n_v_heads, st);
    st = synth_set_u32(w, "qwen35", "ssm.inner_size", (uint32_t)(z->d_state * z->n_v_heads), st);
    st = synth_set_u32(w, "qwen35", "full_attention_interval", (uint32_t)z->interval, st);
    return st == TR_OK ? tr_gguf_writer_set_arr_i32(w, "qwen35.rope.dimension_sections", z->sections, 4) : st;
}

/* A Gated DeltaNet layer, or (every interval-th) gated full attention; post_attention_norm is the FFN's pre-norm.
 * Names and shapes as llama.cpp's qwen35 loader expects them. */
static void synth_layer(synth_plan *pl, const synth_shape *s, int il) {
    const synth_sizes *z = s->extra;
    const int64_t q_dim = (int64_t)s->n_head * s->head_dim, kv_dim = (int64_t)s->n_head_kv * s->head_dim;
    const int64_t ds = z->d_state, n_v = z->n_v_heads, conv_dim = 2 * ds * z->n_k_heads + ds * n_v;
    char name[96];
    synth_vector(pl, il, "attn_norm.weight", s->n_embd, FILL_NORM);
    synth_vector(pl, il, "post_attention_norm.weight", s->n_embd, FILL_NORM);
    if ((il + 1) % z->interval == 0) {
        synth_weight(pl, il, "attn_q", s->n_embd, 2 * q_dim); /* query and gate per head */
        synth_weight(pl, il, "attn_k", s->n_embd, kv_dim);
        synth_weight(pl, il, "attn_v", s->n_embd, kv_dim);
        synth_weight(pl, il, "attn_output", q_dim, s->n_embd);
        synth_vector(pl, il, "attn_q_norm.weight", s->head_dim, FILL_NORM);
        synth_vector(pl, il, "attn_k_norm.weight", s->head_dim, FILL_NORM);
    } else {
        synth_weight(pl, il, "attn_qkv", s->n_embd, conv_dim);
        synth_weight(pl, il, "attn_gate", s->n_embd, ds * n_v);
        snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", il);
        synth_add(pl, name, TR_TYPE_F32, z->d_conv, conv_dim, FILL_WEIGHT);
        synth_vector(pl, il, "ssm_dt.bias", n_v, FILL_BIAS);
        synth_vector(pl, il, "ssm_a", n_v, FILL_SSM_A);
        synth_weight(pl, il, "ssm_beta", s->n_embd, n_v);
        synth_weight(pl, il, "ssm_alpha", s->n_embd, n_v);
        synth_vector(pl, il, "ssm_norm.weight", ds, FILL_NORM);
        synth_weight(pl, il, "ssm_out", ds * n_v, s->n_embd);
    }
    synth_weight(pl, il, "ffn_gate", s->n_embd, s->n_ff);
    synth_weight(pl, il, "ffn_up", s->n_embd, s->n_ff);
    synth_weight(pl, il, "ffn_down", s->n_ff, s->n_embd);
}

const arch_ops arch_qwen35 = {
    .name = "qwen35",
    .id = TR_ARCH_QWEN35,
    .rope_neox = true, /* llama.cpp's IMROPE rotates the halves of the rotated dimensions, as NEOX */
    .load = load,
    .unload = unload,
    .repack_list = repack_list,
    .state_floats = state_floats,
    .buffers_init = buffers_init,
    .buffers_free = buffers_free,
    .rope_rows = rope_rows,
    .layer = layer,
    .shapes = shapes,
    .n_shapes = sizeof shapes / sizeof shapes[0],
    .synth_hparams = synth_hparams,
    .synth_layer = synth_layer,
};
