/* matmul_neon.c — AArch64 NEON dot products, one weight row × one activation row each, run over the tile by
 * tile_by_dot. Byte products use sdot (vdotq_s32) where the compiler targets the dot-product extension and
 * widening multiplies otherwise. Nibble weights are re-centred to signed bytes (q - 8, q - 16, q - 32) before the
 * signed dot, so no offset correction is needed. Activations: SoA Q8_0 (see matmul_impl.h) and standard Q8_K. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <arm_neon.h>
#include <string.h>

static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

/* Bytes 0..15 of the result are 0x10 where bit j of the 16-bit word is set, else 0. */
static inline uint8x16_t fifth_bits(uint32_t bits16) {
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)bits16), vdup_n_u8((uint8_t)(bits16 >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

/* ---------------------------------------------------------------- Q8_0, Q4_0, Q5_0 × SoA Q8_0 */

enum { K_Q8_0, K_Q4_0, K_Q5_0 };

static inline float w32_dot(const void *w, const void *x, int64_t n, int kind) {
    const int8_t *xq = x;
    const float *xd = (const float *)(xq + n);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        int8x16_t w0, w1;
        uint16_t d;
        if (kind == K_Q8_0) {
            const block_q8_0 *q = (const block_q8_0 *)w + b;
            w0 = vld1q_s8(q->qs), w1 = vld1q_s8(q->qs + 16), d = q->d;
        } else {
            const uint8_t *qs;
            uint8x16_t lo, hi;
            int off = 8;
            if (kind == K_Q4_0) {
                const block_q4_0 *q = (const block_q4_0 *)w + b;
                qs = q->qs, d = q->d;
                const uint8x16_t v = vld1q_u8(qs);
                lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
            } else {
                const block_q5_0 *q = (const block_q5_0 *)w + b;
                uint32_t qh;
                memcpy(&qh, q->qh, 4);
                qs = q->qs, d = q->d, off = 16;
                const uint8x16_t v = vld1q_u8(qs);
                lo = vorrq_u8(vandq_u8(v, vdupq_n_u8(0x0F)), fifth_bits(qh & 0xFFFF));
                hi = vorrq_u8(vshrq_n_u8(v, 4), fifth_bits(qh >> 16));
            }
            w0 = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8((int8_t)off));
            w1 = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8((int8_t)off));
        }
        int32x4_t s = dot16(vdupq_n_s32(0), w0, vld1q_s8(xq + 32 * b));
        s = dot16(s, w1, vld1q_s8(xq + 32 * b + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(s), fp16_to_fp32(d) * xd[b]);
    }
    return vaddvq_f32(acc);
}

static float neon_q8_0(const void *w, const void *x, int64_t n) { return w32_dot(w, x, n, K_Q8_0); }
static float neon_q4_0(const void *w, const void *x, int64_t n) { return w32_dot(w, x, n, K_Q4_0); }
static float neon_q5_0(const void *w, const void *x, int64_t n) { return w32_dot(w, x, n, K_Q5_0); }

/* ---------------------------------------------------------------- K-quants × Q8_K */

static inline float kx_dot(const void *w, const void *x, int64_t n, int five) {
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *qs, *qh = NULL, *scales;
        uint16_t d, dmin;
        if (five) {
            const block_q5_k *q = (const block_q5_k *)w + b;
            qs = q->qs, qh = q->qh, scales = q->scales, d = q->d, dmin = q->dmin;
        } else {
            const block_q4_k *q = (const block_q4_k *)w + b;
            qs = q->qs, scales = q->scales, d = q->d, dmin = q->dmin;
        }
        int32x4_t acc = vdupq_n_s32(0);
        int summ = 0;
        for (int c = 0; c < 4; c++) {
            /* chunk c: 32 bytes; low nibbles are sub-block 2c, high nibbles 2c+1 */
            for (int half = 0; half < 2; half++) {
                const int j = 2 * c + half;
                uint8_t sc, m;
                kquant_scale_min(j, scales, &sc, &m);
                int32x4_t s = vdupq_n_s32(0);
                for (int k = 0; k < 2; k++) {
                    const uint8x16_t v = vld1q_u8(qs + 32 * c + 16 * k);
                    uint8x16_t q = half ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(0x0F));
                    if (five) {
                        const uint8x16_t h = vld1q_u8(qh + 16 * k);
                        q = vorrq_u8(q, vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << j))), vdupq_n_u8(0x10)));
                    }
                    s = dot16(s, vreinterpretq_s8_u8(q), vld1q_s8(xb[b].qs + 32 * j + 16 * k));
                }
                acc = vmlaq_n_s32(acc, s, sc);
                summ += m * (xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1]);
            }
        }
        sum += xb[b].d * (fp16_to_fp32(d) * (float)vaddvq_s32(acc) - fp16_to_fp32(dmin) * (float)summ);
    }
    return sum;
}

