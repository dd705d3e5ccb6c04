/* matmul_k23_avx2.c — AVX2 tiles for Q2_K and Q3_K (× Q8_K activations): plain rows and the X16 layout (repack.c).
 *
 * Both types hold 2-bit fields (bits 2j..2j+1 of a qs byte) in 16 sub-blocks of 16; Q3_K adds a high bit from hmask,
 * taken as the unsigned value low2 + 4·hbit (0..7) whose -4 comes back through Q8_K's per-16 activation sums.
 * vpmaddubsw multiplies the unsigned fields with the signed activations into 16-bit pair sums (at most
 * 2 · 7 · 127, never saturating; four of them summed stay below 2^15), and vpmaddwd applies the sub-block scales,
 * so a 256-block sums exactly in int32 and meets one float multiply, as llama.cpp's dot products do. Q2_K's mins
 * multiply the bsums in one vpmaddwd. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/avx2_inline.h"
#include "kernels/matmul_impl.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL _Pragma("GCC unroll 4")

/* The 2-bit field of shift j (0-3) of every byte. */
INLINE __m256i field2(__m256i q, int j) { return _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3)); }

/* Bit k (0-7) of every byte of hm moved to bit 2 (4 or 0): Q3_K's high bit, already weighted by 4. */
INLINE __m256i hbit4(__m256i hm, int k) {
    const __m256i v = k < 2 ? _mm256_slli_epi16(hm, 2 - k) : k > 2 ? _mm256_srli_epi16(hm, k - 2) : hm;
    return _mm256_and_si256(v, _mm256_set1_epi8(4));
}

/* Q3_K's 16 scales minus 32 as int8 (ggml's kmask unpacking of the 12 bytes, blocks.h). */
INLINE __m128i q3k_scales8(const uint8_t *packed) {
    uint32_t a[4];
    memcpy(a, packed, 12);
    const uint32_t tmp = a[2], k1 = 0x03030303, k2 = 0x0f0f0f0f;
    a[2] = ((a[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
    a[3] = ((a[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
    a[0] = (a[0] & k2) | (((tmp >> 0) & k1) << 4);
    a[1] = (a[1] & k2) | (((tmp >> 2) & k1) << 4);
    return _mm_sub_epi8(_mm_loadu_si128((const __m128i *)a), _mm_set1_epi8(32));
}

/* ---------------------------------------------------------------- plain rows: 1 row × up to 4 tokens */

/* A 32-byte qs load of half n, field j, holds elements 128n + 32j + l: sub-block 8n + 2j in the low 16 bytes and
 * 8n + 2j + 1 in the high ones, so one vpmaddwd applies both scales. */

INLINE void q2_k_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const block_q2_k *w = (const block_q2_k *)(a->w + (size_t)r * a->w_stride);
    const block_q8_k *xb[4];
    __m256 acc[4];
    UNROLL for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    const __m128i m4 = _mm_set1_epi8(0xF);
    for (int64_t b = 0; b < nb; b++) {
        const block_q2_k *blk = w + b;
        const __m128i raw = _mm_loadu_si128((const __m128i *)blk->scales);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_and_si128(raw, m4));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        __m256i isum[4];
        UNROLL for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
        _Pragma("GCC unroll 2") for (int n = 0; n < 2; n++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * n));
            UNROLL for (int j = 0; j < 4; j++) {
                const int s = 8 * n + 2 * j; /* scale byte s as words in the low lane, s + 1 in the high lane */
                const __m256i s16 = _mm256_shuffle_epi8(
                    sc, _mm256_set_m128i(_mm_set1_epi16((short)(0x8000 | (s + 1))), _mm_set1_epi16((short)(0x8000 | s))));
                const __m256i v = field2(q, j);
                UNROLL for (int ii = 0; ii < NI; ii++) {
                    const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(xb[ii][b].qs + 128 * n + 32 * j)));
                    isum[ii] = _mm256_add_epi32(isum[ii], _mm256_madd_epi16(p, s16));
                }
            }
        }
        const float d = fp16_to_fp32(blk->d), dmin = fp16_to_fp32(blk->dmin);
        UNROLL for (int ii = 0; ii < NI; ii++) {
            const __m256i mm = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)xb[ii][b].bsums));
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[ii]), _mm256_set1_ps(d * xb[ii][b].d), acc[ii]);
            acc[ii] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(dmin * xb[ii][b].d), acc[ii]);
        }
    }
    UNROLL for (int ii = 0; ii < NI; ii++) a->y[(i + ii) * a->ldy + r] = hsum8(acc[ii]);
}

