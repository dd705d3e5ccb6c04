/* router_file.c — the MLP router file: reading (every field checked before use) and writing.
 *
 * A router file is a GGUF with
 *   general.architecture      str       "tokroute-router"
 *   tokroute-router.n_layers  u32       number of linear layers L (1..64)
 *   tokroute-router.sizes     i32[L+1]  layer widths; sizes[0] = slm.n_embd + feature inputs, sizes[L] = 1
 *   tokroute-router.features  str[]     extra inputs after the hidden state, a subset of ["maxprob", "entropy",
 *                                       "margin", "topk_logprobs", "token_embedding", "induction", "ngram"] in
 *                                       that order (optional; induction's 7 values and then ngram's 7 come after
 *                                       the context positions)
 *   tokroute-router.topk      u32       k of topk_logprobs (1..64; required with it)
 *   tokroute-router.version   u32       2 when the file uses context (absent: 1); a newer version is refused
 *   tokroute-router.context   u32       previous positions read (0..8; absent = 0, version 2): their inputs follow
 *                                       this position's, each tr_router_context_width values, the nearest first
 *   tokroute-router.tau       f32       default threshold in [0, 1] (optional; absent = 0.5)
 *   tokroute-router.slm.name  str       the SLM the router was trained for (optional)
 *   tokroute-router.slm.n_embd, tokroute-router.slm.n_vocab  u32   that SLM's hidden and vocabulary sizes
 *   tokroute-router.ngram.order      u32   with ngram: K, the longest context (1..8)
 *   tokroute-router.ngram.min_count  u32   with ngram: the fewest occurrences a context kept has (>= 1)
 * and exactly 2L tensors (plus, with ngram, per order k that has contexts ngram.<k>.context ne = [k, n] and
 * ngram.<k>.stats ne = [6, n], F32: ngram.c's header), all F32: mlp.<i>.weight with ne = [sizes[i], sizes[i+1]] (ggml order: ne[0] is the row
 * length, so rows are outputs, as W[out][in]) and mlp.<i>.bias with ne = [sizes[i+1]], for i in 0..L-1.
 * Integer keys may be stored in any integer type, tau in either float type. Every tensor's presence, type and shape
 * is checked before the weights are allocated; they are then copied out of the mapping (and checked to be
 * finite), so the file is closed once loaded.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "router/router_internal.h"

#define KEY(k) ROUTER_ARCH "." k
#define ROUTER_FILE_VERSION 2 /* 2: context */

static tr_status get_required_int(const tr_gguf *g, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    if (tr_gguf_find_kv(g, key) < 0) return tr_fail(TR_ERR_FORMAT, "missing key %s", key);
    if (!tr_gguf_get_int(g, key, out)) return tr_fail(TR_ERR_FORMAT, "key %s is not an integer", key);
    if (*out < lo || *out > hi)
        return tr_fail(TR_ERR_FORMAT, "key %s = %" PRId64 " is outside %" PRId64 "..%" PRId64, key, *out, lo, hi);
    return TR_OK;
}

static tr_status read_sizes(const tr_gguf *g, mlp_net *net, int32_t *sizes) {
    int64_t n_layers;
    tr_status st = get_required_int(g, KEY("n_layers"), 1, ROUTER_MAX_LAYERS, &n_layers);
    if (st != TR_OK) return st;
    const int64_t kv = tr_gguf_find_kv(g, KEY("sizes"));
    if (kv < 0) return tr_fail(TR_ERR_FORMAT, "missing key " KEY("sizes"));
    if (tr_gguf_kv_type(g, kv) != TR_GGUF_ARRAY || tr_gguf_kv_array_len(g, kv) != (uint64_t)n_layers + 1)
        return tr_fail(TR_ERR_FORMAT, KEY("sizes") " must be an integer array of n_layers + 1 = %d entries",
                       (int)n_layers + 1);
    for (int64_t i = 0; i <= n_layers; i++) {
        int64_t v;
        if (!tr_gguf_arr_int(g, kv, (uint64_t)i, &v))
            return tr_fail(TR_ERR_FORMAT, KEY("sizes") " must be an integer array");
        if (v < 1 || v > ROUTER_MAX_WIDTH)
            return tr_fail(TR_ERR_FORMAT, KEY("sizes") "[%d] = %" PRId64 " is outside 1..%d", (int)i, v,
                           ROUTER_MAX_WIDTH);
        sizes[i] = (int32_t)v;
    }
    if (sizes[n_layers] != 1)
        return tr_fail(TR_ERR_FORMAT, "the last layer has %d outputs; a router ends in 1 (the confidence)",
                       sizes[n_layers]);
    net->n_layers = (int32_t)n_layers;
    return TR_OK;
}

