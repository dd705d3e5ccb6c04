/* kv_q8.c — Q8_0 KV rows: quantizing a position's K or V row as it is stored, decoding one (tests), and the
 * portable attention kernels over such rows, plus the choice of the SIMD ones (kv_q8_avx2.c, kv_q8_avx512.c,
 * kv_q8_neon.c) for the instruction set the matrix products run on. Only 32-value blocks (every real model's
 * head_dim) have SIMD versions; narrower blocks are for the tiny demo models and stay scalar. */
#include "kernels/kv_q8.h"

#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"

int kvq8_block_for(int64_t head_dim) {
    if (head_dim <= 0) return 0;
    return head_dim % 32 == 0 ? 32 : head_dim % 16 == 0 ? 16 : head_dim % 8 == 0 ? 8 : 0;
}

int kvq8_rot_k(int64_t head_dim) {
    if (head_dim <= 0 || head_dim % 64 != 0) return 0;
    int run = 64;
    while (head_dim % (2 * run) == 0) run *= 2;
    return run;
}

int kvq8_rot_v(int64_t head_dim) { return head_dim > 0 && head_dim % 64 == 0 ? 64 : 0; }

/* The fast Walsh-Hadamard transform (butterflies a+b, a-b in Sylvester order), scaled by 1/sqrt(run) as llama.cpp's
 * matrix is. */
void kvq8_rotate(float *x, int64_t n, int run) {
    const float scale = 1.0f / sqrtf((float)run);
    for (int64_t base = 0; base < n; base += run) {
        float *v = x + base;
        for (int h = 1; h < run; h *= 2)
            for (int i = 0; i < run; i += 2 * h)
                for (int j = i; j < i + h; j++) {
                    const float a = v[j], b = v[j + h];
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
        for (int i = 0; i < run; i++) v[i] *= scale;
    }
}

size_t kvq8_row_bytes(int64_t n, int block) { return (size_t)(n / block) * (sizeof(uint16_t) + (size_t)block); }

/* d = amax/127 kept as F16, q = round-half-even(x * 127/amax): the values llama.cpp's x86 quantizer writes into
 * its Q8_0 cache. */
void kvq8_quantize_row(const float *x, void *dst, int64_t n, int block) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n; i += block, x += block, out += 2 + block) {
        float amax = 0.0f;
        for (int j = 0; j < block; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const uint16_t d = fp32_to_fp16(amax / 127.0f);
        memcpy(out, &d, sizeof d);
        for (int j = 0; j < block; j++) out[2 + j] = (uint8_t)(int8_t)nearest_int(x[j] * id);
    }
}

static float block_scale(const uint8_t *b) {
    uint16_t d;
    memcpy(&d, b, sizeof d);
    return fp16_to_fp32(d);
}

void kvq8_dequantize_row(const void *src, float *dst, int64_t n, int block) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i += block, b += 2 + block) {
        const float d = block_scale(b);
        for (int j = 0; j < block; j++) dst[i + j] = d * (float)(int8_t)b[2 + j];
    }
}

void kvq8_scores_scalar(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld) {
    for (int32_t r = 0; r < c.rows; r++) {
        const float *qr = q + (size_t)r * K->hd;
        const int32_t valid = kvq8_row_valid(c, r);
        for (int32_t p = 0; p < valid; p++) {
            const uint8_t *b = K->data + (size_t)p * K->stride;
            float sum = 0.0f;
            for (int64_t i = 0; i < K->hd; i += K->block, b += 2 + K->block) {
                float part = 0.0f;
                for (int j = 0; j < K->block; j++) part += qr[i + j] * (float)(int8_t)b[2 + j];
                sum += part * block_scale(b);
            }
            scores[(size_t)r * ld + p] = sum;
        }
    }
}

void kvq8_mix_scalar(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out) {
    for (int32_t r = 0; r < c.rows; r++) {
        float *o = out + (size_t)r * V->hd;
        const float *w = P + (size_t)r * ldp;
        memset(o, 0, (size_t)V->hd * sizeof *o);
        const int32_t valid = kvq8_row_valid(c, r);
        for (int32_t p = 0; p < valid; p++) {
            const uint8_t *b = V->data + (size_t)p * V->stride;
            for (int64_t i = 0; i < V->hd; i += V->block, b += 2 + V->block) {
                const float s = w[p] * block_scale(b);
                for (int j = 0; j < V->block; j++) o[i + j] += s * (float)(int8_t)b[2 + j];
            }
        }
    }
}

static const kvq8_kernels scalar = {kvq8_scores_scalar, kvq8_mix_scalar};

static const kvq8_kernels *kernels_for(int block) {
    if (block != 32) return &scalar;
    const char *isa = kernels_isa();
#if defined(__x86_64__)
    if (strcmp(isa, "avx512") == 0) return &kvq8_avx512;
    if (strcmp(isa, "avx2") == 0) return &kvq8_avx2;
#elif defined(__aarch64__)
    if (strcmp(isa, "neon") == 0) return &kvq8_neon;
#endif
    (void)isa;
    return &scalar;
}

void kvq8_scores(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld) {
    kernels_for(K->block)->scores(K, q, c, scores, ld);
}

void kvq8_mix(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out) {
    kernels_for(V->block)->mix(V, P, ldp, c, out);
}