INLINE void q3_k_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {
    const int64_t nb = a->cols / QK_K;
    const block_q3_k *w = (const block_q3_k *)(a->w + (size_t)r * a->w_stride);
    const block_q8_k *xb[4];
    __m256 acc[4];
    UNROLL for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const block_q3_k *blk = w + b;
        const __m128i sc8 = q3k_scales8(blk->scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)blk->hmask);
        __m256i isum[4];
        UNROLL for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
        _Pragma("GCC unroll 2") for (int n = 0; n < 2; n++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * n));
            /* scales 8n..8n+7 as words in both lanes; field j takes word 2j (low lane) and 2j + 1 (high lane) */
            const __m256i sn = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(n ? _mm_unpackhi_epi64(sc8, sc8) : sc8));
            UNROLL for (int j = 0; j < 4; j++) {
                const __m256i s16 = _mm256_shuffle_epi8(
                    sn, _mm256_set_m128i(_mm_set1_epi16((short)((4 * j + 3) << 8 | (4 * j + 2))),
                                         _mm_set1_epi16((short)((4 * j + 1) << 8 | (4 * j)))));
                const __m256i v = _mm256_or_si256(field2(q, j), hbit4(hm, 4 * n + j));
                UNROLL for (int ii = 0; ii < NI; ii++) {
                    const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(xb[ii][b].qs + 128 * n + 32 * j)));
                    isum[ii] = _mm256_add_epi32(isum[ii], _mm256_madd_epi16(p, s16));
                }
            }
        }
        const float d = fp16_to_fp32(blk->d);
        UNROLL for (int ii = 0; ii < NI; ii++) {
            /* values are low2 + 4 hbit - 4: take 4 * sum_s scale_s * bsum_s back */
            const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)xb[ii][b].bsums));
            const __m256i t = _mm256_sub_epi32(isum[ii], _mm256_slli_epi32(corr, 2));
            acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(d * xb[ii][b].d), acc[ii]);
        }
    }
    UNROLL for (int ii = 0; ii < NI; ii++) a->y[(i + ii) * a->ldy + r] = hsum8(acc[ii]);
}

DEFINE_ROW_TILE(q2_k)
DEFINE_ROW_TILE(q3_k)

/* ---------------------------------------------------------------- X16 layout: 8 rows (half h of a group) per lane set */

INLINE __m256 f16x8(const uint8_t *p, int h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h))); }

/* Decode: ask for the bytes a few block columns ahead, as matmul_x16_*.c do, but into L2 (prefetcht1), not L1:
 * measured on qwen3-0.6b decode, 2 threads, quiet machine, prefetcht0 → prefetcht1: Q2_K 114 → 127 tok/s, Q3_K
 * 78 → 96-108 with AVX-512 (no prefetch at all: 117-124 / 91), and +30% / +60% with the AVX2 tiles. */
INLINE void prefetch_col(const uint8_t *col, size_t col_bytes) {
    size_t ahead = 4 * col_bytes;
    ahead = ahead < 2048 ? 2048 : ahead > 8192 ? 8192 : ahead;
    for (size_t off = 0; off < col_bytes; off += 64) _mm_prefetch((const char *)col + ahead + off, _MM_HINT_T1);
}

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, int h, const int NI, const __m256 *acc) {
    UNROLL for (int ii = 0; ii < NI; ii++) _mm256_storeu_ps(a->y + (i + ii) * a->ldy + r + 8 * h, acc[ii]);
}

/* The 16-bit pair (sub-blocks 2p, 2p+1) of a nibble word (repack.c): nibble 2t at bit 4t, 2t+1 at 16 + 4t. */
INLINE __m256i nib_pair(__m256i w, int t) { return _mm256_and_si256(_mm256_srli_epi32(w, 4 * t), _mm256_set1_epi32(0x000F000F)); }

/* Either half of a 16-bit pair copied into both halves of each lane (vpmaddwd multiplies both by it); vpshufb
 * indexes bytes of its 128-bit lane. */
