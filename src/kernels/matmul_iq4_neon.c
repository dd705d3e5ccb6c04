/* matmul_iq4_neon.c — AArch64 NEON products for IQ4_NL (× SoA Q8_0 activations) and IQ4_XS (× Q8_K): dot products
 * for plain rows (run over the tile by tile_by_dot, as matmul_neon.c) and tiles for the X16 layout (repack.c, read
 * as matmul_x16_neon.c reads Q4_0: each 16-byte quarter of a layout word is 4 rows, one 32-bit lane per row).
 *
 * One tbl (vqtbl1q_s8) turns 16 indices into their signed levels, so products are plain signed byte dots: sdot where
 * the compiler targets the dot-product extension, widening multiplies otherwise. Those stay exact: a level times a
 * Q8 activation is at most 127 · 128 in magnitude, so even two of them summed fit int16. IQ4_XS's 6-bit sub-block
 * scales (-32..31) multiply exact int32 sub-block sums, so a whole 256-block sums in int32 as in llama.cpp. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <arm_neon.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

INLINE int8x16_t levels_table(void) { return vld1q_s8(iq4nl_values); }

/* The levels of the low and high nibbles of 16 index bytes. */
INLINE int8x16_t levels_lo(int8x16_t table, uint8x16_t v) { return vqtbl1q_s8(table, vandq_u8(v, vdupq_n_u8(0x0F))); }
INLINE int8x16_t levels_hi(int8x16_t table, uint8x16_t v) { return vqtbl1q_s8(table, vshrq_n_u8(v, 4)); }

/* acc[k] += sum of the products of bytes 4k..4k+3 of a and b. */
INLINE int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b)), hi = vmull_high_s8(a, b);
    return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

/* acc[k] += sum of bytes 4k..4k+3 of w times the 4 bytes of word `lane` of x (lane must be a constant). */
#if defined(__ARM_FEATURE_DOTPROD)
#define DOT_LANE(acc, w, x, lane) vdotq_laneq_s32((acc), (w), (x), (lane))
#else
#define DOT_LANE(acc, w, x, lane) dot16((acc), (w), vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), (lane))))
#endif

/* ---------------------------------------------------------------- plain rows */

/* 32 weights (16 index bytes) against 32 int8 activations. */
INLINE int32x4_t block_dot(int32x4_t acc, int8x16_t table, const uint8_t *qs, const int8_t *x) {
    const uint8x16_t v = vld1q_u8(qs);
    acc = dot16(acc, levels_lo(table, v), vld1q_s8(x));
    return dot16(acc, levels_hi(table, v), vld1q_s8(x + 16));
}

static float neon_iq4_nl(const void *w, const void *x, int64_t n) {
    const block_iq4_nl *wb = w;
    const int8_t *xq = x;
    const float *xd = (const float *)(xq + n);
    const int8x16_t table = levels_table();
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        const int32x4_t s = block_dot(vdupq_n_s32(0), table, wb[b].qs, xq + 32 * b);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), fp16_to_fp32(wb[b].d) * xd[b]);
    }
    return vaddvq_f32(acc);
}

static float neon_iq4_xs(const void *w, const void *x, int64_t n) {
    const block_iq4_xs *wb = w;
    const block_q8_k *xb = x;
    const int8x16_t table = levels_table();
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            const int32x4_t s = block_dot(vdupq_n_s32(0), table, wb[b].qs + 16 * j, xb[b].qs + 32 * j);
            acc = vmlaq_n_s32(acc, s, iq4xs_scale(&wb[b], j) - 32);
        }
        sum += xb[b].d * fp16_to_fp32(wb[b].d) * (float)vaddvq_s32(acc);
    }
    return sum;
}

static void tile_iq4_nl(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    tile_by_dot(a, r0, r1, i0, i1, neon_iq4_nl);
}
static void tile_iq4_xs(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    tile_by_dot(a, r0, r1, i0, i1, neon_iq4_xs);
}

/* ---------------------------------------------------------------- X16 layout: quarter q (rows 4q..4q+3) of a group */

INLINE float32x4_t f16x4(const uint8_t *p) {
    uint16_t h[4];
    memcpy(h, p, 8);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, int q, const int NI, const float32x4_t *acc) {
    for (int ii = 0; ii < NI; ii++) vst1q_f32(a->y + (i + ii) * a->ldy + r + 4 * q, acc[ii]);
}

/* is[ii] += one index word (4 bytes of 4 rows) of 32 weights' block: its low nibbles against activation word c of
 * x0 (elements 4c..4c+3), its high nibbles against word c of x1 (elements 16+4c..). */
#define IQ4_WORD(p, c, x0, x1)                                                                                 \
    do {                                                                                                       \
        const uint8x16_t v = vld1q_u8(p);                                                                     \
        const int8x16_t lo = levels_lo(table, v), hi = levels_hi(table, v);                                    \
        for (int ii = 0; ii < NI; ii++) {                                                                      \
            is[ii] = DOT_LANE(is[ii], lo, x0[ii], c);                                                          \
            is[ii] = DOT_LANE(is[ii], hi, x1[ii], c);                                                          \
        }                                                                                                      \
    } while (0)

