/* tok_fixture.h — reading the tokenizer fixtures of ../shared/tokenizer for the tokenizer tests: an .inp file holds
 * texts each followed by "\n__ggml_vocab_test__\n"; an .out file one line per text, each id preceded by a space.
 * fx_check_pair tokenizes an .inp file's texts and compares them with an .out file's ids. Header-only (static
 * functions) so that each test executable stays a single source file. */
#ifndef TR_TOK_FIXTURE_H
#define TR_TOK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokroute.h"

typedef struct fx_text {
    char *s;
    size_t len;
} fx_text;

typedef struct fx_ids {
    int32_t *ids;
    size_t n;
} fx_ids;

static inline char *fx_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

/* Texts of an .inp file; returns the count, or -1 when the file cannot be read. */
static inline long fx_read_inp(const char *path, fx_text **out) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t len, sl = sizeof sep - 1;
    char *buf = fx_read_file(path, &len);
    if (!buf) return -1;
    long n = 0, cap = 256;
    fx_text *t = malloc((size_t)cap * sizeof *t);
    size_t off = 0;
    while (off < len) {
        char *m = memmem(buf + off, len - off, sep, sl);
        size_t end = m ? (size_t)(m - buf) : len;
        if (n == cap) t = realloc(t, (size_t)(cap *= 2) * sizeof *t);
        t[n].len = end - off;
        t[n].s = malloc(t[n].len + 1);
        memcpy(t[n].s, buf + off, t[n].len);
        t[n].s[t[n].len] = '\0';
        n++;
        off = m ? end + sl : len;
    }
    free(buf);
    *out = t;
    return n;
}

/* Lines of an .out file; returns the count, or -1 when the file cannot be read. */
static inline long fx_read_out(const char *path, fx_ids **out) {
    size_t len;
    char *buf = fx_read_file(path, &len);
    if (!buf) return -1;
    long n = 0;
    for (size_t i = 0; i < len; i++) n += buf[i] == '\n';
    if (len > 0 && buf[len - 1] != '\n') n++;
    fx_ids *r = calloc((size_t)n + 1, sizeof *r);
    char *p = buf;
    for (long i = 0; i < n; i++) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        size_t cap = 16;
        r[i].ids = malloc(cap * sizeof *r[i].ids);
        char *q = p;
        for (;;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            if (r[i].n == cap) r[i].ids = realloc(r[i].ids, (cap *= 2) * sizeof *r[i].ids);
            r[i].ids[r[i].n++] = (int32_t)v;
            q = e;
        }
        p = nl ? nl + 1 : p + strlen(p);
    }
    free(buf);
    *out = r;
    return n;
}

static inline void fx_free_texts(fx_text *t, long n) {
    for (long i = 0; i < n; i++) free(t[i].s);
    free(t);
}

static inline void fx_free_ids(fx_ids *r, long n) {
    for (long i = 0; i < n; i++) free(r[i].ids);
    free(r);
}

/* Tokenizes every text of inp without BOS/EOS (special-token text parsed when parse_special) and compares with the
 * ids of outp, showing the first three mismatches on stderr under `label`: the number of texts that match, *total
 * the number of texts; -1 (*total 0) when a file cannot be read, their counts differ or tr_tokenize fails. */
static inline long fx_check_pair(const tr_vocab *v, const char *label, const char *inp, const char *outp,
                                 bool parse_special, long *total) {
    fx_text *texts = NULL;
    fx_ids *want = NULL;
    const long nt = fx_read_inp(inp, &texts), nw = fx_read_out(outp, &want);
    long ok = 0, shown = 0;
    *total = 0;
    if (nt < 0 || nw != nt) {
        fprintf(stderr, "[%s] cannot read %s or %s, or their counts differ (%ld, %ld)\n", label, inp, outp, nt, nw);
        ok = -1;
    }
    tr_tokenize_params p = tr_tokenize_default_params();
    p.add_special = false;
    p.parse_special = parse_special;
    for (long i = 0; ok >= 0 && i < nt; i++) {
        int32_t cap = (int32_t)texts[i].len * 2 + 16, n = 0;
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (tr_tokenize(v, texts[i].s, texts[i].len, &p, ids, cap, &n) != TR_OK) {
            fprintf(stderr, "[%s] text %ld: %s\n", label, i, tr_last_error());
            ok = -1;
        } else if ((size_t)n == want[i].n && memcmp(ids, want[i].ids, (size_t)n * sizeof *ids) == 0) {
            ok++;
        } else if (shown++ < 3) {
            fprintf(stderr, "[%s] text %ld mismatch: '%.60s'\n  got :", label, i, texts[i].s);
            for (int32_t k = 0; k < n && k < 24; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  want:");
            for (size_t k = 0; k < want[i].n && k < 24; k++) fprintf(stderr, " %d", want[i].ids[k]);
            fprintf(stderr, "\n");
        }
        free(ids);
    }
    if (ok >= 0) *total = nt;
    if (nt > 0) fx_free_texts(texts, nt);
    if (nw > 0) fx_free_ids(want, nw);
    return ok;
}

#endif /* TR_TOK_FIXTURE_H */