static tr_status read_features(const tr_gguf *g, unsigned *features) {
    *features = 0;
    const int64_t kv = tr_gguf_find_kv(g, KEY("features"));
    if (kv < 0) return TR_OK;
    if (tr_gguf_kv_type(g, kv) != TR_GGUF_ARRAY || tr_gguf_kv_array_type(g, kv) != TR_GGUF_STRING)
        return tr_fail(TR_ERR_FORMAT, KEY("features") " must be an array of strings");
    const uint64_t n = tr_gguf_kv_array_len(g, kv);
    for (uint64_t i = 0; i < n; i++) {
        const char *name = tr_gguf_arr_str(g, kv, i, NULL);
        const unsigned bit = name && strcmp(name, "topk") != 0 ? feature_from_name(name) : 0;
        if (!bit)
            return tr_fail(TR_ERR_UNSUPPORTED,
                           "unknown router feature '%s' (known: maxprob, entropy, margin, topk_logprobs, "
                           "token_embedding, induction, ngram)",
                           name ? name : "");
        /* Features enter the input in one fixed order; a file listing them otherwise would be misread. */
        if (*features & bit) return tr_fail(TR_ERR_FORMAT, "router feature '%s' is listed twice", name);
        if (*features >= bit)
            return tr_fail(TR_ERR_FORMAT,
                           "router features must be listed in the order maxprob, entropy, margin, topk_logprobs, "
                           "token_embedding, induction, ngram");
        *features |= bit;
    }
    return TR_OK;
}

static tr_status read_metadata(const tr_gguf *g, mlp_net *net, int32_t *sizes) {
    const char *arch = tr_gguf_get_str(g, "general.architecture", NULL);
    if (!arch) return tr_fail(TR_ERR_FORMAT, "not a router file: no general.architecture");
    if (strcmp(arch, ROUTER_ARCH) != 0)
        return tr_fail(TR_ERR_FORMAT, "not a router file: general.architecture is '%s', expected '%s'", arch,
                       ROUTER_ARCH);
    int64_t version = 1;
    if (tr_gguf_find_kv(g, KEY("version")) >= 0 && !tr_gguf_get_int(g, KEY("version"), &version))
        return tr_fail(TR_ERR_FORMAT, "key " KEY("version") " is not an integer");
    if (version < 1 || version > ROUTER_FILE_VERSION)
        return tr_fail(TR_ERR_UNSUPPORTED, "router file format version %" PRId64 " is not one this build reads (1..%d): "
                       "a newer tokroute wrote it", version, ROUTER_FILE_VERSION);
    tr_status st = read_sizes(g, net, sizes);
    if (st == TR_OK) st = read_features(g, &net->features);
    int64_t n_embd = 0, n_vocab = 0;
    if (st == TR_OK) st = get_required_int(g, KEY("slm.n_embd"), 1, ROUTER_MAX_WIDTH, &n_embd);
    if (st == TR_OK) st = get_required_int(g, KEY("slm.n_vocab"), 1, INT32_MAX, &n_vocab);
    if (st != TR_OK) return st;
    net->topk = 0;
    if (net->features & TR_FEATURE_TOPK_LOGPROBS) {
        int64_t topk;
        st = get_required_int(g, KEY("topk"), 1, TR_ROUTER_TOPK_MAX, &topk);
        if (st != TR_OK) return st;
        if (topk > n_vocab)
            return tr_fail(TR_ERR_FORMAT, KEY("topk") " = %d exceeds slm.n_vocab %d", (int)topk, (int)n_vocab);
        net->topk = (int32_t)topk;
    }
    int64_t context = 0;
    if (tr_gguf_find_kv(g, KEY("context")) >= 0) {
        st = get_required_int(g, KEY("context"), 0, TR_ROUTER_CONTEXT_MAX, &context);
        if (st != TR_OK) return st;
    }
    net->context = (int32_t)context;
    const int32_t n_in = tr_router_input_width(net->features, net->topk, (int32_t)n_embd, net->context);
    if (sizes[0] != n_in)
        return tr_fail(TR_ERR_FORMAT, "input size %d does not match slm.n_embd %d + %d features + %d previous "
                       "positions of %d%s%s", sizes[0], (int)n_embd, tr_router_feature_width(net->features, net->topk,
                       (int32_t)n_embd), net->context, tr_router_context_width(net->features, net->topk, (int32_t)n_embd),
                       (net->features & TR_FEATURE_INDUCTION)
                           ? " + " TR_STRINGIFY(TR_ROUTER_INDUCTION_VALUES) " induction values" : "",
                       (net->features & TR_FEATURE_NGRAM)
                           ? " + " TR_STRINGIFY(TR_ROUTER_NGRAM_VALUES) " ngram values (routers from before ngram's "
                             "gain mean had 6: train them again)" : "");
    net->slm_n_embd = (int32_t)n_embd;
    net->slm_n_vocab = (int32_t)n_vocab;

    net->tau = ROUTER_DEFAULT_TAU;
    if (tr_gguf_find_kv(g, KEY("tau")) >= 0) {
        double tau;
        if (!tr_gguf_get_float(g, KEY("tau"), &tau)) return tr_fail(TR_ERR_FORMAT, KEY("tau") " is not a float");
        if (!(tau >= 0 && tau <= 1)) return tr_fail(TR_ERR_FORMAT, KEY("tau") " = %g is outside [0, 1]", tau);
        net->tau = (float)tau;
    }
    const char *name = tr_gguf_get_str(g, KEY("slm.name"), NULL);
    net->slm_name = strdup(name ? name : "");
    return net->slm_name ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

/* Finds name and checks it is F32 of ne [ne0, ne1]. */
static tr_status find_tensor(const tr_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                             const tr_gguf_tensor **out) {
    const int64_t ti = tr_gguf_find_tensor(g, name);
    if (ti < 0) return tr_fail(TR_ERR_FORMAT, "missing tensor %s", name);
    const tr_gguf_tensor *t = tr_gguf_tensor_at(g, ti);
    if (t->type != TR_TYPE_F32)
        return tr_fail(TR_ERR_UNSUPPORTED, "tensor %s is %s; router tensors must be f32", name,
                       tr_type_name(t->type) ? tr_type_name(t->type) : "of an unknown type");
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return tr_fail(TR_ERR_FORMAT,
                       "tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                       "] but the layer sizes need [%" PRId64 ", %" PRId64 "]",
                       name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0, ne1);
    *out = t;
    return TR_OK;
}

