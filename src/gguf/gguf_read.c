/* gguf_read.c — opens GGUF v2/v3 files: parses the header, metadata and tensor directory from a memory map, with
 * every count, length, dimension, offset and size checked against the bytes actually present before it is used.
 *
 * Decisions a reader could not guess: metadata strings (keys, values, string-array elements) are copied once into
 * an arena as NUL-terminated strings, because GGUF strings are length-prefixed and unterminated; numeric arrays stay
 * in the map and are read element by element with memcpy (GGUF does not align metadata). Tensor data is never
 * copied. Tensors must lie inside the data section, aligned, and must not overlap one another.
 */
#include "gguf/gguf_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* ---------------------------------------------------------------- bounded cursor */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    const char *what; /* what is being read, for messages */
} cursor;

static tr_status need(cursor *c, uint64_t n) {
    if (n > c->size - c->pos)
        return tr_fail(TR_ERR_FORMAT, "truncated file: %s needs %" PRIu64 " bytes at offset %" PRIu64
                       " but only %" PRIu64 " remain", c->what, n, c->pos, c->size - c->pos);
    return TR_OK;
}

static tr_status read_bytes(cursor *c, void *dst, uint64_t n) {
    tr_status st = need(c, n);
    if (st != TR_OK) return st;
    memcpy(dst, c->base + c->pos, (size_t)n);
    c->pos += n;
    return TR_OK;
}

static tr_status read_u32(cursor *c, uint32_t *v) { return read_bytes(c, v, 4); }
static tr_status read_u64(cursor *c, uint64_t *v) { return read_bytes(c, v, 8); }

/* ---------------------------------------------------------------- arena for strings */

static char *arena_alloc(tr_gguf *g, size_t n) {
    if (g->arena_used + n > g->arena_cap) {
        size_t cap = g->arena_cap ? g->arena_cap * 2 : 4096;
        while (cap < n) cap *= 2;
        /* Chunks are never moved: strings handed out stay valid. */
        arena_chunk *chunk = malloc(sizeof *chunk + cap);
        if (!chunk) return NULL;
        chunk->next = g->arena;
        g->arena = chunk;
        g->arena_cap = cap;
        g->arena_used = 0;
    }
    char *p = g->arena->data + g->arena_used;
    g->arena_used += n;
    return p;
}

/* Reads a GGUF string (u64 length + bytes) into the arena. */
static tr_status read_string(tr_gguf *g, cursor *c, gguf_str *out) {
    uint64_t len;
    tr_status st = read_u64(c, &len);
    if (st != TR_OK) return st;
    if ((st = need(c, len)) != TR_OK) return st;
    char *s = arena_alloc(g, (size_t)len + 1);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory reading a %" PRIu64 "-byte string", len);
    memcpy(s, c->base + c->pos, (size_t)len);
    s[len] = '\0';
    c->pos += len;
    out->s = s;
    out->len = len;
    return TR_OK;
}

/* ---------------------------------------------------------------- metadata */

size_t gguf_value_size(tr_gguf_value_type t) {
    switch (t) {
    case TR_GGUF_UINT8: case TR_GGUF_INT8: case TR_GGUF_BOOL: return 1;
    case TR_GGUF_UINT16: case TR_GGUF_INT16: return 2;
    case TR_GGUF_UINT32: case TR_GGUF_INT32: case TR_GGUF_FLOAT32: return 4;
    case TR_GGUF_UINT64: case TR_GGUF_INT64: case TR_GGUF_FLOAT64: return 8;
    default: return 0; /* string, array: variable */
    }
}

const char *gguf_value_type_name(tr_gguf_value_type t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64",
                                  "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static tr_status read_scalar(cursor *c, tr_gguf_value_type t, gguf_scalar *v) {
    uint8_t raw[8] = {0};
    size_t n = gguf_value_size(t);
    tr_status st = read_bytes(c, raw, n);
    if (st != TR_OK) return st;
    gguf_scalar_decode(t, raw, v);
    return TR_OK;
}

