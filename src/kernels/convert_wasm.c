/* convert_wasm.c — exact load-time type conversion for the WebAssembly build: Q5_0 matrices become Q8_0 ones holding
 * the same values, because SIMD128's Q8_0 product does fewer instructions per weight than Q5_0's (the fifth bits
 * need a shuffle, compares and masks per block; measured about 1.4x per multiply-add). A Q5_0 block is d * (q - 16)
 * with q in 0..31 and an F16 d; the Q8_0 block with the same d and q8 = q - 16 holds the same 32 values, and its
 * integer dot products with the Q8_0 activations are the same integers, so the products are unchanged (the SIMD128
 * tiles sum both types in the same order: bit-identical). It costs 12 bytes per 32 weights (34 instead of 22), in a
 * buffer the model owns (malloc'd by model_load.c); the file's bytes stay as they are. Q5_1 is not exact in Q8_0 (its offset m), so it stays.
 * Elsewhere (native builds) nothing is converted: every function keeps the file's type. */
#include "kernels/kernels.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

size_t weight_convert_bytes(const weight_matrix *w, tr_type to) { return type_row_bytes(to, w->cols) * (size_t)w->rows; }

#if defined(__wasm_simd128__)
#include "kernels/blocks.h"
#include "kernels/q5_0_wasm.h"

/* wasm32 addresses 4 GiB; web/worker.js refuses a model file over 4 GiB - 320 MiB (the KV cache and the work
 * buffers beside it). The file and its converted copies together stay within that. */
#define WASM32_MODEL_BYTES_MAX (((uint64_t)4 << 30) - ((uint64_t)320 << 20))

static bool converts_here(const weight_matrix *w) {
    const char *off = getenv("TOKROUTE_CONVERT");
    return !(off && strcmp(off, "0") == 0) && strcmp(kernels_isa(), "simd128") == 0 && w->layout == WEIGHT_PLAIN &&
           w->row_stride == 0 && w->rows > 0 && w->cols > 0 && w->cols % QK5_0 == 0;
}

tr_type weight_convert_type(const weight_matrix *w) {
    return w->type == TR_TYPE_Q5_0 && converts_here(w) ? TR_TYPE_Q8_0 : w->type;
}

bool weight_convert_fits(uint64_t file_bytes, uint64_t extra_bytes) {
    return file_bytes <= WASM32_MODEL_BYTES_MAX && extra_bytes <= WASM32_MODEL_BYTES_MAX - file_bytes;
}

/* One Q5_0 block as Q8_0: its five-bit values (q5_0_wasm.h, shared with the Q5_0 product) less 16. */
static void q5_0_block_to_q8_0(const block_q5_0 *x, block_q8_0 *y) {
    const v128_t sixteen = wasm_i8x16_splat(16);
    v128_t lo, hi;
    q5_0_values(x, &lo, &hi);
    y->d = x->d;
    wasm_v128_store(y->qs, wasm_i8x16_sub(lo, sixteen));
    wasm_v128_store(y->qs + 16, wasm_i8x16_sub(hi, sixteen));
}

tr_status weight_convert(weight_matrix *w, tr_type to, void *dst) {
    if (!w || !dst || to == w->type || weight_convert_type(w) != to)
        return tr_fail(TR_ERR_ARG, "weight_convert: no exact conversion of this matrix to that type");
    const int64_t n = w->rows * (w->cols / QK5_0);
    const block_q5_0 *x = w->data;
    block_q8_0 *y = dst;
    for (int64_t b = 0; b < n; b++) q5_0_block_to_q8_0(&x[b], &y[b]);
    w->type = to;
    w->data = dst;
    return TR_OK;
}
#else
tr_type weight_convert_type(const weight_matrix *w) { return w->type; }
bool weight_convert_fits(uint64_t file_bytes, uint64_t extra_bytes) { return true; }
tr_status weight_convert(weight_matrix *w, tr_type to, void *dst) {
    return tr_fail(TR_ERR_UNSUPPORTED, "weight_convert: this build converts no weight type");
}
#endif
