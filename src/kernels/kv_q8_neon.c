/* kv_q8_neon.c — the Q8_0 KV kernels of kv_q8.h for 32-value blocks on baseline ARMv8 NEON: as kv_q8_avx2.c with
 * 4-lane vectors (a block is eight): 4 query rows per scores tile, 4 rows over half a block per mix tile. */
#include <arm_neon.h>

#include "kernels/fp16.h"
#include "kernels/kv_q8.h"

#define INLINE static inline __attribute__((always_inline))
#define QK KVQ8_QK
#define BLOCK_BYTES KVQ8_BLOCK_BYTES

INLINE float scale_of(const uint8_t *b) { return fp16_to_fp32(kvq8_scale_bits(b)); }

INLINE void widen(const uint8_t *b, float32x4_t v[8]) {
    for (int h = 0; h < 2; h++) {
        const int8x16_t q = vld1q_s8((const int8_t *)(b + 2 + 16 * h));
        const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
        v[4 * h + 0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
        v[4 * h + 1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
        v[4 * h + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
        v[4 * h + 3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
    }
}

INLINE void scores_tile(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld, int32_t r0,
                        const int NR) {
    const int64_t nb = K->hd / QK;
    int32_t valid[4];
    for (int rr = 0; rr < NR; rr++) valid[rr] = kvq8_row_valid(c, r0 + rr);
    for (int32_t p = 0; p < valid[NR - 1]; p++) {
        const uint8_t *b = K->data + (size_t)p * K->stride;
        float32x4_t acc[4];
        for (int rr = 0; rr < NR; rr++) acc[rr] = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < nb; j++, b += BLOCK_BYTES) {
            float32x4_t kv[8];
            widen(b, kv);
            const float d = scale_of(b);
            for (int k = 0; k < 8; k++) kv[k] = vmulq_n_f32(kv[k], d);
            for (int rr = 0; rr < NR; rr++) {
                const float *qr = q + (size_t)(r0 + rr) * K->hd + j * QK;
                for (int k = 0; k < 8; k++) acc[rr] = vfmaq_f32(acc[rr], vld1q_f32(qr + 4 * k), kv[k]);
            }
        }
        for (int rr = 0; rr < NR; rr++)
            if (p < valid[rr]) scores[(size_t)(r0 + rr) * ld + p] = vaddvq_f32(acc[rr]);
    }
}

static void scores_neon(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld) {
    int32_t r = 0;
    for (; r + 4 <= c.rows; r += 4) scores_tile(K, q, c, scores, ld, r, 4);
    for (; r < c.rows; r++) scores_tile(K, q, c, scores, ld, r, 1);
}

/* 16 output values (half a block) for NR rows: 4 accumulators per row. */
INLINE void mix_tile(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out, int32_t r0,
                     const int NR) {
    const int32_t n = kvq8_row_valid(c, r0 + NR - 1); /* the tile's longest row; P is zero past shorter ones */
    for (int64_t h = 0; h < V->hd / 16; h++) {
        float32x4_t acc[4][4];
        for (int rr = 0; rr < NR; rr++)
            for (int k = 0; k < 4; k++) acc[rr][k] = vdupq_n_f32(0.0f);
        const uint8_t *b = V->data + (h / 2) * BLOCK_BYTES;
        const int off = 2 + 16 * (int)(h % 2);
        for (int32_t p = 0; p < n; p++, b += V->stride) {
            const int8x16_t q = vld1q_s8((const int8_t *)(b + off));
            const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
            const float d = scale_of(b);
            const float32x4_t v[4] = {vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d),
                                      vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d),
                                      vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d),
                                      vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d)};
            for (int rr = 0; rr < NR; rr++) {
                const float w = P[(size_t)(r0 + rr) * ldp + p];
                for (int k = 0; k < 4; k++) acc[rr][k] = vfmaq_n_f32(acc[rr][k], v[k], w);
            }
        }
        for (int rr = 0; rr < NR; rr++)
            for (int k = 0; k < 4; k++) vst1q_f32(out + (size_t)(r0 + rr) * V->hd + h * 16 + 4 * k, acc[rr][k]);
    }
}

static void mix_neon(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out) {
    int32_t r = 0;
    for (; r + 4 <= c.rows; r += 4) mix_tile(V, P, ldp, c, out, r, 4);
    switch (c.rows - r) {
    case 3: mix_tile(V, P, ldp, c, out, r, 3); break;
    case 2: mix_tile(V, P, ldp, c, out, r, 2); break;
    case 1: mix_tile(V, P, ldp, c, out, r, 1); break;
    default: break;
    }
}

const kvq8_kernels kvq8_neon = {scores_neon, mix_neon};
