/* tokenize.c — tr_tokenize: special-token partitioning, then SPM or byte-level BPE on the text in between.
 *
 * As in llama.cpp's tokenizer_st_partition, special tokens are cut out of the text first, longest first. Control
 * and unknown tokens are cut only when the caller asks (parse_special); user-defined tokens are always cut, since
 * the Hugging Face tokenizers treat them as added tokens. A token marked LSTRIP/RSTRIP swallows ASCII whitespace
 * on that side. SPM adds its dummy-prefix space at the start of the text and after each special token
 * (add_space_prefix), then escapes every ' ' to U+2581. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

tr_tokenize_params tr_tokenize_default_params(void) {
    tr_tokenize_params p = {.add_special = true, .parse_special = false};
    return p;
}

bool idbuf_push(idbuf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *ni = realloc(b->ids, cap * sizeof *ni);
        if (!ni) return false;
        b->ids = ni;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return true;
}

typedef struct fragment {
    int32_t token;  /* -1 for raw text */
    size_t off, len;
} fragment;

typedef struct fragbuf {
    fragment *f;
    size_t n, cap;
} fragbuf;

static bool frag_push(fragbuf *b, int32_t token, size_t off, size_t len) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        fragment *nf = realloc(b->f, cap * sizeof *nf);
        if (!nf) return false;
        b->f = nf;
        b->cap = cap;
    }
    b->f[b->n++] = (fragment){token, off, len};
    return true;
}

static const char *find_bytes(const char *hay, size_t hlen, const char *needle, size_t nlen) {
    if (nlen == 0 || nlen > hlen) return NULL;
    return memmem(hay, hlen, needle, nlen);
}

/* True when bytes [pos, pos + n) may become a control token: everywhere without a mask, else where the mask is set. */
static bool special_allowed(const uint8_t *special_ok, size_t pos, size_t n) {
    if (!special_ok) return true;
    for (size_t i = 0; i < n; i++)
        if (!special_ok[pos + i]) return false;
    return true;
}

/* Splits every raw fragment of *cur at the occurrences of token id; the result goes to *next. With a mask, an
 * occurrence of a control/unknown token counts only where every byte of it is allowed; elsewhere it stays text. */
static bool split_at_token(const tr_vocab *v, const char *text, int32_t id, const uint8_t *special_ok,
                           const fragbuf *cur, fragbuf *next) {
    const char *tt = v->text[id];
    size_t tl = v->len[id];
    if (!(v->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN))) special_ok = NULL; /* user-defined: always cut */
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        fragment f = cur->f[i];
        if (f.token >= 0) {
            if (!frag_push(next, f.token, 0, 0)) return false;
            continue;
        }
        size_t off = f.off, end = f.off + f.len, search = off;
        for (;;) {
            const char *m = find_bytes(text + search, end - search, tt, tl);
            if (m && !special_allowed(special_ok, (size_t)(m - text), tl)) {
                search = (size_t)(m - text) + 1; /* message text: not a token here, look further */
                continue;
            }
            if (!m) {
                if (end > off && !frag_push(next, -1, off, end - off)) return false;
                break;
            }
            size_t mpos = (size_t)(m - text), left_len = mpos - off;
            if (v->attr[id] & ATTR_LSTRIP)
                while (left_len > 0 && isspace((unsigned char)text[off + left_len - 1])) left_len--;
            if (left_len > 0 && !frag_push(next, -1, off, left_len)) return false;
            if (!frag_push(next, id, 0, 0)) return false;
            off = mpos + tl;
            if (v->attr[id] & ATTR_RSTRIP)
                while (off < end && isspace((unsigned char)text[off])) off++;
            search = off;
        }
    }
    return true;
}