void gguf_scalar_decode(tr_gguf_value_type t, const uint8_t *raw, gguf_scalar *v) {
    memset(v, 0, sizeof *v);
    switch (t) {
    case TR_GGUF_UINT8: v->i = raw[0]; break;
    case TR_GGUF_INT8: v->i = (int8_t)raw[0]; break;
    case TR_GGUF_BOOL: v->i = raw[0] != 0; break;
    case TR_GGUF_UINT16: { uint16_t x; memcpy(&x, raw, 2); v->i = x; break; }
    case TR_GGUF_INT16: { int16_t x; memcpy(&x, raw, 2); v->i = x; break; }
    case TR_GGUF_UINT32: { uint32_t x; memcpy(&x, raw, 4); v->i = x; break; }
    case TR_GGUF_INT32: { int32_t x; memcpy(&x, raw, 4); v->i = x; break; }
    case TR_GGUF_UINT64: {
        uint64_t x;
        memcpy(&x, raw, 8);
        v->u = x;
        v->i = (int64_t)x;
        v->u64_big = x > (uint64_t)INT64_MAX;
        break;
    }
    case TR_GGUF_INT64: { int64_t x; memcpy(&x, raw, 8); v->i = x; break; }
    case TR_GGUF_FLOAT32: { float x; memcpy(&x, raw, 4); v->f = x; break; }
    case TR_GGUF_FLOAT64: { double x; memcpy(&x, raw, 8); v->f = x; break; }
    default: break;
    }
}

static tr_status read_array(tr_gguf *g, cursor *c, gguf_kv *kv) {
    uint32_t et;
    uint64_t n;
    tr_status st = read_u32(c, &et);
    if (st == TR_OK) st = read_u64(c, &n);
    if (st != TR_OK) return st;
    kv->arr_type = (tr_gguf_value_type)et;
    kv->arr_len = n;
    if (et == TR_GGUF_ARRAY)
        return tr_fail(TR_ERR_FORMAT, "key '%s': arrays of arrays are not valid GGUF", kv->key.s);
    if (et == TR_GGUF_STRING) {
        /* Each element is at least its 8-byte length: bound n by the bytes left before allocating. */
        if (n > (c->size - c->pos) / 8)
            return tr_fail(TR_ERR_FORMAT, "key '%s': string array of %" PRIu64 " elements exceeds the file",
                           kv->key.s, n);
        kv->arr_strs = malloc((size_t)(n ? n : 1) * sizeof *kv->arr_strs);
        if (!kv->arr_strs) return tr_fail(TR_ERR_NOMEM, "out of memory for key '%s'", kv->key.s);
        for (uint64_t i = 0; i < n; i++)
            if ((st = read_string(g, c, &kv->arr_strs[i])) != TR_OK)
                return tr_fail_prefix(st, "key '%s' element %" PRIu64, kv->key.s, i);
        return TR_OK;
    }
    size_t es = gguf_value_size((tr_gguf_value_type)et);
    if (es == 0) return tr_fail(TR_ERR_FORMAT, "key '%s': unknown array element type %u", kv->key.s, et);
    if (n > (c->size - c->pos) / es)
        return tr_fail(TR_ERR_FORMAT, "key '%s': array of %" PRIu64 " elements exceeds the file", kv->key.s, n);
    kv->arr_raw = c->base + c->pos;
    c->pos += n * es;
    return TR_OK;
}

static tr_status read_kv(tr_gguf *g, cursor *c, gguf_kv *kv) {
    c->what = "metadata key";
    tr_status st = read_string(g, c, &kv->key);
    if (st != TR_OK) return st;
    c->what = "metadata value";
    uint32_t t;
    if ((st = read_u32(c, &t)) != TR_OK) return st;
    kv->type = (tr_gguf_value_type)t;
    if (t == TR_GGUF_STRING) return read_string(g, c, &kv->str);
    if (t == TR_GGUF_ARRAY) return read_array(g, c, kv);
    if (gguf_value_size(kv->type) == 0)
        return tr_fail(TR_ERR_FORMAT, "key '%s': unknown value type %u", kv->key.s, t);
    return read_scalar(c, kv->type, &kv->val);
}

/* ---------------------------------------------------------------- tensors */

