/* gguf_internal.h — the parsed form of a GGUF file, shared by the reader and the accessors. */
#ifndef TR_GGUF_INTERNAL_H
#define TR_GGUF_INTERNAL_H

#include "tokroute.h"
#include "common/platform.h"

typedef struct gguf_str {
    const char *s; /* NUL-terminated, in the arena */
    uint64_t len;
} gguf_str;

typedef struct gguf_scalar {
    int64_t i;      /* integers and bool */
    uint64_t u;     /* uint64 as read */
    bool u64_big;   /* a uint64 above INT64_MAX (does not fit i) */
    double f;       /* float32/float64 */
} gguf_scalar;

typedef struct gguf_kv {
    gguf_str key;
    tr_gguf_value_type type;
    gguf_scalar val;              /* scalars */
    gguf_str str;                 /* strings */
    tr_gguf_value_type arr_type;  /* arrays */
    uint64_t arr_len;
    const uint8_t *arr_raw;       /* numeric arrays: into the file, unaligned */
    gguf_str *arr_strs;           /* string arrays */
} gguf_kv;

typedef struct gguf_tensor {
    tr_gguf_tensor info;
} gguf_tensor;

/* Name → entry number (gguf_index.c). Keys are not copied: they must outlive the index. */
typedef struct gguf_index_slot {
    const char *key;
    uint64_t hash;
    int64_t value;
} gguf_index_slot;

typedef struct gguf_index {
    gguf_index_slot *slots;
    uint64_t cap, n;
} gguf_index;

/* Adds key → value unless key is present; *existing gets the present entry's value (or -1 when added). False
 * only when out of memory. */
bool gguf_index_put(gguf_index *x, const char *key, int64_t value, int64_t *existing);
int64_t gguf_index_get(const gguf_index *x, const char *key); /* -1 when absent */
void gguf_index_free(gguf_index *x);

typedef struct arena_chunk {
    struct arena_chunk *next;
    char data[];
} arena_chunk;

struct tr_gguf {
    const uint8_t *base;
    uint64_t size;
    tr_file_view file; /* what tr_gguf_open opened (nothing for tr_gguf_open_memory), closed with it */
    uint32_t version, alignment;
    uint64_t data_offset;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    gguf_index kv_index, tensor_index; /* built when the file is opened */
    arena_chunk *arena;
    size_t arena_used, arena_cap;
};

size_t gguf_value_size(tr_gguf_value_type t);
const char *gguf_value_type_name(tr_gguf_value_type t);
void gguf_scalar_decode(tr_gguf_value_type t, const uint8_t *raw, gguf_scalar *v);

#endif /* TR_GGUF_INTERNAL_H */
