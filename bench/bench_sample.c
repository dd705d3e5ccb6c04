/* bench_sample.c — what picking a token costs at a 152K vocabulary (Qwen2.5's 151936): tr_sampler_sample with
 * temperature 0.8 under several top-k/top-p settings, and greedy tr_argmax, against the previous implementation
 * that sorted the whole vocabulary per token (tests/support/sampler_ref.h, compiled here unchanged), in µs per
 * token, measured in the same run. Logits are an LM-like row (a few dominant tokens over a long tail) and a flat
 * row (the worst case for top-p alone, which then has to walk most of the vocabulary).
 *
 * usage: bench_sample [n_vocab]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../tests/support/sampler_ref.h"
#include "tokroute.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void make_row(float *l, int32_t n, bool peaked) {
    uint64_t seed = 12345;
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const double u = (double)(seed >> 11) / 9007199254740992.0;
        l[i] = peaked ? (float)(-8.0 + 4.0 * u) : (float)(u * 2.0);
    }
    if (peaked)
        for (int32_t i = 0; i < 20; i++) l[(int32_t)((uint64_t)i * 7919 % (uint64_t)n)] = 8.0f - (float)i * 0.5f;
}

enum { NEW_SAMPLER, REF_SAMPLER, NEW_ARGMAX, REF_ARGMAX };

/* Mean µs per call over ~200 ms (at least 3 calls). */
static double time_calls(int which, const tr_sampler_params *p, const float *l, int32_t n, ref_candidate *scratch) {
    tr_sampler *s = NULL;
    if (tr_sampler_create(p, &s) != TR_OK) return NAN;
    ref_sampler r;
    ref_sampler_init(&r, p, scratch);
    volatile int32_t sink = 0;
    int64_t calls = 0;
    const double t0 = now_us();
    do {
        switch (which) {
        case NEW_SAMPLER: sink += tr_sampler_sample(s, l, n); break;
        case REF_SAMPLER: sink += ref_sampler_sample(&r, l, n); break;
        case NEW_ARGMAX: sink += tr_argmax(l, n); break;
        default: sink += ref_argmax(l, n); break;
        }
        calls++;
    } while (now_us() - t0 < 200e3 || calls < 3);
    const double us = (now_us() - t0) / (double)calls;
    tr_sampler_free(s);
    return us;
}

int main(int argc, char **argv) {
    const int32_t n = argc > 1 ? (int32_t)atol(argv[1]) : 151936;
    if (n < 100) {
        fprintf(stderr, "usage: bench_sample [n_vocab >= 100]\n");
        return 2;
    }
    float *l = malloc((size_t)n * sizeof *l);
    ref_candidate *scratch = malloc((size_t)n * sizeof *scratch);
    if (!l || !scratch) return 1;
    const struct {
        const char *name;
        int32_t top_k;
        float top_p;
    } cases[] = {{"top-k 40, top-p 0.95 (defaults)", 40, 0.95f},
                 {"top-p 0.95 alone", 0, 0.95f},
                 {"no cut (top-k 0, top-p 1)", 0, 1.0f}};
    printf("n_vocab %d, temperature 0.8; µs per token; previous = full sort per token\n", n);
    printf("%-7s %-32s %10s %10s %8s\n", "row", "setting", "previous", "now", "speedup");
    for (int peaked = 1; peaked >= 0; peaked--) {
        make_row(l, n, peaked);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            tr_sampler_params p = tr_sampler_default_params();
            p.temperature = 0.8f;
            p.top_k = cases[c].top_k;
            p.top_p = cases[c].top_p;
            const double before = time_calls(REF_SAMPLER, &p, l, n, scratch);
            const double after = time_calls(NEW_SAMPLER, &p, l, n, scratch);
            printf("%-7s %-32s %10.1f %10.1f %7.1fx\n", peaked ? "peaked" : "flat", cases[c].name, before, after,
                   before / after);
        }
        const tr_sampler_params g = tr_sampler_default_params();
        const double before = time_calls(REF_ARGMAX, &g, l, n, scratch);
        const double after = time_calls(NEW_ARGMAX, &g, l, n, scratch);
        printf("%-7s %-32s %10.1f %10.1f %7.1fx\n", peaked ? "peaked" : "flat", "greedy (argmax)", before, after,
               before / after);
    }
    free(l);
    free(scratch);
    return 0;
}
