/* matmul_wasm.c — WebAssembly SIMD128 dot products (wasm_simd128.h), one weight row × one activation row each, run
 * over the tile by tile_by_dot; built only where the compiler targets SIMD128 (emcc -msimd128: __wasm_simd128__).
 * Q8_0, Q4_0 and IQ4_NL weights against SoA Q8_0 activations (matmul_impl.h), Q4_K, Q6_K and IQ4_XS against Q8_K,
 * F32 against F32: the types small models are downloaded in; every other type keeps the portable code.
 *
 * SIMD128 has no byte dot product: the signed bytes are widened to 16 bits and summed in pairs by i32x4.dot_i16x8_s,
 * exact in 32 bits. Q4_0 nibbles are re-centred (q - 8) before the product, as on NEON, so no offset correction is
 * needed; IQ4 indices become levels by one i8x16.swizzle. The block sums are exact integers, so only the float
 * scaling and the four-lane accumulation differ from the scalar order (within float rounding). Elsewhere the file
 * is empty (so the builds that take every kernel file, CMake's and check-neon's, need no exception). */
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

/* ---------------------------------------------------------------- IQ4_NL × SoA Q8_0, IQ4_XS × Q8_K */

/* 32 weights (16 index bytes, low nibbles first) turned into their signed levels by one swizzle each, against 32
 * int8 activations. */
static inline v128_t iq4_block(v128_t acc, v128_t table, const uint8_t *qs, const int8_t *x) {
    const v128_t v = wasm_v128_load(qs);
    acc = dot16(acc, wasm_i8x16_swizzle(table, wasm_v128_and(v, wasm_i8x16_splat(0x0F))), wasm_v128_load(x));
    return dot16(acc, wasm_i8x16_swizzle(table, wasm_u8x16_shr(v, 4)), wasm_v128_load(x + 16));
}

static inline int32_t hsum_i32(v128_t v) {
    return wasm_i32x4_extract_lane(v, 0) + wasm_i32x4_extract_lane(v, 1) + wasm_i32x4_extract_lane(v, 2) +
           wasm_i32x4_extract_lane(v, 3);
}

static float simd128_iq4_nl(const void *w, const void *x, int64_t n) {
    const block_iq4_nl *wb = w;
    const int8_t *xq = x;
    const float *xd = (const float *)(xq + n);
    const v128_t table = wasm_v128_load(iq4nl_values);
    v128_t acc = wasm_f32x4_splat(0.0f);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        const v128_t s = iq4_block(wasm_i32x4_splat(0), table, wb[b].qs, xq + 32 * b);
        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s),
                                                 wasm_f32x4_splat(fp16_to_fp32(wb[b].d) * xd[b])));
    }
    return hsum_f32(acc);
}

static float simd128_iq4_xs(const void *w, const void *x, int64_t n) {
    const block_iq4_xs *wb = w;
    const block_q8_k *xb = x;
    const v128_t table = wasm_v128_load(iq4nl_values);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        v128_t acc = wasm_i32x4_splat(0);
        for (int j = 0; j < 8; j++) {
            const v128_t s = iq4_block(wasm_i32x4_splat(0), table, wb[b].qs + 16 * j, xb[b].qs + 32 * j);
            acc = wasm_i32x4_add(acc, wasm_i32x4_mul(s, wasm_i32x4_splat(iq4xs_scale(&wb[b], j) - 32)));
        }
        sum += xb[b].d * fp16_to_fp32(wb[b].d) * (float)hsum_i32(acc);
    }
    return sum;
}

/* ---------------------------------------------------------------- Q4_K, Q6_K × Q8_K (as matmul_neon.c) */

static float simd128_q4_k(const void *w, const void *x, int64_t n) {
    const block_q4_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        v128_t acc = wasm_i32x4_splat(0);
        int summ = 0;
        for (int c = 0; c < 4; c++) { /* chunk c: 32 bytes; low nibbles are sub-block 2c, high nibbles 2c+1 */
            for (int half = 0; half < 2; half++) {
                const int j = 2 * c + half;
                uint8_t sc, m;
                kquant_scale_min(j, wb[b].scales, &sc, &m);
                v128_t s = wasm_i32x4_splat(0);
                for (int k = 0; k < 2; k++) {
                    const v128_t v = wasm_v128_load(wb[b].qs + 32 * c + 16 * k);
                    const v128_t q = half ? wasm_u8x16_shr(v, 4) : wasm_v128_and(v, wasm_i8x16_splat(0x0F));
                    s = dot16(s, q, wasm_v128_load(xb[b].qs + 32 * j + 16 * k));
                }
                acc = wasm_i32x4_add(acc, wasm_i32x4_mul(s, wasm_i32x4_splat(sc)));
                summ += m * (xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1]);
            }
        }
        sum += xb[b].d * (fp16_to_fp32(wb[b].d) * (float)hsum_i32(acc) - fp16_to_fp32(wb[b].dmin) * (float)summ);
    }
    return sum;
}

static float simd128_q6_k(const void *w, const void *x, int64_t n) {
    const block_q6_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        v128_t acc = wasm_i32x4_splat(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = wb[b].ql + 64 * h, *qh = wb[b].qh + 32 * h;
            /* piece k of 32 (k = 0..3): ql[l] or ql[l+32] (k odd), low nibble for k < 2, qh[l] bits 2k..2k+1 */
            for (int k = 0; k < 4; k++) {
                for (int part = 0; part < 2; part++) { /* 16 elements = one scale */
                    const v128_t lv = wasm_v128_load(ql + 32 * (k & 1) + 16 * part);
                    const v128_t hv = wasm_v128_load(qh + 16 * part);
                    const v128_t lo = k < 2 ? wasm_v128_and(lv, wasm_i8x16_splat(0x0F)) : wasm_u8x16_shr(lv, 4);
                    const v128_t hs = k < 3 ? wasm_i8x16_shl(hv, (uint32_t)(4 - 2 * k)) : wasm_u8x16_shr(hv, 2);
                    const v128_t hi = wasm_v128_and(hs, wasm_i8x16_splat(0x30));
                    const v128_t q = wasm_i8x16_sub(wasm_v128_or(lo, hi), wasm_i8x16_splat(32));
                    const int e = 128 * h + 32 * k + 16 * part;
                    const v128_t s = dot16(wasm_i32x4_splat(0), q, wasm_v128_load(xb[b].qs + e));
                    acc = wasm_i32x4_add(acc, wasm_i32x4_mul(s, wasm_i32x4_splat(wb[b].scales[e / 16])));
                }
            }
        }
        sum += xb[b].d * fp16_to_fp32(wb[b].d) * (float)hsum_i32(acc);
    }
    return sum;
}

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
SIMD128_TILE(iq4_nl)
SIMD128_TILE(iq4_xs)
SIMD128_TILE(q4_k)
SIMD128_TILE(q6_k)

void mm_isa_simd128(mm_isa *isa) {
    isa->name = "simd128";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_IQ4_NL] = (mm_kernel){tile_iq4_nl, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_IQ4_XS] = (mm_kernel){tile_iq4_xs, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_K] = (mm_kernel){tile_q4_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q6_K] = (mm_kernel){tile_q6_k, quantize_q8_k, q8_k_row_bytes, NULL};
}
#else
typedef int matmul_wasm_not_built; /* ISO C wants a declaration in every file */
#endif
