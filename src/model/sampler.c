/* sampler.c — picks the next token from logits: greedy, or temperature with top-k and top-p, seeded.
 *
 * Order as in llama.cpp's common chain: top-k, then softmax at the temperature, then top-p over the sorted
 * candidates, then a draw. The generator is xorshift64* so a seed reproduces a run on every platform.
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

int32_t tr_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static double next_uniform(tr_sampler *s) {
    s->state ^= s->state >> 12;
    s->state ^= s->state << 25;
    s->state ^= s->state >> 27;
    return (double)((s->state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

static int by_logit_desc(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int32_t tr_sampler_sample(tr_sampler *s, const float *logits, int32_t n_vocab) {
    if (!s || !logits || n_vocab <= 0) return -1;
    if (s->params.temperature <= 0.0f) return tr_argmax(logits, n_vocab);
    if (s->cap < n_vocab) {
        candidate *c = realloc(s->cand, (size_t)n_vocab * sizeof *c);
        if (!c) return tr_argmax(logits, n_vocab); /* cannot sample without memory: fall back to greedy */
        s->cand = c;
        s->cap = n_vocab;
    }
    candidate *c = s->cand;
    for (int32_t i = 0; i < n_vocab; i++) c[i] = (candidate){i, logits[i], 0.0f};
    qsort(c, (size_t)n_vocab, sizeof *c, by_logit_desc);
    int32_t n = n_vocab;
    if (s->params.top_k > 0 && s->params.top_k < n) n = s->params.top_k;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / s->params.temperature);
        sum += c[i].p;
    }
    /* top-p: keep the smallest prefix whose probability reaches top_p. */
    double cum = 0.0;
    int32_t keep = n;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].p / sum;
        if (cum >= s->params.top_p) {
            keep = i + 1;
            break;
        }
    }
    double total = 0.0;
    for (int32_t i = 0; i < keep; i++) total += c[i].p;
    double r = next_uniform(s) * total;
    for (int32_t i = 0; i < keep; i++) {
        r -= c[i].p;
        if (r <= 0) return c[i].id;
    }
    return c[keep - 1].id;
}
