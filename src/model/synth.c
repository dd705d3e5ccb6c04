/* synth.c — writes models with random weights at real models' exact shapes, so speed can be measured at real
 * sizes without downloading them.
 *
 * Tensor types follow llama.cpp's quantizer where it matters for speed: a K-quant cannot hold rows whose length
 * is not a multiple of 256 (Qwen2.5-0.5B's 896, SmolLM2's 576), so those fall back as llama.cpp does (Q4_K → Q5_0,
 * Q5_K → Q5_1, Q6_K → Q8_0, IQ4_XS → IQ4_NL, Q2_K and Q3_K → Q4_0). IQ4_NL / IQ4_XS (quants_iq4.c) and Q2_K / Q3_K
 * (quants_k23.c) use ggml's quantizers without an importance matrix, all 2-D weights in the type (as llama-quantize
 * --pure writes them; its Q2_K / Q3_K_S/M/L mixes come from llama-quantize itself, see bench/compare-llamacpp.sh).
 * The Q4_K_M mix puts Q6_K on the output and on attn_v / ffn_down of the layers
 * llama.cpp's use_more_bits picks. The vocabulary is a dummy SentencePiece one: control tokens, 256 byte tokens,
 * then filler pieces, so any text tokenizes (by byte fallback).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/sample_math.h"

typedef struct synth_shape {
    const char *name, *arch;
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_theta, norm_eps;
    bool tied, biases, qk_norm, rope_freqs;
} synth_shape;

static const synth_shape shapes[] = {
    {"smollm2-135m", "llama", 576, 30, 9, 3, 64, 1536, 49152, 8192, 100000.0f, 1e-5f, true, false, false, false},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, true, false, false},
    {"qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 128, 8960, 151936, 32768, 1000000.0f, 1e-6f, true, true, false, false},
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true, false, true, false},
    {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false, false, true},
    {"tiny", "llama", 64, 2, 4, 2, 16, 128, 512, 512, 10000.0f, 1e-5f, false, false, false, false},
    /* Qwen3.5 (qwen35; its Gated DeltaNet sizes in qwen35_shapes below) */
    {"qwen3.5-0.8b", "qwen35", 1024, 24, 8, 2, 256, 3584, 248320, 262144, 10000000.0f, 1e-6f, true, false, true, false},
    {"qwen3.5-2b", "qwen35", 2048, 24, 8, 2, 256, 6144, 248320, 262144, 10000000.0f, 1e-6f, true, false, true, false},
    {"qwen3.5-tiny", "qwen35", 128, 4, 4, 2, 64, 256, 512, 512, 10000000.0f, 1e-6f, true, false, true, false},
    {"qwen3.5-small", "qwen35", 192, 8, 6, 2, 64, 384, 512, 512, 10000000.0f, 1e-6f, true, false, true, false},
    /* Gemma 3 (the HF configs: query_pre_attn_scalar = head_dim, rope_local_base_freq 10000 = llama.cpp's
     * default for freq_base_swa); the two small ones keep head_dim 256 and the 5:1 local/global rule for tests,
     * with windows short prompts cross */
    {"gemma3-270m", "gemma3", 640, 18, 4, 1, 256, 2048, 262144, 32768, 1000000.0f, 1e-6f, true, false, true, false},
    {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 256, 6912, 262144, 32768, 1000000.0f, 1e-6f, true, false, true, false},
    {"gemma3-tiny", "gemma3", 256, 7, 4, 1, 256, 512, 512, 512, 1000000.0f, 1e-6f, true, false, true, false},
    {"gemma3-small", "gemma3", 384, 8, 6, 2, 256, 1024, 512, 512, 1000000.0f, 1e-6f, true, false, true, false},
};
/* gemma3 shapes' attention.sliding_window (HF config sliding_window) */
static const struct {
    const char *name;
    int32_t window;
} gemma3_windows[] = {{"gemma3-270m", 512}, {"gemma3-1b", 512}, {"gemma3-tiny", 32}, {"gemma3-small", 48}};
/* qwen35 shapes' Gated DeltaNet and RoPE. The real ones: Qwen3.5-0.8B / 2B's HF configs (linear_conv_kernel_dim 4,
 * linear_key_head_dim = linear_value_head_dim 128, 16 key and 16 value heads, full_attention_interval 4,
 * partial_rotary_factor 0.25 of head_dim 256, mrope_section [11, 11, 10]: llama.cpp's converter default), as far as
 * they could be checked here (llama.cpp's loader: 24 layers, n_embd 1024 = 0.8B, else 2B); the two small ones
 * are for tests (value heads twice the key heads; the second leaves a RoPE pair to the unrotated 4th section). */
