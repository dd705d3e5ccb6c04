/* sampler_ref.h — the sampler as it was before partial selection (sort the whole vocabulary by logit, then top-k,
 * softmax at the temperature, top-p, draw), kept as the reference the fast sampler is compared with draw for draw
 * (tests/model/test_sampler.c) and timed against (bench/bench_sample.c). Header-only: static functions. */
#ifndef TR_TEST_SAMPLER_REF_H
#define TR_TEST_SAMPLER_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tokroute.h"

typedef struct ref_candidate {
    int32_t id;
    float logit;
    float p;
} ref_candidate;

typedef struct ref_sampler {
    tr_sampler_params params;
    uint64_t state;
    ref_candidate *cand; /* n_vocab entries, owned by the caller */
} ref_sampler;

static inline void ref_sampler_init(ref_sampler *s, const tr_sampler_params *p, ref_candidate *scratch) {
    s->params = *p;
    s->state = p->seed ? p->seed : 0x9E3779B97F4A7C15ull;
    s->cand = scratch;
}

static inline double ref_next_uniform(ref_sampler *s) {
    s->state ^= s->state >> 12;
    s->state ^= s->state << 25;
    s->state ^= s->state >> 27;
    return (double)((s->state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

static inline int ref_by_logit_desc(const void *a, const void *b) {
    const ref_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static inline int32_t ref_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static inline int32_t ref_sampler_sample(ref_sampler *s, const float *logits, int32_t n_vocab) {
    if (s->params.temperature <= 0.0f) return ref_argmax(logits, n_vocab);
    ref_candidate *c = s->cand;
    for (int32_t i = 0; i < n_vocab; i++) c[i] = (ref_candidate){i, logits[i], 0.0f};
    qsort(c, (size_t)n_vocab, sizeof *c, ref_by_logit_desc);
    int32_t n = n_vocab;
    if (s->params.top_k > 0 && s->params.top_k < n) n = s->params.top_k;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / s->params.temperature);
        sum += c[i].p;
    }
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
    double r = ref_next_uniform(s) * total;
    for (int32_t i = 0; i < keep; i++) {
        r -= c[i].p;
        if (r <= 0) return c[i].id;
    }
    return c[keep - 1].id;
}

#endif
