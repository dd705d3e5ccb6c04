/* matmul_k23_avx512.c — AVX-512 VNNI tiles for Q2_K and Q3_K in the X16 layout (repack.c); plain rows use the
 * AVX2 tiles (matmul_k23_avx2.c). Lane r of every accumulator is row r of the group, as in matmul_x16_avx512.c.
 *
 * The 2-bit fields (Q3_K: plus 4 where the hmask bit is set, one masked byte add) go unsigned into vpdpbusd, each
 * sub-block of 16 into its own int32 sums. Those fit in 16 bits (|sum| <= 16 · 7 · 127), so two sub-blocks pack
 * into one lane and a single vpdpwssd multiplies them by their scales (a nibble pair from the layout's scale words)
 * and accumulates. Q2_K's mins and Q3_K's offset of -4 meet the Q8_K bsums the same way, two sub-blocks per
 * vpdpwssd. A 256-block sums exactly in int32, as in llama.cpp. */
#include "kernels/blocks.h"
#include "kernels/matmul_impl.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

INLINE __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

INLINE __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* Decode: ask for the bytes a few block columns ahead, as matmul_x16_*.c do, but into L2 (prefetcht1), not L1:
 * measured on qwen3-0.6b decode, 2 threads, quiet machine, prefetcht0 → prefetcht1: Q2_K 114 → 127 tok/s, Q3_K
 * 78 → 96-108 with AVX-512 (no prefetch at all: 117-124 / 91), and +30% / +60% with the AVX2 tiles. */
INLINE void prefetch_col(const uint8_t *col, size_t col_bytes) {
    size_t ahead = 4 * col_bytes;
    ahead = ahead < 2048 ? 2048 : ahead > 8192 ? 8192 : ahead;
    for (size_t off = 0; off < col_bytes; off += 64) _mm_prefetch((const char *)col + ahead + off, _MM_HINT_T1);
}

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, const int NI, const __m512 *acc) {
    UNROLL for (int ii = 0; ii < NI; ii++) _mm512_storeu_ps(a->y + (i + ii) * a->ldy + r, acc[ii]);
}

/* The 16-bit pair (sub-blocks 2t, 2t+1 of the word's eight) of a nibble word (repack.c). */
INLINE __m512i nib_pair(__m512i w, int t) { return _mm512_and_si512(_mm512_srli_epi32(w, 4 * t), _mm512_set1_epi32(0x000F000F)); }

/* Two int32 sums lo, hi, each 2^sh times a value that fits in 16 bits, as those values in the low and high halves
 * of each lane (hi's low sh bits are zero, so one left shift puts its value in place). 512-bit shifts issue on
 * one port only, beside vpdpbusd: they are what these tiles count. */
INLINE __m512i pack16(__m512i lo, __m512i hi, int sh) {
    if (sh) lo = _mm512_srai_epi32(lo, sh);
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, lo, _mm512_slli_epi32(hi, 16 - sh));
}

/* The power of two field j is read at (see sub_sums): 4^j, but 16 for Q3_K's field 3. */
INLINE int field_shift(bool q3, int j) { return q3 && j == 3 ? 4 : 2 * j; }

/* isum[.] = sub-block 8n + 2j + hl of 16 rows against each token: qs words 8n + 4hl + wi, field j; Q3_K adds 4
 * where bit 4n + j of hmask word 4hl + wi is set. The field is taken in place (masked, not shifted down), as
 * value · 2^field_shift, and the int32 sums are shifted back once per sub-block (pack16), which saves a shift per
 * word.
 * In place the values stay bytes: Q2_K's at most 3 · 64, Q3_K's (3 + 4) · 16 (its field 3 is moved down to
 * bits 4-5 so the high bit fits at bit 6). */
INLINE void sub_sums(const uint8_t *col, size_t qs_at, bool q3, int n, int j, int hl, const block_q8_k *const *xb,
                     int64_t b, const int NI, __m512i *isum) {
    const int sh = field_shift(q3, j);
    const __m512i fm = _mm512_set1_epi8((char)(3 << sh));
    UNROLL for (int ii = 0; ii < NI; ii++) isum[ii] = _mm512_setzero_si512();
    UNROLL for (int wi = 0; wi < 4; wi++) {
        const int w = 8 * n + 4 * hl + wi;
        __m512i q = _mm512_loadu_si512(col + qs_at + 64 * w);
        if (sh != 2 * j) q = _mm512_srli_epi16(q, 2 * j - sh);
        __m512i v = _mm512_and_si512(q, fm);
        if (q3) {
            const __mmask64 hb = _mm512_test_epi8_mask(_mm512_loadu_si512(col + 224 + 64 * (4 * hl + wi)),
                                                       _mm512_set1_epi8((char)(1 << (4 * n + j))));
            v = _mm512_mask_add_epi8(v, hb, v, _mm512_set1_epi8((char)(4 << sh)));
        }
        UNROLL for (int ii = 0; ii < NI; ii++)
            isum[ii] = _mm512_dpbusd_epi32(isum[ii], v, bcast32(xb[ii][b].qs + 128 * n + 32 * j + 16 * hl + 4 * wi));
    }
}

