/* matmul_wasm.c — WebAssembly SIMD128 dot products (wasm_simd128.h), one weight row × one activation row each, run
 * over the tile by tile_by_dot; built only where the compiler targets SIMD128 (emcc -msimd128: __wasm_simd128__).
 * Q8_0 and Q4_0 weights against SoA Q8_0 activations (matmul_impl.h), F32 against F32; every other type keeps the
 * portable code. SIMD128 has no byte dot product: the signed bytes are widened to 16 bits and summed in pairs by
 * i32x4.dot_i16x8_s, exact in 32 bits for 32-value blocks. Q4_0 nibbles are re-centred (q - 8) before the product,
 * as on NEON, so no offset correction is needed. The block sums are exact integers, so only the float scaling and
 * the four-lane accumulation differ from the scalar order (within float rounding). Elsewhere the file is empty
 * (so the builds that take every kernel file, CMake's and check-neon's, need no exception). */
#if defined(__wasm_simd128__)
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <wasm_simd128.h>

/* Sum over 16 signed byte products a[i]*b[i] added into 4 int32 lanes. */
static inline v128_t dot16(v128_t acc, v128_t a, v128_t b) {
    const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b));
    const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b));
    return wasm_i32x4_add(acc, wasm_i32x4_add(lo, hi));
}

static inline float hsum_f32(v128_t v) {
    return wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1) + wasm_f32x4_extract_lane(v, 2) +
           wasm_f32x4_extract_lane(v, 3);
}

/* ---------------------------------------------------------------- Q8_0, Q4_0 × SoA Q8_0 */

static inline float w32_dot(const void *w, const void *x, int64_t n, bool q4) {
    const int8_t *xq = x;
    const float *xd = (const float *)(xq + n);
    v128_t acc = wasm_f32x4_splat(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        v128_t w0, w1;
        uint16_t d;
        if (q4) {
            const block_q4_0 *q = (const block_q4_0 *)w + b;
            const v128_t v = wasm_v128_load(q->qs);
            const v128_t eight = wasm_i8x16_splat(8);
            w0 = wasm_i8x16_sub(wasm_v128_and(v, wasm_i8x16_splat(0x0F)), eight);
            w1 = wasm_i8x16_sub(wasm_u8x16_shr(v, 4), eight);
            d = q->d;
        } else {
            const block_q8_0 *q = (const block_q8_0 *)w + b;
            w0 = wasm_v128_load(q->qs), w1 = wasm_v128_load(q->qs + 16), d = q->d;
        }
        v128_t s = dot16(wasm_i32x4_splat(0), w0, wasm_v128_load(xq + 32 * b));
        s = dot16(s, w1, wasm_v128_load(xq + 32 * b + 16));
        const v128_t scale = wasm_f32x4_splat(fp16_to_fp32(d) * xd[b]);
        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s), scale));
    }
    return hsum_f32(acc);
}

static float simd128_q8_0(const void *w, const void *x, int64_t n) { return w32_dot(w, x, n, false); }
static float simd128_q4_0(const void *w, const void *x, int64_t n) { return w32_dot(w, x, n, true); }

/* ---------------------------------------------------------------- F32 × F32 */

static float simd128_f32(const void *w, const void *x, int64_t n) {
    const float *a = w, *b = x;
    v128_t acc = wasm_f32x4_splat(0.0f);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4)
        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(a + k), wasm_v128_load(b + k)));
    float s = hsum_f32(acc);
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

/* ---------------------------------------------------------------- table */

#define SIMD128_TILE(name)                                                                                  \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        tile_by_dot(a, r0, r1, i0, i1, simd128_##name);                                                     \
    }
SIMD128_TILE(f32)
SIMD128_TILE(q8_0)
SIMD128_TILE(q4_0)

void mm_isa_simd128(mm_isa *isa) {
    isa->name = "simd128";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
}
#else
typedef int matmul_wasm_not_built; /* ISO C wants a declaration in every file */
#endif
