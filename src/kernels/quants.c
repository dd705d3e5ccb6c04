/* quants.c — row conversion for the float and 32-element block types (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q8_1), and the dispatch of dequantize_row/quantize_row to them, to the K-quants (quants_k.c, Q2_K and Q3_K
 * in quants_k23.c) and to IQ4_NL / IQ4_XS (quants_iq4.c).
 *
 * Weight quantizers follow ggml's reference quantizers (deterministic model files). The activation quantizers
 * (Q8_0, Q8_1) follow what llama.cpp runs on x86: d = amax/127 stored as F16, q = round-half-even(x * 127/amax),
 * so products agree with it bit for bit in the integer part. */
#include "kernels/kernels.h"

#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"
#include "kernels/types.h"

#include <float.h>
#include <math.h>

/* ---------------------------------------------------------------- decoders */

static void dequant_q4_0(const block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_1) {
        const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (float)(b[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32_le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q5_0/Q5_1 element j (j < 16) takes bit j of qh, element j+16 takes bit j+16. */
static void unpack_q5(const uint8_t *qs, const uint8_t *qh4, int *q) {
    const uint32_t qh = load_u32_le(qh4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

static void dequant_q5_0(const block_q5_0 *b, float *y, int64_t nb) {
    int q[32];
    for (int64_t i = 0; i < nb; i++, y += QK5_0) {
        const float d = fp16_to_fp32(b[i].d);
        unpack_q5(b[i].qs, b[i].qh, q);
        for (int j = 0; j < 32; j++) y[j] = (float)(q[j] - 16) * d;
    }
}

static void dequant_q5_1(const block_q5_1 *b, float *y, int64_t nb) {
    int q[32];
    for (int64_t i = 0; i < nb; i++, y += QK5_1) {
        const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
        unpack_q5(b[i].qs, b[i].qh, q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
    }
}

static void dequant_q8_0(const block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void dequant_q8_1(const block_q8_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK8_1) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_1; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

tr_status dequantize_row(tr_type type, const void *src, float *dst, int64_t n) {
    if (!type_decodable(type)) return tr_fail(TR_ERR_UNSUPPORTED, "no decoder for tensor type %d", (int)type);
    const int64_t be = tr_type_block_elems(type);
    if (n < 0 || n % be != 0)
        return tr_fail(TR_ERR_ARG, "row of %lld elements is not a multiple of %s blocks", (long long)n,
                       tr_type_name(type));
    const int64_t nb = n / be;
    switch (type) {
    case TR_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case TR_TYPE_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(h[i]);
        break;
    }
    case TR_TYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(h[i]);
        break;
    }
    case TR_TYPE_Q4_0: dequant_q4_0(src, dst, nb); break;
    case TR_TYPE_Q4_1: dequant_q4_1(src, dst, nb); break;
    case TR_TYPE_Q5_0: dequant_q5_0(src, dst, nb); break;
    case TR_TYPE_Q5_1: dequant_q5_1(src, dst, nb); break;
    case TR_TYPE_Q8_0: dequant_q8_0(src, dst, nb); break;
    case TR_TYPE_Q8_1: dequant_q8_1(src, dst, nb); break;
    case TR_TYPE_Q2_K: dequant_q2_k(src, dst, nb); break;
    case TR_TYPE_Q3_K: dequant_q3_k(src, dst, nb); break;
    case TR_TYPE_Q4_K: dequant_q4_k(src, dst, nb); break;
    case TR_TYPE_Q5_K: dequant_q5_k(src, dst, nb); break;
    case TR_TYPE_Q6_K: dequant_q6_k(src, dst, nb); break;
    case TR_TYPE_Q8_K: dequant_q8_k(src, dst, nb); break;
    case TR_TYPE_IQ4_NL: dequant_iq4_nl(src, dst, nb); break;
    case TR_TYPE_IQ4_XS: dequant_iq4_xs(src, dst, nb); break;
    default: return tr_fail(TR_ERR_UNSUPPORTED, "no decoder for tensor type %s", tr_type_name(type));
    }
    return TR_OK;
}

/* ---------------------------------------------------------------- weight quantizers (ggml reference) */

/* The value of largest magnitude, with its sign. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void quant_q4_0(const float *x, block_q4_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        /* The extreme value maps to q = 0 (value -8*d), so d carries the opposite sign. */
        const float d = signed_absmax(x, QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void block_min_max(const float *x, int n, float *mn, float *mx) {
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *mn) *mn = x[j];
        if (x[j] > *mx) *mx = x[j];
    }
}

static void quant_q4_1(const float *x, block_q4_1 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_1) {
        float mn, mx;
        block_min_max(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        b[i].m = fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[j] - mn) * id + 0.5f), q1 = (int)((x[j + 16] - mn) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Packs 32 five-bit values into 16 nibble bytes and the 32-bit qh word (little-endian). */
static void pack_q5(const int *q, uint8_t *qs, uint8_t *qh4) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh4[k] = (uint8_t)(qh >> (8 * k));
}

static void quant_q5_0(const float *x, block_q5_0 *b, int64_t nb) {
    int q[32];
    for (int64_t i = 0; i < nb; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) {
            int v = (int)(x[j] * id + 16.5f);
            q[j] = v > 31 ? 31 : v;
        }
        pack_q5(q, b[i].qs, b[i].qh);
    }
}

static void quant_q5_1(const float *x, block_q5_1 *b, int64_t nb) {
    int q[32];
    for (int64_t i = 0; i < nb; i++, x += QK5_1) {
        float mn, mx;
        block_min_max(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        b[i].m = fp32_to_fp16(mn);
        for (int j = 0; j < 32; j++) {
            int v = (int)((x[j] - mn) * id + 0.5f);
            q[j] = v > 31 ? 31 : v;
        }
        pack_q5(q, b[i].qs, b[i].qh);
    }
}

/* ---------------------------------------------------------------- activation quantizers (llama.cpp on x86) */

static float block_absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

void quantize_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const float amax = block_absmax(x, QK8_0);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = fp32_to_fp16(amax / 127.0f);
        for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

void quantize_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float amax = block_absmax(x, QK8_1);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            b[i].qs[j] = (int8_t)nearest_int(x[j] * id);
            sum += b[i].qs[j];
        }
        b[i].d = fp32_to_fp16(d);
        b[i].s = fp32_to_fp16(d * (float)sum);
    }
}

void quantize_q8_0_soa(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)(qs + n);
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0, qs += QK8_0) {
        const float amax = block_absmax(x, QK8_0);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        d[i] = fp16_to_fp32(fp32_to_fp16(amax / 127.0f));
        for (int j = 0; j < QK8_0; j++) qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

void quantize_q8_1_soa(const float *x, void *dst, int64_t n) {
    int8_t *qs = dst;
    float *d = (float *)(qs + n), *sum = d + n / QK8_1;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1, qs += QK8_1) {
        const float amax = block_absmax(x, QK8_1);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int total = 0;
        for (int j = 0; j < QK8_1; j++) {
            qs[j] = (int8_t)nearest_int(x[j] * id);
            total += qs[j];
        }
        d[i] = fp16_to_fp32(fp32_to_fp16(amax / 127.0f));
        sum[i] = fp16_to_fp32(fp32_to_fp16(amax / 127.0f * (float)total));
    }
}

