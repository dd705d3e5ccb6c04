/* gguf_builder.c — byte-level GGUF assembly and model rewriting for tests (see gguf_builder.h). */
#include "support/gguf_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void gb_free(gbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void gb_bytes(gbuf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) abort(); /* tests only: out of memory is not a case under test here */
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

void gb_u8(gbuf *b, uint8_t v) { gb_bytes(b, &v, 1); }

void gb_u32(gbuf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, x, 4);
}

void gb_u64(gbuf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, x, 8);
}

void gb_f32(gbuf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    gb_u32(b, u);
}

void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_key(gbuf *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}

void gb_kv_u32(gbuf *b, const char *key, uint32_t v) {
    gb_key(b, key, TR_GGUF_UINT32);
    gb_u32(b, v);
}

void gb_kv_str(gbuf *b, const char *key, const char *v) {
    gb_key(b, key, TR_GGUF_STRING);
    gb_str(b, v);
}

void gb_tensor_info(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

void gb_zeros(gbuf *b, size_t n) {
    static const uint8_t z[64];
    while (n > 0) {
        size_t k = n < sizeof z ? n : sizeof z;
        gb_bytes(b, z, k);
        n -= k;
    }
}

void gb_pad(gbuf *b, size_t align) { gb_zeros(b, (align - b->len % align) % align); }

void gb_patch_u32(gbuf *b, size_t pos, uint32_t v) {
    for (int i = 0; i < 4; i++) b->data[pos + (size_t)i] = (uint8_t)(v >> (8 * i));
}

void gb_patch_u64(gbuf *b, size_t pos, uint64_t v) {
    for (int i = 0; i < 8; i++) b->data[pos + (size_t)i] = (uint8_t)(v >> (8 * i));
}

bool write_bytes_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0) ok = false;
    return ok;
}

bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static tr_status copy_one_kv(tr_gguf_writer *w, const tr_gguf *g, int64_t i) {
    const char *key = tr_gguf_kv_key(g, i);
    int64_t iv;
    double fv;
    bool bv;
    switch (tr_gguf_kv_type(g, i)) {
    case TR_GGUF_STRING: return tr_gguf_writer_set_str(w, key, tr_gguf_get_str(g, key, NULL));
    case TR_GGUF_UINT32:
        tr_gguf_get_int(g, key, &iv);
        return tr_gguf_writer_set_u32(w, key, (uint32_t)iv);
    case TR_GGUF_INT32:
        tr_gguf_get_int(g, key, &iv);
        return tr_gguf_writer_set_i32(w, key, (int32_t)iv);
    case TR_GGUF_FLOAT32:
        tr_gguf_get_float(g, key, &fv);
        return tr_gguf_writer_set_f32(w, key, (float)fv);
    case TR_GGUF_BOOL:
        tr_gguf_get_bool(g, key, &bv);
        return tr_gguf_writer_set_bool(w, key, bv);
    case TR_GGUF_ARRAY: {
        const uint64_t n = tr_gguf_kv_array_len(g, i);
        const tr_gguf_value_type et = tr_gguf_kv_array_type(g, i);
        tr_status st = TR_OK;
        if (et == TR_GGUF_STRING) {
            const char **v = malloc((n ? n : 1) * sizeof *v);
            for (uint64_t j = 0; j < n; j++) v[j] = tr_gguf_arr_str(g, i, j, NULL);
            st = tr_gguf_writer_set_arr_str(w, key, v, n);
            free(v);
        } else if (et == TR_GGUF_FLOAT32) {
            float *v = malloc((n ? n : 1) * sizeof *v);
            for (uint64_t j = 0; j < n; j++) {
                tr_gguf_arr_float(g, i, j, &fv);
                v[j] = (float)fv;
            }
            st = tr_gguf_writer_set_arr_f32(w, key, v, n);
            free(v);
        } else {
            int32_t *v = malloc((n ? n : 1) * sizeof *v);
            for (uint64_t j = 0; j < n; j++) {
                tr_gguf_arr_int(g, i, j, &iv);
                v[j] = (int32_t)iv;
            }
            st = tr_gguf_writer_set_arr_i32(w, key, v, n);
            free(v);
        }
        return st;
    }
    default: return TR_ERR_UNSUPPORTED; /* the shared models use only the types above */
    }
}

tr_status gguf_rewrite(const tr_gguf *src, const char *path, const rewrite_hooks *hooks) {
    static const rewrite_hooks none = {0};
    if (!hooks) hooks = &none;
    tr_gguf_writer *w = NULL;
    tr_status st = tr_gguf_writer_create(&w);
    for (int64_t i = 0; st == TR_OK && i < tr_gguf_n_kv(src); i++) {
        if (hooks->skip_kv && hooks->skip_kv(tr_gguf_kv_key(src, i), hooks->user)) continue;
        st = copy_one_kv(w, src, i);
    }
    if (st == TR_OK && hooks->extra) st = hooks->extra(w, hooks->user);
    for (int64_t i = 0; st == TR_OK && i < tr_gguf_n_tensors(src); i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(src, i);
        if (hooks->skip_tensor && hooks->skip_tensor(t->name, hooks->user)) continue;
        st = tr_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL);
    }
    if (st == TR_OK) st = tr_gguf_writer_write(w, path, NULL, NULL);
    tr_gguf_writer_free(w);
    return st;
}
