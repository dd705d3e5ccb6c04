/* matmul_k23_neon.c — AArch64 NEON dot products for Q2_K and Q3_K × Q8_K, one weight row × one activation row each,
 * run over the tile by tile_by_dot (as matmul_neon.c). A 16-byte qs load of half n holds field j (bits 2j..2j+1)
 * of 16 elements of one sub-block; Q3_K's value gets its high bit from hmask and is re-centred to a signed byte
 * (q - 4), so the signed byte dot (sdot where the compiler targets the dot-product extension) needs no offset
 * correction. Q2_K's mins meet the Q8_K bsums. Each sub-block's int32 sum is scaled in integers, so a 256-block sums
 * exactly, as in llama.cpp. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <arm_neon.h>

static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

/* Field j of 16 qs bytes. */
static inline uint8x16_t field2(uint8x16_t v, int j) { return vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-2 * j))), vdupq_n_u8(3)); }

static float neon_q2_k(const void *w, const void *x, int64_t n) {
    const block_q2_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t acc = vdupq_n_s32(0);
        int summ = 0;
        for (int s = 0; s < 16; s++) {
            /* sub-block s = 8n + 2j + hl: qs[32n + 16hl ..] field j, activations 128n + 32j + 16hl */
            const int nn = s / 8, j = (s % 8) / 2, hl = s % 2;
            const uint8x16_t q = field2(vld1q_u8(wb[b].qs + 32 * nn + 16 * hl), j);
            const int32x4_t d = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(q), vld1q_s8(xb[b].qs + 128 * nn + 32 * j + 16 * hl));
            acc = vmlaq_n_s32(acc, d, wb[b].scales[s] & 0xF);
            summ += (wb[b].scales[s] >> 4) * xb[b].bsums[s];
        }
        sum += xb[b].d * (fp16_to_fp32(wb[b].d) * (float)vaddvq_s32(acc) - fp16_to_fp32(wb[b].dmin) * (float)summ);
    }
    return sum;
}

static float neon_q3_k(const void *w, const void *x, int64_t n) {
    const block_q3_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t acc = vdupq_n_s32(0);
        for (int s = 0; s < 16; s++) {
            const int nn = s / 8, j = (s % 8) / 2, hl = s % 2;
            const uint8x16_t lo = field2(vld1q_u8(wb[b].qs + 32 * nn + 16 * hl), j);
            const uint8x16_t hb = vtstq_u8(vld1q_u8(wb[b].hmask + 16 * hl), vdupq_n_u8((uint8_t)(1u << (4 * nn + j))));
            const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(hb, vdupq_n_u8(4)))), vdupq_n_s8(4));
            const int32x4_t d = dot16(vdupq_n_s32(0), q, vld1q_s8(xb[b].qs + 128 * nn + 32 * j + 16 * hl));
            acc = vmlaq_n_s32(acc, d, q3k_scale(wb[b].scales, s) - 32);
        }
        sum += xb[b].d * fp16_to_fp32(wb[b].d) * (float)vaddvq_s32(acc);
    }
    return sum;
}

static void tile_q2_k(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    tile_by_dot(a, r0, r1, i0, i1, neon_q2_k);
}
static void tile_q3_k(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    tile_by_dot(a, r0, r1, i0, i1, neon_q3_k);
}

void mm_isa_neon_k23(mm_isa *isa) {
    isa->k[TR_TYPE_Q2_K] = (mm_kernel){tile_q2_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q3_K] = (mm_kernel){tile_q3_k, quantize_q8_k, q8_k_row_bytes, NULL};
}
