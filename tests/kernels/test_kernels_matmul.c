/* test_kernels_matmul.c — matrix products of every supported type on every instruction set this machine has,
 * against a float reference (dequantized weights times activations quantized and dequantized like llama.cpp's
 * vec_dot type), for odd shapes, several token counts and 1-3 threads; and the thread pool's contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"

static uint32_t rng_state = 777;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static tr_type vec_dot_type(tr_type t) {
    switch (t) {
    case TR_TYPE_Q4_0: case TR_TYPE_Q5_0: case TR_TYPE_Q8_0: case TR_TYPE_IQ4_NL: return TR_TYPE_Q8_0;
    case TR_TYPE_Q4_1: case TR_TYPE_Q5_1: return TR_TYPE_Q8_1;
    case TR_TYPE_Q4_K: case TR_TYPE_Q5_K: case TR_TYPE_Q6_K: case TR_TYPE_IQ4_XS:
    case TR_TYPE_Q2_K: case TR_TYPE_Q3_K: return TR_TYPE_Q8_K;
    default: return TR_TYPE_F32;
    }
}

static const tr_type TYPES[] = {TR_TYPE_F32,  TR_TYPE_F16,  TR_TYPE_BF16, TR_TYPE_Q8_0, TR_TYPE_Q4_0, TR_TYPE_Q4_1,
                                TR_TYPE_Q5_0, TR_TYPE_Q5_1, TR_TYPE_Q4_K, TR_TYPE_Q5_K, TR_TYPE_Q6_K,
                                TR_TYPE_IQ4_NL, TR_TYPE_IQ4_XS, TR_TYPE_Q2_K, TR_TYPE_Q3_K};
static const char *const ISAS[] = {"scalar", "avx2", "avx512", "neon"};

/* One product checked against the reference; returns the worst error relative to sum |w_k x_k|. */
static double check_product(thread_pool *tp, tr_type t, int64_t rows, int64_t cols, int64_t n, matmul_scratch *sc) {
    const size_t rb = type_row_bytes(t, cols);
    float *wf = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n * cols);
    float *xr = malloc(sizeof(float) * n * cols), *y = malloc(sizeof(float) * n * (rows + 3));
    uint8_t *wq = malloc(rb * rows), *xq = malloc(type_row_bytes(TR_TYPE_Q8_K, cols) * 2 + 64 * cols);
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = frand() * (1.0f + 0.5f * (float)((i / 32) % 3));
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand() * 2.0f;
    for (int64_t r = 0; r < rows; r++) {
        assert_int_equal(quantize_row(t, wf + r * cols, wq + r * rb, cols), TR_OK);
        assert_int_equal(dequantize_row(t, wq + r * rb, wf + r * cols, cols), TR_OK);
    }
    const tr_type vt = vec_dot_type(t);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(quantize_row(vt, x + i * cols, xq, cols), TR_OK);
        assert_int_equal(dequantize_row(vt, xq, xr + i * cols, cols), TR_OK);
    }
    const int64_t ldy = rows + 3; /* a stride wider than rows: the padding must stay untouched */
    for (int64_t i = 0; i < n * ldy; i++) y[i] = -12345.0f;
    weight_matrix w = {.type = t, .data = wq, .rows = rows, .cols = cols};
    assert_int_equal(matmul(tp, &w, x, n, y, ldy, sc), TR_OK);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t r = 0; r < rows; r++) {
            double ref = 0, mag = 1e-6;
            for (int64_t k = 0; k < cols; k++) {
                ref += (double)wf[r * cols + k] * xr[i * cols + k];
                mag += fabs((double)wf[r * cols + k] * xr[i * cols + k]);
            }
            const double e = fabs(y[i * ldy + r] - ref) / mag;
            if (e > worst) worst = e;
        }
        for (int64_t r = rows; r < ldy; r++) assert_true(y[i * ldy + r] == -12345.0f);
    }
    free(wf); free(x); free(xr); free(y); free(wq); free(xq);
    return worst;
}

/* A matrix whose rows sit further apart than their length (row_stride, as attention reads transposed V from the
 * cache) gives the same products as the packed copy, on every ISA, and never reads the gaps. */
