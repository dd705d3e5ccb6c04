/* test_kernels_conformance.c — decoders against files llama.cpp wrote: each quantized conformance model was
 * quantized by llama.cpp from the same random weights as its F32 twin, so every 2-D tensor must decode to within
 * that type's quantization error of the F32 tensor. A block layout decoded wrongly lands near 100% error. The same
 * tensors then go through matmul on every instruction set and must match the dequantized float product. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

#define DIR TR_SHARED_DIR "/conformance/"

static const struct { const char *file; tr_type type; double max_rel_rms; } CASES[] = {
    {"llama-f16.gguf", TR_TYPE_F16, 1e-3},  {"llama-q8_0.gguf", TR_TYPE_Q8_0, 0.01},
    {"llama-q4_0.gguf", TR_TYPE_Q4_0, 0.12}, {"llama-q4_k.gguf", TR_TYPE_Q4_K, 0.10},
    {"llama-q5_k.gguf", TR_TYPE_Q5_K, 0.05}, {"llama-q6_k.gguf", TR_TYPE_Q6_K, 0.025},
};

static double rel_rms(const float *a, const float *b, int64_t n) {
    double e = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        e += (double)(a[i] - b[i]) * (a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(e / (r > 0 ? r : 1));
}

static void test_llama_cpp_files_decode(void **state) {
    (void)state;
    tr_gguf *ref = NULL;
    if (tr_gguf_open(DIR "llama-f32.gguf", &ref) != TR_OK) fail_msg("cannot open llama-f32.gguf: %s", tr_last_error());
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        tr_gguf *g = NULL;
        char path[512];
        snprintf(path, sizeof path, DIR "%s", CASES[c].file);
        if (tr_gguf_open(path, &g) != TR_OK) fail_msg("cannot open %s: %s", path, tr_last_error());
        int checked = 0;
        for (int64_t t = 0; t < tr_gguf_n_tensors(g); t++) {
            const tr_gguf_tensor *q = tr_gguf_tensor_at(g, t);
            if (q->n_dims != 2 || q->type != CASES[c].type) continue;
            const tr_gguf_tensor *f = tr_gguf_tensor_at(ref, tr_gguf_find_tensor(ref, q->name));
            assert_non_null(f);
            assert_int_equal(f->type, TR_TYPE_F32);
            const int64_t n = q->ne[0] * q->ne[1];
            float *deq = malloc(sizeof(float) * n);
            assert_int_equal(dequantize_row(q->type, q->data, deq, n), TR_OK);
            const double e = rel_rms(deq, f->data, n);
            if (e > CASES[c].max_rel_rms) fail_msg("%s %s: relative RMS error %g", CASES[c].file, q->name, e);
            free(deq);
            checked++;
        }
        assert_true(checked >= 7); /* at least the attention and FFN matrices of a layer */
        tr_gguf_close(g);
    }
    tr_gguf_close(ref);
}

/* Products with llama.cpp's own quantized weights: every ISA against the float reference. */
static void test_llama_cpp_files_multiply(void **state) {
    (void)state;
    static const char *const isas[] = {"scalar", "avx2", "avx512", "neon"};
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, DIR "%s", CASES[c].file);
        tr_gguf *g = NULL;
        if (tr_gguf_open(path, &g) != TR_OK) fail_msg("cannot open %s: %s", path, tr_last_error());
        const tr_gguf_tensor *q = tr_gguf_tensor_at(g, tr_gguf_find_tensor(g, "blk.0.ffn_down.weight"));
        assert_non_null(q);
        const int64_t cols = q->ne[0], rows = q->ne[1], n = 9;
        float *wf = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * n * cols);
        float *y = malloc(sizeof(float) * n * rows), *y0 = malloc(sizeof(float) * n * rows);
        assert_int_equal(dequantize_row(q->type, q->data, wf, rows * cols), TR_OK);
        for (int64_t i = 0; i < n * cols; i++) x[i] = sinf((float)i * 0.37f);
        weight_matrix w = {.type = q->type, .data = q->data, .rows = rows, .cols = cols};
        thread_pool *tp = thread_pool_create(2);
        matmul_scratch sc = {0};
        kernels_force_isa("scalar");
        assert_int_equal(matmul(tp, &w, x, n, y0, rows, &sc), TR_OK);
        for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
            if (!kernels_isa_available(isas[s])) continue;
            kernels_force_isa(isas[s]);
            assert_int_equal(matmul(tp, &w, x, n, y, rows, &sc), TR_OK);
            /* against the scalar product (same quantized activations): float rounding only */
            assert_true(rel_rms(y, y0, n * rows) < 1e-5);
            /* against float weights × float activations: within the 8-bit activation error */
            double e = 0, ref2 = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < rows; r++) {
                    double d = 0;
                    for (int64_t k = 0; k < cols; k++) d += (double)wf[r * cols + k] * x[i * cols + k];
                    e += (y[i * rows + r] - d) * (y[i * rows + r] - d);
                    ref2 += d * d;
                }
            if (sqrt(e / ref2) > 0.02) fail_msg("%s %s: %g from the float product", isas[s], CASES[c].file, sqrt(e / ref2));
        }
        kernels_force_isa("scalar");
        matmul_scratch_free(&sc);
        thread_pool_free(tp);
        free(wf); free(x); free(y); free(y0);
        tr_gguf_close(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_cpp_files_decode),
        cmocka_unit_test(test_llama_cpp_files_multiply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
