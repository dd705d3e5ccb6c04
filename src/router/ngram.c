/* ngram.c — TR_FEATURE_NGRAM's table and values: what a count model of the training data's token sequences says
 * follows the last 1..K tokens. Owns the in-memory table (tr_ngram_table), the one function turning a context's
 * counts into the feature's seven values (shared by training's leave-one-example-out rows and the router), the
 * decode-time lookup (binary search per order, the highest order found wins), the table's checks and its reading
 * from and writing into a router file.
 *
 * A context of order k at position p is the tokens at p-1, p-2, ..., p-k (nearest first; it exists when p-k >= 0),
 * position 0 always read as NGRAM_START whatever its token. Per context the table holds C (how often it was
 * followed by a token in the training data), its two most frequent followers t1, t2 with counts M1 >= M2 (ties
 * to the smaller id; t2 = -1 and M2 = 0 with one follower), and the mean expected gain of the Cg <= C followers
 * that have a collected record (the g of the expected labels, summed as integers so leaving an example out is
 * exact); only contexts with C >= min_count are kept.
 *
 * File layout (router_file.c's header lists the keys): per order k with at least one context, the F32 tensors
 * ngram.<k>.context, ne = [k, n] (the contexts' tokens, nearest first, START = -1, sorted lexicographically and
 * strictly increasing) and ngram.<k>.stats, ne = [6, n] (C, t1, M1, t2, M2, the gain mean). The first five are
 * integers held exactly by a float (below 2^24), the gain mean a float in [0, 1]; loading checks each rule and
 * names the one broken. Files from before the gain mean (5 columns) are refused by name: their routers were
 * trained on six values.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "router/router_internal.h"

void router_ngram_values(const ngram_stats *s, int32_t k, int32_t order, int32_t slm_top1, float *out) {
    if (!s) {
        for (int j = 0; j < TR_ROUTER_NGRAM_VALUES; j++) out[j] = 0.0f;
        return;
    }
    /* In double, then rounded once (the screening's float64 arithmetic). */
    const double c = (double)s->count;
    const int32_t hit = slm_top1 == s->t1 ? s->m1 : (slm_top1 == s->t2 && s->m2 > 0) ? s->m2 : 0;
    out[0] = 1.0f;
    out[1] = (float)((double)hit / c);
    out[2] = (float)((double)s->m1 / c);
    out[3] = slm_top1 == s->t1 ? 1.0f : 0.0f;
    out[4] = (float)log1p(c);
    out[5] = (float)((double)k / (double)order);
    out[6] = s->gain_mean;
}

int32_t ngram_gain_quantize(float g) { return (int32_t)llround((double)g * NGRAM_GAIN_SCALE); }

float ngram_gain_mean(int64_t sum, int64_t n) {
    return n > 0 ? (float)((double)sum / (double)n / NGRAM_GAIN_SCALE) : 0.0f;
}

void ngram_context_at(const int32_t *tok, int64_t p, int32_t k, int32_t *ctx) {
    for (int32_t j = 0; j < k; j++) ctx[j] = p - 1 - j == 0 ? NGRAM_START : tok[p - 1 - j];
}

/* Lexicographic order of two order-k contexts (nearest token first): -1, 0 or 1. */
static int compare_contexts(const int32_t *a, const int32_t *b, int32_t k) {
    for (int32_t j = 0; j < k; j++)
        if (a[j] != b[j]) return a[j] < b[j] ? -1 : 1;
    return 0;
}

