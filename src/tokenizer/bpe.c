/* bpe.c — byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe_session; and Gemma 4's
 * BPE ("gemma4"), which merges raw UTF-8 (spaces already escaped to U+2581, tokenize.c) and falls back to <0xNN>.
 *
 * A fragment is decoded to codepoints (invalid UTF-8 becomes U+FFFD), split into words by the pre-tokenizer, each
 * word re-encoded as UTF-8 and every byte replaced by its GPT-2 printable character. Within a word, symbols start
 * as those characters and the adjacent pair with the lowest merge rank ("left right" in tokenizer.ggml.merges) is
 * merged first (ties: leftmost). Final symbols that are not tokens fall back to one token per byte of their text,
 * where such one-byte tokens exist. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

static bool bpe_try_pair(const tr_vocab *v, const char *w, const merge_sym *syms, int32_t left, int32_t right,
                         merge_heap *h) {
    if (left < 0 || right < 0) return true;
    int32_t rank = strmap_get_pair(&v->merge_ranks, w + syms[left].start, syms[left].n, w + syms[right].start,
                                   syms[right].n);
    if (rank < 0) return true;
    merge_cand c = {(double)rank, left, right, syms[left].n + syms[right].n};
    return heap_push(h, c);
}

/* Merges one byte-encoded word w[0..len) and appends its tokens. syms must hold len entries. */
static tr_status bpe_word(const tr_vocab *v, const char *w, size_t len, merge_sym *syms, merge_heap *heap,
                          idbuf *out) {
    size_t newlines = 0;
    while (newlines < len && w[newlines] == '\n') newlines++;
    if (v->ignore_merges || (v->spm_bpe && newlines == len)) { /* gemma4: a run of newlines, whole */
        int32_t id = strmap_get(&v->token_ids, w, len);
        if (id >= 0) return idbuf_push(out, id) ? TR_OK : tr_fail(TR_ERR_NOMEM, "token buffer");
    }
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = utf8_len_from_lead((unsigned char)w[off]);
        if (cl > len - off) cl = len - off;
        syms[n] = (merge_sym){n - 1, off + cl == len ? -1 : n + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
    }
    heap->n = 0;
    for (int32_t i = 1; i < n; i++)
        if (!bpe_try_pair(v, w, syms, i - 1, i, heap)) return tr_fail(TR_ERR_NOMEM, "merge queue");
    while (heap->n > 0) {
        merge_cand c = heap_pop(heap);
        merge_sym *l = &syms[c.left], *r = &syms[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = c.left;
        if (!bpe_try_pair(v, w, syms, l->prev, c.left, heap) || !bpe_try_pair(v, w, syms, c.left, l->next, heap))
            return tr_fail(TR_ERR_NOMEM, "merge queue");
    }
    for (int32_t i = 0; i != -1 && n > 0; i = syms[i].next) {
        const char *s = w + syms[i].start;
        int32_t id = strmap_get(&v->token_ids, s, syms[i].n);
        if (id >= 0) {
            if (!idbuf_push(out, id)) return tr_fail(TR_ERR_NOMEM, "token buffer");
            continue;
        }
        /* llama.cpp looks each byte of the encoded text up as a one-byte token (gemma4: its <0xNN> token) and
         * drops those it cannot find */
        for (uint32_t k = 0; k < syms[i].n; k++) {
            int32_t b = v->spm_bpe ? v->byte_token[(uint8_t)s[k]] : strmap_get(&v->token_ids, s + k, 1);
            if (b >= 0 && !idbuf_push(out, b)) return tr_fail(TR_ERR_NOMEM, "token buffer");
        }
    }
    return TR_OK;
}

tr_status bpe_tokenize(const tr_vocab *v, const char *text, size_t len, idbuf *out) {
    if (len == 0) return TR_OK;
    uint32_t *cpts = malloc(len * sizeof *cpts);
    if (!cpts) return tr_fail(TR_ERR_NOMEM, "tokenizer codepoints");
    size_t n = utf8_decode_all(text, len, cpts);
    size_t *bounds = NULL, n_words = 0;
    tr_status st = pretok_split(v->pretok, cpts, n, &bounds, &n_words);
    /* a word of k codepoints is at most 4k bytes, each byte-encoded into at most 2 */
    size_t max_word = 0;
    for (size_t i = 0; i < n_words; i++)
        if (bounds[i + 1] - bounds[i] > max_word) max_word = bounds[i + 1] - bounds[i];
    char *word = st == TR_OK ? malloc(max_word * 8 + 8) : NULL;
    merge_sym *syms = st == TR_OK ? malloc((max_word * 4 + 4) * sizeof *syms) : NULL;
    merge_heap heap = {0};
    if (st == TR_OK && (!word || !syms)) st = tr_fail(TR_ERR_NOMEM, "tokenizer word buffer");
    for (size_t i = 0; i < n_words && st == TR_OK; i++) {
        size_t wl = 0;
        for (size_t k = bounds[i]; k < bounds[i + 1]; k++) {
            char raw[4];
            int rl = utf8_encode(cpts[k], raw);
            for (int j = 0; j < rl; j++)
                if (v->spm_bpe) word[wl++] = raw[j]; /* raw UTF-8 */
                else wl += (size_t)utf8_encode(gpt2_byte_to_cpt((uint8_t)raw[j]), word + wl);
        }
        st = bpe_word(v, word, wl, syms, &heap, out);
    }
    free(heap.a);
    free(syms);
    free(word);
    free(bounds);
    free(cpts);
    return st;
}