/* IQ4_NL block column: d[16] F16 | qs word c (0-3) of row r at 32 + 64c + 4r. */
INLINE void iq4_nl_x16_micro(const mm_args *a, int64_t r, int64_t i, int q, const int NI) {
    const int64_t nb = a->cols / 32;
    const size_t col_bytes = 16 * sizeof(block_iq4_nl);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8x16_t table = levels_table();
    const int8_t *xq[4];
    const float *xd[4];
    float32x4_t acc[4];
    for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        acc[ii] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes, *qs = col + 32 + 16 * q;
        int32x4_t is[4];
        int8x16_t x0[4], x1[4];
        for (int ii = 0; ii < NI; ii++) {
            is[ii] = vdupq_n_s32(0);
            x0[ii] = vld1q_s8(xq[ii] + 32 * b);
            x1[ii] = vld1q_s8(xq[ii] + 32 * b + 16);
        }
        IQ4_WORD(qs, 0, x0, x1);
        IQ4_WORD(qs + 64, 1, x0, x1);
        IQ4_WORD(qs + 128, 2, x0, x1);
        IQ4_WORD(qs + 192, 3, x0, x1);
        const float32x4_t wd = f16x4(col + 8 * q);
        for (int ii = 0; ii < NI; ii++) acc[ii] = vfmaq_f32(acc[ii], vcvtq_f32_s32(is[ii]), vmulq_n_f32(wd, xd[ii][b]));
    }
    store_rows(a, r, i, q, NI, acc);
}

/* IQ4_XS: sub-block j's scale of each row lane (4 bits from its scales_l word sl, 2 from its scales_h sh), minus 32. */
INLINE int32x4_t xs_scales(uint32x4_t sl, uint32x4_t sh, int j) {
    const uint32x4_t lo4 = vandq_u32(vshlq_u32(sl, vdupq_n_s32(-4 * j)), vdupq_n_u32(0xF));
    const uint32x4_t hi2 = vandq_u32(vshlq_u32(sh, vdupq_n_s32(-2 * j)), vdupq_n_u32(3));
    return vsubq_s32(vreinterpretq_s32_u32(vorrq_u32(lo4, vshlq_n_u32(hi2, 4))), vdupq_n_s32(32));
}

/* IQ4_XS block column: d[16] F16 | scales_h[16] u16 at 32 | scales_l (4 bytes) of row r at 64 + 4r | qs word w
 * (0-31) of row r at 128 + 64w + 4r, words 4j..4j+3 being sub-block j. */
INLINE void iq4_xs_x16_micro(const mm_args *a, int64_t r, int64_t i, int q, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_iq4_xs);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8x16_t table = levels_table();
    const block_q8_k *xb[4];
    float32x4_t acc[4];
    for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        uint16_t h[4];
        memcpy(h, col + 32 + 8 * q, 8);
        const uint32x4_t sh = vmovl_u16(vld1_u16(h)), sl = vld1q_u32((const uint32_t *)(col + 64 + 16 * q));
        int32x4_t tot[4];
        for (int ii = 0; ii < NI; ii++) tot[ii] = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            const int32x4_t ls = xs_scales(sl, sh, j);
            const uint8_t *qs = col + 128 + 64 * 4 * j + 16 * q;
            int32x4_t is[4];
            int8x16_t x0[4], x1[4];
            for (int ii = 0; ii < NI; ii++) {
                is[ii] = vdupq_n_s32(0);
                x0[ii] = vld1q_s8(xb[ii][b].qs + 32 * j);
                x1[ii] = vld1q_s8(xb[ii][b].qs + 32 * j + 16);
            }
            IQ4_WORD(qs, 0, x0, x1);
            IQ4_WORD(qs + 64, 1, x0, x1);
            IQ4_WORD(qs + 128, 2, x0, x1);
            IQ4_WORD(qs + 192, 3, x0, x1);
            for (int ii = 0; ii < NI; ii++) tot[ii] = vmlaq_s32(tot[ii], is[ii], ls);
        }
        const float32x4_t wd = f16x4(col + 8 * q);
        for (int ii = 0; ii < NI; ii++) acc[ii] = vfmaq_f32(acc[ii], vcvtq_f32_s32(tot[ii]), vmulq_n_f32(wd, xb[ii][b].d));
    }
    store_rows(a, r, i, q, NI, acc);
}
#undef IQ4_WORD

/* ---------------------------------------------------------------- X16 layout, decode: one token, all 16 rows
 *
 * One pass over a group for all four quarters, so the weights stream from memory once and steadily (four quarter
 * passes would fetch a group in the first and compute on cached bytes in the other three: the AVX2 tiles measured
 * 1.3-1.5x from the same change). is[q] and acc[q] hold quarter q. */

/* is[q] += index word c of all 16 rows at p (quarter q at p + 16q) against activation word c of x0 (low nibbles)
 * and x1 (high nibbles). */