static const struct {
    const char *name;
    int32_t d_conv, d_state, n_k_heads, n_v_heads, interval, rope_dim, sections[4];
} qwen35_shapes[] = {
    {"qwen3.5-0.8b", 4, 128, 16, 16, 4, 64, {11, 11, 10, 0}},
    {"qwen3.5-2b", 4, 128, 16, 16, 4, 64, {11, 11, 10, 0}},
    {"qwen3.5-tiny", 4, 32, 4, 8, 4, 16, {3, 3, 2, 0}},
    {"qwen3.5-small", 4, 32, 4, 4, 4, 16, {1, 2, 2, 0}},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static int qwen35_shape(const synth_shape *s) {
    for (int i = 0; i < (int)(sizeof qwen35_shapes / sizeof qwen35_shapes[0]); i++)
        if (strcmp(s->name, qwen35_shapes[i].name) == 0) return i;
    return -1;
}


const char *const *tr_synth_shapes(void) {
    static const char *names[N_SHAPES + 1];
    for (size_t i = 0; i < N_SHAPES; i++) names[i] = shapes[i].name;
    names[N_SHAPES] = NULL;
    return names;
}

tr_synth_params tr_synth_default_params(void) {
    tr_synth_params p = {.shape = "tiny", .type = TR_TYPE_Q8_0, .mixed_q4_k_m = false, .seed = 42};
    return p;
}

/* ---------------------------------------------------------------- tensor plan */

typedef enum fill_kind { FILL_WEIGHT, FILL_NORM, FILL_BIAS, FILL_ROPE_FREQS, FILL_SSM_A } fill_kind;

typedef struct synth_job {
    const synth_shape *shape;
    const tr_synth_params *params;
    fill_kind *kinds;     /* per tensor */
    int64_t *cols;        /* row length per tensor */
    tr_type *types;
    int64_t n_tensors, done;
    float *row;
} synth_job;

static tr_type k_fallback(tr_type t, int64_t cols) {
    if (cols % 256 == 0) return t;
    switch (t) {
    case TR_TYPE_Q4_K: return TR_TYPE_Q5_0;
    case TR_TYPE_Q5_K: return TR_TYPE_Q5_1;
    case TR_TYPE_Q6_K: return TR_TYPE_Q8_0;
    case TR_TYPE_IQ4_XS: return TR_TYPE_IQ4_NL;
    case TR_TYPE_Q2_K:
    case TR_TYPE_Q3_K: return TR_TYPE_Q4_0;
    default: return t;
    }
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between. */
static bool use_more_bits(int il, int n_layer) {
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

static tr_type weight_type(const tr_synth_params *p, const char *role, int il, int n_layer, int64_t cols) {
    tr_type t = p->type;
    if (p->mixed_q4_k_m) {
        if (strcmp(role, "output") == 0) t = TR_TYPE_Q6_K;
        else if ((strcmp(role, "attn_v") == 0 || strcmp(role, "ffn_down") == 0) && use_more_bits(il, n_layer))
            t = TR_TYPE_Q6_K;
        else t = TR_TYPE_Q4_K;
    }
    return k_fallback(t, cols);
}

/* ---------------------------------------------------------------- random numbers */

/* Uniform in [-1, 1), reproducible per (seed, tensor, index). */
static float rand_sym(uint64_t *state) {
    *state = splitmix64_mix(*state + SPLITMIX64_GAMMA);
    return (float)((double)(*state >> 11) * 0x1.0p-52 - 1.0);
}

static tr_status fill_tensor(void *user, int64_t ti, void *dst, size_t n_bytes) {
    synth_job *job = user;
    const int64_t cols = job->cols[ti];
    const tr_type type = job->types[ti];
    const size_t row_bytes = type_row_bytes(type, cols);
    const int64_t rows = (int64_t)(n_bytes / row_bytes);
    uint64_t state = splitmix64_mix(job->params->seed * 1315423911ull + (uint64_t)ti);
    /* Weights ~ U(-a, a) with a chosen so that each product keeps unit-scale activations. */
    const float amp = 1.7f / sqrtf((float)cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) {
            switch (job->kinds[ti]) {
            case FILL_WEIGHT: job->row[i] = amp * rand_sym(&state); break;
            case FILL_NORM: job->row[i] = 1.0f + 0.1f * rand_sym(&state); break;
            case FILL_BIAS: job->row[i] = 0.1f * rand_sym(&state); break;
            case FILL_ROPE_FREQS: job->row[i] = 1.0f + (float)i / (float)cols * 7.0f; break;
            case FILL_SSM_A: job->row[i] = -1.0f + 0.45f * rand_sym(&state); break; /* -exp(A_log): decays */
            }
        }
        tr_status st = quantize_row(type, job->row, (uint8_t *)dst + (size_t)r * row_bytes, cols);
        if (st != TR_OK) return st;
    }
    job->done++;
    if (job->params->progress) job->params->progress(job->params->progress_user, (double)job->done / job->n_tensors);
    return TR_OK;
}

/* ---------------------------------------------------------------- metadata */

static tr_status write_vocab(tr_gguf_writer *w, int32_t n_vocab) {
    char **tokens = calloc((size_t)n_vocab, sizeof *tokens);
    float *scores = malloc((size_t)n_vocab * sizeof *scores);
    int32_t *types = malloc((size_t)n_vocab * sizeof *types);
    char *text = malloc((size_t)n_vocab * 16);
    tr_status st = TR_OK;
    if (!tokens || !scores || !types || !text) st = tr_fail(TR_ERR_NOMEM, "out of memory for the vocabulary");
    for (int32_t i = 0; st == TR_OK && i < n_vocab; i++) {
        char *t = text + (size_t)i * 16;
        if (i == 0) snprintf(t, 16, "<unk>");
        else if (i == 1) snprintf(t, 16, "<s>");
        else if (i == 2) snprintf(t, 16, "</s>");
        else if (i < 3 + 256) snprintf(t, 16, "<0x%02X>", i - 3);
        else snprintf(t, 16, "\xe2\x96\x81t%d", i); /* "▁t<i>": a word piece */
        tokens[i] = t;
        scores[i] = i < 3 + 256 ? 0.0f : -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1;
    }
    if (st == TR_OK) st = tr_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (st == TR_OK) st = tr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, (uint64_t)n_vocab);
    if (st == TR_OK) st = tr_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n_vocab);
    if (st == TR_OK) st = tr_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n_vocab);
    if (st == TR_OK) st = tr_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == TR_OK) st = tr_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == TR_OK) st = tr_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    free(tokens);
    free(scores);
    free(types);
    free(text);
    return st;
}

