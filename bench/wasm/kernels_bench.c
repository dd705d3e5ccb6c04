/* kernels_bench.c — the matrix products alone, per weight type, at the shapes of a qwen2.5-0.5b decode step (one
 * activation row: ffn gate/up 4864 × 896 for the 32-block types, ffn down 896 × 4864 for the super-block ones) and
 * of a 32-token prefill, on the active instruction set: giga multiply-adds per second, the fastest product of R passes
 * over a set of matrices larger than the caches (so the weights stream from memory as in a real step). Built by
 * bench/wasm/build.sh for node: `node --no-experimental-fetch kernels_bench_node.js [THREADS] [REPS] [TYPE...]`
 * prints one line a type: type, shape, decode GMAC/s, prefill GMAC/s. Compare builds by alternating them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/types.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

enum { N_MATS = 8, PREFILL = 32 };

/* GMAC/s of the fastest single product over `reps` passes through the N_MATS matrices with n activation rows: on
 * a shared machine the fastest of many short products is the one nothing interrupted. */
static double gmacs(thread_pool *tp, const weight_matrix *w, const float *x, int64_t n, float *y, int reps,
                    matmul_scratch *sc) {
    double best = 1e30;
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < N_MATS; m++) {
            const double t0 = now_s();
            if (matmul(tp, &w[m], x, n, y, w[m].rows, sc) != TR_OK) return -1;
            const double t = now_s() - t0;
            if (t < best) best = t;
        }
    return (double)w[0].rows * (double)w[0].cols * (double)n / best * 1e-9;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 5;
    const char *all[] = {"q4_0", "q5_0", "q8_0", "q4_k", "q6_k", "iq4_xs"};
    const char *const *names = argc > 3 ? (const char *const *)argv + 3 : all;
    const int n_names = argc > 3 ? argc - 3 : (int)(sizeof all / sizeof all[0]);
    thread_pool *tp = thread_pool_create(threads);
    if (!tp || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: kernels_bench [THREADS] [REPS] [TYPE...]\n");
        return 2;
    }
    printf("isa %s, %d thread(s), fastest product of %d passes\n", kernels_isa(), threads, reps);
    for (int i = 0; i < n_names; i++) {
        tr_type t = TR_TYPE_COUNT;
        for (int k = 0; k < TR_TYPE_COUNT; k++)
            if (tr_type_name((tr_type)k) && strcmp(tr_type_name((tr_type)k), names[i]) == 0) t = (tr_type)k;
        if (t == TR_TYPE_COUNT) {
            fprintf(stderr, "kernels_bench: no type %s\n", names[i]);
            return 2;
        }
        const bool super = tr_type_block_elems(t) == 256;
        const int64_t rows = super ? 896 : 4864, cols = super ? 4864 : 896;
        const size_t rb = type_row_bytes(t, cols);
        float *row = malloc(sizeof(float) * cols), *x = malloc(sizeof(float) * PREFILL * cols);
        float *y = malloc(sizeof(float) * PREFILL * rows);
        uint8_t *data = malloc(rb * rows * N_MATS);
        weight_matrix w[N_MATS];
        if (!row || !x || !y || !data) return 1;
        for (int m = 0; m < N_MATS; m++) {
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t k = 0; k < cols; k++) row[k] = frand();
                quantize_row(t, row, data + rb * (rows * m + r), cols);
            }
            w[m] = (weight_matrix){t, data + rb * rows * m, rows, cols, 0, WEIGHT_PLAIN};
        }
        for (int64_t k = 0; k < PREFILL * cols; k++) x[k] = frand();
        matmul_scratch sc = {0};
        const double dec = gmacs(tp, w, x, 1, y, reps, &sc), pre = gmacs(tp, w, x, PREFILL, y, reps, &sc);
        printf("%-7s %5lld x %-5lld decode %6.2f GMAC/s  prefill %6.2f GMAC/s\n", names[i], (long long)rows,
               (long long)cols, dec, pre);
        matmul_scratch_free(&sc);
        free(row), free(x), free(y), free(data);
    }
    thread_pool_free(tp);
    return 0;
}
