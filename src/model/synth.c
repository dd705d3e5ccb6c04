/* synth.c — writes models with random weights at real models' exact shapes, so speed can be measured at real
 * sizes without downloading them. The shapes, the metadata they add and the tensors of layers other than the shared
 * decoder layer's live with their families (arch_ops.shapes, synth_hparams, synth_layer; synth.h).
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
#include "model/arch.h"
#include "model/sample_math.h"

/* Every family's shapes (arch_ops.shapes), and the family of one. */
static const synth_shape *find_shape(const char *name, const arch_ops **family) {
    size_t n_fam;
    const arch_ops *const *fams = arch_all(&n_fam);
    for (size_t f = 0; f < n_fam; f++)
        for (int i = 0; i < fams[f]->n_shapes; i++)
            if (strcmp(fams[f]->shapes[i].name, name) == 0) {
                *family = fams[f];
                return &fams[f]->shapes[i];
            }
    return NULL;
}

const char *const *tr_synth_shapes(void) {
    static const char *names[128];
    size_t n_fam, k = 0;
    const arch_ops *const *fams = arch_all(&n_fam);
    for (size_t f = 0; f < n_fam; f++)
        for (int i = 0; i < fams[f]->n_shapes && k + 1 < sizeof names / sizeof names[0]; i++)
            names[k++] = fams[f]->shapes[i].name;
    names[k] = NULL;
    return names;
}

tr_synth_params tr_synth_default_params(void) {
    tr_synth_params p = {.shape = "tiny", .type = TR_TYPE_Q8_0, .mixed_q4_k_m = false, .seed = 42};
    return p;
}

/* ---------------------------------------------------------------- tensor plan */

typedef struct synth_job {
    const synth_shape *shape;
    const tr_synth_params *params;
    synth_fill *kinds;     /* per tensor */
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
            case FILL_ROPE_QUARTER: job->row[i] = i < cols / 4 ? 1.0f : 1e30f; break;
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

tr_status synth_set_u32(tr_gguf_writer *w, const char *arch, const char *suffix, uint32_t v, tr_status st) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return st == TR_OK ? tr_gguf_writer_set_u32(w, key, v) : st;
}

tr_status synth_set_f32(tr_gguf_writer *w, const char *arch, const char *suffix, float v, tr_status st) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return st == TR_OK ? tr_gguf_writer_set_f32(w, key, v) : st;
}

static tr_status write_hparams(tr_gguf_writer *w, const arch_ops *fam, const synth_shape *s,
                               const tr_synth_params *p) {
    char name[96];
    const char *arch = fam->name;
    tr_status st = tr_gguf_writer_set_str(w, "general.architecture", arch);
    snprintf(name, sizeof name, "synthetic %s %s%s", s->name, tr_type_name(p->type), p->mixed_q4_k_m ? "_m" : "");
    if (st == TR_OK) st = tr_gguf_writer_set_str(w, "general.name", name);
    st = synth_set_u32(w, arch, "context_length", (uint32_t)s->n_ctx, st);
    st = synth_set_u32(w, arch, "embedding_length", (uint32_t)s->n_embd, st);
    st = synth_set_u32(w, arch, "block_count", (uint32_t)s->n_layer, st);
    st = synth_set_u32(w, arch, "feed_forward_length", (uint32_t)s->n_ff, st);
    st = synth_set_u32(w, arch, "attention.head_count", (uint32_t)s->n_head, st);
    st = synth_set_u32(w, arch, "attention.head_count_kv", (uint32_t)s->n_head_kv, st);
    st = synth_set_u32(w, arch, "attention.key_length", (uint32_t)s->head_dim, st);
    st = synth_set_u32(w, arch, "attention.value_length", (uint32_t)s->head_dim, st);
    st = synth_set_u32(w, arch, "rope.dimension_count", (uint32_t)(s->rope_dim ? s->rope_dim : s->head_dim), st);
    st = synth_set_f32(w, arch, "rope.freq_base", s->rope_theta, st);
    st = synth_set_f32(w, arch, "attention.layer_norm_rms_epsilon", s->norm_eps, st);
    if (st == TR_OK && fam->synth_hparams) st = fam->synth_hparams(w, s);
    return st;
}

/* ---------------------------------------------------------------- tensors */

struct synth_plan {
    tr_gguf_writer *w;
    synth_job *job;
    tr_status st;
};

void synth_add(synth_plan *pl, const char *name, tr_type type, int64_t cols, int64_t rows, synth_fill fill) {
    if (pl->st != TR_OK) return;
    int64_t ne[2] = {cols, rows}, index;
    pl->st = tr_gguf_writer_add_tensor(pl->w, name, type, rows > 0 ? 2 : 1, ne, NULL, &index);
    if (pl->st != TR_OK) return;
    pl->job->kinds[index] = fill;
    pl->job->cols[index] = cols;
    pl->job->types[index] = type;
    pl->job->n_tensors = index + 1;
}

const synth_shape *synth_plan_shape(const synth_plan *pl) { return pl->job->shape; }

void synth_weight(synth_plan *pl, int il, const char *role, int64_t cols, int64_t rows) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", il, role);
    synth_add(pl, name, weight_type(pl->job->params, role, il, pl->job->shape->n_layer, cols), cols, rows,
              FILL_WEIGHT);
}

void synth_vector(synth_plan *pl, int il, const char *suffix, int64_t n, synth_fill fill) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    synth_add(pl, name, TR_TYPE_F32, n, 0, fill);
}