static tr_status partition(const tr_vocab *v, const char *text, size_t len, bool parse_special,
                           const uint8_t *special_ok, fragbuf *out) {
    fragbuf other = {0};
    out->n = 0;
    if (len > 0 && !frag_push(out, -1, 0, len)) return tr_fail(TR_ERR_NOMEM, "fragments");
    for (int32_t k = 0; k < v->n_special && out->n > 0; k++) {
        int32_t id = v->special[k];
        if (!parse_special && (v->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;
        bool any_raw = false;
        for (size_t i = 0; i < out->n && !any_raw; i++)
            any_raw = out->f[i].token < 0 && find_bytes(text + out->f[i].off, out->f[i].len, v->text[id], v->len[id]);
        if (!any_raw) continue;
        if (!split_at_token(v, text, id, special_ok, out, &other)) {
            free(other.f);
            return tr_fail(TR_ERR_NOMEM, "fragments");
        }
        fragbuf t = *out;
        *out = other;
        other = t;
    }
    free(other.f);
    return TR_OK;
}

/* Dummy prefix and " " → U+2581 for one SPM fragment (or a gemma4 BPE one, without the prefix). */
static tr_status spm_fragment(const tr_vocab *v, const char *s, size_t len, bool prefix, idbuf *out) {
    size_t spaces = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += s[i] == ' ';
    char *esc = malloc(len + spaces * 2 + 1);
    if (!esc) return tr_fail(TR_ERR_NOMEM, "escaped text");
    size_t o = 0;
    if (prefix) memcpy(esc + o, "\xE2\x96\x81", 3), o += 3;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') memcpy(esc + o, "\xE2\x96\x81", 3), o += 3;
        else esc[o++] = s[i];
    }
    tr_status st = v->kind == TR_VOCAB_SPM ? spm_tokenize(v, esc, o, out) : bpe_tokenize(v, esc, o, out);
    free(esc);
    return st;
}

tr_status tokenize_masked(const tr_vocab *v, const char *text, size_t len, const tr_tokenize_params *params,
                          const uint8_t *special_ok, int32_t *tokens, int32_t cap, int32_t *n_tokens) {
    if (n_tokens) *n_tokens = 0;
    if (!v || (!text && len > 0) || !n_tokens || cap < 0 || (cap > 0 && !tokens))
        return tr_fail(TR_ERR_ARG, "tr_tokenize: invalid argument");
    tr_tokenize_params p = params ? *params : tr_tokenize_default_params();
    if (special_ok) p.parse_special = true; /* gated by the mask, byte by byte */
    idbuf out = {0};
    fragbuf frags = {0};
    tr_status st = partition(v, text, len, p.parse_special, special_ok, &frags);
    if (st == TR_OK && p.add_special && v->add_bos && v->bos >= 0 && !idbuf_push(&out, v->bos))
        st = tr_fail(TR_ERR_NOMEM, "token buffer");
    bool prev_special = true; /* SPM: the first fragment gets the dummy prefix */
    for (size_t i = 0; i < frags.n && st == TR_OK; i++) {
        fragment f = frags.f[i];
        if (f.token >= 0) {
            if (!idbuf_push(&out, f.token)) st = tr_fail(TR_ERR_NOMEM, "token buffer");
            prev_special = true;
        } else if (v->kind == TR_VOCAB_SPM) {
            st = spm_fragment(v, text + f.off, f.len, v->add_space_prefix && prev_special, &out);
            prev_special = false;
        } else if (v->spm_bpe) {
            st = spm_fragment(v, text + f.off, f.len, false, &out);
        } else {
            st = bpe_tokenize(v, text + f.off, f.len, &out);
        }
    }
    if (st == TR_OK && p.add_special && v->add_eos && v->eos >= 0 && !idbuf_push(&out, v->eos))
        st = tr_fail(TR_ERR_NOMEM, "token buffer");
    free(frags.f);
    if (st != TR_OK) {
        free(out.ids);
        return st;
    }
    if (out.n > INT32_MAX) {
        free(out.ids);
        return tr_fail(TR_ERR_RANGE, "too many tokens");
    }
    *n_tokens = (int32_t)out.n;
    size_t ncopy = out.n < (size_t)cap ? out.n : (size_t)cap;
    if (ncopy) memcpy(tokens, out.ids, ncopy * sizeof *tokens);
    free(out.ids);
    if (out.n > (size_t)cap) return tr_fail(TR_ERR_RANGE, "%zu tokens do not fit in a buffer of %d", out.n, cap);
    return TR_OK;
}

tr_status tr_tokenize(const tr_vocab *v, const char *text, size_t len, const tr_tokenize_params *params,
                      int32_t *tokens, int32_t cap, int32_t *n_tokens) {
    return tokenize_masked(v, text, len, params, NULL, tokens, cap, n_tokens);
}
