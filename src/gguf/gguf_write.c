/* gguf_write.c — writes GGUF v3 files: metadata in insertion order, tensor directory, then tensor data at
 * 32-byte-aligned offsets. Data is either copied at add time or produced by a callback while writing, one tensor
 * at a time, so synthetic models larger than memory can be written. The file is written to PATH.tmp and renamed,
 * so a failed write never leaves a half file under the final name. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gguf/gguf_internal.h"

#define WRITE_ALIGNMENT 32

/* Strings keep an explicit length: GGUF strings may contain NUL bytes. */
typedef struct wstr {
    char *s;
    uint64_t len;
} wstr;

typedef struct wkv {
    char *key;
    tr_gguf_value_type type;
    uint8_t scalar[8];
    wstr str;                     /* strings */
    tr_gguf_value_type arr_type;  /* arrays */
    uint64_t arr_len;
    void *arr_data;               /* numeric array copy, or wstr[] for strings */
} wkv;

typedef struct wtensor {
    char *name;
    tr_type type;
    int n_dims;
    int64_t ne[4];
    uint64_t n_bytes, offset;
    void *data; /* copy, or NULL for fill-at-write */
} wtensor;

struct tr_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    gguf_index kv_index, t_index; /* key / tensor name → entry, so setting and adding stay O(1) */
};

tr_status tr_gguf_writer_create(tr_gguf_writer **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "tr_gguf_writer_create: NULL argument");
    *out = calloc(1, sizeof **out);
    return *out ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
}

static void free_kv(wkv *kv) {
    free(kv->key);
    free(kv->str.s);
    if (kv->type == TR_GGUF_ARRAY && kv->arr_type == TR_GGUF_STRING && kv->arr_data) {
        wstr *s = kv->arr_data;
        for (uint64_t i = 0; i < kv->arr_len; i++) free(s[i].s);
    }
    free(kv->arr_data);
}

/* a * b, false when the product does not fit 64 bits (sizes come from callers and copied files: never wrap). */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

static bool dup_bytes(wstr *out, const char *s, uint64_t len) {
    out->len = len;
    out->s = NULL;
    if (len >= SIZE_MAX) return false;
    out->s = malloc((size_t)len + 1);
    if (!out->s) return false;
    if (len) memcpy(out->s, s, (size_t)len);
    out->s[len] = '\0';
    return true;
}

void tr_gguf_writer_free(tr_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) free_kv(&w->kv[i]);
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    gguf_index_free(&w->kv_index);
    gguf_index_free(&w->t_index);
    free(w);
}

/* Returns the entry for key, replacing an earlier value of the same key. */
static wkv *kv_slot(tr_gguf_writer *w, const char *key) {
    if (!w || !key) return NULL;
    const int64_t i = gguf_index_get(&w->kv_index, key);
    if (i >= 0) {
        char *k = w->kv[i].key;
        w->kv[i].key = NULL;
        free_kv(&w->kv[i]);
        memset(&w->kv[i], 0, sizeof w->kv[i]);
        w->kv[i].key = k;
        return &w->kv[i];
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) return NULL;
        w->kv = kv;
        w->cap_kv = cap;
    }
    wkv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    int64_t existing;
    if (!(kv->key = strdup(key)) || !gguf_index_put(&w->kv_index, kv->key, (int64_t)w->n_kv, &existing)) {
        free(kv->key);
        kv->key = NULL;
        return NULL;
    }
    w->n_kv++;
    return kv;
}

static tr_status set_scalar(tr_gguf_writer *w, const char *key, tr_gguf_value_type t, const void *v) {
    wkv *kv = kv_slot(w, key);
    if (!kv) return tr_fail(w && key ? TR_ERR_NOMEM : TR_ERR_ARG, "cannot set key %s", key ? key : "(null)");
    kv->type = t;
    memcpy(kv->scalar, v, gguf_value_size(t));
    return TR_OK;
}

tr_status tr_gguf_writer_set_u32(tr_gguf_writer *w, const char *k, uint32_t v) { return set_scalar(w, k, TR_GGUF_UINT32, &v); }
tr_status tr_gguf_writer_set_i32(tr_gguf_writer *w, const char *k, int32_t v) { return set_scalar(w, k, TR_GGUF_INT32, &v); }
tr_status tr_gguf_writer_set_u64(tr_gguf_writer *w, const char *k, uint64_t v) { return set_scalar(w, k, TR_GGUF_UINT64, &v); }
tr_status tr_gguf_writer_set_f32(tr_gguf_writer *w, const char *k, float v) { return set_scalar(w, k, TR_GGUF_FLOAT32, &v); }
tr_status tr_gguf_writer_set_bool(tr_gguf_writer *w, const char *k, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, k, TR_GGUF_BOOL, &b);
}