static float neon_q4_k(const void *w, const void *x, int64_t n) { return kx_dot(w, x, n, 0); }
static float neon_q5_k(const void *w, const void *x, int64_t n) { return kx_dot(w, x, n, 1); }

static float neon_q6_k(const void *w, const void *x, int64_t n) {
    const block_q6_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = wb[b].ql + 64 * h, *qh = wb[b].qh + 32 * h;
            /* piece k of 32 (k = 0..3): ql[l] or ql[l+32] (k odd), low nibble for k < 2, qh[l] bits 2k..2k+1 */
            for (int k = 0; k < 4; k++) {
                for (int part = 0; part < 2; part++) { /* 16 elements = one scale */
                    const uint8x16_t lv = vld1q_u8(ql + 32 * (k & 1) + 16 * part);
                    const uint8x16_t hv = vld1q_u8(qh + 16 * part);
                    const uint8x16_t lo = k < 2 ? vandq_u8(lv, vdupq_n_u8(0x0F)) : vshrq_n_u8(lv, 4);
                    const uint8x16_t hi = vandq_u8(vshlq_u8(hv, vdupq_n_s8((int8_t)(4 - 2 * k))), vdupq_n_u8(0x30));
                    const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(32));
                    const int e = 128 * h + 32 * k + 16 * part;
                    const int32x4_t s = dot16(vdupq_n_s32(0), q, vld1q_s8(xb[b].qs + e));
                    acc = vmlaq_n_s32(acc, s, wb[b].scales[e / 16]);
                }
            }
        }
        sum += xb[b].d * fp16_to_fp32(wb[b].d) * (float)vaddvq_s32(acc);
    }
    return sum;
}

/* ---------------------------------------------------------------- F32, F16, BF16 × F32 */

static float neon_f32(const void *w, const void *x, int64_t n) {
    const float *a = w, *b = x;
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) acc = vfmaq_f32(acc, vld1q_f32(a + k), vld1q_f32(b + k));
    float s = vaddvq_f32(acc);
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

static float neon_f16(const void *w, const void *x, int64_t n) {
    const uint16_t *a = w;
    const float *b = x;
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4)
        acc = vfmaq_f32(acc, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(a + k))), vld1q_f32(b + k));
    float s = vaddvq_f32(acc);
    for (; k < n; k++) s += fp16_to_fp32(a[k]) * b[k];
    return s;
}

static float neon_bf16(const void *w, const void *x, int64_t n) {
    const uint16_t *a = w;
    const float *b = x;
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4)
        acc = vfmaq_f32(acc, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(a + k), 16)), vld1q_f32(b + k));
    float s = vaddvq_f32(acc);
    for (; k < n; k++) s += bf16_to_fp32(a[k]) * b[k];
    return s;
}

/* ---------------------------------------------------------------- table */

#define NEON_TILE(name)                                                                                     \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        tile_by_dot(a, r0, r1, i0, i1, neon_##name);                                                        \
    }
NEON_TILE(f32)
NEON_TILE(f16)
NEON_TILE(bf16)
NEON_TILE(q8_0)
NEON_TILE(q4_0)
NEON_TILE(q5_0)
NEON_TILE(q4_k)
NEON_TILE(q5_k)
NEON_TILE(q6_k)


void mm_isa_neon(mm_isa *isa) {
    isa->name = "neon";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_F16] = (mm_kernel){tile_f16, NULL, NULL, NULL};
    isa->k[TR_TYPE_BF16] = (mm_kernel){tile_bf16, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_0] = (mm_kernel){tile_q5_0, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_K] = (mm_kernel){tile_q4_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_K] = (mm_kernel){tile_q5_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q6_K] = (mm_kernel){tile_q6_k, quantize_q8_k, q8_k_row_bytes, NULL};
}
