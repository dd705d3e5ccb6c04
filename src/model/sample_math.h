/* sample_math.h — the two computations every place that draws a token or reports a log-probability shares, written
 * once so the device side (the routed loop, the embedded LLM, collect) and the server (its sampler and scoring) agree
 * bit for bit: the per-position seed (a draw at a position depends only on (seed, position), so separate calls
 * continuing one sequence never restart a generator, and a server resync draws the same tokens) and the
 * log-sum-exp of a row of logits (in double, after subtracting the largest logit). */
#ifndef TR_MODEL_SAMPLE_MATH_H
#define TR_MODEL_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>

/* SplitMix64 (Steele, Lea and Flood 2014): the generator adds SPLITMIX64_GAMMA to its state and returns
 * splitmix64_mix of it; the same mix of seed + GAMMA * (i + 1) is a hash of (seed, i) independent of any order. Every
 * splitmix64 in the tree (the position seed, the trainer's and the backend jitter's generators, synthetic weights,
 * eval's random policy) is this one function. */
#define SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull
static inline uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* splitmix64 of (seed, position): the generator seed of the draw at pos. */
static inline uint64_t position_seed(uint64_t seed, int32_t pos) {
    return splitmix64_mix(seed + SPLITMIX64_GAMMA * ((uint64_t)pos + 1));
}

/* ln sum_i exp(logits[i]) over the first n entries: m + ln sum exp(l_i - m), m the largest, in double. */
static inline double log_sum_exp(const float *logits, int32_t n) {
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    return mx + log(sum);
}

/* The log-softmax of logits[id] over the first n entries. */
static inline float log_softmax_at(const float *logits, int32_t n, int32_t id) {
    return (float)((double)logits[id] - log_sum_exp(logits, n));
}

#endif /* TR_MODEL_SAMPLE_MATH_H */
