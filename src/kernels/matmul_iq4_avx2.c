/* matmul_iq4_avx2.c — AVX2 tiles for IQ4_NL (× Q8_0 activations, SoA) and IQ4_XS (× Q8_K): plain rows and the X16
 * layout (repack.c). A weight index becomes its level with one vpshufb against the 16-entry table, so the levels
 * are signed bytes; vpmaddubsw wants one unsigned operand, so products use the sign trick (|w| × sign(x, w), the
 * table holding no zero) and pair sums stay below 2 · 127 · 127, never saturating. IQ4_XS's 6-bit sub-block scales
 * (-32..31) multiply those pair sums in vpmaddwd, so a whole 256-block sums exactly in int32 as in llama.cpp. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/avx2_inline.h"
#include "kernels/matmul_impl.h"

#include <immintrin.h>
#include <string.h>


INLINE __m256i levels_table(void) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4nl_values)); }

/* 16-bit pair sums of w × x for signed w (no zero) and x: |w| × (x with w's sign). */
INLINE __m256i pairs_signed(__m256i w, __m256i x) { return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }

/* 32 levels of 16 index bytes in element order: low nibbles (elements 0-15), then high nibbles (16-31). */
INLINE __m256i levels32(const uint8_t *qs, __m256i table) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(table, idx);
}

/* ---------------------------------------------------------------- plain rows: 1 row × up to 4 tokens */

INLINE void iq4_nl_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {
    const int64_t nb = a->cols / 32;
    const uint8_t *w = a->w + (size_t)r * a->w_stride;
    const __m256i table = levels_table(), ones = _mm256_set1_epi16(1);
    const int8_t *xq[4];
    const float *xd[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        acc[ii] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const block_iq4_nl *blk = (const block_iq4_nl *)w + b;
        const __m256i lv = levels32(blk->qs, table);
        const float dw = fp16_to_fp32(blk->d);
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
            const __m256i p = _mm256_madd_epi16(pairs_signed(lv, _mm256_loadu_si256((const __m256i *)(xq[ii] + 32 * b))), ones);
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xd[ii][b]), acc[ii]);
        }
    }
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) a->y[(i + ii) * a->ldy + r] = hsum8(acc[ii]);
}

INLINE void iq4_xs_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const uint8_t *w = a->w + (size_t)r * a->w_stride;
    const __m256i table = levels_table();
    const block_q8_k *xb[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const block_iq4_xs *blk = (const block_iq4_xs *)w + b;
        __m256i isum[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i lv = levels32(blk->qs + 16 * j, table);
            const __m256i sc = _mm256_set1_epi16((short)(iq4xs_scale(blk, j) - 32));
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(xb[ii][b].qs + 32 * j));
                isum[ii] = _mm256_add_epi32(isum[ii], _mm256_madd_epi16(pairs_signed(lv, x), sc));
            }
        }
        const float dw = fp16_to_fp32(blk->d);
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[ii]), _mm256_set1_ps(dw * xb[ii][b].d), acc[ii]);
    }
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) a->y[(i + ii) * a->ldy + r] = hsum8(acc[ii]);
}

DEFINE_ROW_TILE(iq4_nl)
DEFINE_ROW_TILE(iq4_xs)

/* ---------------------------------------------------------------- X16 layout
 *
 * Prefill (4 tokens at a time): 8 rows (half h of a group) per pass, so 4 tokens' accumulators fit the registers.
 * Decode (one token): both halves in one pass. Two half passes would stream a group's bytes from memory in the
 * first and compute on cached bytes in the second, leaving the memory idle half the time; one pass keeps the
 * stream steady (1.3-1.5x the decode rate of two passes at one thread, measured in CPU time on a Zen 4). */

/* Decode: ask for the bytes a few block columns ahead (as matmul_x16_avx2.c): this compute-heavy loop runs too few
 * block columns ahead on its own to keep the memory busy. */
INLINE void prefetch_col(const uint8_t *col, size_t col_bytes) {
    size_t ahead = 4 * col_bytes;
    ahead = ahead < 2048 ? 2048 : ahead > 8192 ? 8192 : ahead;
    for (size_t off = 0; off < col_bytes; off += 64) _mm_prefetch((const char *)col + ahead + off, _MM_HINT_T0);
}

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, int h, const int NI, const __m256 *acc) {
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) _mm256_storeu_ps(a->y + (i + ii) * a->ldy + r + 8 * h, acc[ii]);
}

/* One index word (4 bytes of each of 8 rows) against the activation words at x (low nibbles: elements 4c..4c+3)
 * and x + 16 (high nibbles): per row lane, the pair sums times mul (vpmaddwd), both halves added in int32. */
INLINE __m256i word_dot(__m256i q, __m256i table, const int8_t *x, __m256i mul) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
    const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    return _mm256_add_epi32(_mm256_madd_epi16(pairs_signed(lo, bcast32(x)), mul),
                            _mm256_madd_epi16(pairs_signed(hi, bcast32(x + 16)), mul));
}

/* IQ4_XS: sub-block j's 6-bit scale of each row lane, minus 32, in both 16-bit halves of the lane (a vpmaddwd
 * multiplier). sl: the rows' scales_l words; sh: their scales_h, one per 32-bit lane. */
INLINE __m256i xs_scale_mul(__m256i sl, __m256i sh, int j) {
    const __m256i ls = _mm256_sub_epi32(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0xF)),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4)),
        _mm256_set1_epi32(32));
    return _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(ls, 16));
}

