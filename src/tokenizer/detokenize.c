/* detokenize.c — token ids back to bytes: one piece per token, whole sequences, and a streaming detokenizer that
 * only hands out complete UTF-8 characters.
 *
 * A piece follows llama.cpp's token_to_piece: control and unknown tokens render only with render_special; user-
 * defined tokens render as their text; normal tokens are unescaped (SPM "▁" → " ", byte-level BPE characters →
 * their bytes); byte tokens <0xNN> give the byte; unused and undefined tokens give nothing. Unlike llama.cpp's
 * llama_detokenize we do not "clean up" spaces before punctuation, so byte-level BPE round-trips exactly.
 *
 * Ids at or past the end of the token list render as empty text: a model's n_vocab (rows of its output matrix) may
 * exceed its token list (padded vocabularies), so a sampler can legitimately produce them. Only negative ids are
 * invalid. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Appends up to cap bytes of s to buf at *o, counting the full length anyway. */
static void put(char *buf, int32_t cap, int32_t *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++, (*o)++)
        if (*o < cap) buf[*o] = s[i];
}

int32_t tr_token_to_piece(const tr_vocab *v, int32_t id, bool render_special, char *buf, int32_t cap) {
    if (!v || id < 0 || (cap > 0 && !buf)) return -1;
    if (id >= v->n_tokens) return 0; /* padding id without a token: no text */
    if (cap < 0) cap = 0;
    uint32_t a = v->attr[id];
    const char *t = v->text[id];
    size_t tl = v->len[id];
    int32_t o = 0;
    if (a & (ATTR_UNKNOWN | ATTR_CONTROL)) {
        if (render_special) put(buf, cap, &o, t, tl);
        return o;
    }
    if (a & ATTR_USER_DEFINED) {
        put(buf, cap, &o, t, tl);
        return o;
    }
    if (a & ATTR_NORMAL) {
        if (v->kind == TR_VOCAB_SPM || v->spm_bpe) {
            for (size_t i = 0; i < tl; i++) {
                if (i + 2 < tl && memcmp(t + i, "\xE2\x96\x81", 3) == 0) {
                    put(buf, cap, &o, " ", 1);
                    i += 2;
                } else {
                    put(buf, cap, &o, t + i, 1);
                }
            }
        } else {
            uint32_t cpts[64];
            uint32_t *c = tl <= 64 ? cpts : malloc(tl * sizeof *c);
            if (!c) return -1;
            size_t n = utf8_decode_all(t, tl, c);
            for (size_t i = 0; i < n; i++) {
                int b = gpt2_cpt_to_byte(c[i]);
                char ch = (char)b, enc[4];
                if (b >= 0) put(buf, cap, &o, &ch, 1);
                else put(buf, cap, &o, enc, (size_t)utf8_encode(c[i], enc)); /* not a byte character: keep it */
            }
            if (c != cpts) free(c);
        }
        return o;
    }
    if ((a & ATTR_BYTE) && tl == 6 && hex_digit(t[3]) >= 0 && hex_digit(t[4]) >= 0) {
        char ch = (char)(hex_digit(t[3]) * 16 + hex_digit(t[4]));
        put(buf, cap, &o, &ch, 1);
    }
    return o;
}

/* Piece of id into a growable buffer at *len, always leaving one byte free for the final NUL. */
static tr_status append_piece(const tr_vocab *v, int32_t id, bool render_special, char **buf, size_t *len,
                              size_t *cap) {
    for (;;) {
        const size_t free_bytes = *cap - *len - 1;
        int32_t room = free_bytes > INT32_MAX ? INT32_MAX : (int32_t)free_bytes;
        int32_t n = tr_token_to_piece(v, id, render_special, *buf + *len, room);
        if (n < 0) return tr_fail(TR_ERR_RANGE, "token id %d is negative", id);
        if (n <= room) {
            *len += (size_t)n;
            return TR_OK;
        }
        size_t ncap = (*cap + (size_t)n) * 2;
        char *nb = realloc(*buf, ncap);
        if (!nb) return tr_fail(TR_ERR_NOMEM, "detokenize buffer");
        *buf = nb;
        *cap = ncap;
    }
}

tr_status tr_detokenize(const tr_vocab *v, const int32_t *tokens, int32_t n_tokens, bool remove_leading_space,
                        bool render_special, char **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "tr_detokenize: NULL out");
    *out = NULL;
    if (!v || n_tokens < 0 || (n_tokens > 0 && !tokens)) return tr_fail(TR_ERR_ARG, "tr_detokenize: invalid argument");
    size_t cap = (size_t)n_tokens * 8 + 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) return tr_fail(TR_ERR_NOMEM, "detokenize buffer");
    bool strip = remove_leading_space && v->add_space_prefix;
    for (int32_t i = 0; i < n_tokens; i++) {
        size_t before = len;
        tr_status st = append_piece(v, tokens[i], render_special, &buf, &len, &cap);
        if (st != TR_OK) {
            free(buf);
            return st;
        }
        /* the dummy prefix sits at the start of the first piece that renders anything */
        if (strip && len > before) {
            if (buf[before] == ' ') memmove(buf + before, buf + before + 1, --len - before);
            strip = false;
        }
    }
    buf[len] = '\0';
    *out = buf;
    return TR_OK;
}

