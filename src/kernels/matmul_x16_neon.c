/* matmul_x16_neon.c — AArch64 NEON tiles for the interleaved X16 layout (repack.c), Q4_0, Q8_0 and Q4_K. A 64-byte
 * word of the layout holds 4 bytes of each of 16 rows; NEON takes it as four 16-byte quarters of 4 rows, each
 * 32-bit lane one row. With the dot-product extension one sdot-by-element (vdotq_laneq_s32) multiplies the quarter
 * by one activation word for all 4 rows; without it, widening multiplies and pairwise adds keep each lane's four
 * products together. Q4_0 nibbles are re-centred (q - 8) so the signed dot needs no correction; Q4_K's minimums
 * come back through Q8_K's bsums. Activations: the plain NEON tiles' formats (SoA Q8_0, Q8_K). */
#if defined(__aarch64__)
#include "kernels/blocks.h"
#include "kernels/matmul_impl.h"

#include <arm_neon.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* acc[k] += sum of bytes 4k..4k+3 of w times the 4 bytes of word `lane` of x (lane must be a constant). */
#if defined(__ARM_FEATURE_DOTPROD)
#define DOT_LANE(acc, w, x, lane) vdotq_laneq_s32((acc), (w), (x), (lane))
#else
#define DOT_LANE(acc, w, x, lane) dot_words((acc), (w), vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), (lane))))
/* Products of signed bytes fit int16; each pair of them too (|x| <= 127 for Q8_0, weights below 16 for Q4_K). */
INLINE int32x4_t dot_words(int32x4_t acc, int8x16_t w, int8x16_t x) {
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(x)), hi = vmull_high_s8(w, x);
    return vpadalq_s16(acc, vpaddq_s16(lo, hi));
}
#endif

INLINE float32x4_t f16x4(const uint8_t *p) {
    uint16_t h[4];
    memcpy(h, p, 8);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

#define DEFINE_X16_TILE(name)                                                                                \
    static void name##_x4(const mm_args *a, int64_t r, int64_t i, int q) { name##_micro(a, r, i, q, 4); }  \
    static void name##_x1(const mm_args *a, int64_t r, int64_t i, int q) { name##_micro(a, r, i, q, 1); }  \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        for (int64_t r = r0; r < r1; r += 16)                                                               \
            for (int q = 0; q < 4; q++) {                                                                   \
                int64_t i = i0;                                                                             \
                for (; i + 4 <= i1; i += 4) name##_x4(a, r, i, q);                                          \
                for (; i < i1; i++) name##_x1(a, r, i, q);                                                  \
            }                                                                                               \
    }

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, int q, const int NI, const float32x4_t *acc) {
    for (int ii = 0; ii < NI; ii++) vst1q_f32(a->y + (i + ii) * a->ldy + r + 4 * q, acc[ii]);
}

/* ---------------------------------------------------------------- Q4_0, Q8_0 × SoA Q8_0 */

INLINE void w32_x16_micro(const mm_args *a, int64_t r, int64_t i, int q, const int NI, const bool q8) {
    const int64_t nb = a->cols / 32;
    const size_t col_bytes = q8 ? 16 * sizeof(block_q8_0) : 16 * sizeof(block_q4_0);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8_t *xq[4];
    const float *xd[4];
    float32x4_t acc[4];
    for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        acc[ii] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        const float32x4_t wd = f16x4(col + 8 * q);
        int32x4_t is[4];
        int8x16_t x0[4], x1[4]; /* elements 0-15 and 16-31 of the block: words 0-3 and 4-7 */
        for (int ii = 0; ii < NI; ii++) {
            is[ii] = vdupq_n_s32(0);
            x0[ii] = vld1q_s8(xq[ii] + 32 * b);
            x1[ii] = vld1q_s8(xq[ii] + 32 * b + 16);
        }
        if (q8) {
#define Q8_WORD(c, xv, lane)                                                                                   \
    do {                                                                                                       \
        const int8x16_t w = vld1q_s8((const int8_t *)col + 32 + 64 * (c) + 16 * q);                          \
        for (int ii = 0; ii < NI; ii++) is[ii] = DOT_LANE(is[ii], w, xv[ii], lane);                            \
    } while (0)
            Q8_WORD(0, x0, 0); Q8_WORD(1, x0, 1); Q8_WORD(2, x0, 2); Q8_WORD(3, x0, 3);
            Q8_WORD(4, x1, 0); Q8_WORD(5, x1, 1); Q8_WORD(6, x1, 2); Q8_WORD(7, x1, 3);
#undef Q8_WORD
        } else {
            const int8x16_t eight = vdupq_n_s8(8);
#define Q4_WORD(c)                                                                                             \
    do {                                                                                                       \
        const uint8x16_t v = vld1q_u8(col + 32 + 64 * (c) + 16 * q);                                          \
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), eight);             \
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);                         \
        for (int ii = 0; ii < NI; ii++) {                                                                      \
            is[ii] = DOT_LANE(is[ii], lo, x0[ii], c);                                                          \
            is[ii] = DOT_LANE(is[ii], hi, x1[ii], c);                                                          \
        }                                                                                                      \
    } while (0)
            Q4_WORD(0); Q4_WORD(1); Q4_WORD(2); Q4_WORD(3);
#undef Q4_WORD
        }
        for (int ii = 0; ii < NI; ii++)
            acc[ii] = vfmaq_f32(acc[ii], vcvtq_f32_s32(is[ii]), vmulq_n_f32(wd, xd[ii][b]));
    }
    store_rows(a, r, i, q, NI, acc);
}

