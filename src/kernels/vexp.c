/* vexp.c — vexp.h's scalar loops (the reference) and the choice of path: the AVX-512 one when the CPU has it and,
 * checked once on a sweep of inputs covering every exponent, its expf equals this C library's bit for bit. */
#include "kernels/vexp.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels.h"

void vexp_silu_mul_scalar(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void vexp_softmax_scalar(float *x, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void vexp_softmax_rows_scalar(float *x, int64_t stride, int k, int64_t n, float scale) {
    for (int r = 0; r < k; r++) {
        float *y = x + (size_t)r * (size_t)stride;
        for (int64_t i = 0; i < n; i++) y[i] *= scale;
        vexp_softmax_scalar(y, n);
    }
}

void vexp_round_f16_scalar(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void vexp_table_glu_scalar(const float *table, float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[fp32_to_fp16(x)];
        gate[i] = g * up[i];
    }
}

#if defined(__x86_64__)
static vexp_consts consts;
static bool use_avx512;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void consts_init(vexp_consts *c) {
    for (int i = 0; i < 32; i++) { /* 2^(i/32) rounded to double (from long double), less i/32 in the exponent */
        const double d = (double)exp2l((long double)i / 32);
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        u -= (uint64_t)i << 47;
        memcpy(&c->tab[i], &u, sizeof u);
    }
    c->invln2n = 0x1.71547652b82fep+0 * 32;
    c->shift = 0x1.8p+52;
    c->c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
    c->c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
    c->c2 = 0x1.62e42ff0c52d6p-1 / 32;
}

/* Every 4099th float from -104 to 89 (all exponents, varied mantissas) and the edges: the vector expf must equal
 * expf on each. */
static bool avx512_matches(void) {
    enum { CHUNK = 256 };
    float x[CHUNK], y[CHUNK];
    int k = 0;
    for (float v = -104.0f; v <= 89.0f;) {
        x[k++] = v;
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        u = v < 0 ? (u > 0x80000000u + 4099 ? u - 4099 : 0) : u + 4099;
        memcpy(&v, &u, sizeof v);
        if (k < CHUNK && v <= 89.0f) continue;
        while (k % 16) x[k++] = 0.0f;
        vexp_expf_avx512(&consts, x, y, k);
        for (int i = 0; i < k; i++)
            if (memcmp(&y[i], &(float){expf(x[i])}, sizeof(float)) != 0) return false;
        k = 0;
    }
    return true;
}

static void choose(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
        strcmp(kernels_isa(), "avx512") != 0)
        return;
    consts_init(&consts);
    use_avx512 = avx512_matches();
}

static bool avx512(void) {
    pthread_once(&once, choose);
    return use_avx512;
}
#else
static bool avx512(void) { return false; }
#endif

const char *vexp_path(void) { return avx512() ? "avx512" : "scalar"; }

void vexp_silu_mul(float *gate, const float *up, int64_t n) {
#if defined(__x86_64__)
    if (avx512()) {
        vexp_silu_mul_avx512(&consts, gate, up, n);
        return;
    }
#endif
    vexp_silu_mul_scalar(gate, up, n);
}

void vexp_softmax(float *x, int64_t n) {
#if defined(__x86_64__)
    if (avx512()) {
        vexp_softmax_avx512(&consts, x, n);
        return;
    }
#endif
    vexp_softmax_scalar(x, n);
}

void vexp_softmax_rows(float *x, int64_t stride, int k, int64_t n, float scale) {
#if defined(__x86_64__)
    if (avx512()) {
        vexp_softmax_rows_avx512(&consts, x, stride, k, n, scale);
        return;
    }
#endif
    vexp_softmax_rows_scalar(x, stride, k, n, scale);
}

void vexp_round_f16(float *x, int64_t n) {
#if defined(__x86_64__)
    if (avx512()) {
        vexp_round_f16_avx512(x, n);
        return;
    }
#endif
    vexp_round_f16_scalar(x, n);
}

void vexp_table_glu(const float *table, float *gate, const float *up, int64_t n) {
#if defined(__x86_64__)
    if (avx512()) {
        vexp_table_glu_avx512(table, gate, up, n);
        return;
    }
#endif
    vexp_table_glu_scalar(table, gate, up, n);
}