/* ---------------------------------------------------------------- streaming */

struct tr_detok_stream {
    const tr_vocab *vocab;
    bool strip;         /* dummy-prefix space still to remove */
    char held[8];       /* bytes of an incomplete UTF-8 character */
    size_t n_held;
    char *piece;        /* scratch for the current piece */
    size_t piece_cap;
    char *out;          /* returned text */
    size_t out_cap;
};

tr_status tr_detok_stream_create(const tr_vocab *v, bool remove_leading_space, tr_detok_stream **out) {
    if (!v || !out) return tr_fail(TR_ERR_ARG, "tr_detok_stream_create: NULL argument");
    tr_detok_stream *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "detokenizer stream");
    s->vocab = v;
    s->strip = remove_leading_space && v->add_space_prefix;
    *out = s;
    return TR_OK;
}

void tr_detok_stream_free(tr_detok_stream *s) {
    if (!s) return;
    free(s->piece);
    free(s->out);
    free(s);
}

/* Length of the UTF-8 character a lead byte starts (0 = not a valid lead). */
static int utf8_need(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

static bool reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t ncap = need * 2 + 16;
    char *nb = realloc(*buf, ncap);
    if (!nb) return false;
    *buf = nb;
    *cap = ncap;
    return true;
}

/* Moves held bytes + in[0..n) to s->out as complete characters; invalid bytes become U+FFFD and, when flushing,
 * so does an incomplete tail. Returns the output length. */
static size_t emit(tr_detok_stream *s, const char *in, size_t n, bool flush) {
    size_t total = s->n_held + n, o = 0, i = 0;
    char *src = malloc(total + 1);
    if (!src || !reserve(&s->out, &s->out_cap, total * 3 + 1)) {
        free(src);
        return (size_t)-1;
    }
    memcpy(src, s->held, s->n_held);
    memcpy(src + s->n_held, in, n);
    s->n_held = 0;
    while (i < total) {
        int need = utf8_need((unsigned char)src[i]);
        int have = 1;
        while (need > 1 && have < need && i + (size_t)have < total &&
               ((unsigned char)src[i + (size_t)have] & 0xC0) == 0x80)
            have++;
        if (need > 0 && have == need) {
            memcpy(s->out + o, src + i, (size_t)need);
            o += (size_t)need;
            i += (size_t)need;
        } else if (need > 1 && i + (size_t)have == total && !flush) {
            memcpy(s->held, src + i, (size_t)have); /* incomplete: wait for the next token */
            s->n_held = (size_t)have;
            i = total;
        } else {
            memcpy(s->out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += need > 1 ? (size_t)have : 1;
        }
    }
    s->out[o] = '\0';
    free(src);
    return o;
}

tr_status tr_detok_stream_push(tr_detok_stream *s, int32_t id, const char **text, size_t *len) {
    if (!s || !text || !len) return tr_fail(TR_ERR_ARG, "tr_detok_stream_push: NULL argument");
    *text = "";
    *len = 0;
    int32_t n = tr_token_to_piece(s->vocab, id, false, NULL, 0);
    if (n < 0) return tr_fail(TR_ERR_RANGE, "token id %d is negative", id);
    if (!reserve(&s->piece, &s->piece_cap, (size_t)n + 1)) return tr_fail(TR_ERR_NOMEM, "detokenizer stream");
    tr_token_to_piece(s->vocab, id, false, s->piece, n);
    const char *p = s->piece;
    if (s->strip && n > 0) {
        if (p[0] == ' ') p++, n--;
        s->strip = false;
    }
    size_t o = emit(s, p, (size_t)n, false);
    if (o == (size_t)-1) return tr_fail(TR_ERR_NOMEM, "detokenizer stream");
    *text = s->out;
    *len = o;
    return TR_OK;
}

tr_status tr_detok_stream_flush(tr_detok_stream *s, const char **text, size_t *len) {
    if (!s || !text || !len) return tr_fail(TR_ERR_ARG, "tr_detok_stream_flush: NULL argument");
    size_t o = emit(s, "", 0, true);
    if (o == (size_t)-1) return tr_fail(TR_ERR_NOMEM, "detokenizer stream");
    *text = s->out;
    *len = o;
    return TR_OK;
}
