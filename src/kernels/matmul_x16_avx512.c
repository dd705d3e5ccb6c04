/* matmul_x16_avx512.c — AVX-512 VNNI tiles for weights in the interleaved X16 layout (repack.c): 16 rows per
 * group, each 64-byte load holding one 4-byte word of every row. Lane r of every accumulator belongs to row r, so
 * an activation word is broadcast once for 16 rows (vpdpbusd with a {1to16} operand) and the 16 results leave
 * with one store, never reduced across lanes. Each micro-tile takes NI tokens (up to 8) so an unpacked weight
 * vector also serves several tokens in prefill.
 *
 * Weights go in vpdpbusd's unsigned slot: nibbles and 5/6-bit values are unsigned already, and Q8_0's signed
 * bytes become w + 128 (w ^ 0x80). The offsets (-8, -16, -128, -32) come back through activation sums: per
 * 32-block sums for Q8_0 activations (quantize_q8_0_soa_sums), Q8_1's sums for Q4_1/Q5_1's minimums, Q8_K's
 * bsums for the K-quants. K-quant sub-block scales multiply
 * exact int32 sub-block sums, so the whole 256-block sums in integers as in the plain kernels. */
#include "kernels/blocks.h"
#include "kernels/matmul_impl.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

INLINE __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

INLINE __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* Decode reads each weight once: ask for the bytes a few block columns ahead of the one being read (a group is one
 * contiguous run, and the next group follows it), so a single thread keeps more memory requests in flight than the
 * hardware prefetcher starts on its own (measured: +30-60% decode GB/s from DRAM). About 4 columns, kept within
 * 2-8 KiB. The 32-element tiles ask in batched products too, where the first token block of a group reads its
 * weights from memory or L2 (151936x896 output at 16 rows: +10-20% on Zen 4); a later token block's requests hit
 * L1 and cost a load slot each.
 *
 * Into L1 (prefetcht0) by default; every tile has a second version prefetching into L2 (prefetcht1), chosen
 * on AMD CPUs (see prefetch_to_l2): on Zen 4 prefetcht0 of the streamed weights made Q4_K decode slower than no
 * prefetch at all, while Q6_K needs one (its column is read as two interleaved runs, ql and qh). One thread,
 * qwen3-0.6b shapes, 8 layers from DRAM (bench_matmul --cputime, load 7-9): Q4_K 12-14 GB/s with prefetcht0,
 * 18-22 none, 17-23 prefetcht1; Q6_K 11-13, 8-9 and 15-20; whole-model decode at 1 thread 12-13 -> 18-19 tok/s.
 *
 * Into L2, the 32-element types' decode asks only two columns ahead (576 bytes for Q4_0, not the 2 KiB floor: 7
 * columns): with both cores streaming, the longer distance lost to the shorter in 15 of 15 alternating rounds
 * (tokroute bench -t 2, decode GB/s, medians of 5, load 4-6: lfm2-350m Q4_0 17.5 -> 20.7, qwen2.5-0.5b Q4_0
 * 10.4 -> 12.5, gemma3-270m Q4_0 18.4 -> 18.9; qwen2.5-0.5b Q4_K_M, whose 896-wide rows are Q5_0/Q8_0, 10.6 ->
 * 13.2; lfm2-350m Q8_0 15.0 -> 15.3); one column ahead was no better, and the K-quants' distance gained nothing
 * (qwen3-0.6b Q4_K_M 10.0 -> 10.3), so they keep theirs. */
INLINE size_t prefetch_ahead(size_t col_bytes) {
    const size_t ahead = 4 * col_bytes;
    return ahead < 2048 ? 2048 : ahead > 8192 ? 8192 : ahead;
}

INLINE void prefetch_col(const uint8_t *col, size_t col_bytes, size_t ahead, const bool to_l2) {
    if (to_l2)
        for (size_t off = 0; off < col_bytes; off += 64) _mm_prefetch((const char *)col + ahead + off, _MM_HINT_T1);
    else
        for (size_t off = 0; off < col_bytes; off += 64) _mm_prefetch((const char *)col + ahead + off, _MM_HINT_T0);
}

