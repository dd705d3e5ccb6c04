/* gguf_index.c — a hash index from names (NUL-terminated, not copied) to entry numbers, for metadata keys and
 * tensor names: duplicate detection when a file is opened and lookups by name are O(1) instead of a scan, so a
 * file with tens of thousands of keys opens in linear time. Open addressing with linear probing, FNV-1a hashes,
 * the table kept at most half full. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_internal.h"

static uint64_t name_hash(const char *s) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a, 64 bit */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* Slot holding key, or the empty slot where it would go. */
static gguf_index_slot *find_slot(const gguf_index *x, const char *key, uint64_t h) {
    const uint64_t mask = x->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        gguf_index_slot *s = &x->slots[i];
        if (!s->key || (s->hash == h && strcmp(s->key, key) == 0)) return s;
    }
}

static bool grow(gguf_index *x) {
    const uint64_t cap = x->cap ? x->cap * 2 : 64;
    if (cap > SIZE_MAX / sizeof(gguf_index_slot)) return false;
    gguf_index_slot *slots = calloc((size_t)cap, sizeof *slots);
    if (!slots) return false;
    gguf_index old = *x;
    x->slots = slots;
    x->cap = cap;
    for (uint64_t i = 0; i < old.cap; i++)
        if (old.slots[i].key) *find_slot(x, old.slots[i].key, old.slots[i].hash) = old.slots[i];
    free(old.slots);
    return true;
}

bool gguf_index_put(gguf_index *x, const char *key, int64_t value, int64_t *existing) {
    *existing = -1;
    if ((x->n + 1) * 2 > x->cap && !grow(x)) return false;
    const uint64_t h = name_hash(key);
    gguf_index_slot *s = find_slot(x, key, h);
    if (s->key) {
        *existing = s->value;
        return true;
    }
    *s = (gguf_index_slot){key, h, value};
    x->n++;
    return true;
}

int64_t gguf_index_get(const gguf_index *x, const char *key) {
    if (!x->cap || !key) return -1;
    const gguf_index_slot *s = find_slot(x, key, name_hash(key));
    return s->key ? s->value : -1;
}

void gguf_index_free(gguf_index *x) {
    free(x->slots);
    *x = (gguf_index){0};
}