static tr_status read_tensor_info(tr_gguf *g, cursor *c, gguf_tensor *t) {
    c->what = "tensor info";
    gguf_str name;
    tr_status st = read_string(g, c, &name);
    if (st != TR_OK) return st;
    t->info.name = name.s;
    uint32_t n_dims;
    if ((st = read_u32(c, &n_dims)) != TR_OK) return st;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return tr_fail(TR_ERR_FORMAT, "tensor '%s': %u dimensions (1..%d allowed)", name.s, n_dims, GGUF_MAX_DIMS);
    t->info.n_dims = (int)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->info.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        if ((st = read_u64(c, &ne)) != TR_OK) return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX / 2)
            return tr_fail(TR_ERR_FORMAT, "tensor '%s': dimension %u has size %" PRIu64, name.s, d, ne);
        t->info.ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if ((st = read_u32(c, &type)) != TR_OK) return st;
    if ((st = read_u64(c, &t->info.offset)) != TR_OK) return st;
    t->info.type = (tr_type)type;
    if (type >= TR_TYPE_COUNT || tr_type_block_elems((tr_type)type) == 0)
        return tr_fail(TR_ERR_UNSUPPORTED, "tensor '%s': unknown tensor type %u", name.s, type);
    int64_t be = tr_type_block_elems((tr_type)type);
    if (t->info.ne[0] % be != 0)
        return tr_fail(TR_ERR_FORMAT, "tensor '%s': row length %" PRId64 " is not a multiple of the %s block (%"
                       PRId64 ")", name.s, t->info.ne[0], tr_type_name((tr_type)type), be);
    /* n_bytes = (ne0 / be) * block_bytes * ne1 * ne2 * ne3, each step checked for overflow against the file size
     * (nothing larger than the file can be valid). */
    uint64_t bytes = (uint64_t)(t->info.ne[0] / be) * tr_type_block_bytes((tr_type)type);
    for (int d = 1; d < GGUF_MAX_DIMS; d++) {
        if (bytes > g->size / (uint64_t)t->info.ne[d])
            return tr_fail(TR_ERR_FORMAT, "tensor '%s': %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64
                           " %s is larger than the file", name.s, t->info.ne[0], t->info.ne[1], t->info.ne[2],
                           t->info.ne[3], tr_type_name((tr_type)type));
        bytes *= (uint64_t)t->info.ne[d];
    }
    t->info.n_bytes = bytes;
    return TR_OK;
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->info.offset < y->info.offset ? -1 : x->info.offset > y->info.offset;
}

/* Every tensor inside the data section, aligned, and disjoint from the others. */
static tr_status check_tensor_layout(tr_gguf *g) {
    if (g->n_tensors == 0) return TR_OK;
    gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return tr_fail(TR_ERR_NOMEM, "out of memory checking tensors");
    uint64_t data_size = g->size - g->data_offset;
    tr_status st = TR_OK;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        order[i] = t;
        if (t->info.offset % g->alignment != 0) {
            st = tr_fail(TR_ERR_FORMAT, "tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %u",
                         t->info.name, t->info.offset, g->alignment);
            break;
        }
        if (t->info.offset > data_size || t->info.n_bytes > data_size - t->info.offset) {
            st = tr_fail(TR_ERR_FORMAT, "tensor '%s': bytes %" PRIu64 "..%" PRIu64 " of the data section lie past "
                         "the end of the file (data section is %" PRIu64 " bytes; truncated file?)", t->info.name,
                         t->info.offset, t->info.offset + t->info.n_bytes, data_size);
            break;
        }
        t->info.data = g->base + g->data_offset + t->info.offset;
    }
    if (st == TR_OK) {
        qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_tensor_offset);
        for (int64_t i = 1; i < g->n_tensors; i++) {
            const gguf_tensor *a = order[i - 1], *b = order[i];
            if (a->info.offset + a->info.n_bytes > b->info.offset) {
                st = tr_fail(TR_ERR_FORMAT, "tensors '%s' and '%s' overlap in the file", a->info.name, b->info.name);
                break;
            }
        }
    }
    free(order);
    return st;
}

/* ---------------------------------------------------------------- open */

/* Builds the name → entry index, rejecting a name that appears twice (hashing: linear in the count). */
static tr_status index_names(gguf_index *x, int64_t n, const char *(*name_of)(const tr_gguf *, int64_t),
                             const tr_gguf *g, const char *what) {
    for (int64_t i = 0; i < n; i++) {
        int64_t existing;
        if (!gguf_index_put(x, name_of(g, i), i, &existing))
            return tr_fail(TR_ERR_NOMEM, "out of memory for the GGUF %s index", what);
        if (existing >= 0) return tr_fail(TR_ERR_FORMAT, "duplicate %s '%s'", what, name_of(g, i));
    }
    return TR_OK;
}

static const char *kv_name(const tr_gguf *g, int64_t i) { return g->kv[i].key.s; }
static const char *tensor_name(const tr_gguf *g, int64_t i) { return g->tensors[i].info.name; }