/* Runs micro(a, r, i, NI) over the tile: NT tokens at a time (as many as the accumulators fit in registers), then
 * single tokens. */
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

INLINE void store_rows(const mm_args *a, int64_t r, int64_t i, const int NI, const __m512 *acc) {
    _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) _mm512_storeu_ps(a->y + (i + ii) * a->ldy + r, acc[ii]);
}

/* ---------------------------------------------------------------- 32-element blocks × Q8_0 / Q8_1 */

enum { K_Q4_0, K_Q5_0, K_Q8_0, K_Q4_1, K_Q5_1 };

/* Activations: Q8_0 SoA with int32 block sums (offset types), or Q8_1 SoA with float sums d * sum q (Q4_1, Q5_1:
 * value = d*q + m, so a row's dot is d_w d_x isum + m_w s_x). */
INLINE void w32_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI, const int kind, const bool to_l2) {
    const int64_t nb = a->cols / 32;
    const bool with_m = kind == K_Q4_1 || kind == K_Q5_1, five = kind == K_Q5_0 || kind == K_Q5_1;
    const size_t col_bytes = 16 * (kind == K_Q8_0 ? 34 : kind == K_Q4_0 ? 18 : kind == K_Q4_1 ? 20 : kind == K_Q5_0 ? 22 : 24);
    const size_t masks_at = with_m ? 64 : 32, qs_at = masks_at + (five ? 64 : 0);
    const int offset = kind == K_Q8_0 ? 128 : kind == K_Q4_0 ? 8 : kind == K_Q5_0 ? 16 : 0;
    const size_t ahead = to_l2 && NI == 1 ? 2 * col_bytes : prefetch_ahead(col_bytes); /* see prefetch_col */
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const int8_t *xq[8];
    const float *xd[8], *xm[8];
    const int32_t *xs[8];
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        xs[ii] = (const int32_t *)(xd[ii] + nb);
        xm[ii] = xd[ii] + nb;
        acc[ii] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80), sixteen = _mm512_set1_epi8(16);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        prefetch_col(col, col_bytes, ahead, to_l2);
        const __m512 wd = f16x16(col);
        __m512i isum[8];
        _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) isum[ii] = _mm512_setzero_si512();
        if (kind == K_Q8_0) {
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
                const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(col + 32 + 64 * c), flip);
                _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++)
                    isum[ii] = _mm512_dpbusd_epi32(isum[ii], w, bcast32(xq[ii] + 32 * b + 4 * c));
            }
        } else {
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                const __m512i q = _mm512_loadu_si512(col + qs_at + 64 * c);
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (five) {
                    uint64_t mlo, mhi;
                    memcpy(&mlo, col + masks_at + 8 * (2 * c), 8);
                    memcpy(&mhi, col + masks_at + 8 * (2 * c + 1), 8);
                    lo = _mm512_mask_add_epi8(lo, (__mmask64)mlo, lo, sixteen);
                    hi = _mm512_mask_add_epi8(hi, (__mmask64)mhi, hi, sixteen);
                }
                _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
                    isum[ii] = _mm512_dpbusd_epi32(isum[ii], lo, bcast32(xq[ii] + 32 * b + 4 * c));
                    isum[ii] = _mm512_dpbusd_epi32(isum[ii], hi, bcast32(xq[ii] + 32 * b + 16 + 4 * c));
                }
            }
        }
        const __m512 wm = with_m ? f16x16(col + 32) : _mm512_setzero_ps();
        _Pragma("GCC unroll 8") for (int ii = 0; ii < NI; ii++) {
            __m512i s = isum[ii];
            /* sum (w_u - off) x = sum w_u x - off * sum x */
            if (offset) s = _mm512_sub_epi32(s, _mm512_set1_epi32((int32_t)((uint32_t)xs[ii][b] * (uint32_t)offset)));
            acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, _mm512_set1_ps(xd[ii][b])), acc[ii]);
            if (with_m) acc[ii] = _mm512_fmadd_ps(wm, _mm512_set1_ps(xm[ii][b]), acc[ii]);
        }
    }
    store_rows(a, r, i, NI, acc);
}