#define IQ4_WORD16(p, c, x0, x1)                                                                               \
    do {                                                                                                       \
        for (int q = 0; q < 4; q++) {                                                                          \
            const uint8x16_t v = vld1q_u8((p) + 16 * q);                                                      \
            is[q] = DOT_LANE(is[q], levels_lo(table, v), x0, c);                                               \
            is[q] = DOT_LANE(is[q], levels_hi(table, v), x1, c);                                               \
        }                                                                                                      \
    } while (0)

INLINE void store_group(const mm_args *a, int64_t r, int64_t i, const float32x4_t *acc) {
    for (int q = 0; q < 4; q++) vst1q_f32(a->y + i * a->ldy + r + 4 * q, acc[q]);
}

static void iq4_nl_x16_decode(const mm_args *a, int64_t r, int64_t i) {
    const int64_t nb = a->cols / 32;
    const size_t col_bytes = 16 * sizeof(block_iq4_nl);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8x16_t table = levels_table();
    const int8_t *xq = (const int8_t *)(a->x + (size_t)i * a->x_stride);
    const float *xd = (const float *)(xq + a->cols);
    float32x4_t acc[4];
    for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes, *qs = col + 32;
        const int8x16_t x0 = vld1q_s8(xq + 32 * b), x1 = vld1q_s8(xq + 32 * b + 16);
        int32x4_t is[4];
        for (int q = 0; q < 4; q++) is[q] = vdupq_n_s32(0);
        IQ4_WORD16(qs, 0, x0, x1);
        IQ4_WORD16(qs + 64, 1, x0, x1);
        IQ4_WORD16(qs + 128, 2, x0, x1);
        IQ4_WORD16(qs + 192, 3, x0, x1);
        for (int q = 0; q < 4; q++) acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(is[q]), vmulq_n_f32(f16x4(col + 8 * q), xd[b]));
    }
    store_group(a, r, i, acc);
}

static void iq4_xs_x16_decode(const mm_args *a, int64_t r, int64_t i) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_iq4_xs);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8x16_t table = levels_table();
    const block_q8_k *xb = (const block_q8_k *)(a->x + (size_t)i * a->x_stride);
    float32x4_t acc[4];
    for (int q = 0; q < 4; q++) acc[q] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        uint16_t h[16];
        memcpy(h, col + 32, sizeof h);
        uint32x4_t sh[4], sl[4];
        int32x4_t tot[4];
        for (int q = 0; q < 4; q++) {
            sh[q] = vmovl_u16(vld1_u16(h + 4 * q));
            sl[q] = vld1q_u32((const uint32_t *)(col + 64 + 16 * q));
            tot[q] = vdupq_n_s32(0);
        }
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = col + 128 + 64 * 4 * j;
            const int8x16_t x0 = vld1q_s8(xb[b].qs + 32 * j), x1 = vld1q_s8(xb[b].qs + 32 * j + 16);
            int32x4_t is[4];
            for (int q = 0; q < 4; q++) is[q] = vdupq_n_s32(0);
            IQ4_WORD16(qs, 0, x0, x1);
            IQ4_WORD16(qs + 64, 1, x0, x1);
            IQ4_WORD16(qs + 128, 2, x0, x1);
            IQ4_WORD16(qs + 192, 3, x0, x1);
            for (int q = 0; q < 4; q++) tot[q] = vmlaq_s32(tot[q], is[q], xs_scales(sl[q], sh[q], j));
        }
        for (int q = 0; q < 4; q++) acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(tot[q]), vmulq_n_f32(f16x4(col + 8 * q), xb[b].d));
    }
    store_group(a, r, i, acc);
}
#undef IQ4_WORD16

/* tile_NAME: each group of 16 rows of [r0, r1): the tokens in fours, a quarter of the group per pass, then the
 * rest one by one with the whole group in one pass. */
#define DEFINE_X16_TILE(name)                                                                                \
    static void name##_x4(const mm_args *a, int64_t r, int64_t i, int q) { name##_micro(a, r, i, q, 4); }  \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        const int64_t i4 = i0 + (i1 - i0) / 4 * 4;                                                          \
        for (int64_t r = r0; r < r1; r += 16) {                                                             \
            for (int q = 0; q < 4; q++)                                                                     \
                for (int64_t i = i0; i < i4; i += 4) name##_x4(a, r, i, q);                                 \
            for (int64_t i = i4; i < i1; i++) name##_decode(a, r, i);                                       \
        }                                                                                                   \
    }
DEFINE_X16_TILE(iq4_nl_x16)
DEFINE_X16_TILE(iq4_xs_x16)

/* ---------------------------------------------------------------- table */

void mm_isa_neon_iq4(mm_isa *isa) {
    isa->k[TR_TYPE_IQ4_NL] = (mm_kernel){tile_iq4_nl, quantize_q8_0_soa, q8_0_soa_row_bytes, tile_iq4_nl_x16};
    isa->k[TR_TYPE_IQ4_XS] = (mm_kernel){tile_iq4_xs, quantize_q8_k, q8_k_row_bytes, tile_iq4_xs_x16};
}
