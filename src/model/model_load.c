/* model_load.c — loads a GGUF file for the family its general.architecture names (arch.h, families.c): the common
 * hyperparameters, the embeddings and output, then the family's own (arch_ops.load), every shape and type checked
 * before the forward pass may touch it.
 *
 * Weights stay in the file's mapping unless the kernels stream them faster interleaved (repack.c): those matrices
 * are repacked once into owned buffers and their pages of the mapping are released, so memory holds one copy
 * either way (with use_mmap off they are repacked in place). 1-D tensors (norms, biases, rope frequency factors)
 * are converted to owned F32 arrays, since they are tiny and read on every token.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/platform.h"
#include "model/model_internal.h"
#include "model/arch.h"
#include "router/router_internal.h" /* ROUTER_ARCH: a router file handed over as a model is named as one */

tr_model_params tr_model_default_params(void) {
    tr_model_params p = {.use_mmap = true, .load_vocab = true, .kv_type = TR_KV_DEFAULT};
    return p;
}

const tr_model_info *tr_model_get_info(const tr_model *m) { return m ? &m->info : NULL; }
const tr_vocab *tr_model_vocab(const tr_model *m) { return m ? m->vocab : NULL; }

/* ---------------------------------------------------------------- hyperparameters */

static bool arch_int(const tr_gguf *g, const char *arch, const char *suffix, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return tr_gguf_get_int(g, key, out);
}

static bool arch_float(const tr_gguf *g, const char *arch, const char *suffix, double *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return tr_gguf_get_float(g, key, out);
}

static tr_status require_int(const tr_gguf *g, const char *arch, const char *suffix, int64_t lo, int64_t hi,
                             int32_t *out) {
    int64_t v;
    if (!arch_int(g, arch, suffix, &v)) return tr_fail(TR_ERR_FORMAT, "missing metadata %s.%s", arch, suffix);
    if (v < lo || v > hi)
        return tr_fail(TR_ERR_FORMAT, "metadata %s.%s = %" PRId64 " is outside %" PRId64 "..%" PRId64, arch, suffix,
                       v, lo, hi);
    *out = (int32_t)v;
    return TR_OK;
}

/* feed_forward_length: one integer, or one per layer (gemma4's double-wide layers: the family binds each layer's;
 * the buffers take the largest). */
static tr_status read_n_ff(const tr_model *m, int32_t *n_ff) {
    char key[128];
    snprintf(key, sizeof key, "%s.feed_forward_length", m->arch_name);
    const int64_t kv = tr_gguf_find_kv(m->gguf, key);
    if (kv < 0 || tr_gguf_kv_type(m->gguf, kv) != TR_GGUF_ARRAY)
        return require_int(m->gguf, m->arch_name, "feed_forward_length", 1, 1 << 20, n_ff);
    const uint64_t n = tr_gguf_kv_array_len(m->gguf, kv);
    *n_ff = 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if (!tr_gguf_arr_int(m->gguf, kv, i, &v) || v < 1 || v > (1 << 20))
            return tr_fail(TR_ERR_FORMAT, "metadata %s[%" PRIu64 "] is not an integer 1..%d", key, i, 1 << 20);
        if (v > *n_ff) *n_ff = (int32_t)v;
    }
    if (n == 0) return tr_fail(TR_ERR_FORMAT, "metadata %s is an empty array", key);
    return TR_OK;
}

