/* ngram_build.c — the trainer's side of TR_FEATURE_NGRAM: counting every context of 1..K tokens of the training
 * sequences with what followed it, the table a router file keeps (contexts seen at least min_count times; ngram.c
 * owns its layout and the values), and each training position's values computed leave-one-example-out: as if the
 * table had been built without that position's sequence, so a row never sees its own next token.
 *
 * Counting sorts instead of hashing: a context of order k is (its order k-1 context, the token k back), so
 * ranking the pairs (rank at k-1, token) with a radix sort gives each position's order-k context a dense id
 * whose order is the lexicographic order of the tokens (nearest first), the order the file stores. Pairs (context
 * id, follower) sorted the same way give every context's followers, then kept sorted by count (ties: smaller id).
 *
 * Leave-one-example-out: a sequence's own (context, follower) pairs are few (sorted per sequence, cached while
 * its positions are asked for in a row); C and each follower's count lose the sequence's own, and the exact top-2
 * follows from walking the context's followers by global count until two that the sequence never produced are
 * seen: every later one counts no more than they (ties going to the smaller id, which comes first). The gain mean
 * is exact the same way: each follower's expected gain is counted as an integer (ngram_gain_quantize), so a
 * context's sum and count of gains lose the sequence's own by integer subtraction.
 *
 * Sequences may also be counted without ever being left out (train-router --ngram-data: examples that feed the
 * table but are not training rows); they simply are never asked for.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "router/router_internal.h"
#include "train/train_internal.h"

#define NONE (-2) /* after a sequence's last token: no follower */

/* Per context what the leave-one-out values read together (one cache line rather than one miss per array): its
 * followers' first index (the next context's is the end), C, and the gain count and sum. */
typedef struct ctx_counts {
    int64_t fol_start, gain_sum;
    int32_t count, gain_n;
} ctx_counts;

typedef struct follower {
    int32_t tok, cnt;
} follower;

typedef struct own_pair {
    uint64_t key; /* context id << 32 | follower */
    int32_t gain;
} own_pair;

struct ngram_counts {
    int32_t order, min_count, n_seqs;
    int64_t n;                            /* entries of seq */
    int32_t *seq;                         /* per sequence: START, its tokens 1..L-1, NONE (slot s = base + p) */
    int32_t *gain;                        /* [n] the quantized expected gain of slot s's follower (-1: none) */
    int64_t *base;                        /* [n_seqs + 1] */
    int32_t *cid[NGRAM_ORDER_MAX];        /* [n] order-k context id of slot s (-1: none) */
    int32_t n_ctx[NGRAM_ORDER_MAX];
    uint32_t *rep[NGRAM_ORDER_MAX];       /* [n_ctx] a slot with that context */
    ctx_counts *ctx[NGRAM_ORDER_MAX];     /* [n_ctx + 1] C, Cg, S and where the followers start */
    follower *fol[NGRAM_ORDER_MAX];       /* per context by count descending, then id */
    /* the sequence whose own pairs are cached: sorted (context id << 32 | follower) per order */
    int32_t cached;
    uint64_t *own[NGRAM_ORDER_MAX];
    int32_t *own_gain[NGRAM_ORDER_MAX];   /* the gain of each own pair (-1: none), in own's order */
    own_pair *own_scratch;                /* [own_cap] */
    int64_t n_own[NGRAM_ORDER_MAX], own_cap;
};

/* LSD radix sort of n keys (16-bit digits; a digit that is the same everywhere is skipped) carrying val (may be
 * NULL). */