static tr_status set_str_len(tr_gguf_writer *w, const char *key, const char *v, uint64_t len) {
    if (!v) return tr_fail(TR_ERR_ARG, "NULL string for key %s", key ? key : "(null)");
    wkv *kv = kv_slot(w, key);
    if (!kv || !dup_bytes(&kv->str, v, len)) return tr_fail(TR_ERR_NOMEM, "out of memory");
    kv->type = TR_GGUF_STRING;
    return TR_OK;
}

tr_status tr_gguf_writer_set_str(tr_gguf_writer *w, const char *key, const char *v) {
    return set_str_len(w, key, v, v ? strlen(v) : 0);
}

/* String arrays take optional explicit lengths (NULL: NUL-terminated elements). */
static tr_status set_array(tr_gguf_writer *w, const char *key, tr_gguf_value_type et, const void *v, uint64_t n,
                           const uint64_t *lens) {
    if (!v && n) return tr_fail(TR_ERR_ARG, "NULL array for key %s", key ? key : "(null)");
    uint64_t bytes;
    if (!mul_u64(n, et == TR_GGUF_STRING ? sizeof(wstr) : gguf_value_size(et), &bytes) || bytes > SIZE_MAX / 2)
        return tr_fail(TR_ERR_RANGE, "array %s: %" PRIu64 " elements do not fit in memory", key ? key : "(null)", n);
    wkv *kv = kv_slot(w, key);
    if (!kv) return tr_fail(TR_ERR_NOMEM, "out of memory");
    kv->type = TR_GGUF_ARRAY;
    kv->arr_type = et;
    kv->arr_len = 0; /* set once the elements are in place, so a failure leaves nothing to read past */
    if (et == TR_GGUF_STRING) {
        wstr *dst = calloc((size_t)(n ? n : 1), sizeof *dst);
        if (!dst) return tr_fail(TR_ERR_NOMEM, "out of memory");
        kv->arr_data = dst;
        const char *const *src = v;
        for (uint64_t i = 0; i < n; i++) {
            const char *e = src[i] ? src[i] : "";
            kv->arr_len = i; /* free_kv frees exactly the elements copied so far */
            if (!dup_bytes(&dst[i], e, lens ? lens[i] : strlen(e))) return tr_fail(TR_ERR_NOMEM, "out of memory");
        }
        kv->arr_len = n;
        return TR_OK;
    }
    if (!(kv->arr_data = malloc(bytes ? (size_t)bytes : 1))) return tr_fail(TR_ERR_NOMEM, "out of memory");
    if (bytes) memcpy(kv->arr_data, v, (size_t)bytes);
    kv->arr_len = n;
    return TR_OK;
}

tr_status tr_gguf_writer_set_arr_str(tr_gguf_writer *w, const char *k, const char *const *v, uint64_t n) {
    return set_array(w, k, TR_GGUF_STRING, v, n, NULL);
}
tr_status tr_gguf_writer_set_arr_i32(tr_gguf_writer *w, const char *k, const int32_t *v, uint64_t n) {
    return set_array(w, k, TR_GGUF_INT32, v, n, NULL);
}
tr_status tr_gguf_writer_set_arr_f32(tr_gguf_writer *w, const char *k, const float *v, uint64_t n) {
    return set_array(w, k, TR_GGUF_FLOAT32, v, n, NULL);
}
tr_status tr_gguf_writer_set_arr_bool(tr_gguf_writer *w, const char *k, const bool *v, uint64_t n) {
    _Static_assert(sizeof(bool) == 1, "GGUF bools are one byte");
    return set_array(w, k, TR_GGUF_BOOL, v, n, NULL);
}