static void test_row_stride(void **state) {
    (void)state;
    const tr_type types[] = {TR_TYPE_F16, TR_TYPE_F32, TR_TYPE_Q8_0};
    const int64_t rows = 37, cols = 64, n = 5, gap = 3;
    const char *best = kernels_isa();
    thread_pool *tp = thread_pool_create(2);
    matmul_scratch sc = {0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const tr_type t = types[ti];
        const size_t rb = type_row_bytes(t, cols), stride = rb + gap * tr_type_block_bytes(t);
        uint8_t *packed = malloc(rb * rows), *spaced = malloc(stride * rows);
        float *row = malloc(sizeof(float) * cols), *x = malloc(sizeof(float) * n * cols);
        float *y1 = malloc(sizeof(float) * n * rows), *y2 = malloc(sizeof(float) * n * rows);
        memset(spaced, 0x7f, stride * rows); /* NaN-ish garbage in the gaps */
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t k = 0; k < cols; k++) row[k] = frand();
            assert_int_equal(quantize_row(t, row, packed + r * rb, cols), TR_OK);
            memcpy(spaced + r * stride, packed + r * rb, rb);
        }
        for (int64_t i = 0; i < n * cols; i++) x[i] = frand();
        const char *isas[] = {"scalar", "avx2", "avx512", "neon"};
        for (int isa = 0; isa < 4; isa++) {
            if (!kernels_isa_available(isas[isa])) continue;
            assert_int_equal(kernels_force_isa(isas[isa]), TR_OK);
            const weight_matrix a = {t, packed, rows, cols, 0, WEIGHT_PLAIN}, b = {t, spaced, rows, cols, stride, WEIGHT_PLAIN};
            assert_int_equal(matmul(tp, &a, x, n, y1, rows, &sc), TR_OK);
            assert_int_equal(matmul(tp, &b, x, n, y2, rows, &sc), TR_OK);
            assert_memory_equal(y1, y2, sizeof(float) * n * rows);
        }
        free(packed); free(spaced); free(row); free(x); free(y1); free(y2);
    }
    assert_int_equal(kernels_force_isa(best), TR_OK);
    matmul_scratch_free(&sc);
    thread_pool_free(tp);
}

static void test_products_agree_with_reference(void **state) {
    (void)state;
    const int64_t ns[] = {1, 3, 17, 64};
    const int64_t rows_list[] = {1, 7, 37, 100};
    int isas_run = 0;
    for (size_t s = 0; s < sizeof ISAS / sizeof ISAS[0]; s++) {
        if (!kernels_isa_available(ISAS[s])) continue;
        assert_int_equal(kernels_force_isa(ISAS[s]), TR_OK);
        assert_string_equal(kernels_isa(), ISAS[s]);
        isas_run++;
        for (int nth = 1; nth <= 3; nth++) {
            thread_pool *tp = thread_pool_create(nth);
            assert_non_null(tp);
            matmul_scratch scratch = {0};
            for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
                const tr_type t = TYPES[ti];
                const int64_t cols = tr_type_block_elems(t) == 256 ? 512 : 320;
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int64_t rows = rows_list[(ni + ti + (size_t)nth) % 4];
                    const double e = check_product(tp, t, rows, cols, ns[ni], &scratch);
                    /* Q8_1's s = d*sum(q) is rounded to F16 (as in llama.cpp); everything else only differs by
                     * float summation order. */
                    const double tol = (t == TR_TYPE_Q4_1 || t == TR_TYPE_Q5_1) ? 2e-3 : 1e-4;
                    if (e > tol)
                        fail_msg("%s %s rows=%lld n=%lld threads=%d: relative error %g", ISAS[s], tr_type_name(t),
                                 (long long)rows, (long long)ns[ni], nth, e);
                }
            }
            matmul_scratch_free(&scratch);
            thread_pool_free(tp);
        }
    }
    assert_true(isas_run >= 1);
    assert_int_equal(kernels_force_isa("scalar"), TR_OK);
}

