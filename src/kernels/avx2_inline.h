/* avx2_inline.h — the small AVX2 helpers the *_avx2.c matrix files share (included only by files built with
 * -mavx2 -mfma -mf16c): a horizontal sum, a 4-byte broadcast, one 32-byte half of an X16 layout word, and the row
 * tile that runs a micro-kernel over 4 tokens at a time. */
#ifndef TR_KERNELS_AVX2_INLINE_H
#define TR_KERNELS_AVX2_INLINE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/matmul_impl.h"

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* 32-byte half h of 64-byte word c of the region at base. */
INLINE __m256i half_word(const uint8_t *base, int c, int h) { return _mm256_loadu_si256((const __m256i *)(base + 64 * c + 32 * h)); }

/* tile_NAME: every row of [r0, r1) against the tokens [i0, i1), 4 tokens per call of NAME_micro, then the rest. */
#define DEFINE_ROW_TILE(name)                                                                                \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        for (int64_t r = r0; r < r1; r++) {                                                                 \
            int64_t i = i0;                                                                                 \
            for (; i + 4 <= i1; i += 4) name##_micro(a, r, i, 4);                                           \
            for (; i < i1; i++) name##_micro(a, r, i, 1);                                                   \
        }                                                                                                   \
    }

#endif /* TR_KERNELS_AVX2_INLINE_H */