tr_status tr_gguf_writer_copy_kv(tr_gguf_writer *w, const tr_gguf *src) {
    if (!w || !src) return tr_fail(TR_ERR_ARG, "tr_gguf_writer_copy_kv: NULL argument");
    for (int64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *s = &src->kv[i];
        tr_status st;
        if (s->type == TR_GGUF_STRING) {
            st = set_str_len(w, s->key.s, s->str.s, s->str.len);
        } else if (s->type == TR_GGUF_ARRAY && s->arr_type == TR_GGUF_STRING) {
            const size_t n = (size_t)(s->arr_len ? s->arr_len : 1);
            const char **v = malloc(n * sizeof *v);
            uint64_t *lens = malloc(n * sizeof *lens);
            if (!v || !lens) st = tr_fail(TR_ERR_NOMEM, "out of memory");
            for (uint64_t j = 0; v && lens && j < s->arr_len; j++) v[j] = s->arr_strs[j].s, lens[j] = s->arr_strs[j].len;
            if (v && lens) st = set_array(w, s->key.s, TR_GGUF_STRING, v, s->arr_len, lens);
            free(v);
            free(lens);
        } else if (s->type == TR_GGUF_ARRAY) {
            st = set_array(w, s->key.s, s->arr_type, s->arr_raw, s->arr_len, NULL);
        } else {
            /* Re-encode the scalar from its raw little-endian bytes. */
            uint8_t raw[8];
            memcpy(raw, &s->val.i, 8);
            if (s->type == TR_GGUF_FLOAT32) {
                float f = (float)s->val.f;
                memcpy(raw, &f, 4);
            } else if (s->type == TR_GGUF_FLOAT64) {
                memcpy(raw, &s->val.f, 8);
            } else if (s->type == TR_GGUF_UINT64) {
                memcpy(raw, &s->val.u, 8);
            }
            st = set_scalar(w, s->key.s, s->type, raw);
        }
        if (st != TR_OK) return st;
    }
    return TR_OK;
}