static tr_status radix_sort(uint64_t *key, uint32_t *val, size_t n) {
    uint64_t *k2 = malloc((n ? n : 1) * sizeof *k2);
    uint32_t *v2 = val ? malloc((n ? n : 1) * sizeof *v2) : NULL;
    size_t *cnt = malloc(65536 * sizeof *cnt);
    if (!k2 || (val && !v2) || !cnt) {
        free(k2), free(v2), free(cnt);
        return tr_fail(TR_ERR_NOMEM, "out of memory sorting %zu ngram keys", n);
    }
    uint64_t *ks = key, *kd = k2;
    uint32_t *vs = val, *vd = v2;
    for (int shift = 0; shift < 64; shift += 16) {
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (size_t i = 0; i < n; i++) cnt[(ks[i] >> shift) & 0xffff]++;
        if (n == 0 || cnt[(ks[0] >> shift) & 0xffff] == n) continue;
        size_t sum = 0;
        for (size_t b = 0; b < 65536; b++) {
            const size_t c = cnt[b];
            cnt[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) {
            const size_t at = cnt[(ks[i] >> shift) & 0xffff]++;
            kd[at] = ks[i];
            if (val) vd[at] = vs[i];
        }
        uint64_t *tk = ks;
        ks = kd, kd = tk;
        uint32_t *tv = vs;
        vs = vd, vd = tv;
    }
    if (ks != key) {
        memcpy(key, ks, n * sizeof *key);
        if (val) memcpy(val, vs, n * sizeof *val);
    }
    free(cnt);
    free(k2);
    free(v2);
    return TR_OK;
}

static int by_count(const void *a, const void *b) {
    const follower *x = a, *y = b;
    if (x->cnt != y->cnt) return x->cnt > y->cnt ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

/* Order k's context ids (from order k-1's), counts and followers. key/val: scratch of c->n entries. */
static tr_status count_order(ngram_counts *c, int32_t k, uint64_t *key, uint32_t *val) {
    const int32_t j = k - 1;
    const int32_t *prev = k > 1 ? c->cid[j - 1] : NULL;
    int32_t *cid = c->cid[j] = malloc((size_t)c->n * sizeof(int32_t));
    if (!cid) return tr_fail(TR_ERR_NOMEM, "out of memory for the ngram contexts");
    size_t m = 0;
    for (int64_t s = 0; s < c->n; s++) cid[s] = -1;
    for (int32_t e = 0; e < c->n_seqs; e++)
        for (int64_t s = c->base[e] + k; s < c->base[e + 1]; s++) { /* p = s - base >= k, up to L */
            key[m] = ((uint64_t)(prev ? (uint32_t)prev[s] : 0u) << 32) | (uint32_t)(c->seq[s - k] + 1);
            val[m++] = (uint32_t)s;
        }
    tr_status st = radix_sort(key, val, m);
    if (st != TR_OK) return st;
    int32_t n_ctx = 0;
    c->rep[j] = malloc((m ? m : 1) * sizeof(uint32_t));
    if (!c->rep[j]) return tr_fail(TR_ERR_NOMEM, "out of memory for the ngram contexts");
    for (size_t i = 0; i < m; i++) {
        if (i == 0 || key[i] != key[i - 1]) c->rep[j][n_ctx++] = val[i];
        cid[val[i]] = n_ctx - 1;
    }
    c->n_ctx[j] = n_ctx;
    ctx_counts *x = c->ctx[j] = calloc((size_t)n_ctx + 1, sizeof(ctx_counts));
    if (!x) return tr_fail(TR_ERR_NOMEM, "out of memory for the ngram counts");
    /* (context, follower) pairs */
    m = 0;
    for (int64_t s = 0; s < c->n; s++)
        if (cid[s] >= 0 && c->seq[s] != NONE) {
            key[m++] = ((uint64_t)(uint32_t)cid[s] << 32) | (uint32_t)c->seq[s];
            if (c->gain[s] >= 0) x[cid[s]].gain_n++, x[cid[s]].gain_sum += c->gain[s];
            if (++x[cid[s]].count >= NGRAM_EXACT_MAX)
                return tr_fail(TR_ERR_RANGE, "a context of %d tokens occurs %d times or more: the ngram table keeps "
                               "counts below 2^24 (train on less data, or without the ngram feature)", (int)k,
                               NGRAM_EXACT_MAX);
        }
    if ((st = radix_sort(key, NULL, m)) != TR_OK) return st;
    size_t n_pairs = 0;
    for (size_t i = 0; i < m; i++) n_pairs += i == 0 || key[i] != key[i - 1];
    follower *f = c->fol[j] = malloc((n_pairs ? n_pairs : 1) * sizeof(follower));
    if (!f) return tr_fail(TR_ERR_NOMEM, "out of memory for the ngram followers");
    int64_t u = -1;
    for (size_t i = 0; i < m; i++) {
        if (i == 0 || key[i] != key[i - 1]) {
            f[++u] = (follower){.tok = (int32_t)(uint32_t)key[i], .cnt = 0};
            x[(key[i] >> 32) + 1].fol_start++;
        }
        f[u].cnt++;
    }
    for (int32_t id = 0; id < n_ctx; id++) x[id + 1].fol_start += x[id].fol_start;
    for (int32_t id = 0; id < n_ctx; id++) {
        const int64_t a = x[id].fol_start, b = x[id + 1].fol_start;
        if (b - a > 1 && x[id].count >= c->min_count) qsort(f + a, (size_t)(b - a), sizeof *f, by_count);
    }
    return TR_OK;
}

void ngram_counts_free(ngram_counts *c) {
    if (!c) return;
    for (int j = 0; j < NGRAM_ORDER_MAX; j++) {
        free(c->cid[j]), free(c->ctx[j]), free(c->rep[j]), free(c->fol[j]);
        free(c->own[j]), free(c->own_gain[j]);
    }
    free(c->own_scratch);
    free(c->seq);
    free(c->gain);
    free(c->base);
    free(c);
}

tr_status ngram_counts_build(const int32_t *const *seqs, const int32_t *const *gains, const int32_t *lens,
                             int32_t n_seqs, int32_t order, int32_t min_count, ngram_counts **out) {
    *out = NULL;
    if (order < 1 || order > NGRAM_ORDER_MAX || min_count < 1 || n_seqs < 0)
        return tr_fail(TR_ERR_ARG, "ngram: order %d (1..%d), min_count %d (>= 1)", (int)order, NGRAM_ORDER_MAX,
                       (int)min_count);
    ngram_counts *c = calloc(1, sizeof *c);
    if (!c) return tr_fail(TR_ERR_NOMEM, "out of memory");
    c->order = order;
    c->min_count = min_count;
    c->n_seqs = n_seqs;
    c->cached = -1;
    int64_t n = 0, longest = 0;
    for (int32_t e = 0; e < n_seqs; e++) {
        n += (lens[e] > 0 ? lens[e] : 1) + 1;
        if (lens[e] > longest) longest = lens[e];
    }
    tr_status st = TR_OK;
    if (n >= INT32_MAX) st = tr_fail(TR_ERR_RANGE, "ngram: %" PRId64 " tokens are more than a table counts", n);
    c->n = n;
    c->seq = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    c->gain = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    c->base = malloc(((size_t)n_seqs + 1) * sizeof(int64_t));
    c->own_cap = longest + 1;
    c->own_scratch = malloc((size_t)c->own_cap * sizeof(own_pair));
    for (int32_t j = 0; j < order; j++) {
        c->own[j] = malloc((size_t)c->own_cap * sizeof(uint64_t));
        c->own_gain[j] = malloc((size_t)c->own_cap * sizeof(int32_t));
    }
    uint64_t *key = malloc((size_t)(n ? n : 1) * sizeof *key);
    uint32_t *val = malloc((size_t)(n ? n : 1) * sizeof *val);
    if (st == TR_OK && (!c->seq || !c->gain || !c->base || !key || !val || !c->own_scratch))
        st = tr_fail(TR_ERR_NOMEM, "out of memory for the ngram table's %" PRId64 " tokens", n);
    for (int32_t j = 0; st == TR_OK && j < order; j++)
        if (!c->own[j] || !c->own_gain[j]) st = tr_fail(TR_ERR_NOMEM, "out of memory");
    int64_t at = 0;
    for (int32_t e = 0; st == TR_OK && e < n_seqs; e++) {
        c->base[e] = at;
        c->gain[at] = -1;
        c->seq[at++] = NGRAM_START;
        const int32_t *g = gains ? gains[e] : NULL;
        for (int32_t q = 1; q < lens[e]; q++) {
            if (seqs[e][q] < 0 || seqs[e][q] >= NGRAM_EXACT_MAX) {
                st = tr_fail(TR_ERR_ARG, "ngram: sequence %d has token %d at %d", (int)e, (int)seqs[e][q], (int)q);
                break;
            }
            if (g && (g[q] < -1 || g[q] > (int32_t)NGRAM_GAIN_SCALE)) {
                st = tr_fail(TR_ERR_ARG, "ngram: sequence %d has gain %d at %d (-1 or 0..%d)", (int)e, (int)g[q],
                             (int)q, (int)NGRAM_GAIN_SCALE);
                break;
            }
            c->gain[at] = g ? g[q] : -1;
            c->seq[at++] = seqs[e][q];
        }
        c->gain[at] = -1;
        c->seq[at++] = NONE;
    }
    if (st == TR_OK) c->base[n_seqs] = at;
    for (int32_t k = 1; st == TR_OK && k <= order; k++) st = count_order(c, k, key, val);
    free(key);
    free(val);
    if (st != TR_OK) {
        ngram_counts_free(c);
        return st;
    }
    *out = c;
    return TR_OK;
}

tr_status ngram_counts_table(const ngram_counts *c, tr_ngram_table **out) {
    *out = NULL;
    tr_ngram_table *t = calloc(1, sizeof *t);
    if (!t) return tr_fail(TR_ERR_NOMEM, "out of memory");
    t->order = c->order;
    t->min_count = c->min_count;
    for (int32_t k = 1; k <= c->order; k++) {
        const int32_t j = k - 1;
        ngram_order_table *o = &t->orders[j];
        int64_t n = 0;
        const ctx_counts *x = c->ctx[j];
        const follower *f = c->fol[j];
        for (int32_t id = 0; id < c->n_ctx[j]; id++) n += x[id].count >= c->min_count;
        if (n == 0) continue;
        o->context = malloc((size_t)n * (size_t)k * sizeof(int32_t));
        o->stats = malloc((size_t)n * sizeof(ngram_stats));
        if (!o->context || !o->stats) {
            ngram_table_free(t);
            return tr_fail(TR_ERR_NOMEM, "out of memory for %" PRId64 " ngram contexts", n);
        }
        for (int32_t id = 0; id < c->n_ctx[j]; id++) {
            if (x[id].count < c->min_count) continue;
            const int64_t s = c->rep[j][id], a = x[id].fol_start, b = x[id + 1].fol_start;
            for (int32_t i = 0; i < k; i++) o->context[o->n * k + i] = c->seq[s - 1 - i];
            o->stats[o->n++] = (ngram_stats){.count = x[id].count, .t1 = f[a].tok, .m1 = f[a].cnt,
                                             .t2 = b - a > 1 ? f[a + 1].tok : -1, .m2 = b - a > 1 ? f[a + 1].cnt : 0,
                                             .gain_mean = ngram_gain_mean(x[id].gain_sum, x[id].gain_n)};
        }
    }
    *out = t;
    return TR_OK;
}

/* Sorted keys in [lo, hi) equal to key: how many. */
static int64_t count_key(const uint64_t *keys, int64_t lo, int64_t hi, uint64_t key, int64_t *first) {
    int64_t a = lo, b = hi;
    while (a < b) {
        const int64_t mid = a + (b - a) / 2;
        if (keys[mid] < key) a = mid + 1;
        else b = mid;
    }
    int64_t e = a;
    while (e < hi && keys[e] == key) e++;
    if (first) *first = a;
    return e - a;
}

static int by_key(const void *a, const void *b) {
    const uint64_t x = ((const own_pair *)a)->key, y = ((const own_pair *)b)->key;
    return (x > y) - (x < y);
}

/* Sequence e's own (context id, follower) pairs per order, sorted, with their gains. */
static void cache_own(ngram_counts *c, int32_t e) {
    if (c->cached == e) return;
    own_pair *pairs = c->own_scratch;
    for (int32_t j = 0; j < c->order; j++) {
        int64_t m = 0;
        for (int64_t s = c->base[e] + j + 1; s < c->base[e + 1]; s++)
            if (c->seq[s] != NONE)
                pairs[m++] = (own_pair){((uint64_t)(uint32_t)c->cid[j][s] << 32) | (uint32_t)c->seq[s], c->gain[s]};
        qsort(pairs, (size_t)m, sizeof *pairs, by_key);
        for (int64_t i = 0; i < m; i++) c->own[j][i] = pairs[i].key, c->own_gain[j][i] = pairs[i].gain;
        c->n_own[j] = m;
    }
    c->cached = e;
}

/* Inserts (tok, cnt) into a top-2 by count descending, then smaller id. */
static void top2_insert(int32_t *t, int32_t *m, int32_t tok, int32_t cnt) {
    for (int i = 0; i < 2; i++)
        if (cnt > m[i] || (cnt == m[i] && tok < t[i])) {
            if (i == 0) t[1] = t[0], m[1] = m[0];
            t[i] = tok, m[i] = cnt;
            return;
        }
}

void ngram_counts_loo_values(ngram_counts *c, int32_t e, int64_t p, int32_t slm_top1, float *out) {
    cache_own(c, e);
    for (int32_t k = c->order; k >= 1; k--) {
        const int32_t j = k - 1;
        if (p - k < 0) continue;
        const int32_t id = c->cid[j][c->base[e] + p];
        if (id < 0) continue;
        const ctx_counts *x = &c->ctx[j][id];
        if (x->count < c->min_count) continue;
        int64_t lo;
        const uint64_t ctx = (uint64_t)(uint32_t)id << 32;
        /* the sequence's own pairs of this context: keys ctx | follower, all in [ctx, ctx + 2^32) */
        int64_t hi;
        count_key(c->own[j], 0, c->n_own[j], ctx, &lo);
        count_key(c->own[j], lo, c->n_own[j], ctx + (1ull << 32), &hi);
        const int32_t count = x->count - (int32_t)(hi - lo);
        if (count < c->min_count) continue;
        int64_t gain_n = x->gain_n, gain_sum = x->gain_sum;
        for (int64_t f = lo; f < hi; f++)
            if (c->own_gain[j][f] >= 0) gain_n--, gain_sum -= c->own_gain[j][f];
        int32_t t[2] = {-1, -1}, m[2] = {0, 0};
        int not_own = 0;
        const follower *fol = c->fol[j];
        for (int64_t f = x->fol_start; f < x[1].fol_start && not_own < 2; f++) {
            const int32_t tok = fol[f].tok;
            const int64_t own = count_key(c->own[j], lo, hi, ctx | (uint32_t)tok, NULL);
            not_own += own == 0;
            const int32_t left = fol[f].cnt - (int32_t)own;
            if (left > 0) top2_insert(t, m, tok, left);
        }
        const ngram_stats s = {.count = count, .t1 = t[0], .m1 = m[0], .t2 = m[1] > 0 ? t[1] : -1, .m2 = m[1],
                               .gain_mean = ngram_gain_mean(gain_sum, gain_n)};
        router_ngram_values(&s, k, c->order, slm_top1, out);
        return;
    }
    router_ngram_values(NULL, 0, c->order, slm_top1, out);
}

/* Each example of d as a sequence (at seqs/gains/lens + first): its tokens, and per position the quantized
 * expected gain of its record (-1 without one), in gain_pool, laid out as d->tokens. */
static tr_status add_sequences(const tr_train_data *d, int32_t first, const int32_t **seqs, const int32_t **gains,
                               int32_t *lens, int32_t **gain_pool) {
    *gain_pool = malloc((size_t)(d->n_tokens ? d->n_tokens : 1) * sizeof(int32_t));
    if (!*gain_pool) return tr_fail(TR_ERR_NOMEM, "out of memory for the ngram gains");
    int32_t *pool = *gain_pool;
    for (int64_t q = 0; q < d->n_tokens; q++) pool[q] = -1;
    for (int64_t i = 0; i < d->n; i++) {
        const int32_t g = d->group[i], p = d->position[i];
        if (d->group_tokens[g] >= 0 && p < d->group_n_tokens[g])
            pool[d->group_tokens[g] + p] = ngram_gain_quantize(expected_gain(d, i));
    }
    for (int32_t g = 0; g < d->n_groups; g++) {
        const bool known = d->group_tokens[g] >= 0;
        seqs[first + g] = known ? d->tokens + d->group_tokens[g] : NULL;
        gains[first + g] = known ? pool + d->group_tokens[g] : NULL;
        lens[first + g] = known ? d->group_n_tokens[g] : 0;
    }
    return TR_OK;
}

tr_status ngram_train_build(const tr_train_data *d, const tr_train_data *table_only, tr_ngram_table **table,
                            float **loo, int64_t *n_counted) {
    *table = NULL;
    if (n_counted) *n_counted = 0;
    if (loo) *loo = NULL;
    const int32_t n_extra = table_only ? table_only->n_groups : 0;
    if (n_extra > INT32_MAX - 1 - d->n_groups) return tr_fail(TR_ERR_RANGE, "ngram: too many examples");
    const size_t n_seqs = (size_t)d->n_groups + (size_t)n_extra;
    const int32_t **seqs = malloc((n_seqs + 1) * sizeof *seqs), **gains = malloc((n_seqs + 1) * sizeof *gains);
    int32_t *lens = malloc((n_seqs + 1) * sizeof *lens), *pool = NULL, *extra_pool = NULL;
    tr_status st = seqs && gains && lens ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st == TR_OK) st = add_sequences(d, 0, seqs, gains, lens, &pool);
    if (st == TR_OK && table_only) st = add_sequences(table_only, d->n_groups, seqs, gains, lens, &extra_pool);
    for (size_t e = 0; st == TR_OK && n_counted && e < n_seqs; e++) *n_counted += lens[e] > 1 ? lens[e] - 1 : 0;
    ngram_counts *c = NULL;
    if (st == TR_OK)
        st = ngram_counts_build(seqs, gains, lens, (int32_t)n_seqs, NGRAM_ORDER, NGRAM_MIN_COUNT, &c);
    free(seqs);
    free(gains);
    free(pool);
    free(extra_pool);
    if (st == TR_OK) st = ngram_counts_table(c, table);
    /* Training rows are left out of their own example only: table-only examples (after d's) are never asked. */
    if (st == TR_OK && loo) {
        *loo = malloc(((size_t)d->n + 1) * TR_ROUTER_NGRAM_VALUES * sizeof(float));
        if (!*loo) st = tr_fail(TR_ERR_NOMEM, "out of memory for the ngram values");
        for (int64_t i = 0; st == TR_OK && i < d->n; i++) {
            const int32_t g = d->group[i];
            if (d->position[i] > lens[g])
                st = tr_fail(TR_ERR_STATE, "example %d has no tokens before position %d (ngram)", (int)d->example[i],
                             (int)d->position[i]);
            else
                ngram_counts_loo_values(c, g, d->position[i], d->slm_top1[i], *loo + i * TR_ROUTER_NGRAM_VALUES);
        }
    }
    free(lens);
    ngram_counts_free(c);
    if (st != TR_OK) {
        ngram_table_free(*table);
        *table = NULL;
        if (loo) free(*loo), *loo = NULL;
    }
    return st;
}