/* Copies a tensor that find_tensor accepted, checking every value is finite. */
static tr_status copy_tensor(const tr_gguf_tensor *t, float *dst) {
    const size_t n = (size_t)(t->ne[0] * t->ne[1]);
    memcpy(dst, t->data, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) return tr_fail(TR_ERR_FORMAT, "tensor %s has a non-finite value at %zu", t->name, i);
    return TR_OK;
}

/* Exactly the 2L tensors of the format (and the ngram table's), so a file whose n_layers disagrees with its
 * tensors is caught. */
static tr_status check_no_extra_tensors(const tr_gguf *g, int32_t n_layers, int32_t ngram_order) {
    const int64_t n = tr_gguf_n_tensors(g);
    for (int64_t i = 0; i < n; i++) {
        const char *name = tr_gguf_tensor_at(g, i)->name;
        if (ngram_order > 0 && ngram_tensor_name(name, ngram_order)) continue;
        int layer = -1, end = 0;
        char kind[8] = "";
        if (sscanf(name, "mlp.%d.%7[a-z]%n", &layer, kind, &end) != 2 || name[end] != '\0' || layer < 0 ||
            layer >= n_layers || (strcmp(kind, "weight") != 0 && strcmp(kind, "bias") != 0))
            return tr_fail(TR_ERR_FORMAT, "unexpected tensor %s (the router has %d layers)", name, n_layers);
    }
    return TR_OK;
}

/* Every tensor is found and its shape checked before anything is allocated: memory follows the tensors the file
 * really holds (bounded by its size), never widths a hostile header merely claims. */