tr_status tr_gguf_writer_add_tensor(tr_gguf_writer *w, const char *name, tr_type type, int n_dims, const int64_t *ne,
                                    const void *data, int64_t *index) {
    if (!w || !name || !ne || n_dims < 1 || n_dims > 4) return tr_fail(TR_ERR_ARG, "add_tensor: bad argument");
    int64_t be = tr_type_block_elems(type);
    if (be == 0) return tr_fail(TR_ERR_UNSUPPORTED, "tensor %s: unknown type %d", name, (int)type);
    if (ne[0] % be != 0)
        return tr_fail(TR_ERR_ARG, "tensor %s: row length %" PRId64 " is not a multiple of %" PRId64, name, ne[0], be);
    if (gguf_index_get(&w->t_index, name) >= 0) return tr_fail(TR_ERR_ARG, "tensor %s was already added", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return tr_fail(TR_ERR_NOMEM, "out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t bytes = 0;
    bool fits = mul_u64((uint64_t)(ne[0] / be), tr_type_block_bytes(type), &bytes);
    for (int d = 0; d < 4; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (t->ne[d] < 1) return tr_fail(TR_ERR_ARG, "tensor %s: dimension %d is %" PRId64, name, d, t->ne[d]);
        if (d > 0) fits = fits && mul_u64(bytes, (uint64_t)t->ne[d], &bytes);
    }
    /* The data section is addressed with 64-bit offsets: keep room for the padding of every tensor after it. */
    if (!fits || bytes > UINT64_MAX / 2)
        return tr_fail(TR_ERR_RANGE, "tensor %s: %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 " elements of %s "
                       "exceed 2^63 bytes", name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], tr_type_name(type));
    if (data && bytes > SIZE_MAX / 2)
        return tr_fail(TR_ERR_RANGE, "tensor %s: %" PRIu64 " bytes do not fit in memory", name, bytes);
    t->n_bytes = bytes;
    if (!(t->name = strdup(name))) return tr_fail(TR_ERR_NOMEM, "out of memory");
    if (data) {
        if (!(t->data = malloc(bytes ? (size_t)bytes : 1))) {
            free(t->name);
            return tr_fail(TR_ERR_NOMEM, "out of memory for tensor %s", name);
        }
        memcpy(t->data, data, (size_t)bytes);
    }
    int64_t existing;
    if (!gguf_index_put(&w->t_index, t->name, (int64_t)w->n_t, &existing)) {
        free(t->name);
        free(t->data);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    if (index) *index = (int64_t)w->n_t;
    w->n_t++;
    return TR_OK;
}

/* ---------------------------------------------------------------- writing */

typedef struct out_file {
    FILE *f;
    uint64_t pos;
    bool failed;
} out_file;

static void put(out_file *o, const void *p, size_t n) {
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->failed = true;
    o->pos += n;
}
static void put_u32(out_file *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(out_file *o, uint64_t v) { put(o, &v, 8); }
static void put_bytes_str(out_file *o, const char *s, uint64_t n) {
    put_u64(o, n);
    put(o, s, (size_t)n);
}
static void put_str(out_file *o, const char *s) { put_bytes_str(o, s, strlen(s)); }
static void put_pad(out_file *o) {
    static const uint8_t zeros[WRITE_ALIGNMENT];
    put(o, zeros, (size_t)((WRITE_ALIGNMENT - o->pos % WRITE_ALIGNMENT) % WRITE_ALIGNMENT));
}

static void put_kv(out_file *o, const wkv *kv) {
    put_str(o, kv->key);
    put_u32(o, (uint32_t)kv->type);
    if (kv->type == TR_GGUF_STRING) {
        put_bytes_str(o, kv->str.s, kv->str.len);
    } else if (kv->type == TR_GGUF_ARRAY) {
        put_u32(o, (uint32_t)kv->arr_type);
        put_u64(o, kv->arr_len);
        if (kv->arr_type == TR_GGUF_STRING) {
            const wstr *s = kv->arr_data;
            for (uint64_t i = 0; i < kv->arr_len; i++) put_bytes_str(o, s[i].s, s[i].len);
        } else {
            put(o, kv->arr_data, (size_t)kv->arr_len * gguf_value_size(kv->arr_type));
        }
    } else {
        put(o, kv->scalar, gguf_value_size(kv->type));
    }
}

static tr_status write_all(tr_gguf_writer *w, out_file *o, tr_gguf_fill_fn fill, void *user) {
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = offset;
        /* each n_bytes is below 2^63 (add_tensor): the sum of two can still wrap, so check every step */
        if (__builtin_add_overflow(offset, w->t[i].n_bytes, &offset) ||
            __builtin_add_overflow(offset, (WRITE_ALIGNMENT - offset % WRITE_ALIGNMENT) % WRITE_ALIGNMENT, &offset))
            return tr_fail(TR_ERR_RANGE, "tensor data past %s exceeds 2^64 bytes", w->t[i].name);
    }
    put(o, "GGUF", 4);
    put_u32(o, 3);
    put_u64(o, (uint64_t)w->n_t);
    put_u64(o, (uint64_t)w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) put_kv(o, &w->kv[i]);
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(o, t->name);
        put_u32(o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(o, (uint64_t)t->ne[d]);
        put_u32(o, (uint32_t)t->type);
        put_u64(o, t->offset);
    }
    put_pad(o);
    void *buf = NULL;
    size_t buf_cap = 0;
    tr_status st = TR_OK;
    for (size_t i = 0; i < w->n_t && st == TR_OK && !o->failed; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (!fill) {
                st = tr_fail(TR_ERR_ARG, "tensor %s has no data and no fill callback was given", t->name);
                break;
            }
            if (t->n_bytes > SIZE_MAX / 2) {
                st = tr_fail(TR_ERR_RANGE, "tensor %s: %" PRIu64 " bytes do not fit in memory", t->name, t->n_bytes);
                break;
            }
            if (t->n_bytes > buf_cap) {
                free(buf);
                buf_cap = (size_t)t->n_bytes;
                if (!(buf = malloc(buf_cap))) {
                    st = tr_fail(TR_ERR_NOMEM, "out of memory for tensor %s", t->name);
                    break;
                }
            }
            if ((st = fill(user, (int64_t)i, buf, (size_t)t->n_bytes)) != TR_OK) break;
            src = buf;
        }
        put(o, src, (size_t)t->n_bytes);
        put_pad(o);
    }
    free(buf);
    return st;
}

tr_status tr_gguf_writer_write(tr_gguf_writer *w, const char *path, tr_gguf_fill_fn fill, void *user) {
    if (!w || !path) return tr_fail(TR_ERR_ARG, "tr_gguf_writer_write: NULL argument");
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp) return tr_fail(TR_ERR_NOMEM, "out of memory");
    snprintf(tmp, n, "%s.tmp", path);
    out_file o = {fopen(tmp, "wb"), 0, false};
    if (!o.f) {
        tr_status st = tr_fail(TR_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    tr_status st = write_all(w, &o, fill, user);
    if (fclose(o.f) != 0) o.failed = true;
    if (st == TR_OK && o.failed) st = tr_fail(TR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st == TR_OK && rename(tmp, path) != 0) st = tr_fail(TR_ERR_IO, "cannot rename %s: %s", tmp, strerror(errno));
    if (st != TR_OK) remove(tmp);
    free(tmp);
    return st;
}
