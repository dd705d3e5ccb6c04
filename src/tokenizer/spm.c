/* spm.c — SentencePiece BPE (tokenizer.ggml.model = "llama") and the merge queue both merge algorithms use.
 *
 * The text arrives with spaces already escaped to U+2581 "▁" (and the dummy prefix added by the caller). It is cut
 * into UTF-8 characters; then, repeatedly, the adjacent pair whose concatenation is a vocabulary token with the
 * highest score is merged (ties: leftmost pair), as llama.cpp's llm_tokenizer_spm_session does. A final symbol that
 * is not a token is emitted as byte-fallback tokens <0xNN>. */
#include <stdlib.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

/* ---------------------------------------------------------------- merge queue (binary heap) */

static bool cand_before(const merge_cand *a, const merge_cand *b) {
    return a->priority < b->priority || (a->priority == b->priority && a->left < b->left);
}

bool heap_push(merge_heap *h, merge_cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        merge_cand *na = realloc(h->a, cap * sizeof *na);
        if (!na) return false;
        h->a = na;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h->a[parent])) break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = c;
    return true;
}

merge_cand heap_pop(merge_heap *h) {
    merge_cand top = h->a[0];
    merge_cand last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_cand *best = &last;
        if (l < h->n && cand_before(&h->a[l], best)) m = l, best = &h->a[l];
        if (r < h->n && cand_before(&h->a[r], best)) m = r;
        if (m == i) break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (h->n > 0) h->a[i] = last;
    return top;
}

/* ---------------------------------------------------------------- SPM */

static bool spm_try_pair(const tr_vocab *v, const char *text, const merge_sym *syms, int32_t left, int32_t right,
                         merge_heap *h) {
    if (left < 0 || right < 0) return true;
    uint32_t size = syms[left].n + syms[right].n;
    int32_t id = strmap_get(&v->token_ids, text + syms[left].start, size);
    if (id < 0) return true;
    merge_cand c = {-(double)v->score[id], left, right, size};
    return heap_push(h, c);
}

tr_status spm_tokenize(const tr_vocab *v, const char *text, size_t len, idbuf *out) {
    if (len == 0) return TR_OK;
    if (len > UINT32_MAX / 2) return tr_fail(TR_ERR_RANGE, "text too long (%zu bytes)", len);
    merge_sym *syms = malloc(len * sizeof *syms);
    merge_heap heap = {0};
    if (!syms) return tr_fail(TR_ERR_NOMEM, "tokenizer symbols");
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = utf8_len_from_lead((unsigned char)text[off]);
        if (cl > len - off) cl = len - off;
        syms[n] = (merge_sym){n - 1, off + cl == len ? -1 : n + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
    }
    tr_status st = TR_OK;
    for (int32_t i = 1; i < n && st == TR_OK; i++)
        if (!spm_try_pair(v, text, syms, i - 1, i, &heap)) st = tr_fail(TR_ERR_NOMEM, "merge queue");
    while (heap.n > 0 && st == TR_OK) {
        merge_cand c = heap_pop(&heap);
        merge_sym *l = &syms[c.left], *r = &syms[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = c.left;
        if (!spm_try_pair(v, text, syms, l->prev, c.left, &heap) ||
            !spm_try_pair(v, text, syms, c.left, l->next, &heap))
            st = tr_fail(TR_ERR_NOMEM, "merge queue");
    }
    for (int32_t i = 0; i != -1 && st == TR_OK; i = syms[i].next) {
        int32_t id = strmap_get(&v->token_ids, text + syms[i].start, syms[i].n);
        if (id >= 0) {
            if (!idbuf_push(out, id)) st = tr_fail(TR_ERR_NOMEM, "token buffer");
            continue;
        }
        /* a merged symbol is always a token, so this is a single character missing from the vocabulary */
        for (uint32_t k = 0; k < syms[i].n && st == TR_OK; k++) {
            int32_t b = v->byte_token[(unsigned char)text[syms[i].start + k]];
            if (b < 0) b = v->unk;
            if (b >= 0 && !idbuf_push(out, b)) st = tr_fail(TR_ERR_NOMEM, "token buffer");
        }
    }
    free(heap.a);
    free(syms);
    return st;
}
