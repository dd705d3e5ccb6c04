/* ops.c — the element-wise steps of the forward pass: RMSNorm, SwiGLU, residual add, softmax and RoPE
 * (SwiGLU and softmax by kernels/vexp: vectorized, bit for bit the scalar loops).
 *
 * They follow llama.cpp's arithmetic where it matters for agreement: RMSNorm and softmax sums accumulate in
 * double; RoPE angles are built as theta_base * theta_scale^i in float, with theta_scale = base^(-2/rope_dim),
 * divided by the optional per-pair frequency factors and multiplied by the linear scaling factor.
 */
#include <math.h>

#include "kernels/vexp.h"
#include "model/model_internal.h"

void rms_norm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void silu_mul(float *gate, const float *up, int64_t n) { vexp_silu_mul(gate, up, n); }

void add_vec(float *acc, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

void softmax_inplace(float *x, int64_t n) { vexp_softmax(x, n); }

void rope_tables(const tr_model *m, int32_t pos0, int32_t n, float *cos_out, float *sin_out) {
    const int32_t half = m->rope_dim / 2;
    const float theta_scale = powf(m->info.rope_theta, -2.0f / (float)m->rope_dim);
    for (int32_t t = 0; t < n; t++) {
        float theta = (float)(pos0 + t);
        for (int32_t i = 0; i < half; i++) {
            float angle = theta * m->rope_freq_scale;
            if (m->rope_freqs) angle = theta / m->rope_freqs[i] * m->rope_freq_scale;
            cos_out[(int64_t)t * half + i] = cosf(angle);
            sin_out[(int64_t)t * half + i] = sinf(angle);
            theta *= theta_scale;
        }
    }
}

void rope_apply(const tr_model *m, float *vec, int32_t n_heads, const float *cos_row, const float *sin_row) {
    const int32_t hd = m->info.head_dim, half = m->rope_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = vec + (int64_t)h * hd;
        for (int32_t i = 0; i < half; i++) {
            /* llama: adjacent pairs (2i, 2i+1); NEOX (qwen): (i, i + rope_dim/2). */
            const int32_t a = m->rope_neox ? i : 2 * i, b = m->rope_neox ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b], c = cos_row[i], s = sin_row[i];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}