/* A larger product with many row chunks per thread (exercises chunk claiming and full tiles). */
static void test_large_product(void **state) {
    (void)state;
    for (size_t s = 0; s < sizeof ISAS / sizeof ISAS[0]; s++) {
        if (!kernels_isa_available(ISAS[s])) continue;
        kernels_force_isa(ISAS[s]);
        thread_pool *tp = thread_pool_create(2);
        matmul_scratch scratch = {0};
        const tr_type ts[] = {TR_TYPE_Q8_0,   TR_TYPE_Q4_K,   TR_TYPE_Q6_K, TR_TYPE_F16,
                              TR_TYPE_IQ4_NL, TR_TYPE_IQ4_XS, TR_TYPE_Q2_K, TR_TYPE_Q3_K};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            const double e = check_product(tp, ts[i], 333, 1024, 70, &scratch);
            if (e > 1e-4) fail_msg("%s %s large: relative error %g", ISAS[s], tr_type_name(ts[i]), e);
        }
        matmul_scratch_free(&scratch);
        thread_pool_free(tp);
    }
    kernels_force_isa("scalar");
}

/* With one-hot weight rows (row r picks element r with weight exactly 1) the product returns each quantized
 * activation times its scale, so every instruction set's activation quantizer must give the scalar reference's
 * values exactly (llama.cpp's arithmetic, not merely close to it). */
static void test_activation_quantizers_are_exact(void **state) {
    (void)state;
    enum { COLS = 512, N = 5 };
    static const tr_type ts[] = {TR_TYPE_Q8_0, TR_TYPE_Q6_K, TR_TYPE_Q4_0, TR_TYPE_Q4_1, TR_TYPE_Q5_K, TR_TYPE_IQ4_NL,
                                 TR_TYPE_IQ4_XS, TR_TYPE_Q2_K, TR_TYPE_Q3_K};
    float *onehot = calloc(COLS, sizeof(float)), *x = malloc(sizeof(float) * N * COLS);
    float *want = malloc(sizeof(float) * N * COLS), *y = malloc(sizeof(float) * N * COLS);
    uint8_t *xq = malloc(4 * COLS);
    for (int i = 0; i < N * COLS; i++) x[i] = frand() * (i % 97 == 0 ? 20.0f : 1.0f);
    x[COLS + 3] = 0.5f * x[COLS + 200]; /* ties between magnitudes stay rare but possible: exercise the first-hit rule */
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const tr_type t = ts[ti], vt = vec_dot_type(t);
        const size_t rb = type_row_bytes(t, COLS);
        uint8_t *w = malloc(rb * COLS);
        for (int r = 0; r < COLS; r++) {
            memset(onehot, 0, COLS * sizeof(float));
            onehot[r] = 1.0f;
            /* the reference below uses the decoded row, so levels that do not hit 1 exactly still compare */
            assert_int_equal(quantize_row(t, onehot, w + rb * r, COLS), TR_OK);
        }
        float *wf = malloc(sizeof(float) * COLS);
        for (int i = 0; i < N; i++) {
            assert_int_equal(quantize_row(vt, x + i * COLS, xq, COLS), TR_OK);
            assert_int_equal(dequantize_row(vt, xq, want + i * COLS, COLS), TR_OK);
        }
        for (size_t s = 0; s < sizeof ISAS / sizeof ISAS[0]; s++) {
            if (!kernels_isa_available(ISAS[s])) continue;
            kernels_force_isa(ISAS[s]);
            matmul_scratch sc = {0};
            weight_matrix wm = {.type = t, .data = w, .rows = COLS, .cols = COLS};
            assert_int_equal(matmul(NULL, &wm, x, N, y, COLS, &sc), TR_OK);
            for (int i = 0; i < N; i++)
                for (int r = 0; r < COLS; r++) {
                    assert_int_equal(dequantize_row(t, w + rb * r, wf, COLS), TR_OK);
                    double ref = 0;
                    for (int k = 0; k < COLS; k++) ref += (double)wf[k] * want[i * COLS + k];
                    /* SIMD lanes hold partial sums that cancel only in total, so allow float rounding of O(1)
                     * terms; one quantization step of an activation is ~1e-2 here. */
                    if (fabs(y[i * COLS + r] - ref) > 1e-5 * fabs(ref) + 1e-5)
                        fail_msg("%s %s token %d row %d: %.9g vs %.9g", ISAS[s], tr_type_name(t), i, r,
                                 (double)y[i * COLS + r], ref);
                }
            matmul_scratch_free(&sc);
        }
        free(wf);
        free(w);
    }
    kernels_force_isa("scalar");
    free(onehot); free(x); free(want); free(y); free(xq);
}

