/* quants_k.c — the K-quant row converters (Q4_K, Q5_K, Q6_K, and the Q8_K activation format): 256-element super
 * blocks split into sub-blocks with their own small integer scales.
 *
 * The weight quantizers are deliberately simple (per-sub-block min/max, then the sub-block scales quantized against
 * the super-block scale): they make valid, reasonable synthetic models, not the best possible ones. Q8_K follows
 * ggml's quantize_row_q8_K_ref exactly, since llama.cpp quantizes activations with it. */
#include "kernels/fp16.h"
#include "kernels/quants.h"

#include <math.h>

/* ---------------------------------------------------------------- decoders */

void dequant_q4_k(const block_q4_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        /* Four chunks of 64: sub-block 2c in the low nibbles of 32 bytes, 2c+1 in the high nibbles. */
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            kquant_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kquant_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
            for (int l = 0; l < 32; l++) *y++ = d0 * (float)(q[l] & 0xF) - mm0;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] >> 4) - mm1;
        }
    }
}

void dequant_q5_k(const block_q5_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            kquant_scale_min(2 * c, b[i].scales, &sc0, &m0);
            kquant_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
            const uint8_t u0 = (uint8_t)(1u << (2 * c)), u1 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) *y++ = d0 * (float)((q[l] & 0xF) + (b[i].qh[l] & u0 ? 16 : 0)) - mm0;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] >> 4) + (b[i].qh[l] & u1 ? 16 : 0)) - mm1;
        }
    }
}

/* Q6_K element e of a 128-element half: l = e % 32, and e / 32 picks the nibble (ql[l] or ql[l+32], low or high)
 * and the qh bit pair (bits 0-1, 2-3, 4-5, 6-7 of qh[l]); scale = scales[8h + e/16]. */
static int q6_value(const uint8_t *ql, const uint8_t *qh, int e) {
    const int l = e % 32, part = e / 32;
    const uint8_t lo = part & 1 ? ql[l + 32] : ql[l];
    const int nib = part < 2 ? (lo & 0xF) : (lo >> 4);
    return (nib | (((qh[l] >> (2 * part)) & 3) << 4)) - 32;
}

void dequant_q6_k(const block_q6_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            for (int e = 0; e < 128; e++) *y++ = d * (float)b[i].scales[8 * h + e / 16] * (float)q6_value(ql, qh, e);
        }
    }
}

void dequant_q8_k(const block_q8_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < QK_K; j++) *y++ = b[i].d * (float)b[i].qs[j];
}

/* ---------------------------------------------------------------- weight quantizers */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Q4_K/Q5_K scale packing, the inverse of kquant_scale_min. */
static void pack_scale_min(const uint8_t *sc, const uint8_t *m, uint8_t *out) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* Shared by Q4_K (qmax 15) and Q5_K (qmax 31): per sub-block of 32, value ≈ scale*q - min with min >= 0; scales
 * and mins become 6-bit multiples of d and dmin. Writes d, dmin, the packed scales and q[256]. */
static void quant_kx(const float *x, int qmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t *scales, uint8_t *q) {
    float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 8; s++) {
        float mn = 0.0f, mx = 0.0f; /* min is clamped to <= 0 as in ggml, so 0 stays representable */
        for (int l = 0; l < 32; l++) {
            mn = fminf(mn, x[32 * s + l]);
            mx = fmaxf(mx, x[32 * s + l]);
        }
        scale[s] = (mx - mn) / (float)qmax;
        mins[s] = -mn;
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, mins[s]);
    }
    const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    *d_out = fp32_to_fp16(d);
    *dmin_out = fp32_to_fp16(dmin);
    const float dq = fp16_to_fp32(*d_out), dminq = fp16_to_fp32(*dmin_out);
    uint8_t sc[8], m[8];
    for (int s = 0; s < 8; s++) {
        sc[s] = (uint8_t)(dq > 0 ? clampi(nearest_int(scale[s] / dq), 0, 63) : 0);
        m[s] = (uint8_t)(dminq > 0 ? clampi(nearest_int(mins[s] / dminq), 0, 63) : 0);
    }
    pack_scale_min(sc, m, scales);
    for (int s = 0; s < 8; s++) {
        const float ds = dq * sc[s], ms = dminq * m[s];
        for (int l = 0; l < 32; l++)
            q[32 * s + l] = (uint8_t)(ds > 0 ? clampi(nearest_int((x[32 * s + l] + ms) / ds), 0, qmax) : 0);
    }
}

void quant_q4_k(const float *x, block_q4_k *b, int64_t nb) {
    uint8_t q[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quant_kx(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

void quant_q5_k(const float *x, block_q5_k *b, int64_t nb) {
    uint8_t q[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quant_kx(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

void quant_q6_k(const float *x, block_q6_k *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float scale[16], max_scale = 0.0f;
        for (int s = 0; s < 16; s++) {
            float amax = 0.0f;
            for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * s + l]));
            scale[s] = amax / 31.0f; /* q in [-31, 31] of the [-32, 31] range */
            max_scale = fmaxf(max_scale, scale[s]);
        }
        const float d = max_scale / 127.0f;
        b[i].d = fp32_to_fp16(d);
        const float dq = fp16_to_fp32(b[i].d);
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int s = 0; s < 16; s++) {
            const int sc = dq > 0 ? clampi(nearest_int(scale[s] / dq), -128, 127) : 0;
            b[i].scales[s] = (int8_t)sc;
            const float ds = dq * (float)sc;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * s + l;
                const int q = (ds > 0 ? clampi(nearest_int(x[e] / ds), -32, 31) : 0) + 32;
                /* Inverse of q6_value: half h, position l32 in it, part selects nibble and qh bit pair. */
                const int h = e / 128, r = e % 128, l32 = r % 32, part = r / 32;
                uint8_t *ql = b[i].ql + 64 * h + l32 + (part & 1 ? 32 : 0);
                *ql |= (uint8_t)(part < 2 ? (q & 0xF) : (q & 0xF) << 4);
                b[i].qh[32 * h + l32] |= (uint8_t)((q >> 4) << (2 * part));
            }
        }
    }
}

/* ---------------------------------------------------------------- Q8_K activations (ggml's reference) */

void quantize_q8_k(const float *x, void *dst, int64_t n) {
    block_q8_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* -127/max maps the extreme value to -127 exactly; the opposite end may round to 128, hence the clamp. */
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            b[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b[i].qs[16 * g + l];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1.0f / iscale;
    }
}