INLINE __m256i dup_lo16(__m256i v) {
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4,
                                                   5, 8, 9, 8, 9, 12, 13, 12, 13));
}
INLINE __m256i dup_hi16(__m256i v) {
    return _mm256_shuffle_epi8(v, _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6,
                                                   7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
}

/* For half n and field j: the 16-bit pair sums of sub-block 8n + 2j + hl, per row lane, summed over its 4 words
 * (qs words 8n + 4hl + wi; Q3_K's high bits from hmask word 4hl + wi, bit 4n + j). */
INLINE void x16_sub_sums(const uint8_t *col, size_t qs_at, size_t hm_at, bool q3, int h, int n, int j, int hl,
                         const block_q8_k *const *xb, int64_t b, const int NI, __m256i *s16) {
    UNROLL for (int ii = 0; ii < NI; ii++) s16[ii] = _mm256_setzero_si256();
    UNROLL for (int wi = 0; wi < 4; wi++) {
        __m256i v = field2(half_word(col + qs_at, 8 * n + 4 * hl + wi, h), j);
        if (q3) v = _mm256_or_si256(v, hbit4(half_word(col + hm_at, 4 * hl + wi, h), 4 * n + j));
        UNROLL for (int ii = 0; ii < NI; ii++)
            s16[ii] = _mm256_add_epi16(s16[ii], _mm256_maddubs_epi16(v, bcast32(xb[ii][b].qs + 128 * n + 32 * j + 16 * hl + 4 * wi)));
    }
}

INLINE void k23_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI, const bool q3) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * (q3 ? sizeof(block_q3_k) : sizeof(block_q2_k));
    const size_t qs_at = q3 ? 736 : 320, hm_at = 224;
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    __m256 acc[4];
    UNROLL for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1 && h == 0) prefetch_col(col, col_bytes);
        const uint8_t *scw = col + (q3 ? 32 : 64);
        const __m256i w2 = half_word(scw, 2, h); /* Q2_K: mins of sub-blocks 0-7; Q3_K: the scales' top bits */
        __m256i tot[4], side[4]; /* side: Q2_K's min products, Q3_K's scale × bsum products */
        UNROLL for (int ii = 0; ii < NI; ii++) tot[ii] = side[ii] = _mm256_setzero_si256();
        _Pragma("GCC unroll 2") for (int n = 0; n < 2; n++) {
            const __m256i sw = half_word(scw, n, h), mw = q3 ? w2 : half_word(scw, 2 + n, h);
            UNROLL for (int j = 0; j < 4; j++) {
                const int s = 8 * n + 2 * j;
                __m256i sp = nib_pair(sw, j); /* scales of sub-blocks s, s+1 */
                if (q3) {
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(w2, 2 * (4 * n + j)), _mm256_set1_epi32(0x00030003));
                    sp = _mm256_sub_epi16(_mm256_or_si256(sp, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi16(32));
                }
                const __m256i side_w = q3 ? sp : nib_pair(mw, j);
                __m256i s16[4];
                x16_sub_sums(col, qs_at, hm_at, q3, h, n, j, 0, xb, b, NI, s16);
                const __m256i d0 = dup_lo16(sp);
                UNROLL for (int ii = 0; ii < NI; ii++) tot[ii] = _mm256_add_epi32(tot[ii], _mm256_madd_epi16(s16[ii], d0));
                x16_sub_sums(col, qs_at, hm_at, q3, h, n, j, 1, xb, b, NI, s16);
                const __m256i d1 = dup_hi16(sp);
                UNROLL for (int ii = 0; ii < NI; ii++) {
                    tot[ii] = _mm256_add_epi32(tot[ii], _mm256_madd_epi16(s16[ii], d1));
                    side[ii] = _mm256_add_epi32(side[ii], _mm256_madd_epi16(side_w, bcast32(xb[ii][b].bsums + s)));
                }
            }
        }
        const __m256 wd = f16x8(col, h);
        if (q3) {
            UNROLL for (int ii = 0; ii < NI; ii++) {
                const __m256i t = _mm256_sub_epi32(tot[ii], _mm256_slli_epi32(side[ii], 2));
                acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(wd, _mm256_set1_ps(xb[ii][b].d)), acc[ii]);
            }
        } else {
            const __m256 wdmin = f16x8(col + 32, h);
            UNROLL for (int ii = 0; ii < NI; ii++) {
                const __m256 xd = _mm256_set1_ps(xb[ii][b].d);
                acc[ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[ii]), _mm256_mul_ps(wd, xd), acc[ii]);
                acc[ii] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(side[ii]), _mm256_mul_ps(wdmin, xd), acc[ii]);
            }
        }
    }
    store_rows(a, r, i, h, NI, acc);
}

INLINE void q2_k_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { k23_x16_micro(a, r, i, h, NI, false); }
INLINE void q3_k_x16_micro(const mm_args *a, int64_t r, int64_t i, int h, const int NI) { k23_x16_micro(a, r, i, h, NI, true); }

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
DEFINE_X16_TILE(q2_k_x16)
DEFINE_X16_TILE(q3_k_x16)

/* ---------------------------------------------------------------- table */

void mm_isa_avx2_k23(mm_isa *isa) {
    isa->k[TR_TYPE_Q2_K] = (mm_kernel){tile_q2_k, quantize_q8_k_avx2, q8_k_row_bytes, tile_q2_k_x16};
    isa->k[TR_TYPE_Q3_K] = (mm_kernel){tile_q3_k, quantize_q8_k_avx2, q8_k_row_bytes, tile_q3_k_x16};
}