static tr_status write_hparams(tr_gguf_writer *w, const synth_shape *s, const tr_synth_params *p) {
    char key[128], name[96];
    tr_status st = tr_gguf_writer_set_str(w, "general.architecture", s->arch);
    snprintf(name, sizeof name, "synthetic %s %s%s", s->name, tr_type_name(p->type), p->mixed_q4_k_m ? "_m" : "");
    if (st == TR_OK) st = tr_gguf_writer_set_str(w, "general.name", name);
#define SET_U32(suffix, v) \
    if (st == TR_OK) st = (snprintf(key, sizeof key, "%s." suffix, s->arch), tr_gguf_writer_set_u32(w, key, (uint32_t)(v)))
#define SET_F32(suffix, v) \
    if (st == TR_OK) st = (snprintf(key, sizeof key, "%s." suffix, s->arch), tr_gguf_writer_set_f32(w, key, (v)))
    SET_U32("context_length", s->n_ctx);
    SET_U32("embedding_length", s->n_embd);
    SET_U32("block_count", s->n_layer);
    SET_U32("feed_forward_length", s->n_ff);
    SET_U32("attention.head_count", s->n_head);
    SET_U32("attention.head_count_kv", s->n_head_kv);
    SET_U32("attention.key_length", s->head_dim);
    SET_U32("attention.value_length", s->head_dim);
    const int q35 = qwen35_shape(s);
    SET_U32("rope.dimension_count", q35 >= 0 ? qwen35_shapes[q35].rope_dim : s->head_dim);
    if (q35 >= 0) {
        SET_U32("ssm.conv_kernel", qwen35_shapes[q35].d_conv);
        SET_U32("ssm.state_size", qwen35_shapes[q35].d_state);
        SET_U32("ssm.group_count", qwen35_shapes[q35].n_k_heads);
        SET_U32("ssm.time_step_rank", qwen35_shapes[q35].n_v_heads);
        SET_U32("ssm.inner_size", qwen35_shapes[q35].d_state * qwen35_shapes[q35].n_v_heads);
        SET_U32("full_attention_interval", qwen35_shapes[q35].interval);
        if (st == TR_OK)
            st = (snprintf(key, sizeof key, "%s.rope.dimension_sections", s->arch),
                  tr_gguf_writer_set_arr_i32(w, key, qwen35_shapes[q35].sections, 4));
    }
    SET_F32("rope.freq_base", s->rope_theta);
    SET_F32("attention.layer_norm_rms_epsilon", s->norm_eps);
    for (size_t i = 0; i < sizeof gemma3_windows / sizeof gemma3_windows[0]; i++)
        if (strcmp(s->name, gemma3_windows[i].name) == 0) SET_U32("attention.sliding_window", gemma3_windows[i].window);
#undef SET_U32
#undef SET_F32
    return st;
}