/* ---------------------------------------------------------------- thread pool */

enum { N_ITEMS = 1000 };
typedef struct count_job {
    atomic_int hits[N_ITEMS];
    atomic_int calls_by_thread[8];
    int nth_seen;
} count_job;

static void count_task(void *arg, int ith, int nth) {
    count_job *job = arg;
    if (ith == 0) job->nth_seen = nth; /* one writer: every share sees the same nth */
    atomic_fetch_add(&job->calls_by_thread[ith], 1);
    for (int i = ith; i < N_ITEMS; i += nth) atomic_fetch_add(&job->hits[i], 1);
}

static void test_thread_pool_runs_every_index_once(void **state) {
    (void)state;
    for (int nth = 1; nth <= 4; nth++) {
        thread_pool *tp = thread_pool_create(nth);
        assert_non_null(tp);
        assert_int_equal(thread_pool_size(tp), nth);
        for (int round = 0; round < 300; round++) {
            count_job job;
            memset(&job, 0, sizeof job);
            if (round == 150) usleep(100000); /* workers fall asleep: the next run must wake them */
            thread_pool_run(tp, count_task, &job);
            assert_int_equal(job.nth_seen, nth);
            for (int i = 0; i < N_ITEMS; i++) assert_int_equal(atomic_load(&job.hits[i]), 1);
            for (int t = 0; t < nth; t++) assert_int_equal(atomic_load(&job.calls_by_thread[t]), 1);
        }
        thread_pool_free(tp);
    }
    count_job job;
    memset(&job, 0, sizeof job);
    thread_pool_run(NULL, count_task, &job); /* no pool: the caller runs alone */
    assert_int_equal(job.nth_seen, 1);
    thread_pool_free(NULL);
}

/* Which thread ran each share of a run. */
typedef struct who_job {
    pthread_t by[4];
    atomic_int runs[4];
} who_job;

static void who_task(void *arg, int ith, int nth) {
    (void)nth;
    who_job *job = arg;
    job->by[ith] = pthread_self();
    atomic_fetch_add(&job->runs[ith], 1);
}

/* A worker late for a run (asleep, or descheduled by a neighbour on a shared machine) must not hold it up: the
 * caller claims the shares no worker has taken yet. With the workers asleep (past their spin), waking one takes
 * microseconds while the caller's empty share 0 takes nanoseconds, so in some of 50 runs the caller takes share 1
 * too (with one fixed share per thread it never did, and waited for the worker to wake every time). */
static void test_thread_pool_caller_takes_shares_of_late_workers(void **state) {
    (void)state;
    thread_pool *tp = thread_pool_create(2);
    assert_non_null(tp);
    int caller_ran_both = 0;
    for (int round = 0; round < 50; round++) {
        usleep(2000); /* > the workers' spin: they sleep */
        who_job job;
        memset(&job, 0, sizeof job);
        thread_pool_run(tp, who_task, &job);
        assert_int_equal(atomic_load(&job.runs[0]), 1);
        assert_int_equal(atomic_load(&job.runs[1]), 1);
        assert_true(pthread_equal(job.by[0], pthread_self())); /* share 0 is always the caller's */
        caller_ran_both += pthread_equal(job.by[1], pthread_self()) != 0;
    }
    thread_pool_free(tp);
    assert_true(caller_ran_both > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_pool_runs_every_index_once),
        cmocka_unit_test(test_thread_pool_caller_takes_shares_of_late_workers),
        cmocka_unit_test(test_products_agree_with_reference),
        cmocka_unit_test(test_row_stride),
        cmocka_unit_test(test_large_product),
        cmocka_unit_test(test_activation_quantizers_are_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