/* ---------------------------------------------------------------- IQ4_NL × SoA Q8_0 */

INLINE void iq4_nl_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) {
    const int64_t nb = a->cols / 32;
    const size_t col_bytes = 16 * sizeof(block_iq4_nl);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const __m256i table = levels_table(), ones = _mm256_set1_epi16(1);
    const int8_t *xq[4];
    const float *xd[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        acc[ii] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(col + 16 * h)));
        __m256i isum[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            const __m256i q = half_word(col + 32, c, h);
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
                isum[ii] = _mm256_add_epi32(isum[ii], word_dot(q, table, xq[ii] + 32 * b + 4 * c, ones));
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[ii]), _mm256_mul_ps(wd, _mm256_set1_ps(xd[ii][b])), acc[ii]);
    }
    store_rows(a, r, i, h, NI, acc);
}

static void iq4_nl_x16_decode(const mm_args *a, int64_t r, int64_t i) {
    const int64_t nb = a->cols / 32;
    const size_t col_bytes = 16 * sizeof(block_iq4_nl);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const __m256i table = levels_table(), ones = _mm256_set1_epi16(1);
    const int8_t *xq = (const int8_t *)(a->x + (size_t)i * a->x_stride);
    const float *xd = (const float *)(xq + a->cols);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        prefetch_col(col, col_bytes);
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
            for (int h = 0; h < 2; h++)
                isum[h] = _mm256_add_epi32(isum[h], word_dot(half_word(col + 32, c, h), table, xq + 32 * b + 4 * c, ones));
        const __m256 dx = _mm256_set1_ps(xd[b]);
        for (int h = 0; h < 2; h++) {
            const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(col + 16 * h)));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(wd, dx), acc[h]);
        }
    }
    store_rows(a, r, i, 0, 1, &acc[0]);
    store_rows(a, r, i, 1, 1, &acc[1]);
}

/* ---------------------------------------------------------------- IQ4_XS × Q8_K */

INLINE void iq4_xs_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_iq4_xs);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const __m256i table = levels_table();
    const block_q8_k *xb[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(col + 16 * h)));
        const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(col + 32 + 16 * h)));
        const __m256i sl = _mm256_loadu_si256((const __m256i *)(col + 64 + 32 * h));
        __m256i isum[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i mul = xs_scale_mul(sl, sh, j);
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                const __m256i q = half_word(col + 128, 4 * j + c, h);
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
                    isum[ii] = _mm256_add_epi32(isum[ii], word_dot(q, table, xb[ii][b].qs + 32 * j + 4 * c, mul));
            }
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[ii]), _mm256_mul_ps(wd, _mm256_set1_ps(xb[ii][b].d)), acc[ii]);
    }
    store_rows(a, r, i, h, NI, acc);
}

static void iq4_xs_x16_decode(const mm_args *a, int64_t r, int64_t i) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_iq4_xs);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const __m256i table = levels_table();
    const block_q8_k *xb = (const block_q8_k *)(a->x + (size_t)i * a->x_stride);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        prefetch_col(col, col_bytes);
        __m256i sh[2], sl[2], isum[2];
        for (int h = 0; h < 2; h++) {
            sh[h] = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(col + 32 + 16 * h)));
            sl[h] = _mm256_loadu_si256((const __m256i *)(col + 64 + 32 * h));
            isum[h] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; j++) {
            const __m256i mul[2] = {xs_scale_mul(sl[0], sh[0], j), xs_scale_mul(sl[1], sh[1], j)};
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                for (int h = 0; h < 2; h++)
                    isum[h] = _mm256_add_epi32(isum[h], word_dot(half_word(col + 128, 4 * j + c, h), table,
                                                                 xb[b].qs + 32 * j + 4 * c, mul[h]));
        }
        const __m256 dx = _mm256_set1_ps(xb[b].d);
        for (int h = 0; h < 2; h++) {
            const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(col + 16 * h)));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(wd, dx), acc[h]);
        }
    }
    store_rows(a, r, i, 0, 1, &acc[0]);
    store_rows(a, r, i, 1, 1, &acc[1]);
}

/* tile_NAME: each group of [r0, r1): the tokens in fours, half a group per pass, then the rest one by one with
 * both halves in one pass. */
#define DEFINE_X16_TILE(name)                                                                                \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        const int64_t i4 = i0 + (i1 - i0) / 4 * 4;                                                          \
        for (int64_t r = r0; r < r1; r += 16) {                                                             \
            for (int h = 0; h < 2; h++)                                                                     \
                for (int64_t i = i0; i < i4; i += 4) name##_micro(a, r, i, h, 4);                           \
            for (int64_t i = i4; i < i1; i++) name##_decode(a, r, i);                                       \
        }                                                                                                   \
    }
DEFINE_X16_TILE(iq4_nl_x16)
DEFINE_X16_TILE(iq4_xs_x16)

/* ---------------------------------------------------------------- table */

void mm_isa_avx2_iq4(mm_isa *isa) {
    isa->k[TR_TYPE_IQ4_NL] = (mm_kernel){tile_iq4_nl, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, tile_iq4_nl_x16};
    isa->k[TR_TYPE_IQ4_XS] = (mm_kernel){tile_iq4_xs, quantize_q8_k_avx2, q8_k_row_bytes, tile_iq4_xs_x16};
}