INLINE void k23_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI, const bool q3) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * (q3 ? sizeof(block_q3_k) : sizeof(block_q2_k));
    const size_t qs_at = q3 ? 736 : 320;
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    __m512 acc[4];
    UNROLL for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1) prefetch_col(col, col_bytes);
        const uint8_t *scw = col + (q3 ? 32 : 64);
        const __m512i w2 = _mm512_loadu_si512(scw + 128); /* Q2_K: mins of sub-blocks 0-7; Q3_K: the scales' top bits */
        __m512i tot[4], side[4]; /* side: Q2_K's min products, Q3_K's scale × bsum products */
        UNROLL for (int ii = 0; ii < NI; ii++) tot[ii] = side[ii] = _mm512_setzero_si512();
        _Pragma("GCC unroll 2") for (int n = 0; n < 2; n++) {
            const __m512i sw = _mm512_loadu_si512(scw + 64 * n), mw = q3 ? w2 : _mm512_loadu_si512(scw + 128 + 64 * n);
            UNROLL for (int j = 0; j < 4; j++) {
                const int s = 8 * n + 2 * j;
                __m512i sp = nib_pair(sw, j); /* scales of sub-blocks s, s+1 */
                if (q3) {
                    /* top 2 bits of the pair at bits 2p, 16 + 2p (p = 4n + j), moved to bits 4-5 and 20-21 */
                    const int p = 4 * n + j;
                    const __m512i t = p >= 2 ? _mm512_srli_epi32(w2, 2 * p - 4) : _mm512_slli_epi32(w2, 4 - 2 * p);
                    const __m512i hi = _mm512_and_si512(t, _mm512_set1_epi32(0x00300030));
                    sp = _mm512_sub_epi16(_mm512_or_si512(sp, hi), _mm512_set1_epi16(32));
                }
                const __m512i side_w = q3 ? sp : nib_pair(mw, j);
                __m512i s0[4], s1[4];
                sub_sums(col, qs_at, q3, n, j, 0, xb, b, NI, s0);
                sub_sums(col, qs_at, q3, n, j, 1, xb, b, NI, s1);
                UNROLL for (int ii = 0; ii < NI; ii++) {
                    tot[ii] = _mm512_dpwssd_epi32(tot[ii], pack16(s0[ii], s1[ii], field_shift(q3, j)), sp);
                    side[ii] = _mm512_dpwssd_epi32(side[ii], side_w, bcast32(xb[ii][b].bsums + s));
                }
            }
        }
        const __m512 wd = f16x16(col);
        if (q3) {
            UNROLL for (int ii = 0; ii < NI; ii++) {
                const __m512i t = _mm512_sub_epi32(tot[ii], _mm512_slli_epi32(side[ii], 2));
                acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(wd, _mm512_set1_ps(xb[ii][b].d)), acc[ii]);
            }
        } else {
            const __m512 wdmin = f16x16(col + 32);
            UNROLL for (int ii = 0; ii < NI; ii++) {
                const __m512 xd = _mm512_set1_ps(xb[ii][b].d);
                acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[ii]), _mm512_mul_ps(wd, xd), acc[ii]);
                acc[ii] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(side[ii]), _mm512_mul_ps(wdmin, xd), acc[ii]);
            }
        }
    }
    store_rows(a, r, i, NI, acc);
}

INLINE void q2_k_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { k23_x16_micro(a, r, i, NI, false); }
INLINE void q3_k_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { k23_x16_micro(a, r, i, NI, true); }

#define DEFINE_X16_TILE(name, NT)                                                                            \
    static void name##_xn(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, NT); }          \
    static void name##_x1(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, 1); }           \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        for (int64_t r = r0; r < r1; r += 16) {                                                             \
            int64_t i = i0;                                                                                 \
            for (; i + NT <= i1; i += NT) name##_xn(a, r, i);                                               \
            for (; i < i1; i++) name##_x1(a, r, i);                                                         \
        }                                                                                                   \
    }
DEFINE_X16_TILE(q2_k_x16, 4)
DEFINE_X16_TILE(q3_k_x16, 4)

/* ---------------------------------------------------------------- table */

void mm_isa_avx512_k23(mm_isa *isa) {
    isa->k[TR_TYPE_Q2_K].tile_x16 = tile_q2_k_x16;
    isa->k[TR_TYPE_Q3_K].tile_x16 = tile_q3_k_x16;
}
