/* matmul_x16_avx2.c — AVX2 tiles for weights in the interleaved X16 layout (repack.c): Q4_0, Q5_0, Q8_0 and the
 * K-quants. A 64-byte word of the layout holds 4 bytes of each of 16 rows; AVX2 takes it as two 32-byte halves of 8
 * rows, each lane one row, so the activation word is broadcast once per half and the 8 results leave with one
 * store.
 *
 * Without VNNI the byte products go through vpmaddubsw (unsigned × signed bytes → saturating 16-bit pair sums) and
 * vpmaddwd against ones. Pair sums stay below 2^15 for nibbles, 5- and 6-bit values; signed Q8_0 weights use the
 * sign trick (|w| × sign(x, w)), so nothing saturates. Offsets (-8, -16, -32) and minimums come back through the
 * activation sums as in the AVX-512 tiles. */
#include "kernels/blocks.h"
#include "kernels/avx2_inline.h"
#include "kernels/matmul_impl.h"

#include <immintrin.h>
#include <string.h>


/* acc + per-lane sum of the four byte products w_u8 × x_s8 */
INLINE __m256i dot4(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

/* 8 F16 scales of rows 8h..8h+7 from a 16-entry array. */
INLINE __m256 f16x8(const uint8_t *p, int h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h))); }

/* Decode: ask for the bytes a few block columns ahead (as the AVX-512 tiles; the second half of a group reads
 * what the first brought into cache). */
INLINE void prefetch_col(const uint8_t *col, size_t col_bytes) {
    size_t ahead = 4 * col_bytes;
    ahead = ahead < 2048 ? 2048 : ahead > 8192 ? 8192 : ahead;
    for (size_t off = 0; off < col_bytes; off += 64) _mm_prefetch((const char *)col + ahead + off, _MM_HINT_T0);
}

#define DEFINE_X16_TILE(name)                                                                                \
    static void name##_x4(const mm_args *a, int64_t r, int64_t i, int h) { name##_micro(a, r, i, h, 4); }  \
    static void name##_x1(const mm_args *a, int64_t r, int64_t i, int h) { name##_micro(a, r, i, h, 1); }  \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        for (int64_t r = r0; r < r1; r += 16)                                                               \
            for (int h = 0; h < 2; h++) {                                                                   \
                int64_t i = i0;                                                                             \
                for (; i + 4 <= i1; i += 4) name##_x4(a, r, i, h);                                          \
                for (; i < i1; i++) name##_x1(a, r, i, h);                                                  \
            }                                                                                               \
    }

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, int h, const int NI, const __m256 *acc) {
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) _mm256_storeu_ps(a->y + (i + ii) * a->ldy + r + 8 * h, acc[ii]);
}

/* ---------------------------------------------------------------- 32-element blocks × Q8_0 / Q8_1 */

enum { K_Q4_0, K_Q5_0, K_Q8_0 };

/* 0xFF in byte j where bit j of m is set: the Q5 fifth bits of 8 rows × 4 bytes (repack.c's masks). */
INLINE __m256i bits_to_bytes(uint32_t m) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                            3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* Activations: Q8_0 SoA with int32 block sums (offset types) or plain (Q8_0: signed weights need no offset).
 * (Q4_1 and Q5_1 have no AVX2 tiles of their own to share an activation format with: they stay plain here.) */