void synth_global_weight(synth_plan *pl, const char *name, int64_t cols, int64_t rows) {
    char full[96];
    snprintf(full, sizeof full, "%s.weight", name);
    synth_add(pl, full, weight_type(pl->job->params, name, 0, pl->job->shape->n_layer, cols), cols, rows, FILL_WEIGHT);
}

void synth_decoder_layer(synth_plan *pl, const synth_shape *s, int il, bool post_norms) {
    const int64_t q_dim = (int64_t)s->n_head * s->head_dim, kv_dim = (int64_t)s->n_head_kv * s->head_dim;
    synth_vector(pl, il, "attn_norm.weight", s->n_embd, FILL_NORM);
    synth_weight(pl, il, "attn_q", s->n_embd, q_dim);
    synth_weight(pl, il, "attn_k", s->n_embd, kv_dim);
    synth_weight(pl, il, "attn_v", s->n_embd, kv_dim);
    synth_weight(pl, il, "attn_output", q_dim, s->n_embd);
    if (s->biases) {
        synth_vector(pl, il, "attn_q.bias", q_dim, FILL_BIAS);
        synth_vector(pl, il, "attn_k.bias", kv_dim, FILL_BIAS);
        synth_vector(pl, il, "attn_v.bias", kv_dim, FILL_BIAS);
    }
    if (s->qk_norm) {
        synth_vector(pl, il, "attn_q_norm.weight", s->head_dim, FILL_NORM);
        synth_vector(pl, il, "attn_k_norm.weight", s->head_dim, FILL_NORM);
    }
    if (post_norms) synth_vector(pl, il, "post_attention_norm.weight", s->n_embd, FILL_NORM);
    synth_vector(pl, il, "ffn_norm.weight", s->n_embd, FILL_NORM);
    synth_weight(pl, il, "ffn_gate", s->n_embd, s->n_ff);
    synth_weight(pl, il, "ffn_up", s->n_embd, s->n_ff);
    synth_weight(pl, il, "ffn_down", s->n_ff, s->n_embd);
    if (post_norms) synth_vector(pl, il, "post_ffw_norm.weight", s->n_embd, FILL_NORM);
}

static void add_tensors(synth_plan *pl, const arch_ops *fam, const synth_shape *s, const tr_synth_params *p) {
    synth_add(pl, "token_embd.weight", weight_type(p, s->tied ? "output" : "token_embd", 0, s->n_layer, s->n_embd),
              s->n_embd, s->n_vocab, FILL_WEIGHT);
    synth_add(pl, fam->output_norm ? fam->output_norm : "output_norm.weight", TR_TYPE_F32, s->n_embd, 0, FILL_NORM);
    if (!s->tied)
        synth_add(pl, "output.weight", weight_type(p, "output", 0, s->n_layer, s->n_embd), s->n_embd, s->n_vocab,
                  FILL_WEIGHT);
    if (s->rope_freqs) synth_add(pl, "rope_freqs.weight", TR_TYPE_F32, s->head_dim / 2, 0, FILL_ROPE_FREQS);
    for (int il = 0; il < s->n_layer; il++) {
        if (fam->synth_layer) fam->synth_layer(pl, s, il);
        else synth_decoder_layer(pl, s, il, false);
    }
}

tr_status tr_synth_write(const tr_synth_params *params, const char *path) {
    if (!params || !params->shape || !path) return tr_fail(TR_ERR_ARG, "tr_synth_write: NULL argument");
    const arch_ops *fam = NULL;
    const synth_shape *s = find_shape(params->shape, &fam);
    if (!s) return tr_fail(TR_ERR_ARG, "unknown shape '%s'", params->shape);
    if (!tr_type_supported(params->type) || params->type == TR_TYPE_Q8_K)
        return tr_fail(TR_ERR_UNSUPPORTED, "cannot write weights of type %s",
                       tr_type_name(params->type) ? tr_type_name(params->type) : "?");
    if (params->mixed_q4_k_m && params->type != TR_TYPE_Q4_K)
        return tr_fail(TR_ERR_ARG, "the Q4_K_M mix needs type q4_k");
    const size_t max_tensors = 8 + (size_t)s->n_layer * 20;
    synth_job job = {.shape = s, .params = params};
    job.kinds = calloc(max_tensors, sizeof *job.kinds);
    job.cols = calloc(max_tensors, sizeof *job.cols);
    job.types = calloc(max_tensors, sizeof *job.types);
    tr_gguf_writer *w = NULL;
    tr_status st = (!job.kinds || !job.cols || !job.types) ? tr_fail(TR_ERR_NOMEM, "out of memory")
                                                           : tr_gguf_writer_create(&w);
    if (st == TR_OK) st = write_hparams(w, fam, s, params);
    if (st == TR_OK) st = write_vocab(w, s->n_vocab);
    if (st == TR_OK) {
        synth_plan pl = {w, &job, TR_OK};
        add_tensors(&pl, fam, s, params);
        st = pl.st;
    }
    int64_t max_cols = 1; /* the longest row of any tensor planned */
    for (int64_t i = 0; i < job.n_tensors; i++) max_cols = job.cols[i] > max_cols ? job.cols[i] : max_cols;
    if (st == TR_OK && !(job.row = malloc((size_t)max_cols * sizeof *job.row)))
        st = tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st == TR_OK) st = tr_gguf_writer_write(w, path, fill_tensor, &job);
    tr_gguf_writer_free(w);
    free(job.kinds);
    free(job.cols);
    free(job.types);
    free(job.row);
    return st;
}
