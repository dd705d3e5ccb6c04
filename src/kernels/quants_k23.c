/* quants_k23.c — Q2_K and Q3_K, the 2- and 3-bit K-quants: 256-element super-blocks of 16 sub-blocks of 16 with
 * small integer scales (Q2_K: 4-bit scale and 4-bit min per sub-block, 2.625 bits per weight; Q3_K: signed 6-bit
 * scale, 3.4375 bits per weight). Row decoders, weight quantizers and the portable dot products with Q8_K
 * activations (llama.cpp's vec_dot_type for both).
 *
 * The quantizers are ggml's reference ones, which llama-quantize runs when it has no importance matrix:
 * Q2_K fits each sub-block with make_qkx2_quants (a scale and a min, 16 trial scales, error weighted by |x|, sum of
 * absolute deviations), Q3_K with make_q3_quants (x²-weighted least squares, then up to 5 passes moving single
 * values where that lowers the error); then the sub-block scales are quantized against the largest and the values
 * re-picked. Written to give the same bytes as llama-quantize (checked by test_model_quants_llamacpp). */
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <math.h>

/* ---------------------------------------------------------------- decoders */

void dequant_q2_k(const block_q2_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            const int n = e / 128, j = (e % 128) / 32, l = e % 32, s = 8 * n + 2 * j + l / 16;
            const int q = (b[i].qs[32 * n + l] >> (2 * j)) & 3;
            *y++ = d * (float)(b[i].scales[s] & 0xF) * (float)q - dmin * (float)(b[i].scales[s] >> 4);
        }
    }
}

void dequant_q3_k(const block_q3_k *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(b[i].d);
        for (int e = 0; e < QK_K; e++) {
            const int n = e / 128, j = (e % 128) / 32, l = e % 32, s = 8 * n + 2 * j + l / 16;
            const int q = ((b[i].qs[32 * n + l] >> (2 * j)) & 3) - ((b[i].hmask[l] >> (4 * n + j)) & 1 ? 0 : 4);
            *y++ = d * (float)(q3k_scale(b[i].scales, s) - 32) * (float)q;
        }
    }
}

/* ---------------------------------------------------------------- quantizers (ggml's reference ones) */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Packs 256 2-bit values as Q2_K/Q3_K qs: bits 2j..2j+1 of qs[32n + l] hold L[128n + 32j + l]. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *p = L + 128 * n + l;
            qs[32 * n + l] = (uint8_t)(p[0] | (p[32] << 2) | (p[64] << 4) | (p[96] << 6));
        }
}

/* ggml's make_qkx2_quants for n = 16 values with weights |x|, nmax 3, trial scales (nmax - 0.5 + 0.1 is) / range
 * for is = 0..15 and absolute deviations: value ≈ scale * L - min, min >= 0 returned in *the_min. */