static inline __attribute__((always_inline)) void q4_0_x16_micro(const mm_args *a, int64_t r, int64_t i, int q, const int NI) {
    w32_x16_micro(a, r, i, q, NI, false);
}
static inline __attribute__((always_inline)) void q8_0_x16_micro(const mm_args *a, int64_t r, int64_t i, int q, const int NI) {
    w32_x16_micro(a, r, i, q, NI, true);
}
DEFINE_X16_TILE(q4_0_x16)
DEFINE_X16_TILE(q8_0_x16)

/* ---------------------------------------------------------------- Q4_K × Q8_K */

/* Byte j of every 32-bit lane as an int32. */
#define LANE_BYTE(v, j) vreinterpretq_s32_u32(vandq_u32((j) ? vshrq_n_u32((v), 8 * ((j) ? (j) : 1)) : (v), vdupq_n_u32(0xFF)))

INLINE void q4_k_x16_micro(const mm_args *a, int64_t r, int64_t i, int q, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_q4_k);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    float32x4_t acc[4];
    for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = vdupq_n_f32(0.0f);
    }
    const uint32x4_t m3f = vdupq_n_u32(0x3F3F3F3F), m0f = vdupq_n_u32(0x0F0F0F0F), m30 = vdupq_n_u32(0x30303030);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes, *qs = col + 256;
        const float32x4_t wd = f16x4(col + 8 * q), wdmin = f16x4(col + 32 + 8 * q);
        const uint32x4_t u0 = vld1q_u32((const uint32_t *)(col + 64 + 16 * q));
        const uint32x4_t u1 = vld1q_u32((const uint32_t *)(col + 128 + 16 * q));
        const uint32x4_t u2 = vld1q_u32((const uint32_t *)(col + 192 + 16 * q));
        uint32x4_t sc[2], mn[2]; /* sub-blocks 0-3 and 4-7, one byte each per lane */
        sc[0] = vandq_u32(u0, m3f), mn[0] = vandq_u32(u1, m3f);
        sc[1] = vorrq_u32(vandq_u32(u2, m0f), vandq_u32(vshrq_n_u32(u0, 2), m30));
        mn[1] = vorrq_u32(vandq_u32(vshrq_n_u32(u2, 4), m0f), vandq_u32(vshrq_n_u32(u1, 2), m30));
        int32x4_t tot[4], mins[4];
        for (int ii = 0; ii < NI; ii++) tot[ii] = mins[ii] = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            int32x4_t slo[4], shi[4];
            int8x16_t xv[4][4]; /* chunk c's 64 activations: low nibbles read 0-31, high nibbles 32-63 */
            for (int ii = 0; ii < NI; ii++) {
                slo[ii] = shi[ii] = vdupq_n_s32(0);
                for (int k = 0; k < 4; k++) xv[ii][k] = vld1q_s8(xb[ii][b].qs + 64 * c + 16 * k);
            }
#define K4_WORD(w)                                                                                             \
    do {                                                                                                       \
        const uint8x16_t v = vld1q_u8(qs + 64 * (8 * c + (w)) + 16 * q);                                      \
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F)));                              \
        const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));                                           \
        for (int ii = 0; ii < NI; ii++) {                                                                      \
            slo[ii] = DOT_LANE(slo[ii], lo, xv[ii][(w) / 4], (w) % 4);                                        \
            shi[ii] = DOT_LANE(shi[ii], hi, xv[ii][2 + (w) / 4], (w) % 4);                                    \
        }                                                                                                      \
    } while (0)
            K4_WORD(0); K4_WORD(1); K4_WORD(2); K4_WORD(3); K4_WORD(4); K4_WORD(5); K4_WORD(6); K4_WORD(7);
#undef K4_WORD
            /* sub-blocks 2c and 2c+1: byte (2c)%4 and (2c+1)%4 of the c/2-th scale word */
            const uint32x4_t scw = sc[c / 2], mnw = mn[c / 2];
            const int32x4_t sc0 = c % 2 ? LANE_BYTE(scw, 2) : LANE_BYTE(scw, 0);
            const int32x4_t sc1 = c % 2 ? LANE_BYTE(scw, 3) : LANE_BYTE(scw, 1);
            const int32x4_t mn0 = c % 2 ? LANE_BYTE(mnw, 2) : LANE_BYTE(mnw, 0);
            const int32x4_t mn1 = c % 2 ? LANE_BYTE(mnw, 3) : LANE_BYTE(mnw, 1);
            for (int ii = 0; ii < NI; ii++) {
                const int16_t *bs = xb[ii][b].bsums + 4 * c;
                tot[ii] = vmlaq_s32(vmlaq_s32(tot[ii], slo[ii], sc0), shi[ii], sc1);
                mins[ii] = vmlaq_n_s32(vmlaq_n_s32(mins[ii], mn0, bs[0] + bs[1]), mn1, bs[2] + bs[3]);
            }
        }
        for (int ii = 0; ii < NI; ii++) {
            const float xd = xb[ii][b].d;
            acc[ii] = vfmaq_f32(acc[ii], vcvtq_f32_s32(tot[ii]), vmulq_n_f32(wd, xd));
            acc[ii] = vfmsq_f32(acc[ii], vcvtq_f32_s32(mins[ii]), vmulq_n_f32(wdmin, xd));
        }
    }
    store_rows(a, r, i, q, NI, acc);
}
DEFINE_X16_TILE(q4_k_x16)

void mm_isa_neon_x16(mm_isa *isa) {
    isa->k[TR_TYPE_Q4_0].tile_x16 = tile_q4_0_x16;
    isa->k[TR_TYPE_Q8_0].tile_x16 = tile_q8_0_x16;
    isa->k[TR_TYPE_Q4_K].tile_x16 = tile_q4_k_x16;
}
#endif