INLINE void w32_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI, const int kind) {
    const int64_t nb = a->cols / 32;
    const bool five = kind == K_Q5_0;
    const size_t col_bytes = 16 * (kind == K_Q8_0 ? 34 : kind == K_Q4_0 ? 18 : 22);
    const size_t masks_at = 32, qs_at = masks_at + (five ? 64 : 0);
    const int offset = kind == K_Q4_0 ? 8 : kind == K_Q5_0 ? 16 : 0;
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8_t *xq[4];
    const float *xd[4];
    const int32_t *xs[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        xs[ii] = (const int32_t *)(xd[ii] + nb);
        acc[ii] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1 && h == 0) prefetch_col(col, col_bytes);
        const __m256 wd = f16x8(col, h);
        __m256i isum[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
        if (kind == K_Q8_0) {
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
                const __m256i w = half_word(col + 32, c, h), aw = _mm256_abs_epi8(w);
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
                    isum[ii] = dot4(isum[ii], aw, _mm256_sign_epi8(bcast32(xq[ii] + 32 * b + 4 * c), w));
            }
        } else {
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                const __m256i q = half_word(col + qs_at, c, h);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (five) {
                    uint32_t mlo, mhi; /* rows 8h..8h+7: the half of each 64-bit mask */
                    memcpy(&mlo, col + masks_at + 8 * (2 * c) + 4 * h, 4);
                    memcpy(&mhi, col + masks_at + 8 * (2 * c + 1) + 4 * h, 4);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(bits_to_bytes(mlo), m10));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(bits_to_bytes(mhi), m10));
                }
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                    isum[ii] = dot4(isum[ii], lo, bcast32(xq[ii] + 32 * b + 4 * c));
                    isum[ii] = dot4(isum[ii], hi, bcast32(xq[ii] + 32 * b + 16 + 4 * c));
                }
            }
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
            __m256i s = isum[ii];
            if (offset) s = _mm256_sub_epi32(s, _mm256_set1_epi32((int32_t)((uint32_t)xs[ii][b] * (uint32_t)offset)));
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd, _mm256_set1_ps(xd[ii][b])), acc[ii]);
        }
    }
    store_rows(a, r, i, h, NI, acc);
}

INLINE void q4_0_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { w32_x16_micro(a, r, i, h, NI, K_Q4_0); }
INLINE void q5_0_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { w32_x16_micro(a, r, i, h, NI, K_Q5_0); }
INLINE void q8_0_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { w32_x16_micro(a, r, i, h, NI, K_Q8_0); }
DEFINE_X16_TILE(q4_0_x16)
DEFINE_X16_TILE(q5_0_x16)
DEFINE_X16_TILE(q8_0_x16)

/* ---------------------------------------------------------------- Q4_K, Q5_K × Q8_K */

INLINE __m256i move_bits(__m256i v, int from, int to) {
    if (from < to) return _mm256_slli_epi32(v, to - from);
    if (from > to) return _mm256_srli_epi32(v, from - to);
    return v;
}

INLINE __m256i lane_byte(__m256i v, int j) { return _mm256_and_si256(_mm256_srli_epi32(v, 8 * j), _mm256_set1_epi32(0xFF)); }

INLINE void kx_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI, const bool q5) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = q5 ? 16 * sizeof(block_q5_k) : 16 * sizeof(block_q4_k);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    const __m256i m3f = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1 && h == 0) prefetch_col(col, col_bytes);
        const uint8_t *qs = col + (q5 ? 768 : 256);
        const __m256 wd = f16x8(col, h), wdmin = f16x8(col + 32, h);
        const __m256i u0 = half_word(col + 64, 0, h), u1 = half_word(col + 64, 1, h), u2 = half_word(col + 64, 2, h);
        const __m256i sc_lo = _mm256_and_si256(u0, m3f), m_lo = _mm256_and_si256(u1, m3f);
        const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_and_si256(_mm256_srli_epi32(u0, 2), m30));
        const __m256i m_hi =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4), _mm256_and_si256(_mm256_srli_epi32(u1, 2), m30));
        __m256i tot[4], mins[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) tot[ii] = mins[ii] = _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            __m256i slo[4], shi[4];
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) slo[ii] = shi[ii] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int w = 0; w < 8; w++) {
                const __m256i q = half_word(qs, 8 * c + w, h);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    const __m256i hb = half_word(col + 256, w, h);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(move_bits(hb, 2 * c, 4), m10));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(move_bits(hb, 2 * c + 1, 4), m10));
                }
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                    slo[ii] = dot4(slo[ii], lo, bcast32(xb[ii][b].qs + 64 * c + 4 * w));
                    shi[ii] = dot4(shi[ii], hi, bcast32(xb[ii][b].qs + 64 * c + 32 + 4 * w));
                }
            }
            const int j0 = 2 * c, j1 = 2 * c + 1;
            const __m256i sc0 = lane_byte(j0 < 4 ? sc_lo : sc_hi, j0 % 4), sc1 = lane_byte(j1 < 4 ? sc_lo : sc_hi, j1 % 4);
            const __m256i mn0 = lane_byte(j0 < 4 ? m_lo : m_hi, j0 % 4), mn1 = lane_byte(j1 < 4 ? m_lo : m_hi, j1 % 4);
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                tot[ii] = _mm256_add_epi32(tot[ii], _mm256_mullo_epi32(slo[ii], sc0));
                tot[ii] = _mm256_add_epi32(tot[ii], _mm256_mullo_epi32(shi[ii], sc1));
                const int16_t *bs = xb[ii][b].bsums;
                mins[ii] = _mm256_add_epi32(mins[ii], _mm256_mullo_epi32(mn0, _mm256_set1_epi32(bs[2 * j0] + bs[2 * j0 + 1])));
                mins[ii] = _mm256_add_epi32(mins[ii], _mm256_mullo_epi32(mn1, _mm256_set1_epi32(bs[2 * j1] + bs[2 * j1 + 1])));
            }
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
            const __m256 xd = _mm256_set1_ps(xb[ii][b].d);
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[ii]), _mm256_mul_ps(wd, xd), acc[ii]);
            acc[ii] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[ii]), _mm256_mul_ps(wdmin, xd), acc[ii]);
        }
    }
    store_rows(a, r, i, h, NI, acc);
}