static float q2_fit(const float *x, uint8_t *L, float *the_min) {
    enum { N = 16, NMAX = 3, NSTEP = 15 };
    const float rmin = -0.5f, rdelta = 0.1f;
    float w[N], min = x[0], max = x[0], sum_w = fabsf(x[0]), sum_x = sum_w * x[0];
    w[0] = sum_w;
    for (int i = 1; i < N; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        w[i] = fabsf(x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, N);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = NMAX / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < N; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, NMAX);
        best_error += w[i] * fabsf(scale * L[i] + min - x[i]);
    }
    for (int is = 0; is <= NSTEP; is++) {
        uint8_t aux[N];
        iscale = (rmin + rdelta * (float)is + NMAX) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < N; i++) {
            const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, NMAX);
            aux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l; /* ggml's order: (w l) l */
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < N; i++) cur_error += w[i] * fabsf(this_scale * aux[i] + this_min - x[i]);
            if (cur_error < best_error) {
                memcpy(L, aux, N);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

void quant_q2_k(const float *x, block_q2_k *b, int64_t nb) {
    const float q4scale = 15.0f;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        uint8_t L[QK_K];
        float scales[16], mins[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = q2_fit(x + 16 * j, L + 16 * j, &mins[j]);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        /* As ggml: 4-bit scales and mins against the largest; stored as C stores an int into a byte. */
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) b[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            b[i].d = fp32_to_fp16(max_scale / q4scale);
        } else {
            memset(b[i].scales, 0, sizeof b[i].scales);
            b[i].d = fp32_to_fp16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++) b[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            b[i].dmin = fp32_to_fp16(max_min / q4scale);
        } else {
            b[i].dmin = fp32_to_fp16(0.0f);
        }
        /* Values re-picked against the stored scales (a sub-block whose scale rounds to 0 keeps its fit's). */
        for (int j = 0; j < 16; j++) {
            const float d = fp16_to_fp32(b[i].d) * (float)(b[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = fp16_to_fp32(b[i].dmin) * (float)(b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)clampi(nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, b[i].qs);
    }
}

/* ggml's make_q3_quants for 16 values, nmax 4, with its rmse search: L[i] in [0, 7] (value + 4), returns the
 * scale. An all-zero sub-block gives L = 0 and scale 0. */
static float q3_fit(const float *x, int8_t *L) {
    enum { N = 16, NMAX = 4 };
    float max = 0, amax = 0;
    for (int i = 0; i < N; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < 1e-15f) {
        memset(L, 0, N);
        return 0.0f;
    }
    const float iscale = -NMAX / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < N; i++) {
        const int l = clampi(nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < N; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int new_l = clampi(nearest_int(x[i] * sl2 / slx), -NMAX, NMAX - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < N; i++) L[i] = (int8_t)(L[i] + NMAX);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void quant_q3_k(const float *x, block_q3_k *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = q3_fit(x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(b[i].scales, 0, sizeof b[i].scales);
        if (max_scale != 0.0f) {
            /* the largest scale becomes -32; the 6-bit range is [-32, 31], stored + 32 (layout in blocks.h) */
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int l = clampi((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) b[i].scales[j] = (uint8_t)(l & 0xF);
                else b[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                b[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b[i].d = fp32_to_fp16(1 / iscale);
        } else {
            b[i].d = fp32_to_fp16(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = fp16_to_fp32(b[i].d) * (float)(q3k_scale(b[i].scales, j) - 32);
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* bit 2 of element 32k + l goes to bit k of hmask[l]; the low 2 bits to qs */
        uint8_t low[QK_K];
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        for (int e = 0; e < QK_K; e++) {
            if (L[e] > 3) b[i].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            low[e] = (uint8_t)(L[e] & 3);
        }
        pack_2bit(low, b[i].qs);
    }
}

/* ---------------------------------------------------------------- dot products (scalar reference) */

/* Sum of q * y over sub-block s (16 values) of a Q2_K/Q3_K qs, q the 2-bit field. */
static int low2_dot(const uint8_t *qs, int s, const int8_t *y) {
    const int n = s / 8, j = (s % 8) / 2, l0 = 16 * (s % 2);
    int sum = 0;
    for (int l = l0; l < l0 + 16; l++) sum += ((qs[32 * n + l] >> (2 * j)) & 3) * y[128 * n + 32 * j + l];
    return sum;
}

float dot_q2_k(const void *w, const void *x, int64_t n) {
    const block_q2_k *a = w;
    const block_q8_k *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            isum += (a[i].scales[j] & 0xF) * low2_dot(a[i].qs, j, b[i].qs);
            summ += (a[i].scales[j] >> 4) * b[i].bsums[j];
        }
        s += b[i].d * fp16_to_fp32(a[i].d) * (float)isum - b[i].d * fp16_to_fp32(a[i].dmin) * (float)summ;
    }
    return s;
}

float dot_q3_k(const void *w, const void *x, int64_t n) {
    const block_q3_k *a = w;
    const block_q8_k *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* q = low2 + 4 * hbit - 4: the -4 comes back through the sub-block's activation sum. */
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            const int nn = j / 8, jj = (j % 8) / 2, l0 = 16 * (j % 2);
            int hsum = 0;
            for (int l = l0; l < l0 + 16; l++)
                hsum += ((a[i].hmask[l] >> (4 * nn + jj)) & 1) * b[i].qs[128 * nn + 32 * jj + l];
            isum += (q3k_scale(a[i].scales, j) - 32) * (low2_dot(a[i].qs, j, b[i].qs) + 4 * hsum - 4 * b[i].bsums[j]);
        }
        s += fp16_to_fp32(a[i].d) * b[i].d * (float)isum;
    }
    return s;
}
