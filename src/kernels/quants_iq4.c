/* quants_iq4.c — IQ4_NL and IQ4_XS: 4-bit indices into one fixed table of 16 non-linear levels (finer near zero,
 * where most weights are). IQ4_NL has one F16 scale per 32 weights; IQ4_XS has an F16 scale per 256 and a 6-bit
 * signed scale per 32 (4.25 bits per weight). Row decoders, weight quantizers and the portable dot products.
 *
 * The quantizer is ggml's (quantize_row_iq4_nl_impl without an importance matrix): per 32 weights, the scale that
 * maps the extreme weight to the table's end, then 15 trial scales around it, keeping the one with the smallest
 * squared error weighted by x² (the least-squares scale for the chosen indices); IQ4_XS then quantizes the eight
 * sub-block scales to 6 bits against the largest and re-picks the indices. Products pair IQ4_NL with Q8_0
 * activations and IQ4_XS with Q8_K, as llama.cpp's vec_dot_type does, and sum in integers per block. */
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <math.h>

const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ---------------------------------------------------------------- decoders */

void dequant_iq4_nl(const block_iq4_nl *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_NL) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * (float)iq4nl_values[b[i].qs[j] & 0xF];
            y[j + 16] = d * (float)iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

void dequant_iq4_xs(const block_iq4_xs *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(b[i].d);
        for (int s = 0; s < QK_K / 32; s++, y += 32) {
            const float dl = d * (float)(iq4xs_scale(&b[i], s) - 32);
            const uint8_t *qs = b[i].qs + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * (float)iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* ---------------------------------------------------------------- quantizers (ggml's, no importance matrix) */

/* Index of the level nearest to x (ggml's best_index_int8: ties go to the lower level). */
static int nearest_level(float x) {
    if (x <= iq4nl_values[0]) return 0;
    if (x >= iq4nl_values[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < iq4nl_values[mid]) hi = mid;
        else lo = mid;
    }
    return x - iq4nl_values[hi - 1] < iq4nl_values[hi] - x ? hi - 1 : hi;
}

/* Weighted least squares of x against the levels picked at inverse scale id: sum w q x and sum w q², w = x². */
static void trial(const float *x, float id, float *sumqx, float *sumq2) {
    *sumqx = *sumq2 = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float q = iq4nl_values[nearest_level(id * x[j])], w = x[j] * x[j];
        *sumqx += w * q * x[j];
        *sumq2 += w * q * q;
    }
}

/* The scale of 32 weights (0 for an all-zero block): first d = max / 127, then ggml's 15 trials putting the extreme
 * weight near the table's negative end, id = (t - 127) / max for t in [-7, 7]. Each picks the nearest levels and
 * gives the least-squares d = sumqx / sumq2 for them, kept when it lowers the weighted error. */
static float block_scale(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < 1e-15f) return 0.0f;
    float sumqx, sumq2;
    trial(x, 1.0f / (-max / iq4nl_values[0]), &sumqx, &sumq2);
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f, best = d * sumqx;
    for (int t = -7; t <= 7; t++) {
        trial(x, (float)(t + iq4nl_values[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Packs 32 level indices as IQ4_NL/IQ4_XS nibbles: byte j = element j | element j+16 << 4. */
static void pack_levels(const float *x, float scale, uint8_t *qs) {
    const float id = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(nearest_level(id * x[j]) | nearest_level(id * x[j + 16]) << 4);
}

void quant_iq4_nl(const float *x, block_iq4_nl *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_NL) {
        const float d = block_scale(x);
        b[i].d = fp32_to_fp16(d);
        pack_levels(x, d, b[i].qs);
    }
}

void quant_iq4_xs(const float *x, block_iq4_xs *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float scales[8], max_scale = 0.0f, amax_scale = 0.0f;
        for (int s = 0; s < 8; s++) {
            scales[s] = block_scale(x + 32 * s);
            if (fabsf(scales[s]) > amax_scale) {
                amax_scale = fabsf(scales[s]);
                max_scale = scales[s];
            }
        }
        /* The largest sub-block scale becomes -32 (the 6-bit range is [-32, 31]). */
        const float d = -max_scale / 32.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int s = 0; s < 8; s++) {
            int l = nearest_int(id * scales[s]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            pack_levels(x + 32 * s, d * (float)l, b[i].qs + 16 * s);
            l += 32;
            b[i].scales_l[s / 2] |= (uint8_t)((l & 0xF) << (4 * (s % 2)));
            b[i].scales_h |= (uint16_t)((l >> 4) << (2 * s));
        }
    }
}

/* ---------------------------------------------------------------- dot products (scalar reference) */

/* Sum over 32 weights (16 index bytes) times 32 int8 activations. */
static int levels_dot(const uint8_t *qs, const int8_t *y) {
    int sum = 0;
    for (int j = 0; j < 16; j++) sum += iq4nl_values[qs[j] & 0xF] * y[j] + iq4nl_values[qs[j] >> 4] * y[j + 16];
    return sum;
}

float dot_iq4_nl(const void *w, const void *x, int64_t n) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; i++)
        s += (float)levels_dot(a[i].qs, b[i].qs) * (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d));
    return s;
}

float dot_iq4_xs(const void *w, const void *x, int64_t n) {
    const block_iq4_xs *a = w;
    const block_q8_k *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* |sum| <= 8 * 32 * 32 * 127 * 127: the whole super-block sums exactly in int32. */
        int sumi = 0;
        for (int j = 0; j < 8; j++) sumi += (iq4xs_scale(&a[i], j) - 32) * levels_dot(a[i].qs + 16 * j, b[i].qs + 32 * j);
        s += fp16_to_fp32(a[i].d) * b[i].d * (float)sumi;
    }
    return s;
}