static tr_status read_hparams(tr_model *m) {
    const tr_gguf *g = m->gguf;
    tr_model_info *in = &m->info;
    const char *arch = m->arch_name;
    tr_status st;
    if ((st = require_int(g, arch, "embedding_length", 1, 1 << 16, &in->n_embd)) != TR_OK ||
        (st = require_int(g, arch, "block_count", 1, 1024, &in->n_layer)) != TR_OK ||
        (st = require_int(g, arch, "attention.head_count", 1, 1024, &in->n_head)) != TR_OK ||
        (st = read_n_ff(m, &in->n_ff)) != TR_OK)
        return st;
    int64_t v;
    in->n_head_kv = in->n_head;
    if (arch_int(g, arch, "attention.head_count_kv", &v)) {
        if (v < 1 || v > in->n_head || in->n_head % v != 0)
            return tr_fail(TR_ERR_FORMAT, "attention.head_count_kv = %" PRId64 " does not divide head_count %d", v,
                           in->n_head);
        in->n_head_kv = (int32_t)v;
    }
    in->head_dim = in->n_embd / in->n_head;
    if (arch_int(g, arch, "attention.key_length", &v)) {
        if (v < 2 || v > 1024 || v % 2) return tr_fail(TR_ERR_FORMAT, "attention.key_length = %" PRId64, v);
        in->head_dim = (int32_t)v;
    } else if (in->n_embd % in->n_head != 0) {
        return tr_fail(TR_ERR_FORMAT, "embedding_length %d is not a multiple of head_count %d", in->n_embd,
                       in->n_head);
    }
    if (arch_int(g, arch, "attention.value_length", &v) && v != in->head_dim)
        return tr_fail(TR_ERR_UNSUPPORTED, "value_length %" PRId64 " differs from key_length %d", v, in->head_dim);
    if (in->head_dim % 2 || in->head_dim > 1024)
        return tr_fail(TR_ERR_UNSUPPORTED, "head size %d (even sizes up to 1024 are supported)", in->head_dim);
    m->rope_dim = in->head_dim;
    if (arch_int(g, arch, "rope.dimension_count", &v)) {
        if (v < 2 || v > in->head_dim || v % 2) return tr_fail(TR_ERR_FORMAT, "rope.dimension_count = %" PRId64, v);
        m->rope_dim = (int32_t)v;
    }
    in->n_ctx_train = 4096;
    if (arch_int(g, arch, "context_length", &v) && v > 0) in->n_ctx_train = v > (1 << 24) ? 1 << 24 : (int32_t)v;
    double f;
    in->rope_theta = 10000.0f;
    if (arch_float(g, arch, "rope.freq_base", &f)) {
        if (!(f > 0)) return tr_fail(TR_ERR_FORMAT, "rope.freq_base = %g", f);
        in->rope_theta = (float)f;
    }
    in->norm_eps = 1e-5f;
    if (arch_float(g, arch, "attention.layer_norm_rms_epsilon", &f)) {
        if (!(f > 0 && f < 1)) return tr_fail(TR_ERR_FORMAT, "layer_norm_rms_epsilon = %g", f);
        in->norm_eps = (float)f;
    }
    m->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *scaling = tr_gguf_get_str(g, key, NULL);
    if (scaling && strcmp(scaling, "none") != 0) {
        if (strcmp(scaling, "linear") != 0)
            return tr_fail(TR_ERR_UNSUPPORTED, "rope scaling '%s' is not supported (none and linear are)", scaling);
        if (arch_float(g, arch, "rope.scaling.factor", &f) && f > 0) m->rope_freq_scale = (float)(1.0 / f);
    }
    m->q_dim = in->n_head * in->head_dim;
    m->kv_dim = in->n_head_kv * in->head_dim;
    m->kq_scale = 1.0f / sqrtf((float)in->head_dim);
    m->embd_scale = m->q_scale = 1.0f;
    return TR_OK;
}

/* ---------------------------------------------------------------- tensors */

tr_status find_tensor(tr_model *m, const char *name, bool required, const tr_gguf_tensor **out) {
    int64_t i = tr_gguf_find_tensor(m->gguf, name);
    *out = i >= 0 ? tr_gguf_tensor_at(m->gguf, i) : NULL;
    if (!*out && required) return tr_fail(TR_ERR_FORMAT, "missing tensor '%s'", name);
    return TR_OK;
}

/* A 2-D weight of ne = [cols, rows] in a type we can multiply. */
tr_status bind_matrix(tr_model *m, const char *name, int64_t cols, int64_t rows, bool required,
                             weight_matrix *out) {
    const tr_gguf_tensor *t;
    tr_status st = find_tensor(m, name, required, &t);
    memset(out, 0, sizeof *out);
    if (st != TR_OK || !t) return st;
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
        return tr_fail(TR_ERR_FORMAT, "tensor '%s' has shape [%" PRId64 ", %" PRId64 "] (%d-D), expected [%" PRId64
                       ", %" PRId64 "]", name, t->ne[0], t->ne[1], t->n_dims, cols, rows);
    if (!tr_type_supported(t->type))
        return tr_fail(TR_ERR_UNSUPPORTED, "tensor '%s' has type %s, which the engine cannot multiply", name,
                       tr_type_name(t->type) ? tr_type_name(t->type) : "?");
    out->type = t->type;
    out->data = t->data;
    out->rows = rows;
    out->cols = cols;
    m->info.n_params += (uint64_t)(rows * cols);
    m->info.weight_bytes += t->n_bytes;
    return TR_OK;
}