INLINE void q4_k_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { kx_x16_micro(a, r, i, h, NI, false); }
INLINE void q5_k_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { kx_x16_micro(a, r, i, h, NI, true); }
DEFINE_X16_TILE(q4_k_x16)
DEFINE_X16_TILE(q5_k_x16)

/* ---------------------------------------------------------------- Q6_K × Q8_K */

INLINE void q6_k_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_q6_k);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1 && h == 0) prefetch_col(col, col_bytes);
        const __m256 wd = f16x8(col, h);
        __m256i tot[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) tot[ii] = _mm256_setzero_si256();
        for (int s = 0; s < 16; s++) {
            /* sub-block s = 2g + hf: ql words 4g+w (low or high nibbles), top bits in qh word s */
            const int g = s / 2, hf = s % 2;
            const __m256i qh = half_word(col + 2336, s, h);
            __m256i is[4];
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) is[ii] = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int w = 0; w < 4; w++) {
                __m256i ql = half_word(col + 288, 4 * g + w, h);
                if (hf) ql = _mm256_srli_epi16(ql, 4);
                const __m256i v = _mm256_or_si256(_mm256_and_si256(ql, m4), _mm256_and_si256(move_bits(qh, 2 * w, 4), m30));
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
                    is[ii] = dot4(is[ii], v, bcast32(xb[ii][b].qs + 16 * s + 4 * w));
            }
            const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(col + 32 + 16 * s + 8 * h)));
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                const __m256i c = _mm256_sub_epi32(is[ii], _mm256_set1_epi32(32 * xb[ii][b].bsums[s]));
                tot[ii] = _mm256_add_epi32(tot[ii], _mm256_mullo_epi32(c, sc));
            }
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[ii]), _mm256_mul_ps(wd, _mm256_set1_ps(xb[ii][b].d)), acc[ii]);
    }
    store_rows(a, r, i, h, NI, acc);
}
DEFINE_X16_TILE(q6_k_x16)

/* ---------------------------------------------------------------- table */

void mm_isa_avx2_x16(mm_isa *isa) {
    /* Q4_0 and Q5_0 read activations with block sums (their plain tiles read the same rows); Q8_0 needs none. */
    isa->k[TR_TYPE_Q4_0].quant = isa->k[TR_TYPE_Q5_0].quant = quantize_q8_0_soa_sums;
    isa->k[TR_TYPE_Q4_0].x_row_bytes = isa->k[TR_TYPE_Q5_0].x_row_bytes = q8_0_soa_sums_row_bytes;
    isa->k[TR_TYPE_Q4_0].tile_x16 = tile_q4_0_x16;
    isa->k[TR_TYPE_Q5_0].tile_x16 = tile_q5_0_x16;

    isa->k[TR_TYPE_Q8_0].tile_x16 = tile_q8_0_x16;
    isa->k[TR_TYPE_Q4_K].tile_x16 = tile_q4_k_x16;
    isa->k[TR_TYPE_Q5_K].tile_x16 = tile_q5_k_x16;
    isa->k[TR_TYPE_Q6_K].tile_x16 = tile_q6_k_x16;
}
