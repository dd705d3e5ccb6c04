/* matmul_iq4_avx512.c — AVX-512 VNNI tiles for IQ4_NL and IQ4_XS in the X16 layout (repack.c); plain rows use the
 * AVX2 tiles (matmul_iq4_avx2.c). Lane r of every accumulator is row r of the group, as in matmul_x16_avx512.c.
 *
 * One vpshufb turns 64 indices into levels. vpdpbusd wants its weights unsigned, so the table holds level + 128
 * (1..241; the product sums go straight to 32 bits, nothing saturates) and the 128 comes back through activation
 * sums: the per-32 sums of quantize_q8_0_soa_sums for IQ4_NL, Q8_K's bsums for IQ4_XS, whose 6-bit sub-block
 * scales then multiply exact int32 sub-block sums.
 *
 * Unlike the other X16 tiles, these do not prefetch in decode: the loop is light enough that the hardware
 * prefetchers and out-of-order loads keep the memory busy alone, and software prefetches made decode slower
 * (one thread, CPU time, Zen 4: IQ4_NL layers 1.1-1.2x, IQ4_XS 1.25-1.5x faster without them). */
#include "kernels/blocks.h"
#include "kernels/matmul_impl.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

INLINE __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The levels + 128 as unsigned bytes, in each 128-bit lane. */
INLINE __m512i shifted_table(void) {
    const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i *)iq4nl_values), _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(t);
}

INLINE __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* isum + the products of one index word (16 rows × 4 bytes) with the activation words at x (low nibbles) and x + 16
 * (high nibbles), weights shifted by +128. */
INLINE __m512i word_dot(__m512i isum, __m512i lo, __m512i hi, const int8_t *x) {
    isum = _mm512_dpbusd_epi32(isum, lo, bcast32(x));
    return _mm512_dpbusd_epi32(isum, hi, bcast32(x + 16));
}

INLINE void split_word(const uint8_t *p, __m512i table, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), q = _mm512_loadu_si512(p);
    *lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
    *hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
}

#define DEFINE_X16_TILE(name, NT)                                                                            \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        for (int64_t r = r0; r < r1; r += 16) {                                                             \
            int64_t i = i0;                                                                                 \
            for (; i + NT <= i1; i += NT) name##_micro(a, r, i, NT);                                        \
            for (; i < i1; i++) name##_micro(a, r, i, 1);                                                   \
        }                                                                                                   \
    }

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, const int NI, const __m512 *acc) {
    _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) _mm512_storeu_ps(a->y + (i + ii) * a->ldy + r, acc[ii]);
}

/* ---------------------------------------------------------------- IQ4_NL × Q8_0 (SoA with block sums) */

INLINE void iq4_nl_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {
    const int64_t nb = a->cols / 32;
    const size_t col_bytes = 16 * sizeof(block_iq4_nl);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const __m512i table = shifted_table();
    const int8_t *xq[8];
    const float *xd[8];
    const int32_t *xs[8];
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        xs[ii] = (const int32_t *)(xd[ii] + nb);
        acc[ii] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        const __m512 wd = f16x16(col);
        __m512i isum[8];
        _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) isum[ii] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            __m512i lo, hi;
            split_word(col + 32 + 64 * c, table, &lo, &hi);
            _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) isum[ii] = word_dot(isum[ii], lo, hi, xq[ii] + 32 * b + 4 * c);
        }
        _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
            const __m512i s = _mm512_sub_epi32(isum[ii], _mm512_set1_epi32((int32_t)((uint32_t)xs[ii][b] << 7)));
            acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, _mm512_set1_ps(xd[ii][b])), acc[ii]);
        }
    }
    store_rows(a, r, i, NI, acc);
}
DEFINE_X16_TILE(iq4_nl_x16, 8)

/* ---------------------------------------------------------------- IQ4_XS × Q8_K */

INLINE void iq4_xs_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_iq4_xs);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const __m512i table = shifted_table();
    const block_q8_k *xb[8];
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        const __m512 wd = f16x16(col);
        const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(col + 32)));
        const __m512i sl = _mm512_loadu_si512(col + 64);
        __m512i tot[8];
        _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) tot[ii] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            const __m512i ls = _mm512_sub_epi32(
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xF)),
                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4)),
                _mm512_set1_epi32(32));
            __m512i isum[8];
            _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
                const int16_t *bs = xb[ii][b].bsums;
                isum[ii] = _mm512_set1_epi32(-128 * (bs[2 * j] + bs[2 * j + 1]));
            }
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                __m512i lo, hi;
                split_word(col + 128 + 64 * (4 * j + c), table, &lo, &hi);
                _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++)
                    isum[ii] = word_dot(isum[ii], lo, hi, xb[ii][b].qs + 32 * j + 4 * c);
            }
            _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++)
                tot[ii] = _mm512_add_epi32(tot[ii], _mm512_mullo_epi32(isum[ii], ls));
        }
        _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++)
            acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[ii]), _mm512_mul_ps(wd, _mm512_set1_ps(xb[ii][b].d)), acc[ii]);
    }
    store_rows(a, r, i, NI, acc);
}
DEFINE_X16_TILE(iq4_xs_x16, 8)

/* ---------------------------------------------------------------- table */

void mm_isa_avx512_iq4(mm_isa *isa) {
    /* IQ4_NL reads activations with block sums; the AVX2 plain tile reads the same rows (it ignores the sums). */
    isa->k[TR_TYPE_IQ4_NL].quant = quantize_q8_0_soa_sums;
    isa->k[TR_TYPE_IQ4_NL].x_row_bytes = q8_0_soa_sums_row_bytes;
    isa->k[TR_TYPE_IQ4_NL].tile_x16 = tile_iq4_nl_x16;
    isa->k[TR_TYPE_IQ4_XS].tile_x16 = tile_iq4_xs_x16;
}