/* The first n values of tensor t (checked by the caller) as an F32 array the model owns, counted in its size. */
tr_status own_f32_copy(tr_model *m, const char *name, const tr_gguf_tensor *t, int64_t n, float **out) {
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return tr_fail(TR_ERR_NOMEM, "out of memory for tensor '%s'", name);
    m->owned_f32[m->n_owned++] = v;
    tr_status st = dequantize_row(t->type, t->data, v, n);
    if (st != TR_OK) return tr_fail_prefix(st, "tensor '%s'", name);
    m->info.n_params += (uint64_t)n;
    m->info.weight_bytes += t->n_bytes;
    *out = v;
    return TR_OK;
}

void lookup_table(tr_model *m, const weight_matrix *w) {
    const uint64_t row = type_row_bytes(w->type, w->cols);
    m->lookup_bytes += row * (uint64_t)w->rows;
    m->lookup_row_bytes += row;
}

/* A 1-D tensor of n elements, converted to an owned F32 array. */
tr_status bind_vector(tr_model *m, const char *name, int64_t n, bool required, const float **out) {
    const tr_gguf_tensor *t;
    tr_status st = find_tensor(m, name, required, &t);
    *out = NULL;
    if (st != TR_OK || !t) return st;
    if (t->n_dims != 1 || t->ne[0] != n)
        return tr_fail(TR_ERR_FORMAT, "tensor '%s' has %" PRId64 " elements (%d-D), expected %" PRId64, name,
                       t->ne[0], t->n_dims, n);
    float *v;
    if ((st = own_f32_copy(m, name, t, n, &v)) != TR_OK) return st;
    *out = v;
    return TR_OK;
}

static tr_type most_common_type(const tr_model *m) {
    uint64_t count[TR_TYPE_COUNT] = {0};
    for (int il = 0; il < m->info.n_layer; il++) {
        const layer_weights *L = &m->layers[il];
        const weight_matrix *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            count[ws[i]->type] += (uint64_t)(ws[i]->rows * ws[i]->cols);
    }
    int best = 0;
    for (int t = 1; t < TR_TYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    return (tr_type)best;
}

static tr_status bind_model(tr_model *m) {
    tr_model_info *in = &m->info;
    /* Upper bound of owned vectors: per layer 11, plus output_norm and rope_freqs. */
    m->owned_f32 = calloc((size_t)in->n_layer * 11 + 2, sizeof *m->owned_f32);
    m->layers = calloc((size_t)in->n_layer, sizeof *m->layers);
    if (!m->owned_f32 || !m->layers) return tr_fail(TR_ERR_NOMEM, "out of memory");
    const tr_gguf_tensor *te;
    tr_status st = find_tensor(m, "token_embd.weight", true, &te);
    if (st != TR_OK) return st;
    if (te->n_dims != 2 || te->ne[0] != in->n_embd || te->ne[1] > INT32_MAX)
        return tr_fail(TR_ERR_FORMAT, "token_embd.weight has shape [%" PRId64 ", %" PRId64 "], expected [%d, vocab]",
                       te->ne[0], te->ne[1], in->n_embd);
    in->n_vocab = (int32_t)te->ne[1];
    if ((st = bind_matrix(m, "token_embd.weight", in->n_embd, in->n_vocab, true, &m->tok_embd)) != TR_OK) return st;
    const char *output_norm = m->arch->output_norm ? m->arch->output_norm : "output_norm.weight";
    if ((st = bind_vector(m, output_norm, in->n_embd, true, &m->output_norm)) != TR_OK) return st;
    if ((st = bind_matrix(m, "output.weight", in->n_embd, in->n_vocab, false, &m->output)) != TR_OK) return st;
    in->tied_output = m->output.data == NULL;
    if (in->tied_output) m->output = m->tok_embd;
    if (!in->tied_output) lookup_table(m, &m->tok_embd);
    if ((st = m->arch->load(m)) != TR_OK) return st; /* the family's hyperparameters and layers */
    in->main_type = most_common_type(m);
    in->token_read_bytes = in->weight_bytes - m->lookup_bytes + m->lookup_row_bytes;
    return TR_OK;
}

/* ---------------------------------------------------------------- exact conversion, repacking */

/* Converts the layer matrices and the output matrix that the active kernels multiply faster in another type holding
 * exactly the same values (weight_convert_type: on SIMD128, Q5_0 -> Q8_0; natively none) into one buffer the model
 * owns; the file's bytes stay. All or nothing: kept in the file's types when the file and the copies would not fit
 * this build's memory (weight_convert_fits) or the buffer cannot be had. */
static tr_status convert_weights(tr_model *m) {
    const size_t n_max = (size_t)m->info.n_layer * 7 + 1;
    weight_matrix **todo = calloc(n_max, sizeof *todo);
    if (!todo) return tr_fail(TR_ERR_NOMEM, "out of memory");
    size_t n = 0, total = 0;
    weight_matrix *out = m->info.tied_output ? &m->tok_embd : &m->output;
    if (weight_convert_type(out) != out->type) todo[n++] = out;
    for (int il = 0; il < m->info.n_layer; il++) {
        layer_weights *L = &m->layers[il];
        weight_matrix *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data && weight_convert_type(ws[i]) != ws[i]->type) todo[n++] = ws[i];
    }
    for (size_t i = 0; i < n; i++)
        total += (weight_convert_bytes(todo[i], weight_convert_type(todo[i])) + 63) / 64 * 64; /* rows 64-aligned */
    uint8_t *buf = n > 0 && weight_convert_fits(tr_gguf_file_size(m->gguf), total) ? malloc(total) : NULL;
    tr_status st = TR_OK;
    if (buf) m->converted = buf;
    for (size_t i = 0, off = 0; buf && i < n && st == TR_OK; i++) {
        const tr_type to = weight_convert_type(todo[i]);
        const size_t bytes = weight_convert_bytes(todo[i], to);
        st = weight_convert(todo[i], to, buf + off);
        off += (bytes + 63) / 64 * 64;
    }
    if (m->info.tied_output) m->output = m->tok_embd;
    free(todo);
    return st;
}

