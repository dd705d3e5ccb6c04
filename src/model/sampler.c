/* sampler.c — picks the next token from logits: greedy, or temperature with top-k and top-p, seeded.
 *
 * Order as in llama.cpp's common chain: top-k, then softmax at the temperature, then top-p over the sorted
 * candidates, then a draw. The generator is xorshift64* so a seed reproduces a run on every platform.
 *
 * Candidates are ordered by logit, highest first, lowest id first among equal logits (a strict total order, so
 * the result does not depend on how they are found). Nothing sorts the whole vocabulary: top-k keeps a k-element
 * heap in one pass over the logits and sorts only those k; without top-k, candidates are drawn out in that order
 * lazily, a selected block at a time, only as far as the top-p walk and the draw actually reach. With top-k the
 * draws are bit-identical to sorting everything first (tests/support/sampler_ref.h keeps that implementation);
 * without it the normalizing sum is taken in id order, which changes it only in its last bits, and top_p = 1 keeps
 * every candidate (the full sort's walk could stop a few negligible tokens early by rounding) and draws among them
 * in id order: the same distribution as the reference, not the same draws.
 */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "tokroute.h"

typedef struct candidate {
    int32_t id;
    float logit;
    float p;
} candidate;

struct tr_sampler {
    tr_sampler_params params;
    uint64_t state;
    candidate *cand;
    int32_t cap;
};

tr_sampler_params tr_sampler_default_params(void) {
    tr_sampler_params p = {.temperature = 0.0f, .top_k = 40, .top_p = 0.95f, .seed = 0x5eed};
    return p;
}

tr_status tr_sampler_create(const tr_sampler_params *params, tr_sampler **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "tr_sampler_create: NULL argument");
    tr_sampler_params p = params ? *params : tr_sampler_default_params();
    /* A temperature <= 0 means greedy (as documented); only NaN is meaningless. */
    if (p.temperature != p.temperature || p.top_k < 0 || !(p.top_p > 0 && p.top_p <= 1))
        return tr_fail(TR_ERR_ARG, "sampler: temperature must be a number, top_k >= 0, top_p in (0, 1]");
    tr_sampler *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory");
    s->params = p;
    s->state = p.seed ? p.seed : 0x9E3779B97F4A7C15ull;
    *out = s;
    return TR_OK;
}

void tr_sampler_reseed(tr_sampler *s, uint64_t seed) {
    if (s) s->state = seed ? seed : 0x9E3779B97F4A7C15ull;
}

void tr_sampler_free(tr_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s);
}

/* Two passes: the maximum over 8 independent lanes (`x > m ? x : m` is exactly what SIMD max instructions compute,
 * so the compiler vectorizes it without changing results; NaNs never win), then the first index holding it. */
int32_t tr_argmax(const float *logits, int32_t n) {
    if (!logits || n <= 0) return 0;
    float lane[8];
    for (int j = 0; j < 8; j++) lane[j] = -INFINITY;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] = logits[i + j] > lane[j] ? logits[i + j] : lane[j];
    float best = -INFINITY;
    for (int j = 0; j < 8; j++) best = lane[j] > best ? lane[j] : best;
    for (; i < n; i++) best = logits[i] > best ? logits[i] : best;
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = 0;
        for (int j = 0; j < 8; j++) hit |= logits[i + j] == best;
        if (hit) break;
    }
    for (; i < n; i++)
        if (logits[i] == best) return i;
    return 0; /* every logit NaN */
}

