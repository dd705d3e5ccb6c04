/* delta_rule.c — the gated delta rule's step (delta_rule.h): the portable code, eight independent partial sums per dot
 * product (so compilers vectorize it without reassociating), and the choice of the SIMD code. */
#include "kernels/delta_rule.h"

#include <stddef.h>
#include <string.h>

#include "kernels/kernels.h"

static float sum8(const float a[8]) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }

void delta_rule_scalar(float *state, int32_t d, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, float *out) {
    for (int32_t r = 0; r < d; r++) {
        float *s = state + (size_t)r * d;
        float a[8] = {0};
        int32_t i = 0;
        for (; i + 8 <= d; i += 8)
            for (int j = 0; j < 8; j++) a[j] += (s[i + j] * decay) * k[i + j];
        float kd = sum8(a);
        for (; i < d; i++) kd += (s[i] * decay) * k[i];
        const float dr = (v[r] - kd) * beta;
        float b[8] = {0};
        for (i = 0; i + 8 <= d; i += 8)
            for (int j = 0; j < 8; j++) {
                const float x = s[i + j] * decay + k[i + j] * dr;
                s[i + j] = x;
                b[j] += x * q[i + j];
            }
        float o = sum8(b);
        for (; i < d; i++) {
            const float x = s[i] * decay + k[i] * dr;
            s[i] = x;
            o += x * q[i];
        }
        out[r] = o * scale;
    }
}

delta_rule_fn delta_rule_for(int32_t d) {
#if defined(__x86_64__)
    const char *isa = kernels_isa();
    if (d % 16 == 0 && strcmp(isa, "avx512") == 0) return delta_rule_avx512;
    if (d % 8 == 0 && (strcmp(isa, "avx512") == 0 || strcmp(isa, "avx2") == 0)) return delta_rule_avx2;
#endif
    (void)d;
    return delta_rule_scalar;
}