/* Interleaves the matrices the active kernels read faster that way: every layer matrix, the embeddings (read
 * through weight_dequantize_row) and a separate output matrix. The repacked copies share one anonymous mapping
 * (not asked for huge pages: the kernel's synchronous compaction for them stalled loads for seconds on a busy
 * machine); with use_mmap off the file is our own copy and they are repacked in place. */
static tr_status repack_weights(tr_model *m) {
    const size_t n_max = (size_t)m->info.n_layer * 15 + 2; /* 7 per layer, up to 8 more of the family's */
    weight_matrix **todo = calloc(n_max, sizeof *todo);
    if (!todo) return tr_fail(TR_ERR_NOMEM, "out of memory");
    size_t n = 0, total = 0;
    if (weight_repack_wanted(&m->tok_embd)) todo[n++] = &m->tok_embd;
    if (!m->info.tied_output && weight_repack_wanted(&m->output)) todo[n++] = &m->output;
    for (int il = 0; il < m->info.n_layer; il++) {
        layer_weights *L = &m->layers[il];
        weight_matrix *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (weight_repack_wanted(ws[i])) todo[n++] = ws[i];
    }
    if (m->arch->repack_list) n += m->arch->repack_list(m, todo + n);
    for (size_t i = 0; i < n; i++) total += (weight_bytes(todo[i]) + 63) / 64 * 64;
    tr_status st = TR_OK;
    uint8_t *arena = NULL;
    if (n > 0 && !m->file_copy) {
        arena = tr_platform_alloc_pages(total);
        if (!arena) st = tr_fail(TR_ERR_NOMEM, "out of memory repacking %zu bytes of weights", total);
        else m->repacked = arena, m->repacked_bytes = total;
    }
    for (size_t i = 0, off = 0; i < n && st == TR_OK; i++) {
        const void *orig = todo[i]->data;
        const size_t bytes = weight_bytes(todo[i]);
        st = weight_repack(todo[i], arena ? arena + off : (void *)orig);
        if (st == TR_OK && arena) tr_platform_release_pages(orig, bytes);
        off += (bytes + 63) / 64 * 64;
    }
    if (m->info.tied_output) m->output = m->tok_embd;
    free(todo);
    return st;
}

/* ---------------------------------------------------------------- load / free */