/* Each 32-element type in two versions, prefetching into L1 or L2 (see prefetch_to_l2). */
#define DEFINE_W32_TILES(name, kind)                                                                                  \
    INLINE void name##_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {                             \
        w32_x16_micro(a, r, i, NI, kind, false);                                                                      \
    }                                                                                                                 \
    INLINE void name##_l2_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) {                          \
        w32_x16_micro(a, r, i, NI, kind, true);                                                                       \
    }                                                                                                                 \
    DEFINE_X16_TILE(name##_x16, 8)                                                                                    \
    DEFINE_X16_TILE(name##_l2_x16, 8)
DEFINE_W32_TILES(q4_0, K_Q4_0)
DEFINE_W32_TILES(q5_0, K_Q5_0)
DEFINE_W32_TILES(q8_0, K_Q8_0)
DEFINE_W32_TILES(q4_1, K_Q4_1)
DEFINE_W32_TILES(q5_1, K_Q5_1)

/* ---------------------------------------------------------------- Q4_K, Q5_K × Q8_K */

/* Bit `from` of every byte moved to bit `to` (other bits: garbage the caller masks off). */
INLINE __m512i move_bits(__m512i v, int from, int to) {
    if (from < to) return _mm512_slli_epi32(v, (unsigned)(to - from));
    if (from > to) return _mm512_srli_epi32(v, (unsigned)(from - to));
    return v;
}

/* Byte j (0-3) of every lane, as int32. */
INLINE __m512i lane_byte(__m512i v, int j) {
    return _mm512_and_si512(_mm512_srli_epi32(v, (unsigned)(8 * j)), _mm512_set1_epi32(0xFF));
}

INLINE void kx_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI, const bool q5, const bool to_l2) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = q5 ? 16 * sizeof(block_q5_k) : 16 * sizeof(block_q4_k);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    const __m512i m3f = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1) prefetch_col(col, col_bytes, prefetch_ahead(col_bytes), to_l2);
        const uint8_t *qs = col + (q5 ? 768 : 256);
        const __m512 wd = f16x16(col), wdmin = f16x16(col + 32);
        /* 6-bit scales and mins of the 8 sub-blocks, four per 32-bit lane (layout in blocks.h). */
        const __m512i u0 = _mm512_loadu_si512(col + 64), u1 = _mm512_loadu_si512(col + 128);
        const __m512i u2 = _mm512_loadu_si512(col + 192);
        const __m512i sc_lo = _mm512_and_si512(u0, m3f), m_lo = _mm512_and_si512(u1, m3f);
        const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_and_si512(_mm512_srli_epi32(u0, 2), m30));
        const __m512i m_hi =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4), _mm512_and_si512(_mm512_srli_epi32(u1, 2), m30));
        __m512i tot[4], mins[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) tot[ii] = mins[ii] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            /* Chunk c: 32 bytes per row; low nibbles are sub-block 2c (elements 64c + l), high nibbles 2c+1. */
            __m512i slo[4], shi[4];
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) slo[ii] = shi[ii] = _mm512_setzero_si512();
            _Pragma("GCC unroll 8") for (int w = 0; w < 8; w++) {
                const __m512i q = _mm512_loadu_si512(qs + 64 * (8 * c + w));
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (q5) {
                    /* Bit 2c of qh byte l is the fifth bit of element 64c+l, bit 2c+1 that of 64c+32+l. */
                    const __m512i h = _mm512_loadu_si512(col + 256 + 64 * w);
                    lo = _mm512_or_si512(lo, _mm512_and_si512(move_bits(h, 2 * c, 4), m10));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(move_bits(h, 2 * c + 1, 4), m10));
                }
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                    slo[ii] = _mm512_dpbusd_epi32(slo[ii], lo, bcast32(xb[ii][b].qs + 64 * c + 4 * w));
                    shi[ii] = _mm512_dpbusd_epi32(shi[ii], hi, bcast32(xb[ii][b].qs + 64 * c + 32 + 4 * w));
                }
            }
            const int j0 = 2 * c, j1 = 2 * c + 1;
            const __m512i sc0 = lane_byte(j0 < 4 ? sc_lo : sc_hi, j0 % 4), sc1 = lane_byte(j1 < 4 ? sc_lo : sc_hi, j1 % 4);
            const __m512i mn0 = lane_byte(j0 < 4 ? m_lo : m_hi, j0 % 4), mn1 = lane_byte(j1 < 4 ? m_lo : m_hi, j1 % 4);
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                tot[ii] = _mm512_add_epi32(tot[ii], _mm512_mullo_epi32(slo[ii], sc0));
                tot[ii] = _mm512_add_epi32(tot[ii], _mm512_mullo_epi32(shi[ii], sc1));
                const int16_t *bs = xb[ii][b].bsums;
                mins[ii] = _mm512_add_epi32(mins[ii], _mm512_mullo_epi32(mn0, _mm512_set1_epi32(bs[2 * j0] + bs[2 * j0 + 1])));
                mins[ii] = _mm512_add_epi32(mins[ii], _mm512_mullo_epi32(mn1, _mm512_set1_epi32(bs[2 * j1] + bs[2 * j1 + 1])));
            }
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
            const __m512 xd = _mm512_set1_ps(xb[ii][b].d);
            acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[ii]), _mm512_mul_ps(wd, xd), acc[ii]);
            acc[ii] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[ii]), _mm512_mul_ps(wdmin, xd), acc[ii]);
        }
    }
    store_rows(a, r, i, NI, acc);
}