static tr_status parse(tr_gguf *g) {
    cursor c = {g->base, g->size, 0, "header"};
    char magic[4];
    tr_status st = read_bytes(&c, magic, 4);
    if (st != TR_OK) return tr_fail(TR_ERR_FORMAT, "not a GGUF file: only %" PRIu64 " bytes", g->size);
    if (memcmp(magic, GGUF_MAGIC, 4) != 0) return tr_fail(TR_ERR_FORMAT, "not a GGUF file (bad magic)");
    uint64_t n_tensors, n_kv;
    if ((st = read_u32(&c, &g->version)) != TR_OK) return st;
    if (g->version != 2 && g->version != 3)
        return tr_fail(TR_ERR_UNSUPPORTED, "GGUF version %u is not supported (2 and 3 are)", g->version);
    if ((st = read_u64(&c, &n_tensors)) != TR_OK || (st = read_u64(&c, &n_kv)) != TR_OK) return st;
    /* A key/value takes at least 8+4+1 bytes and a tensor info at least 8+4+8+4+8: bound counts by the file. */
    if (n_kv > g->size / 13) return tr_fail(TR_ERR_FORMAT, "metadata count %" PRIu64 " exceeds the file", n_kv);
    if (n_tensors > g->size / 32)
        return tr_fail(TR_ERR_FORMAT, "tensor count %" PRIu64 " exceeds the file", n_tensors);
    g->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->kv);
    g->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *g->tensors);
    if (!g->kv || !g->tensors) return tr_fail(TR_ERR_NOMEM, "out of memory for the GGUF directory");
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1;
        if ((st = read_kv(g, &c, &g->kv[i])) != TR_OK) return tr_fail_prefix(st, "metadata entry %" PRIu64, i);
    }
    if ((st = index_names(&g->kv_index, g->n_kv, kv_name, g, "metadata key")) != TR_OK) return st;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = tr_gguf_find_kv(g, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &g->kv[ai];
        if (kv->type != TR_GGUF_UINT32 || kv->val.i == 0 || (kv->val.i & (kv->val.i - 1)) != 0)
            return tr_fail(TR_ERR_FORMAT, "general.alignment must be a power-of-two u32");
        g->alignment = (uint32_t)kv->val.i;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors = (int64_t)i + 1;
        if ((st = read_tensor_info(g, &c, &g->tensors[i])) != TR_OK)
            return tr_fail_prefix(st, "tensor entry %" PRIu64, i);
    }
    if ((st = index_names(&g->tensor_index, g->n_tensors, tensor_name, g, "tensor name")) != TR_OK) return st;
    uint64_t data = c.pos + (g->alignment - c.pos % g->alignment) % g->alignment;
    if (n_tensors > 0 && data > g->size)
        return tr_fail(TR_ERR_FORMAT, "truncated file: the data section would start at %" PRIu64 " of %" PRIu64,
                       data, g->size);
    g->data_offset = data > g->size ? g->size : data;
    return check_tensor_layout(g);
}

static tr_status open_over(tr_gguf *g, tr_gguf **out) {
    tr_status st = parse(g);
    if (st != TR_OK) {
        tr_gguf_close(g);
        return st;
    }
    *out = g;
    return TR_OK;
}

tr_status tr_gguf_open_memory(const void *data, size_t size, tr_gguf **out) {
    if (!out || (!data && size)) return tr_fail(TR_ERR_ARG, "tr_gguf_open_memory: NULL argument");
    *out = NULL;
    tr_gguf *g = calloc(1, sizeof *g);
    if (!g) return tr_fail(TR_ERR_NOMEM, "out of memory");
    g->base = data;
    g->size = size;
    return open_over(g, out);
}

tr_status tr_gguf_open(const char *path, tr_gguf **out) {
    if (!path || !out) return tr_fail(TR_ERR_ARG, "tr_gguf_open: NULL argument");
    *out = NULL;
    tr_file_view view;
    const tr_status opened = tr_platform_view_file(path, &view);
    if (opened != TR_OK) return opened;
    tr_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        tr_platform_view_close(&view);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    g->file = view;
    g->base = view.base;
    g->size = view.size;
    tr_status st = open_over(g, out);
    return st == TR_OK ? st : tr_fail_prefix(st, "%s", path);
}

void tr_gguf_close(tr_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].arr_strs);
    free(g->kv);
    free(g->tensors);
    gguf_index_free(&g->kv_index);
    gguf_index_free(&g->tensor_index);
    while (g->arena) {
        arena_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    tr_platform_view_close(&g->file);
    free(g);
}