static tr_status open_file(tr_model *m, const char *path, bool use_mmap) {
    if (use_mmap) return tr_gguf_open(path, &m->gguf);
    FILE *f = fopen(path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open %s", path);
    tr_status st = TR_OK;
    if (fseek(f, 0, SEEK_END) != 0) st = tr_fail(TR_ERR_IO, "cannot seek %s", path);
    long size = st == TR_OK ? ftell(f) : -1;
    if (st == TR_OK && size < 0) st = tr_fail(TR_ERR_IO, "cannot size %s", path);
    if (st == TR_OK && !(m->file_copy = malloc(size ? (size_t)size : 1)))
        st = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    if (st == TR_OK && (fseek(f, 0, SEEK_SET) != 0 || fread(m->file_copy, 1, (size_t)size, f) != (size_t)size))
        st = tr_fail(TR_ERR_IO, "cannot read %s", path);
    fclose(f);
    if (st == TR_OK && (st = tr_gguf_open_memory(m->file_copy, (size_t)size, &m->gguf)) != TR_OK)
        tr_fail_prefix(st, "%s", path);
    return st;
}

tr_status tr_model_load(const char *path, const tr_model_params *params, tr_model **out) {
    if (!path || !out) return tr_fail(TR_ERR_ARG, "tr_model_load: NULL argument");
    *out = NULL;
    tr_model_params p = params ? *params : tr_model_default_params();
    tr_model *m = calloc(1, sizeof *m);
    if (!m) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_status st = open_file(m, path, p.use_mmap);
    const bool opened = st == TR_OK; /* the reader's messages already name the file */
    if (st == TR_OK) {
        const char *arch = tr_gguf_get_str(m->gguf, "general.architecture", NULL);
        if (!arch) {
            st = tr_fail(TR_ERR_FORMAT, "missing general.architecture");
        } else if (strcmp(arch, ROUTER_ARCH) == 0) {
            st = tr_fail(TR_ERR_ARG, "this is a tokroute router file, not a model: load it as the router "
                                     "(tr_router_load; on the command line --router FILE)");
        } else if (!(m->arch = arch_find(arch))) {
            char names[256];
            arch_names(names, sizeof names);
            st = tr_fail(TR_ERR_UNSUPPORTED, "architecture '%.40s' is not supported (%s are)", arch, names);
        } else {
            m->info.arch = m->arch->id;
            m->rope_neox = m->arch->rope_neox;
        }
        if (st == TR_OK) {
            snprintf(m->arch_name, sizeof m->arch_name, "%s", arch);
            const char *name = tr_gguf_get_str(m->gguf, "general.name", NULL);
            snprintf(m->name, sizeof m->name, "%s", name ? name : "");
            m->info.arch_name = m->arch_name;
            m->info.name = m->name;
        }
    }
    if (st == TR_OK) st = read_hparams(m);
    if (st == TR_OK) { /* a KV type the model cannot hold fails here, not at its first context */
        kv_cache probe;
        m->kv_type = p.kv_type == TR_KV_DEFAULT ? TR_KV_F16 : p.kv_type;
        st = kv_cache_layout(m, m->kv_type, 1, &probe);
    }
    if (st == TR_OK) st = kernels_check();
    if (st == TR_OK) st = bind_model(m);
    if (st == TR_OK) st = convert_weights(m);
    if (st == TR_OK) st = repack_weights(m);
    if (st == TR_OK && p.load_vocab && tr_gguf_find_kv(m->gguf, "tokenizer.ggml.model") >= 0) {
        st = tr_vocab_from_gguf(m->gguf, &m->vocab);
        if (st != TR_OK) st = tr_fail_prefix(st, "vocabulary");
        else if (tr_vocab_n_tokens(m->vocab) > m->info.n_vocab)
            st = tr_fail(TR_ERR_FORMAT, "the vocabulary has %d tokens but token_embd has only %d rows",
                         tr_vocab_n_tokens(m->vocab), m->info.n_vocab);
    }
    if (st != TR_OK) {
        if (opened) tr_fail_prefix(st, "%s", path);
        tr_model_free(m);
        return st;
    }
    *out = m;
    return TR_OK;
}

void tr_model_free(tr_model *m) {
    if (!m) return;
    tr_vocab_free(m->vocab);
    if (m->arch && m->arch->unload) m->arch->unload(m);
    for (int i = 0; i < m->n_owned; i++) free(m->owned_f32[i]);
    free(m->owned_f32);
    free(m->layers);
    tr_platform_free_pages(m->repacked, m->repacked_bytes);
    free(m->converted);
    tr_gguf_close(m->gguf);
    free(m->file_copy);
    free(m);
}