static tr_status read_router(const tr_gguf *g, mlp_net *net) {
    int32_t sizes[ROUTER_MAX_LAYERS + 1];
    const tr_gguf_tensor *w[ROUTER_MAX_LAYERS], *b[ROUTER_MAX_LAYERS];
    tr_status st = read_metadata(g, net, sizes);
    int64_t order = 0, min_count = 0;
    if (st == TR_OK && (net->features & TR_FEATURE_NGRAM)) {
        st = get_required_int(g, KEY("ngram.order"), 1, NGRAM_ORDER_MAX, &order);
        if (st == TR_OK) st = get_required_int(g, KEY("ngram.min_count"), 1, NGRAM_EXACT_MAX - 1, &min_count);
    }
    if (st == TR_OK) st = check_no_extra_tensors(g, net->n_layers, (int32_t)order);
    for (int32_t i = 0; st == TR_OK && i < net->n_layers; i++) {
        char name[64];
        snprintf(name, sizeof name, "mlp.%d.weight", (int)i);
        st = find_tensor(g, name, sizes[i], sizes[i + 1], &w[i]);
        if (st != TR_OK) break;
        snprintf(name, sizeof name, "mlp.%d.bias", (int)i);
        st = find_tensor(g, name, sizes[i + 1], 1, &b[i]);
    }
    if (st == TR_OK && (net->features & TR_FEATURE_NGRAM))
        st = ngram_table_read(g, (int32_t)order, (int32_t)min_count, net->slm_n_vocab, &net->ngram);
    if (st == TR_OK) st = mlp_alloc(net, net->n_layers, sizes);
    if (st == TR_OK) st = mlp_alloc_ring(net);
    for (int32_t i = 0; st == TR_OK && i < net->n_layers; i++) {
        st = copy_tensor(w[i], net->weights[i]);
        if (st == TR_OK) st = copy_tensor(b[i], net->biases[i]);
    }
    return st;
}

tr_status router_file_load(const char *path, mlp_net *net) {
    tr_gguf *g = NULL;
    tr_status st = tr_gguf_open(path, &g);
    if (st == TR_OK) {
        st = read_router(g, net);
        tr_gguf_close(g);
    }
    if (st != TR_OK) {
        mlp_free(net);
        return tr_fail_prefix(st, "router file %s", path);
    }
    return TR_OK;
}

/* ---------------------------------------------------------------- writing */

static tr_status check_desc(const tr_mlp_router_desc *d) {
    if (!d->sizes || !d->weights || !d->biases) return tr_fail(TR_ERR_ARG, "router: NULL sizes, weights or biases");
    if (d->n_layers < 1 || d->n_layers > ROUTER_MAX_LAYERS)
        return tr_fail(TR_ERR_ARG, "router: %d layers (1..%d allowed)", (int)d->n_layers, ROUTER_MAX_LAYERS);
    for (int32_t i = 0; i <= d->n_layers; i++)
        if (d->sizes[i] < 1 || d->sizes[i] > ROUTER_MAX_WIDTH)
            return tr_fail(TR_ERR_ARG, "router: sizes[%d] = %d is outside 1..%d", (int)i, (int)d->sizes[i],
                           ROUTER_MAX_WIDTH);
    if (d->sizes[d->n_layers] != 1)
        return tr_fail(TR_ERR_ARG, "router: the last layer has %d outputs; a router ends in 1",
                       (int)d->sizes[d->n_layers]);
    if (d->features & ~(unsigned)ROUTER_FEATURE_ALL) return tr_fail(TR_ERR_ARG, "router: unknown feature bits");
    if (d->slm_n_embd < 1 || d->slm_n_vocab < 1) return tr_fail(TR_ERR_ARG, "router: SLM sizes must be positive");
    if ((d->features & TR_FEATURE_TOPK_LOGPROBS) && (d->topk < 1 || d->topk > TR_ROUTER_TOPK_MAX))
        return tr_fail(TR_ERR_ARG, "router: topk %d is outside 1..%d", (int)d->topk, TR_ROUTER_TOPK_MAX);
    const int32_t topk = (d->features & TR_FEATURE_TOPK_LOGPROBS) ? d->topk : 0;
    if (d->context < 0 || d->context > TR_ROUTER_CONTEXT_MAX)
        return tr_fail(TR_ERR_ARG, "router: context %d is outside 0..%d", (int)d->context, TR_ROUTER_CONTEXT_MAX);
    const int32_t width = tr_router_input_width(d->features, topk, d->slm_n_embd, d->context);
    if (d->sizes[0] != width)
        return tr_fail(TR_ERR_ARG, "router: input size %d does not match the %d inputs of slm n_embd %d, its features "
                       "and %d previous positions", (int)d->sizes[0], (int)width, (int)d->slm_n_embd, (int)d->context);
    if (!(d->tau >= 0 && d->tau <= 1)) return tr_fail(TR_ERR_ARG, "router: tau %g is outside [0, 1]", d->tau);
    if (d->features & TR_FEATURE_NGRAM) {
        if (!d->ngram) return tr_fail(TR_ERR_ARG, "router: the ngram feature needs its table (desc.ngram)");
        const tr_status st = ngram_table_check(d->ngram, d->slm_n_vocab);
        if (st != TR_OK) return tr_fail_prefix(TR_ERR_ARG, "router");
    }
    for (int32_t i = 0; i < d->n_layers; i++) {
        if (!d->weights[i] || !d->biases[i]) return tr_fail(TR_ERR_ARG, "router: layer %d has no data", (int)i);
        const size_t nw = (size_t)d->sizes[i] * (size_t)d->sizes[i + 1];
        for (size_t k = 0; k < nw; k++)
            if (!isfinite(d->weights[i][k])) return tr_fail(TR_ERR_ARG, "router: layer %d has a non-finite weight", (int)i);
        for (int32_t k = 0; k < d->sizes[i + 1]; k++)
            if (!isfinite(d->biases[i][k])) return tr_fail(TR_ERR_ARG, "router: layer %d has a non-finite bias", (int)i);
    }
    return TR_OK;
}