static double next_uniform(tr_sampler *s) {
    s->state ^= s->state >> 12;
    s->state ^= s->state << 25;
    s->state ^= s->state >> 27;
    return (double)((s->state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

/* a comes before b: higher logit, or the same logit and a lower id */
static inline bool before(const candidate *a, const candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int by_logit_desc(const void *a, const void *b) {
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Heap of h[0..k) with the candidate that comes last at the root. */
static void sift_down(candidate *h, int32_t k, int32_t i) {
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && before(&h[w], &h[l])) w = l;
        if (r < k && before(&h[w], &h[r])) w = r;
        if (w == i) return;
        candidate t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the first k of c[0..n) (in candidate order) to c[0..k), sorted; the others stay in c[k..n), unordered.
 * One pass with a k-element heap: O(n log k), and most elements cost one comparison with the heap's root. */
static void select_first(candidate *c, int32_t n, int32_t k) {
    if (k >= n / 2) { /* a large share: sorting it all is as cheap */
        qsort(c, (size_t)n, sizeof *c, by_logit_desc);
        return;
    }
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int32_t i = k; i < n; i++)
        if (before(&c[i], &c[0])) {
            candidate t = c[0];
            c[0] = c[i];
            c[i] = t;
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof *c, by_logit_desc);
}

/* Top-k without copying the vocabulary: the heap is filled straight from the logits. Ids arrive in increasing
 * order, so a later logit equal to the root's never comes before it. */
static void select_top_k(candidate *c, const float *logits, int32_t n, int32_t k) {
    for (int32_t i = 0; i < k; i++) c[i] = (candidate){i, logits[i], 0.0f};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int32_t i = k; i < n; i++)
        if (logits[i] > c[0].logit) {
            c[0] = (candidate){i, logits[i], 0.0f};
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof *c, by_logit_desc);
}

/* The candidates in order, produced on demand: c[0..n_sorted) is final, the rest is unordered. */
typedef struct ordered {
    candidate *c;
    int32_t n, n_sorted, block;
} ordered;

/* Makes c[i] final (i < n). Blocks of 64, then 1024 candidates (a peaked LM row rarely needs more); a walk that
 * goes past those is on a flat row that needs a large share of the vocabulary, and sorting the rest at once is
 * then cheaper than selecting ever larger blocks. */
static void ordered_reach(ordered *o, int32_t i) {
    while (i >= o->n_sorted) {
        const int32_t left = o->n - o->n_sorted;
        const int32_t k = o->block <= 1024 && o->block < left ? o->block : left;
        select_first(o->c + o->n_sorted, left, k);
        o->n_sorted = k >= left / 2 ? o->n : o->n_sorted + k; /* select_first sorted everything then */
        o->block *= 16;
    }
}

static bool reserve(tr_sampler *s, int32_t n) {
    if (s->cap >= n) return true;
    candidate *c = realloc(s->cand, (size_t)n * sizeof *c);
    if (!c) return false;
    s->cand = c;
    s->cap = n;
    return true;
}

/* The arithmetic is the full-sort sampler's, step for step: p = exp((logit - max) / T) in float, sums in double,
 * top-p keeps the shortest prefix whose normalized mass reaches top_p, and the draw walks that prefix subtracting
 * p from u * total. */
int32_t tr_sampler_sample(tr_sampler *s, const float *logits, int32_t n_vocab) {
    if (!s || !logits || n_vocab <= 0) return -1;
    if (s->params.temperature <= 0.0f) return tr_argmax(logits, n_vocab);
    const float temp = s->params.temperature;
    const double top_p = s->params.top_p;
    const bool top_k = s->params.top_k > 0 && s->params.top_k < n_vocab;
    const int32_t n = top_k ? s->params.top_k : n_vocab;
    if (!reserve(s, n)) return tr_argmax(logits, n_vocab); /* cannot sample without memory: fall back to greedy */
    candidate *c = s->cand;
    ordered o = {c, n, n, 0};
    double sum = 0.0;
    if (top_k) {
        select_top_k(c, logits, n_vocab, n);
        for (int32_t i = 0; i < n; i++) {
            c[i].p = expf((c[i].logit - c[0].logit) / temp);
            sum += c[i].p;
        }
    } else {
        const float max = logits[tr_argmax(logits, n_vocab)];
        for (int32_t i = 0; i < n; i++) {
            c[i] = (candidate){i, logits[i], expf((logits[i] - max) / temp)};
            sum += c[i].p;
        }
        o.n_sorted = 0;
        o.block = 64;
    }
    int32_t keep = n;
    double cum = 0.0;
    if (top_p < 1.0 || top_k) /* top_p = 1 keeps everything (rounding aside, the walk would reach the end) */
        for (int32_t i = 0; i < n; i++) {
            ordered_reach(&o, i);
            cum += c[i].p / sum;
            if (cum >= top_p) {
                keep = i + 1;
                break;
            }
        }
    double total = 0.0;
    if (keep == n && !top_k) {
        total = sum;
    } else {
        for (int32_t i = 0; i < keep; i++) total += c[i].p;
    }
    /* Nothing cut (no top-k, top_p = 1): the draw walks the candidates in id order, as they are. The distribution is
     * the same; drawing in logit order would sort most of a flat row (a random-weight model's), a full sort's cost. */
    const bool id_order = keep == n && !top_k;
    double r = next_uniform(s) * total;
    for (int32_t i = 0; i < keep; i++) {
        if (!id_order) ordered_reach(&o, i);
        r -= c[i].p;
        if (r <= 0) return c[i].id;
    }
    if (!id_order) ordered_reach(&o, keep - 1);
    return c[keep - 1].id;
}