/* The entry of context ctx in order k's table, or -1. */
static int64_t find_context(const ngram_order_table *o, int32_t k, const int32_t *ctx) {
    int64_t lo = 0, hi = o->n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int cmp = compare_contexts(o->context + mid * k, ctx, k);
        if (cmp == 0) return mid;
        if (cmp < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

void router_ngram_lookup(const tr_ngram_table *t, const int32_t *tok, int64_t p, int32_t slm_top1, float *out) {
    int32_t ctx[NGRAM_ORDER_MAX];
    for (int32_t k = t->order; k >= 1; k--) {
        if (p - k < 0) continue;
        const ngram_order_table *o = &t->orders[k - 1];
        if (o->n == 0) continue;
        ngram_context_at(tok, p, k, ctx);
        const int64_t e = find_context(o, k, ctx);
        if (e >= 0) {
            router_ngram_values(&o->stats[e], k, t->order, slm_top1, out);
            return;
        }
    }
    router_ngram_values(NULL, 0, t->order, slm_top1, out);
}

void ngram_table_free(tr_ngram_table *t) {
    if (!t) return;
    for (int k = 0; k < NGRAM_ORDER_MAX; k++) {
        free(t->orders[k].context);
        free(t->orders[k].stats);
    }
    free(t);
}

int64_t ngram_table_contexts(const tr_ngram_table *t) {
    int64_t n = 0;
    for (int32_t k = 0; t && k < t->order; k++) n += t->orders[k].n;
    return n;
}

int64_t ngram_table_bytes(const tr_ngram_table *t) {
    int64_t n = 0;
    for (int32_t k = 1; t && k <= t->order; k++) n += t->orders[k - 1].n * (k + NGRAM_STATS) * (int64_t)sizeof(float);
    return n;
}

/* ---------------------------------------------------------------- checks */

tr_status ngram_table_check(const tr_ngram_table *t, int64_t n_vocab) {
    if (t->order < 1 || t->order > NGRAM_ORDER_MAX)
        return tr_fail(TR_ERR_FORMAT, "ngram order %d is outside 1..%d", (int)t->order, NGRAM_ORDER_MAX);
    if (t->min_count < 1 || t->min_count >= NGRAM_EXACT_MAX)
        return tr_fail(TR_ERR_FORMAT, "ngram min_count %d is outside 1..%d", (int)t->min_count, NGRAM_EXACT_MAX - 1);
    for (int32_t k = 1; k <= t->order; k++) {
        const ngram_order_table *o = &t->orders[k - 1];
        for (int64_t e = 0; e < o->n; e++) {
            const int32_t *c = o->context + e * k;
            for (int32_t j = 0; j < k; j++) {
                /* START (position 0) can only be the farthest token: a nearer one would need p - k < 0. */
                const int32_t lo = j == k - 1 ? NGRAM_START : 0;
                if (c[j] < lo || c[j] >= n_vocab)
                    return tr_fail(TR_ERR_FORMAT,
                                   "ngram order %d context %" PRId64 " token %d is %d, outside %d..%" PRId64 "%s",
                                   (int)k, e, (int)j, (int)c[j], (int)lo, n_vocab - 1,
                                   c[j] == NGRAM_START ? " (START only where position 0 can be: the farthest token)"
                                                       : "");
            }
            if (e > 0 && compare_contexts(c - k, c, k) >= 0)
                return tr_fail(TR_ERR_FORMAT, "ngram order %d contexts are not strictly increasing at %" PRId64,
                               (int)k, e);
            const ngram_stats *s = &o->stats[e];
            if (s->count < t->min_count || s->count >= NGRAM_EXACT_MAX)
                return tr_fail(TR_ERR_FORMAT, "ngram order %d context %" PRId64 " count C = %d is below min_count %d "
                               "or not below 2^24", (int)k, e, (int)s->count, (int)t->min_count);
            if (s->t1 < 0 || s->t1 >= n_vocab || s->t2 < -1 || s->t2 >= n_vocab || s->t1 == s->t2)
                return tr_fail(TR_ERR_FORMAT, "ngram order %d context %" PRId64 " followers t1 = %d, t2 = %d are not "
                               "distinct tokens (t2 may be -1)", (int)k, e, (int)s->t1, (int)s->t2);
            if (s->m1 < 1 || s->m2 < 0 || s->m2 > s->m1 || (int64_t)s->m1 + s->m2 > s->count)
                return tr_fail(TR_ERR_FORMAT, "ngram order %d context %" PRId64 " counts need 0 <= M2 <= M1, M1 >= 1 "
                               "and M1 + M2 <= C (M1 = %d, M2 = %d, C = %d)", (int)k, e, (int)s->m1, (int)s->m2,
                               (int)s->count);
            if ((s->t2 == -1) != (s->m2 == 0))
                return tr_fail(TR_ERR_FORMAT, "ngram order %d context %" PRId64 " has t2 = %d with M2 = %d (t2 = -1 "
                               "exactly when M2 = 0)", (int)k, e, (int)s->t2, (int)s->m2);
            if (!(s->gain_mean >= 0.0f && s->gain_mean <= 1.0f))
                return tr_fail(TR_ERR_FORMAT, "ngram order %d context %" PRId64 " gain mean %.9g is not in [0, 1]",
                               (int)k, e, (double)s->gain_mean);
        }
    }
    return TR_OK;
}

/* ---------------------------------------------------------------- reading */

/* The F32 tensor name with ne = [ne0, n] (n from the tensor when *n < 0), or NULL when absent. */
static tr_status find_order_tensor(const tr_gguf *g, const char *name, int64_t ne0, int64_t *n,
                                   const tr_gguf_tensor **out) {
    *out = NULL;
    const int64_t ti = tr_gguf_find_tensor(g, name);
    if (ti < 0) return TR_OK;
    const tr_gguf_tensor *t = tr_gguf_tensor_at(g, ti);
    if (t->type != TR_TYPE_F32) return tr_fail(TR_ERR_FORMAT, "tensor %s must be f32", name);
    if (ne0 == NGRAM_STATS && t->ne[0] == NGRAM_STATS - 1)
        return tr_fail(TR_ERR_FORMAT, "tensor %s has %d columns: a table from before the gain mean (ngram's 7th "
                       "value; this build reads %d columns): train the router again", name, NGRAM_STATS - 1,
                       NGRAM_STATS);
    if (t->ne[0] != ne0 || t->ne[1] < 1 || t->ne[1] > INT32_MAX || t->ne[2] != 1 || t->ne[3] != 1 ||
        (*n >= 0 && t->ne[1] != *n))
        return tr_fail(TR_ERR_FORMAT, "tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                       "], expected [%" PRId64 ", n]%s", name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], ne0,
                       *n >= 0 ? " with n its context tensor's" : "");
    *n = t->ne[1];
    *out = t;
    return TR_OK;
}

static bool is_integer_in(float v, int64_t lo, int64_t hi) {
    return v == floorf(v) && v >= (float)lo && v <= (float)hi;
}

static tr_status not_integer(const tr_gguf_tensor *t, size_t i, float v, int64_t lo, int64_t hi) {
    return tr_fail(TR_ERR_FORMAT, "tensor %s value %zu (%g) is not an integer in %" PRId64 "..%" PRId64, t->name, i,
                   (double)v, lo, hi);
}

/* Floats that must be exact integers in lo..hi. */
static tr_status read_integers(const tr_gguf_tensor *t, int64_t lo, int64_t hi, int32_t *dst) {
    const float *v = t->data;
    const size_t n = (size_t)(t->ne[0] * t->ne[1]);
    for (size_t i = 0; i < n; i++) {
        if (!is_integer_in(v[i], lo, hi)) return not_integer(t, i, v[i], lo, hi);
        dst[i] = (int32_t)v[i];
    }
    return TR_OK;
}

/* The stats rows: five integers, then the gain mean (finite here; its range is ngram_table_check's). */
static tr_status read_stats(const tr_gguf_tensor *t, int64_t n, ngram_stats *dst) {
    const float *v = t->data;
    for (int64_t e = 0; e < n; e++) {
        const float *row = v + e * NGRAM_STATS;
        int32_t x[NGRAM_STATS - 1];
        for (int c = 0; c < NGRAM_STATS - 1; c++) {
            if (!is_integer_in(row[c], -NGRAM_EXACT_MAX, NGRAM_EXACT_MAX))
                return not_integer(t, (size_t)(e * NGRAM_STATS + c), row[c], -NGRAM_EXACT_MAX, NGRAM_EXACT_MAX);
            x[c] = (int32_t)row[c];
        }
        if (!isfinite(row[NGRAM_STATS - 1]))
            return tr_fail(TR_ERR_FORMAT, "tensor %s row %" PRId64 " gain mean is not finite", t->name, e);
        dst[e] = (ngram_stats){.count = x[0], .t1 = x[1], .m1 = x[2], .t2 = x[3], .m2 = x[4],
                               .gain_mean = row[NGRAM_STATS - 1]};
    }
    return TR_OK;
}

static tr_status read_order(const tr_gguf *g, int32_t k, int64_t n_vocab, ngram_order_table *o) {
    char cname[48], sname[48];
    snprintf(cname, sizeof cname, "ngram.%d.context", (int)k);
    snprintf(sname, sizeof sname, "ngram.%d.stats", (int)k);
    int64_t n = -1;
    const tr_gguf_tensor *ct, *stt;
    tr_status st = find_order_tensor(g, cname, k, &n, &ct);
    if (st == TR_OK) st = find_order_tensor(g, sname, NGRAM_STATS, &n, &stt);
    if (st != TR_OK) return st;
    if (!ct && !stt) return TR_OK; /* no context of this order */
    if (!ct || !stt) return tr_fail(TR_ERR_FORMAT, "ngram order %d needs both %s and %s", (int)k, cname, sname);
    o->context = malloc((size_t)n * (size_t)k * sizeof(int32_t));
    o->stats = malloc((size_t)n * sizeof(ngram_stats));
    if (!o->context || !o->stats) return tr_fail(TR_ERR_NOMEM, "out of memory for %" PRId64 " ngram contexts", n);
    o->n = n;
    /* Integers exact in a float (and a finite gain mean) first; what each may be is ngram_table_check's. */
    st = read_integers(ct, -NGRAM_EXACT_MAX, NGRAM_EXACT_MAX, o->context);
    if (st == TR_OK) st = read_stats(stt, n, o->stats);
    return st;
}

tr_status ngram_table_read(const tr_gguf *g, int32_t order, int32_t min_count, int64_t n_vocab,
                           tr_ngram_table **out) {
    *out = NULL;
    tr_ngram_table *t = calloc(1, sizeof *t);
    if (!t) return tr_fail(TR_ERR_NOMEM, "out of memory");
    t->order = order;
    t->min_count = min_count;
    tr_status st = TR_OK;
    for (int32_t k = 1; st == TR_OK && k <= order; k++) st = read_order(g, k, n_vocab, &t->orders[k - 1]);
    if (st == TR_OK) st = ngram_table_check(t, n_vocab);
    if (st != TR_OK) {
        ngram_table_free(t);
        return st;
    }
    *out = t;
    return TR_OK;
}

bool ngram_tensor_name(const char *name, int32_t order) {
    int k = 0, end = 0;
    char kind[8] = "";
    return sscanf(name, "ngram.%d.%7[a-z]%n", &k, kind, &end) == 2 && name[end] == '\0' && k >= 1 && k <= order &&
           (strcmp(kind, "context") == 0 || strcmp(kind, "stats") == 0);
}

/* ---------------------------------------------------------------- writing */

tr_status ngram_table_add_tensors(tr_gguf_writer *w, const tr_ngram_table *t) {
    tr_status st = TR_OK;
    for (int32_t k = 1; st == TR_OK && k <= t->order; k++) {
        const ngram_order_table *o = &t->orders[k - 1];
        if (o->n == 0) continue;
        float *c = malloc((size_t)o->n * (size_t)k * sizeof(float));
        float *s = malloc((size_t)o->n * NGRAM_STATS * sizeof(float));
        if (!c || !s) st = tr_fail(TR_ERR_NOMEM, "out of memory for the ngram table");
        for (int64_t i = 0; st == TR_OK && i < o->n * k; i++) c[i] = (float)o->context[i];
        for (int64_t e = 0; st == TR_OK && e < o->n; e++) {
            const ngram_stats *x = &o->stats[e];
            float *row = s + e * NGRAM_STATS;
            row[0] = (float)x->count, row[1] = (float)x->t1, row[2] = (float)x->m1, row[3] = (float)x->t2;
            row[4] = (float)x->m2, row[5] = x->gain_mean;
        }
        char name[48];
        const int64_t ne_c[2] = {k, o->n}, ne_s[2] = {NGRAM_STATS, o->n};
        snprintf(name, sizeof name, "ngram.%d.context", (int)k);
        if (st == TR_OK) st = tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 2, ne_c, c, NULL); /* copied */
        snprintf(name, sizeof name, "ngram.%d.stats", (int)k);
        if (st == TR_OK) st = tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 2, ne_s, s, NULL);
        free(c);
        free(s);
    }
    return st;
}
