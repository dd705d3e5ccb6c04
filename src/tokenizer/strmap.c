/* strmap.c — a small open-addressing hash map from byte strings to int32, used for token text → id and for BPE
 * merge pairs → rank. Keys are not copied: they point into the vocabulary's arenas. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

uint32_t strmap_hash(const char *s, size_t len) {
    /* FNV-1a, 32 bit */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

bool strmap_init(strmap *m, size_t expected) {
    uint32_t cap = 16;
    while (cap < expected * 2 + 16) cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = cap;
    m->n = 0;
    return m->slots != NULL;
}

void strmap_free(strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static strmap_slot *find_slot(const strmap *m, const char *key, size_t len, uint32_t h) {
    uint32_t mask = m->cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        strmap_slot *s = &m->slots[i];
        if (!s->key) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

static bool grow(strmap *m) {
    strmap bigger;
    if (!strmap_init(&bigger, m->cap)) return false;
    for (uint32_t i = 0; i < m->cap; i++) {
        strmap_slot *s = &m->slots[i];
        if (s->key) *find_slot(&bigger, s->key, s->len, s->hash) = *s;
    }
    bigger.n = m->n;
    free(m->slots);
    *m = bigger;
    return true;
}

bool strmap_put(strmap *m, const char *key, size_t len, int32_t value, int32_t *existing) {
    if ((m->n + 1) * 2 > m->cap && !grow(m)) return false;
    uint32_t h = strmap_hash(key, len);
    strmap_slot *s = find_slot(m, key, len, h);
    if (s->key) {
        if (existing) *existing = s->value;
        return true;
    }
    s->key = key;
    s->len = (uint32_t)len;
    s->hash = h;
    s->value = value;
    m->n++;
    if (existing) *existing = -1;
    return true;
}

int32_t strmap_get(const strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    const strmap_slot *s = find_slot(m, key, len, strmap_hash(key, len));
    return s->key ? s->value : -1;
}

int32_t strmap_get_pair(const strmap *m, const char *a, size_t alen, const char *b, size_t blen) {
    if (!m->slots) return -1;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < alen; i++) h = (h ^ (unsigned char)a[i]) * 16777619u;
    h = (h ^ (unsigned char)' ') * 16777619u;
    for (size_t i = 0; i < blen; i++) h = (h ^ (unsigned char)b[i]) * 16777619u;
    size_t len = alen + 1 + blen;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        const strmap_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, a, alen) == 0 && s->key[alen] == ' ' &&
            memcmp(s->key + alen + 1, b, blen) == 0)
            return s->value;
    }
}