static tr_status write_all(tr_gguf_writer *w, const tr_mlp_router_desc *d, const char *path) {
    const char *feats[8];
    uint64_t n_feats = 0;
    for (unsigned bit = TR_FEATURE_MAXPROB; bit <= TR_FEATURE_NGRAM; bit <<= 1)
        if (d->features & bit) feats[n_feats++] = tr_router_feature_name(bit);
    tr_status st = tr_gguf_writer_set_str(w, "general.architecture", ROUTER_ARCH);
    if (st == TR_OK) st = tr_gguf_writer_set_u32(w, KEY("n_layers"), (uint32_t)d->n_layers);
    if (st == TR_OK) st = tr_gguf_writer_set_arr_i32(w, KEY("sizes"), d->sizes, (uint64_t)d->n_layers + 1);
    if (st == TR_OK) st = tr_gguf_writer_set_arr_str(w, KEY("features"), feats, n_feats);
    if (st == TR_OK && (d->features & TR_FEATURE_TOPK_LOGPROBS))
        st = tr_gguf_writer_set_u32(w, KEY("topk"), (uint32_t)d->topk);
    /* Files without context stay version 1 (no key), readable by builds before context. */
    if (st == TR_OK && d->context > 0) st = tr_gguf_writer_set_u32(w, KEY("version"), ROUTER_FILE_VERSION);
    if (st == TR_OK && d->context > 0) st = tr_gguf_writer_set_u32(w, KEY("context"), (uint32_t)d->context);
    if (st == TR_OK) st = tr_gguf_writer_set_f32(w, KEY("tau"), d->tau);
    if (st == TR_OK) st = tr_gguf_writer_set_str(w, KEY("slm.name"), d->slm_name ? d->slm_name : "");
    if (st == TR_OK) st = tr_gguf_writer_set_u32(w, KEY("slm.n_embd"), (uint32_t)d->slm_n_embd);
    if (st == TR_OK) st = tr_gguf_writer_set_u32(w, KEY("slm.n_vocab"), (uint32_t)d->slm_n_vocab);
    if (st == TR_OK && (d->features & TR_FEATURE_NGRAM)) {
        st = tr_gguf_writer_set_u32(w, KEY("ngram.order"), (uint32_t)d->ngram->order);
        if (st == TR_OK) st = tr_gguf_writer_set_u32(w, KEY("ngram.min_count"), (uint32_t)d->ngram->min_count);
        if (st == TR_OK) st = ngram_table_add_tensors(w, d->ngram);
    }
    for (int32_t i = 0; st == TR_OK && i < d->n_layers; i++) {
        char name[64];
        const int64_t ne_w[2] = {d->sizes[i], d->sizes[i + 1]}, ne_b[1] = {d->sizes[i + 1]};
        snprintf(name, sizeof name, "mlp.%d.weight", (int)i);
        st = tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 2, ne_w, d->weights[i], NULL);
        if (st != TR_OK) break;
        snprintf(name, sizeof name, "mlp.%d.bias", (int)i);
        st = tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 1, ne_b, d->biases[i], NULL);
    }
    if (st == TR_OK) st = tr_gguf_writer_write(w, path, NULL, NULL);
    return st;
}

tr_status tr_router_write_mlp(const tr_mlp_router_desc *desc, const char *path) {
    if (!desc || !path) return tr_fail(TR_ERR_ARG, "tr_router_write_mlp: NULL argument");
    tr_status st = check_desc(desc);
    if (st != TR_OK) return st;
    tr_gguf_writer *w = NULL;
    st = tr_gguf_writer_create(&w);
    if (st != TR_OK) return st;
    st = write_all(w, desc, path);
    tr_gguf_writer_free(w);
    return st;
}