size_t q8_1_soa_row_bytes(int64_t cols) { return (size_t)cols + (size_t)(cols / QK8_1) * 2 * sizeof(float); }

size_t q8_0_soa_row_bytes(int64_t cols) {
    /* cols is a multiple of 32, so the float array after the quants stays 4-byte aligned when rows are. */
    return (size_t)cols + (size_t)(cols / QK8_0) * sizeof(float);
}

tr_status quantize_row(tr_type type, const float *src, void *dst, int64_t n) {
    const int64_t be = tr_type_block_elems(type);
    if (!type_decodable(type)) return tr_fail(TR_ERR_UNSUPPORTED, "no quantizer for tensor type %d", (int)type);
    if (n < 0 || n % be != 0)
        return tr_fail(TR_ERR_ARG, "row of %lld elements is not a multiple of %s blocks", (long long)n,
                       tr_type_name(type));
    const int64_t nb = n / be;
    switch (type) {
    case TR_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case TR_TYPE_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = fp32_to_fp16(src[i]);
        break;
    }
    case TR_TYPE_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = fp32_to_bf16(src[i]);
        break;
    }
    case TR_TYPE_Q4_0: quant_q4_0(src, dst, nb); break;
    case TR_TYPE_Q4_1: quant_q4_1(src, dst, nb); break;
    case TR_TYPE_Q5_0: quant_q5_0(src, dst, nb); break;
    case TR_TYPE_Q5_1: quant_q5_1(src, dst, nb); break;
    case TR_TYPE_Q8_0: quantize_q8_0(src, dst, n); break;
    case TR_TYPE_Q8_1: quantize_q8_1(src, dst, n); break;
    case TR_TYPE_Q2_K: quant_q2_k(src, dst, nb); break;
    case TR_TYPE_Q3_K: quant_q3_k(src, dst, nb); break;
    case TR_TYPE_Q4_K: quant_q4_k(src, dst, nb); break;
    case TR_TYPE_Q5_K: quant_q5_k(src, dst, nb); break;
    case TR_TYPE_Q6_K: quant_q6_k(src, dst, nb); break;
    case TR_TYPE_Q8_K: quantize_q8_k(src, dst, n); break;
    case TR_TYPE_IQ4_NL: quant_iq4_nl(src, dst, nb); break;
    case TR_TYPE_IQ4_XS: quant_iq4_xs(src, dst, nb); break;
    default: return tr_fail(TR_ERR_UNSUPPORTED, "no quantizer for tensor type %s", tr_type_name(type));
    }
    return TR_OK;
}
