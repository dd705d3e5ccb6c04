/* gguf_access.c — read-only accessors over a parsed GGUF: metadata by key with type conversion, array elements,
 * rendering values as text, and tensor lookup. Every index is range-checked; nothing here can fail loudly. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf_internal.h"

uint32_t tr_gguf_version(const tr_gguf *g) { return g ? g->version : 0; }
uint64_t tr_gguf_file_size(const tr_gguf *g) { return g ? g->size : 0; }
uint32_t tr_gguf_alignment(const tr_gguf *g) { return g ? g->alignment : 0; }
int64_t tr_gguf_n_kv(const tr_gguf *g) { return g ? g->n_kv : 0; }
int64_t tr_gguf_n_tensors(const tr_gguf *g) { return g ? g->n_tensors : 0; }

int64_t tr_gguf_find_kv(const tr_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return gguf_index_get(&g->kv_index, key);
}

static const gguf_kv *kv_at(const tr_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const char *tr_gguf_kv_key(const tr_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->key.s : NULL;
}

tr_gguf_value_type tr_gguf_kv_type(const tr_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : (tr_gguf_value_type)-1;
}

tr_gguf_value_type tr_gguf_kv_array_type(const tr_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == TR_GGUF_ARRAY ? kv->arr_type : (tr_gguf_value_type)-1;
}

uint64_t tr_gguf_kv_array_len(const tr_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && kv->type == TR_GGUF_ARRAY ? kv->arr_len : 0;
}

static bool is_int_type(tr_gguf_value_type t) {
    return t == TR_GGUF_UINT8 || t == TR_GGUF_INT8 || t == TR_GGUF_UINT16 || t == TR_GGUF_INT16 ||
           t == TR_GGUF_UINT32 || t == TR_GGUF_INT32 || t == TR_GGUF_UINT64 || t == TR_GGUF_INT64;
}

bool tr_gguf_get_int(const tr_gguf *g, const char *key, int64_t *out) {
    const gguf_kv *kv = kv_at(g, tr_gguf_find_kv(g, key));
    if (!kv || !is_int_type(kv->type) || kv->val.u64_big) return false;
    *out = kv->val.i;
    return true;
}

bool tr_gguf_get_float(const tr_gguf *g, const char *key, double *out) {
    const gguf_kv *kv = kv_at(g, tr_gguf_find_kv(g, key));
    if (!kv || (kv->type != TR_GGUF_FLOAT32 && kv->type != TR_GGUF_FLOAT64)) return false;
    *out = kv->val.f;
    return true;
}

bool tr_gguf_get_bool(const tr_gguf *g, const char *key, bool *out) {
    const gguf_kv *kv = kv_at(g, tr_gguf_find_kv(g, key));
    if (!kv || kv->type != TR_GGUF_BOOL) return false;
    *out = kv->val.i != 0;
    return true;
}

const char *tr_gguf_get_str(const tr_gguf *g, const char *key, size_t *len) {
    const gguf_kv *kv = kv_at(g, tr_gguf_find_kv(g, key));
    if (!kv || kv->type != TR_GGUF_STRING) return NULL;
    if (len) *len = (size_t)kv->str.len;
    return kv->str.s;
}

static bool arr_elem(const gguf_kv *kv, uint64_t i, gguf_scalar *v) {
    if (!kv || kv->type != TR_GGUF_ARRAY || i >= kv->arr_len || !kv->arr_raw) return false;
    size_t es = gguf_value_size(kv->arr_type);
    gguf_scalar_decode(kv->arr_type, kv->arr_raw + i * es, v);
    return true;
}

bool tr_gguf_arr_int(const tr_gguf *g, int64_t kvi, uint64_t i, int64_t *out) {
    const gguf_kv *kv = kv_at(g, kvi);
    gguf_scalar v;
    /* bool arrays read as 0/1 (qwen35's attention.recurrent_layers) */
    if (!kv || (!is_int_type(kv->arr_type) && kv->arr_type != TR_GGUF_BOOL) || !arr_elem(kv, i, &v) || v.u64_big)
        return false;
    *out = v.i;
    return true;
}

bool tr_gguf_arr_float(const tr_gguf *g, int64_t kvi, uint64_t i, double *out) {
    const gguf_kv *kv = kv_at(g, kvi);
    gguf_scalar v;
    if (!kv || (kv->arr_type != TR_GGUF_FLOAT32 && kv->arr_type != TR_GGUF_FLOAT64) || !arr_elem(kv, i, &v))
        return false;
    *out = v.f;
    return true;
}

const char *tr_gguf_arr_str(const tr_gguf *g, int64_t kvi, uint64_t i, size_t *len) {
    const gguf_kv *kv = kv_at(g, kvi);
    if (!kv || kv->type != TR_GGUF_ARRAY || kv->arr_type != TR_GGUF_STRING || i >= kv->arr_len) return NULL;
    if (len) *len = (size_t)kv->arr_strs[i].len;
    return kv->arr_strs[i].s;
}

void tr_gguf_kv_format(const tr_gguf *g, int64_t i, char *buf, size_t cap) {
    const gguf_kv *kv = kv_at(g, i);
    if (!buf || cap == 0) return;
    if (!kv) {
        snprintf(buf, cap, "?");
        return;
    }
    switch (kv->type) {
    case TR_GGUF_STRING: snprintf(buf, cap, "\"%s\"", kv->str.s); break;
    case TR_GGUF_ARRAY:
        snprintf(buf, cap, "[%s × %" PRIu64 "]", gguf_value_type_name(kv->arr_type), kv->arr_len);
        break;
    case TR_GGUF_FLOAT32: case TR_GGUF_FLOAT64: snprintf(buf, cap, "%g", kv->val.f); break;
    case TR_GGUF_BOOL: snprintf(buf, cap, "%s", kv->val.i ? "true" : "false"); break;
    case TR_GGUF_UINT64: snprintf(buf, cap, "%" PRIu64, kv->val.u); break;
    default: snprintf(buf, cap, "%" PRId64, kv->val.i); break;
    }
}

int64_t tr_gguf_find_tensor(const tr_gguf *g, const char *name) {
    if (!g || !name) return -1;
    return gguf_index_get(&g->tensor_index, name);
}

const tr_gguf_tensor *tr_gguf_tensor_at(const tr_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i].info : NULL;
}