INLINE void q4_k_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { kx_x16_micro(a, r, i, NI, false, false); }
INLINE void q5_k_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { kx_x16_micro(a, r, i, NI, true, false); }
INLINE void q4_k_l2_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { kx_x16_micro(a, r, i, NI, false, true); }
INLINE void q5_k_l2_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { kx_x16_micro(a, r, i, NI, true, true); }
DEFINE_X16_TILE(q4_k_x16, 4)
DEFINE_X16_TILE(q5_k_x16, 4)
DEFINE_X16_TILE(q4_k_l2_x16, 4)
DEFINE_X16_TILE(q5_k_l2_x16, 4)

/* ---------------------------------------------------------------- Q6_K × Q8_K */

INLINE void q6_k_any_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI, const bool to_l2) {
    const int64_t nb = a->cols / QK_K;
    const size_t col_bytes = 16 * sizeof(block_q6_k);
    const uint8_t *grp = a->w + (size_t)r * a->w_stride;
    const block_q8_k *xb[4];
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
        acc[ii] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *col = grp + (size_t)b * col_bytes;
        if (NI == 1) prefetch_col(col, col_bytes, prefetch_ahead(col_bytes), to_l2);
        const __m512 wd = f16x16(col);
        __m512i tot[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) tot[ii] = _mm512_setzero_si512();
        for (int g = 0; g < 8; g++) {
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                /* Sub-block s = 2g+h: elements 32g+16h+4w+i, low (h=0) or high (h=1) nibbles of ql words 4g+w,
                 * top bits in bits 2w..2w+1 of qh word 2g+h. */
                const int s = 2 * g + h;
                const __m512i qh = _mm512_loadu_si512(col + 2336 + 64 * s);
                __m512i is[4];
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) is[ii] = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (int w = 0; w < 4; w++) {
                    __m512i ql = _mm512_loadu_si512(col + 288 + 64 * (4 * g + w));
                    if (h) ql = _mm512_srli_epi16(ql, 4);
                    const __m512i v = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(move_bits(qh, 2 * w, 4), m30));
                    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
                        is[ii] = _mm512_dpbusd_epi32(is[ii], v, bcast32(xb[ii][b].qs + 16 * s + 4 * w));
                }
                const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(col + 32 + 16 * s)));
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                    /* q - 32: take 32 * (sum of the sub-block's activations) back before scaling */
                    const __m512i c = _mm512_sub_epi32(is[ii], _mm512_set1_epi32(32 * xb[ii][b].bsums[s]));
                    tot[ii] = _mm512_add_epi32(tot[ii], _mm512_mullo_epi32(c, sc));
                }
            }
        }
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
            acc[ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[ii]), _mm512_mul_ps(wd, _mm512_set1_ps(xb[ii][b].d)), acc[ii]);
    }
    store_rows(a, r, i, NI, acc);
}
INLINE void q6_k_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { q6_k_any_x16_micro(a, r, i, NI, false); }
INLINE void q6_k_l2_x16_micro(const mm_args *a, int64_t r, int64_t i, const int NI) { q6_k_any_x16_micro(a, r, i, NI, true); }
DEFINE_X16_TILE(q6_k_x16, 4)
DEFINE_X16_TILE(q6_k_l2_x16, 4)