/* ---------------------------------------------------------------- tensors */

typedef struct plan {
    tr_gguf_writer *w;
    synth_job *job;
    tr_status st;
} plan;

static void add(plan *pl, const char *name, tr_type type, int64_t cols, int64_t rows, fill_kind kind) {
    if (pl->st != TR_OK) return;
    int64_t ne[2] = {cols, rows}, index;
    pl->st = tr_gguf_writer_add_tensor(pl->w, name, type, rows > 0 ? 2 : 1, ne, NULL, &index);
    if (pl->st != TR_OK) return;
    pl->job->kinds[index] = kind;
    pl->job->cols[index] = cols;
    pl->job->types[index] = type;
    pl->job->n_tensors = index + 1;
}

/* A qwen35 layer: a Gated DeltaNet one, or (every interval-th) gated full attention; post_attention_norm is the
 * FFN's pre-norm. Names and shapes as llama.cpp's qwen35 loader expects them. */
static void add_qwen35_layer(plan *pl, const synth_shape *s, const tr_synth_params *p, int q35, int il) {
    const int64_t q_dim = (int64_t)s->n_head * s->head_dim, kv_dim = (int64_t)s->n_head_kv * s->head_dim;
    const int64_t ds = qwen35_shapes[q35].d_state, n_k = qwen35_shapes[q35].n_k_heads;
    const int64_t n_v = qwen35_shapes[q35].n_v_heads, conv_dim = 2 * ds * n_k + ds * n_v;
    char name[96];
#define T(suffix) (snprintf(name, sizeof name, "blk.%d.%s", il, suffix), name)
#define W(role, cols, rows) add(pl, T(role ".weight"), weight_type(p, role, il, s->n_layer, cols), cols, rows, FILL_WEIGHT)
    add(pl, T("attn_norm.weight"), TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
    add(pl, T("post_attention_norm.weight"), TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
    if ((il + 1) % qwen35_shapes[q35].interval == 0) {
        W("attn_q", s->n_embd, 2 * q_dim); /* query and gate per head */
        W("attn_k", s->n_embd, kv_dim);
        W("attn_v", s->n_embd, kv_dim);
        W("attn_output", q_dim, s->n_embd);
        add(pl, T("attn_q_norm.weight"), TR_TYPE_F32, s->head_dim, 0, FILL_NORM);
        add(pl, T("attn_k_norm.weight"), TR_TYPE_F32, s->head_dim, 0, FILL_NORM);
    } else {
        W("attn_qkv", s->n_embd, conv_dim);
        W("attn_gate", s->n_embd, ds * n_v);
        add(pl, T("ssm_conv1d.weight"), TR_TYPE_F32, qwen35_shapes[q35].d_conv, conv_dim, FILL_WEIGHT);
        add(pl, T("ssm_dt.bias"), TR_TYPE_F32, n_v, 0, FILL_BIAS);
        add(pl, T("ssm_a"), TR_TYPE_F32, n_v, 0, FILL_SSM_A);
        W("ssm_beta", s->n_embd, n_v);
        W("ssm_alpha", s->n_embd, n_v);
        add(pl, T("ssm_norm.weight"), TR_TYPE_F32, ds, 0, FILL_NORM);
        W("ssm_out", ds * n_v, s->n_embd);
    }
    W("ffn_gate", s->n_embd, s->n_ff);
    W("ffn_up", s->n_embd, s->n_ff);
    W("ffn_down", s->n_ff, s->n_embd);
#undef W
#undef T
}

static void add_tensors(plan *pl, const synth_shape *s, const tr_synth_params *p) {
    const int64_t q_dim = (int64_t)s->n_head * s->head_dim, kv_dim = (int64_t)s->n_head_kv * s->head_dim;
    char name[96];
    add(pl, "token_embd.weight", weight_type(p, s->tied ? "output" : "token_embd", 0, s->n_layer, s->n_embd),
        s->n_embd, s->n_vocab, FILL_WEIGHT);
    add(pl, "output_norm.weight", TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
    if (!s->tied)
        add(pl, "output.weight", weight_type(p, "output", 0, s->n_layer, s->n_embd), s->n_embd, s->n_vocab,
            FILL_WEIGHT);
    if (s->rope_freqs) add(pl, "rope_freqs.weight", TR_TYPE_F32, s->head_dim / 2, 0, FILL_ROPE_FREQS);
    for (int il = 0; il < s->n_layer; il++) {
        if (qwen35_shape(s) >= 0) {
            add_qwen35_layer(pl, s, p, qwen35_shape(s), il);
            continue;
        }
#define T(suffix) (snprintf(name, sizeof name, "blk.%d.%s", il, suffix), name)
#define W(role, cols, rows) add(pl, T(role ".weight"), weight_type(p, role, il, s->n_layer, cols), cols, rows, FILL_WEIGHT)
        add(pl, T("attn_norm.weight"), TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
        W("attn_q", s->n_embd, q_dim);
        W("attn_k", s->n_embd, kv_dim);
        W("attn_v", s->n_embd, kv_dim);
        W("attn_output", q_dim, s->n_embd);
        if (s->biases) {
            add(pl, T("attn_q.bias"), TR_TYPE_F32, q_dim, 0, FILL_BIAS);
            add(pl, T("attn_k.bias"), TR_TYPE_F32, kv_dim, 0, FILL_BIAS);
            add(pl, T("attn_v.bias"), TR_TYPE_F32, kv_dim, 0, FILL_BIAS);
        }
        if (s->qk_norm) {
            add(pl, T("attn_q_norm.weight"), TR_TYPE_F32, s->head_dim, 0, FILL_NORM);
            add(pl, T("attn_k_norm.weight"), TR_TYPE_F32, s->head_dim, 0, FILL_NORM);
        }
        if (strcmp(s->arch, "gemma3") == 0) /* norms stored with Gemma's +1 added, as llama.cpp's converter does */
            add(pl, T("post_attention_norm.weight"), TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
        add(pl, T("ffn_norm.weight"), TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
        W("ffn_gate", s->n_embd, s->n_ff);
        W("ffn_up", s->n_embd, s->n_ff);
        W("ffn_down", s->n_ff, s->n_embd);
        if (strcmp(s->arch, "gemma3") == 0) add(pl, T("post_ffw_norm.weight"), TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
#undef W
#undef T
    }
}

tr_status tr_synth_write(const tr_synth_params *params, const char *path) {
    if (!params || !params->shape || !path) return tr_fail(TR_ERR_ARG, "tr_synth_write: NULL argument");
    const synth_shape *s = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcmp(shapes[i].name, params->shape) == 0) s = &shapes[i];
    if (!s) return tr_fail(TR_ERR_ARG, "unknown shape '%s'", params->shape);
    if (!tr_type_supported(params->type) || params->type == TR_TYPE_Q8_K)
        return tr_fail(TR_ERR_UNSUPPORTED, "cannot write weights of type %s",
                       tr_type_name(params->type) ? tr_type_name(params->type) : "?");
    if (params->mixed_q4_k_m && params->type != TR_TYPE_Q4_K)
        return tr_fail(TR_ERR_ARG, "the Q4_K_M mix needs type q4_k");
    const size_t max_tensors = 4 + (size_t)s->n_layer * 16;
    synth_job job = {.shape = s, .params = params};
    job.kinds = calloc(max_tensors, sizeof *job.kinds);
    job.cols = calloc(max_tensors, sizeof *job.cols);
    job.types = calloc(max_tensors, sizeof *job.types);
    job.row = malloc((size_t)(s->n_ff > s->n_embd * 4 ? s->n_ff : s->n_embd * 4) * sizeof *job.row);
    tr_gguf_writer *w = NULL;
    tr_status st = (!job.kinds || !job.cols || !job.types || !job.row) ? tr_fail(TR_ERR_NOMEM, "out of memory")
                                                                       : tr_gguf_writer_create(&w);
    if (st == TR_OK) st = write_hparams(w, s, params);
    if (st == TR_OK) st = write_vocab(w, s->n_vocab);
    if (st == TR_OK) {
        plan pl = {w, &job, TR_OK};
        add_tensors(&pl, s, params);
        st = pl.st;
    }
    if (st == TR_OK) st = tr_gguf_writer_write(w, path, fill_tensor, &job);
    tr_gguf_writer_free(w);
    free(job.kinds);
    free(job.cols);
    free(job.types);
    free(job.row);
    return st;
}
