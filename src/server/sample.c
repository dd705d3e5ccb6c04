/* sample.c — the server's token choice. Greedy by default (lowest id among equal maxima, as tr_argmax). With a
 * temperature the draw uses a uniform number derived only from (seed, position) by SplitMix64, so a client that
 * resends a position after a rollback or a 409 gets the same token: sampling is a function of the request, not of
 * the server's history. Log-probabilities are those of the untempered distribution over ids < n_vocab. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

typedef struct cand {
    int32_t id;
    float logit;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The n best (id, logit) pairs by a partial selection: O(n_vocab × n) for the small n asked here. */
static void top_n(const float *logits, int32_t n_vocab, int32_t n, cand *out) {
    int32_t have = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float l = logits[i];
        if (have == n && !(l > out[n - 1].logit)) continue;
        int32_t j = have < n ? have++ : n - 1;
        while (j > 0 && out[j - 1].logit < l) {
            out[j] = out[j - 1];
            j--;
        }
        out[j].id = i;
        out[j].logit = l;
    }
}

int32_t sample_token(const float *logits, int32_t n_vocab, const sampling *s, int32_t position, float *logprob,
                     top_entry *top, int32_t n_top) {
    float mx = logits[0];
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx) {
            mx = logits[i];
            best = i;
        }
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    int32_t chosen = best;
    if (s->temperature > 0) {
        /* Candidates: top_k best (all when off), sorted; softmax at the temperature; nucleus cut at top_p. */
        const int32_t k = s->top_k > 0 && s->top_k < n_vocab ? s->top_k : n_vocab;
        cand *c = malloc((size_t)k * sizeof *c);
        if (c) {
            if (k < n_vocab) top_n(logits, n_vocab, k, c);
            else {
                for (int32_t i = 0; i < n_vocab; i++) c[i] = (cand){i, logits[i]};
                qsort(c, (size_t)n_vocab, sizeof *c, cand_cmp);
            }
            double *p = malloc((size_t)k * sizeof *p), z = 0;
            if (p) {
                for (int32_t i = 0; i < k; i++) z += p[i] = exp(((double)c[i].logit - c[0].logit) / s->temperature);
                int32_t keep = k;
                double cum = 0;
                for (int32_t i = 0; i < k; i++) {
                    cum += p[i] / z;
                    if (cum >= s->top_p) {
                        keep = i + 1;
                        break;
                    }
                }
                double zk = 0;
                for (int32_t i = 0; i < keep; i++) zk += p[i];
                const uint64_t r = splitmix64(s->seed ^ splitmix64((uint64_t)position + 1));
                const double u = (double)(r >> 11) * (1.0 / 9007199254740992.0) * zk;
                double acc = 0;
                chosen = c[keep - 1].id;
                for (int32_t i = 0; i < keep; i++) {
                    acc += p[i];
                    if (u < acc) {
                        chosen = c[i].id;
                        break;
                    }
                }
                free(p);
            }
            free(c);
        }
    }
    *logprob = (float)(logits[chosen] - lse);
    if (n_top > 0) {
        cand best_n[TOP_LOGPROBS_MAX];
        if (n_top > n_vocab) n_top = n_vocab;
        top_n(logits, n_vocab, n_top, best_n);
        for (int32_t i = 0; i < n_top; i++) top[i] = (top_entry){best_n[i].id, (float)(best_n[i].logit - lse)};
    }
    return chosen;
}
