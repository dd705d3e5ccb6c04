/* convert_check.c — the WebAssembly build's load-time conversion of Q5_0 matrices to Q8_0 (convert_wasm.c) is exact:
 * under node (tests/wasm/simd128_kernels.sh, in make test) the SIMD128 kernels must ask for it, every converted
 * value must equal the Q5_0 value bit for bit (dequantized), and the products of the converted matrix must equal the
 * Q5_0 matrix's bit for bit (the SIMD128 tiles sum both types in the same order), for one activation row (decode)
 * and batches (prefill tiles of 4 and their leftovers), on one and two threads, over random blocks and the edge
 * blocks (every fifth bit set, none, extreme nibbles, negative and subnormal scales). TOKROUTE_CONVERT=0 keeps Q5_0.
 * A standalone program (no cmocka under emscripten): one line per case, exit 1 on any difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)((double)next_u32() / 4294967296.0 * 2.0 - 1.0); }

/* Q5_0 rows: quantized from random floats, then every 7th block overwritten with an edge pattern. */
static void fill_q5_0(block_q5_0 *b, int64_t n_blocks) {
    float v[QK5_0];
    for (int64_t i = 0; i < n_blocks; i++) {
        for (int j = 0; j < QK5_0; j++) v[j] = frand();
        quantize_row(TR_TYPE_Q5_0, v, &b[i], QK5_0);
        if (i % 7 != 3) continue;
        static const uint16_t scales[] = {0x3C00, 0xBC00, 0x0001, 0x83FF, 0x7BFF}; /* 1, -1, subnormals, max */
        static const uint32_t highs[] = {0xFFFFFFFFu, 0, 0xAAAAAAAAu, 0x0000FFFFu, 0x80000001u};
        const int k = (int)(i / 7) % 5;
        b[i].d = scales[k];
        memcpy(b[i].qh, &highs[(k + 1) % 5], 4);
        for (int j = 0; j < QK5_0 / 2; j++) b[i].qs[j] = k % 2 ? 0xFF : k == 2 ? 0x0F : (uint8_t)next_u32();
    }
}

static int check_values(const weight_matrix *q5, const weight_matrix *q8) {
    float *a = malloc(sizeof(float) * q5->cols), *b = malloc(sizeof(float) * q5->cols);
    int bad = 0;
    for (int64_t r = 0; r < q5->rows && !bad; r++) {
        weight_dequantize_row(q5, r, a);
        weight_dequantize_row(q8, r, b);
        if (memcmp(a, b, sizeof(float) * q5->cols) != 0) bad = 1, printf("FAIL: converted row %lld's values differ\n", (long long)r);
    }
    free(a), free(b);
    return bad;
}

static int check_products(const weight_matrix *q5, const weight_matrix *q8, int64_t n, int threads) {
    thread_pool *tp = thread_pool_create(threads);
    float *x = malloc(sizeof(float) * q5->cols * n), *y5 = malloc(sizeof(float) * q5->rows * n);
    float *y8 = malloc(sizeof(float) * q5->rows * n);
    for (int64_t k = 0; k < q5->cols * n; k++) x[k] = frand();
    matmul_scratch sc = {0};
    int bad = !tp || matmul(tp, q5, x, n, y5, q5->rows, &sc) != TR_OK || matmul(tp, q8, x, n, y8, q5->rows, &sc) != TR_OK;
    int64_t first = -1;
    for (int64_t i = 0; i < q5->rows * n && !bad && first < 0; i++)
        if (memcmp(&y5[i], &y8[i], sizeof(float)) != 0) first = i;
    if (bad) printf("FAIL: product of %lld x %lld, %lld rows, %d threads did not run\n", (long long)q5->rows,
                    (long long)q5->cols, (long long)n, threads);
    else if (first >= 0)
        printf("FAIL: %lld x %lld, %lld activation rows, %d threads: output %lld is %.9g from Q8_0, %.9g from Q5_0\n",
               (long long)q5->rows, (long long)q5->cols, (long long)n, threads, (long long)first, y8[first], y5[first]);
    else
        printf("ok %lld x %lld, %lld activation rows, %d threads: converted Q8_0 product = Q5_0's, bit for bit\n",
               (long long)q5->rows, (long long)q5->cols, (long long)n, threads);
    matmul_scratch_free(&sc);
    free(x), free(y5), free(y8);
    thread_pool_free(tp);
    return bad || first >= 0;
}

int main(void) {
    int failures = 0;
    const int64_t shapes[][2] = {{40, 896}, {33, 96}, {17, 4864}}; /* 28, 3 (leftover blocks) and 152 blocks a row */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1];
        block_q5_0 *b5 = malloc(type_row_bytes(TR_TYPE_Q5_0, cols) * rows);
        fill_q5_0(b5, rows * (cols / QK5_0));
        const weight_matrix q5 = {TR_TYPE_Q5_0, b5, rows, cols, 0, WEIGHT_PLAIN};
        weight_matrix q8 = q5;
        const tr_type to = weight_convert_type(&q5);
        if (to != TR_TYPE_Q8_0) {
            printf("FAIL: the %s kernels do not convert Q5_0 to Q8_0 (they name %s)\n", kernels_isa(), tr_type_name(to));
            return 1;
        }
        void *b8 = malloc(weight_convert_bytes(&q5, to));
        if (weight_convert(&q8, to, b8) != TR_OK || q8.type != TR_TYPE_Q8_0 || q8.data != b8) {
            printf("FAIL: weight_convert: %s\n", tr_last_error());
            return 1;
        }
        failures += check_values(&q5, &q8);
        for (int threads = 1; threads <= 2; threads++)
            for (int i = 0; i < 5; i++) failures += check_products(&q5, &q8, (int64_t[]){1, 2, 4, 5, 11}[i], threads);
        free(b5), free(b8);
    }
    const weight_matrix probe = {TR_TYPE_Q5_0, NULL, 16, 64, 0, WEIGHT_PLAIN};
    setenv("TOKROUTE_CONVERT", "0", 1);
    if (weight_convert_type(&probe) != TR_TYPE_Q5_0) printf("FAIL: TOKROUTE_CONVERT=0 still converts\n"), failures++;
    printf("convert check: %d failure(s), kernels isa %s\n", failures, kernels_isa());
    return failures ? 1 : 0;
}