/* ---------------------------------------------------------------- table */

/* The L2-prefetching tiles on AMD CPUs (CPUID vendor "AuthenticAMD": measured on Zen 4, whose AVX-512 runs as
 * 2 x 256 bits): the K-quants as above, and the 32-element types too (lfm2-350m's shapes, one thread, bench_matmul
 * --cputime, load ~4.8, 4 alternating rounds: Q4_0 14-18 -> 18-18.4 GB/s, Q8_0 15.5-18 -> 19.4-20.5); Intel keeps
 * the prefetcht0 tiles its figures were taken with. TOKROUTE_PREFETCH=l1|l2 overrides
 * the choice (for comparing the two on one machine). */
static bool prefetch_to_l2(void) {
    const char *env = getenv("TOKROUTE_PREFETCH");
    if (env && strcmp(env, "l1") == 0) return false;
    if (env && strcmp(env, "l2") == 0) return true;
    unsigned max_leaf, vendor[3];
    if (!__get_cpuid(0, &max_leaf, &vendor[0], &vendor[2], &vendor[1])) return false;
    return memcmp(vendor, "AuthenticAMD", 12) == 0;
}

void mm_isa_avx512_x16(mm_isa *isa) {
    /* Q4_0, Q5_0 and Q8_0 switch to activations with block sums; their plain tiles read the same rows. */
    const tr_type with_sums[] = {TR_TYPE_Q4_0, TR_TYPE_Q5_0, TR_TYPE_Q8_0};
    for (size_t t = 0; t < sizeof with_sums / sizeof with_sums[0]; t++) {
        isa->k[with_sums[t]].quant = quantize_q8_0_soa_sums;
        isa->k[with_sums[t]].x_row_bytes = q8_0_soa_sums_row_bytes;
    }
    const bool to_l2 = prefetch_to_l2();
    isa->k[TR_TYPE_Q4_0].tile_x16 = to_l2 ? tile_q4_0_l2_x16 : tile_q4_0_x16;
    isa->k[TR_TYPE_Q5_0].tile_x16 = to_l2 ? tile_q5_0_l2_x16 : tile_q5_0_x16;
    isa->k[TR_TYPE_Q8_0].tile_x16 = to_l2 ? tile_q8_0_l2_x16 : tile_q8_0_x16;
    isa->k[TR_TYPE_Q4_1].tile_x16 = to_l2 ? tile_q4_1_l2_x16 : tile_q4_1_x16;
    isa->k[TR_TYPE_Q5_1].tile_x16 = to_l2 ? tile_q5_1_l2_x16 : tile_q5_1_x16;
    isa->k[TR_TYPE_Q4_K].tile_x16 = to_l2 ? tile_q4_k_l2_x16 : tile_q4_k_x16;
    isa->k[TR_TYPE_Q5_K].tile_x16 = to_l2 ? tile_q5_k_l2_x16 : tile_q5_k_x16;
    isa->k[TR_TYPE_Q6_K].tile_x16 = to_l2 ? tile_q6_k_l2_x16 : tile_q6_k_x16;
}
