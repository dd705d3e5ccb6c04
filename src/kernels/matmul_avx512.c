/* matmul_avx512.c — AVX-512 (F, BW, VL, DQ, VNNI) tiles. Every kernel is a micro-tile of RT weight rows × IT tokens
 * whose accumulators live in registers, so each unpacked weight vector is reused across IT tokens and each
 * activation vector across RT rows; partial tiles at the edges use the same code with smaller constants.
 *
 * Integer products use vpdpbusd (unsigned × signed bytes). Unsigned weights (Q4_0, Q5_0, Q4_K, Q5_K, Q6_K nibbles)
 * go in the unsigned slot and their offset (-8, -16, -32) is taken back through the activation sums; signed Q8_0
 * weights are shifted to w + 128 (w ^ 0x80) and handled the same way, so the correction costs one instruction per
 * token, shared by all rows of a tile. K-quant
 * sub-block scales are applied in 16 bits (vpmaddubsw then vpdpwssd) so the whole 256-block sums in integers. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Runs micro(a, r, i, NR, NI) over the tile with RT×IT blocks, then the edges. */
#define DEFINE_TILE(name, RT, IT)                                                                            \
    static void name##_full(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, RT, IT); }     \
    static void name##_rows(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, RT, 1); }      \
    static void name##_rows2(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, RT, 2); }     \
    static void name##_rows3(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, RT, 3); }     \
    static void name##_toks(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, 1, IT); }      \
    static void name##_one(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, 1, 1); }        \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        int64_t r = r0;                                                                                     \
        for (; r + RT <= r1; r += RT) {                                                                     \
            int64_t i = i0;                                                                                 \
            for (; i + IT <= i1; i += IT) name##_full(a, r, i);                                             \
            /* the last 1-3 tokens in one pass over the rows (IT is 4) */                                   \
            if (IT == 4 && i1 - i == 3) name##_rows3(a, r, i);                                              \
            else if (IT == 4 && i1 - i == 2) name##_rows2(a, r, i);                                         \
            else for (; i < i1; i++) name##_rows(a, r, i);                                                  \
        }                                                                                                   \
        for (; r < r1; r++) {                                                                               \
            int64_t i = i0;                                                                                 \
            for (; i + IT <= i1; i += IT) name##_toks(a, r, i);                                             \
            for (; i < i1; i++) name##_one(a, r, i);                                                        \
        }                                                                                                   \
    }

/* Two floats into lanes 0-1, from any 4-byte aligned address (the Q8_1 sums follow an odd number of scales when
 * a row has an odd number of blocks). */
INLINE __m128 load_2f(const float *p) { return _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)p)); }

/* Lanes 0-7 get f[0], lanes 8-15 f[1] (the two blocks a 64-byte vector holds). */
INLINE __m512 spread_pair(__m128 f) {
    const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

/* ---------------------------------------------------------------- Q8_0, Q4_0, Q5_0 × Q8_0 (SoA activations) */

enum { K_Q8_0, K_Q4_0, K_Q5_0, K_Q4_1, K_Q5_1 };

/* Decode streams RT rows side by side, more than the hardware prefetcher follows well: ask ~1 KiB ahead. */
#define PREFETCH_BYTES 1024

/* Scales of blocks b, b+1 as lanes 0-7 and 8-15 (F16 broadcast, then one conversion). */
INLINE __m512 w_scales(uint16_t d0, uint16_t d1) {
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)d1), _mm_set1_epi16((short)d0)));
}

/* Weights of blocks b and b+1 (only b when !two) as 64 unsigned bytes in element order, and their scales. Q8_0's
 * signed weights become w + 128 (w ^ 0x80); the caller subtracts the offset through the activation sums. */
INLINE __m512i load_w32(const uint8_t *row, int64_t b, int two, int kind, __m512 *scale, __m512 *mins) {
    if (kind == K_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        const __m256i lo = _mm256_loadu_si256((const __m256i *)x[0].qs);
        const __m256i hi = two ? _mm256_loadu_si256((const __m256i *)x[1].qs) : _mm256_setzero_si256();
        *scale = w_scales(x[0].d, two ? x[1].d : 0);
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8((char)0x80));
    }
    const uint8_t *qs0, *qs1;
    uint16_t d0, d1;
    uint32_t qh0 = 0, qh1 = 0;
    if (kind == K_Q4_0) {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        qs0 = x[0].qs, qs1 = x[two].qs, d0 = x[0].d, d1 = two ? x[1].d : 0;
    } else if (kind == K_Q5_0) {
        const block_q5_0 *x = (const block_q5_0 *)row + b;
        qs0 = x[0].qs, qs1 = x[two].qs, d0 = x[0].d, d1 = two ? x[1].d : 0;
        memcpy(&qh0, x[0].qh, 4);
        if (two) memcpy(&qh1, x[1].qh, 4);
    } else if (kind == K_Q4_1) {
        const block_q4_1 *x = (const block_q4_1 *)row + b;
        qs0 = x[0].qs, qs1 = x[two].qs, d0 = x[0].d, d1 = two ? x[1].d : 0;
        /* m of block b in lane 0, of block b+1 in lane 8 (zero F16 words elsewhere) */
        *mins = _mm512_cvtph_ps(_mm256_set_m128i(_mm_cvtsi32_si128(two ? x[1].m : 0), _mm_cvtsi32_si128(x[0].m)));
    } else {
        const block_q5_1 *x = (const block_q5_1 *)row + b;
        qs0 = x[0].qs, qs1 = x[two].qs, d0 = x[0].d, d1 = two ? x[1].d : 0;
        memcpy(&qh0, x[0].qh, 4);
        if (two) memcpy(&qh1, x[1].qh, 4);
        *mins = _mm512_cvtph_ps(_mm256_set_m128i(_mm_cvtsi32_si128(two ? x[1].m : 0), _mm_cvtsi32_si128(x[0].m)));
    }
    /* (A missing block b+1 reads as zeros; its activations are zero too.) 128-bit lanes [q0, q0, q1, q1] shifted by [0, 4, 0, 4]: low nibbles (elements 0-15) then high (16-31). */
    const __m128i q0 = _mm_loadu_si128((const __m128i *)qs0);
    const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)qs1) : _mm_setzero_si128();
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(q0)),
                                         _mm256_broadcastsi128_si256(q1), 1);
    const __m512i shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    __m512i w = _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(0x0F));
    if (kind == K_Q5_0 || kind == K_Q5_1) {
        /* Bit j of qh is the fifth bit of element j; the two blocks' words make one 64-bit byte mask. */
        const __mmask64 high = (__mmask64)qh0 | ((__mmask64)qh1 << 32);
        w = _mm512_mask_add_epi8(w, high, w, _mm512_set1_epi8(16));
    }
    *scale = w_scales(d0, d1);
    return w;
}

INLINE void w32_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI, const int kind) {
    const int64_t nb = a->cols / 32;
    const int with_min = kind == K_Q4_1 || kind == K_Q5_1; /* Q8_1 activations: value = d*q + m */
    const int8_t *xq[4];
    const float *xd[4], *xsum[4];
    const uint8_t *wr[4];
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
        xsum[ii] = xd[ii] + nb;
    }
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) wr[rr] = a->w + (size_t)(r + rr) * a->w_stride;
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++)
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    const __m512i offset = _mm512_set1_epi8(kind == K_Q8_0 ? (char)0x80 : kind == K_Q4_0 ? 8 : 16);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i xv[4], xc[4];
        __m512 xs[4], xm[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
            if (two) {
                xv[ii] = _mm512_loadu_si512(xq[ii] + 32 * b);
                xs[ii] = spread_pair(load_2f(xd[ii] + b));
                if (with_min) xm[ii] = spread_pair(load_2f(xsum[ii] + b));
            } else {
                xv[ii] = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xq[ii] + 32 * b)));
                xs[ii] = spread_pair(_mm_load_ss(xd[ii] + b));
                if (with_min) xm[ii] = spread_pair(_mm_load_ss(xsum[ii] + b));
            }
            /* sum (w_u - off) x = sum w_u x - off * sum x: start each lane at -off * (its activation sum). */
            if (!with_min) xc[ii] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, xv[ii]));
            else xc[ii] = zero;
        }
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
            __m512 ws, wm = _mm512_setzero_ps();
            if (NI == 1)
                _mm_prefetch((const char *)wr[rr] + b * (int64_t)(a->w_stride / (size_t)nb) + PREFETCH_BYTES, _MM_HINT_T0);
            const __m512i w = load_w32(wr[rr], b, two, kind, &ws, &wm);
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                const __m512i s = _mm512_dpbusd_epi32(xc[ii], w, xv[ii]);
                acc[rr][ii] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ws, xs[ii]), acc[rr][ii]);
                /* m * s once per block: wm is zero except lanes 0 and 8 */
                if (with_min) acc[rr][ii] = _mm512_fmadd_ps(wm, xm[ii], acc[rr][ii]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++)
            a->y[(i + ii) * a->ldy + r + rr] = _mm512_reduce_add_ps(acc[rr][ii]);
}

INLINE void q8_0_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    w32_micro(a, r, i, NR, NI, K_Q8_0);
}
INLINE void q4_0_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    w32_micro(a, r, i, NR, NI, K_Q4_0);
}
INLINE void q5_0_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    w32_micro(a, r, i, NR, NI, K_Q5_0);
}
INLINE void q4_1_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    w32_micro(a, r, i, NR, NI, K_Q4_1);
}
INLINE void q5_1_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    w32_micro(a, r, i, NR, NI, K_Q5_1);
}
DEFINE_TILE(q8_0, 4, 4)
DEFINE_TILE(q4_1, 4, 4)
DEFINE_TILE(q5_1, 4, 4)
DEFINE_TILE(q4_0, 4, 4)
DEFINE_TILE(q5_0, 4, 4)

/* ---------------------------------------------------------------- K-quants × Q8_K */

enum { K_Q4_K, K_Q5_K, K_Q6_K };

/* Q4_K/Q5_K 6-bit scales and mins as bytes: sc[0..7] in *sc, m[0..7] in *m (layout in blocks.h). */
INLINE void kx_scales(const uint8_t *packed, uint64_t *sc, uint64_t *m) {
    uint32_t u[3];
    memcpy(u, packed, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *m = m_lo | (uint64_t)m_hi << 32;
}

/* Word index vectors selecting, for 64-element chunk c, the scale of each 16-bit product lane. Q4_K/Q5_K: two
 * sub-blocks of 32 per chunk (16 words each); Q6_K: four sub-blocks of 16 (8 words each). */
INLINE __m512i kx_scale_index(int c) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * c))),
                              _mm256_set1_epi16((short)(2 * c + 1)), 1);
}
INLINE __m512i q6_scale_index(int c) {
    const __m128i a = _mm_set1_epi16((short)(4 * c)), b = _mm_set1_epi16((short)(4 * c + 1));
    const __m128i cc = _mm_set1_epi16((short)(4 * c + 2)), d = _mm_set1_epi16((short)(4 * c + 3));
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b, a)), _mm256_set_m128i(d, cc), 1);
}

INLINE void kq_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI, const int kind) {
    const int64_t nb = a->cols / QK_K;
    const block_q8_k *xb[4];
    const uint8_t *wr[4];
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) wr[rr] = a->w + (size_t)(r + rr) * a->w_stride;
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++)
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    for (int64_t b = 0; b < nb; b++) {
        __m512i isum[4][4];
        __m256i bsum[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
            bsum[ii] = _mm256_loadu_si256((const __m256i *)xb[ii][b].bsums);
            /* Q4_K/Q5_K mins multiply pairs of 16-sums: fold the pairs here, once per token (each fits int16). */
            if (kind != K_Q6_K) bsum[ii] = _mm256_madd_epi16(bsum[ii], _mm256_set1_epi16(1));
        }
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
            __m512i scales;
            __m256i mins; /* Q4_K/Q5_K: 8 mins as int32; Q6_K: unused */
            const uint8_t *qs, *qh = NULL;
            float dw, dmin = 0.0f;
            if (kind == K_Q6_K) {
                const block_q6_k *w = (const block_q6_k *)wr[rr] + b;
                scales = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales)));
                qs = w->ql, qh = w->qh, dw = fp16_to_fp32(w->d);
                mins = _mm256_setzero_si256();
            } else {
                uint64_t sc, m;
                const uint16_t *d2;
                if (kind == K_Q4_K) {
                    const block_q4_k *w = (const block_q4_k *)wr[rr] + b;
                    kx_scales(w->scales, &sc, &m), qs = w->qs, d2 = &w->d;
                } else {
                    const block_q5_k *w = (const block_q5_k *)wr[rr] + b;
                    kx_scales(w->scales, &sc, &m), qs = w->qs, qh = w->qh, d2 = &w->d;
                }
                dw = fp16_to_fp32(d2[0]), dmin = fp16_to_fp32(d2[1]);
                scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
                mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m));
            }
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) isum[rr][ii] = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                __m512i w;
                if (kind == K_Q6_K) {
                    /* Half h = c/2: chunk 2h takes ql[0..63] low nibbles with qh bit pairs 0-1 (first 32) and 2-3;
                     * chunk 2h+1 the high nibbles with pairs 4-5 and 6-7. Pairs land on bits 4-5. */
                    const int h = c / 2;
                    const __m512i ql = _mm512_loadu_si512(qs + 64 * h);
                    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qh + 32 * h)));
                    if (c % 2 == 0) {
                        const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
                        w = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, sh), m30));
                    } else {
                        const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
                        w = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                            _mm512_and_si512(_mm512_srlv_epi16(hb, sh), m30));
                    }
                } else {
                    /* Chunk c: 32 bytes; low nibbles are sub-block 2c, high nibbles 2c+1 — element order. */
                    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
                    w = _mm512_and_si512(_mm512_srlv_epi16(v, nib_shift), m4);
                    if (kind == K_Q5_K) {
                        /* Bit 2c of qh[l] is the fifth bit of element 64c+l, bit 2c+1 that of 64c+32+l. */
                        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
                        const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
                                                               _mm256_set1_epi8((char)(2 << (2 * c))), 1);
                        w = _mm512_mask_add_epi8(w, _mm512_test_epi8_mask(hb, sel), w, _mm512_set1_epi8(16));
                    }
                }
                const __m512i sc16 = _mm512_permutexvar_epi16(kind == K_Q6_K ? q6_scale_index(c) : kx_scale_index(c),
                                                              scales);
                _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                    const __m512i p = _mm512_maddubs_epi16(w, _mm512_loadu_si512(xb[ii][b].qs + 64 * c));
                    isum[rr][ii] = _mm512_dpwssd_epi32(isum[rr][ii], p, sc16);
                }
            }
            const __m512 vdw = _mm512_set1_ps(dw), vdmin = _mm512_set1_ps(dmin);
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) {
                __m512 t;
                if (kind == K_Q6_K) {
                    /* q - 32: subtract 32 * sum_j sc_j * bsum_j. */
                    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm512_castsi512_si256(scales), bsum[ii]), 5);
                    t = _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[rr][ii], _mm512_zextsi256_si512(corr)));
                    t = _mm512_mul_ps(t, vdw);
                } else {
                    /* The 16-bit lanes of mins (< 64) against the pair sums (< 2^15) read as int32 products. */
                    const __m256i mm = _mm256_madd_epi16(mins, bsum[ii]);
                    t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[rr][ii]), vdw);
                    t = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(mm)), vdmin, t);
                }
                acc[rr][ii] = _mm512_fmadd_ps(t, _mm512_set1_ps(xb[ii][b].d), acc[rr][ii]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) a->y[(i + ii) * a->ldy + r + rr] = _mm512_reduce_add_ps(acc[rr][ii]);
}

INLINE void q4_k_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    kq_micro(a, r, i, NR, NI, K_Q4_K);
}
INLINE void q5_k_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    kq_micro(a, r, i, NR, NI, K_Q5_K);
}
INLINE void q6_k_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    kq_micro(a, r, i, NR, NI, K_Q6_K);
}
DEFINE_TILE(q4_k, 2, 4)
DEFINE_TILE(q5_k, 2, 4)
DEFINE_TILE(q6_k, 2, 4)

/* ---------------------------------------------------------------- F32, F16, BF16 × F32 */

enum { K_F32, K_F16, K_BF16 };

INLINE __m512 load_wf(const uint8_t *row, int64_t k, __mmask16 mask, int kind) {
    if (kind == K_F32) return _mm512_maskz_loadu_ps(mask, (const float *)row + k);
    const __m256i h = _mm256_maskz_loadu_epi16(mask, (const uint16_t *)row + k);
    if (kind == K_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16 = top half of f32 */
}

/* The lane sums of 16 vectors at once, v[4 * rr + ii] the accumulator of row rr and token ii: lane 4 * ii + rr of
 * the result is the sum of v[4 * rr + ii]'s lanes, so 128-bit lane ii holds token ii's four rows. A transposing
 * tree of 45 shuffles and adds, where 16 separate reductions take ~130 instructions: with the short rows of the
 * attention's QK product (head_dim 64: 4 steps of 16 FMAs per tile) those reductions were most of the work. */
INLINE __m512 reduce_4x4(const __m512 v[16]) {
    __m512 w[8], z[4], u[2];
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) /* 128-bit lanes 0-1: v[2j]'s halves summed, 2-3: v[2j+1]'s */
        w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) /* 128-bit lane k: four partial sums of v[4j + k] */
        z[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0xDD));
    _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) /* lane k: two partials of v[8j + k], two of v[8j + 4 + k] */
        u[j] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * j], z[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(z[2 * j], z[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane k: the sums of v[k], v[4 + k], v[8 + k], v[12 + k] */
    return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

INLINE void wf_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI, const int kind) {
    const float *x[4];
    const uint8_t *wr[4];
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) x[ii] = (const float *)(a->x + (size_t)(i + ii) * a->x_stride);
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) wr[rr] = a->w + (size_t)(r + rr) * a->w_stride;
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++)
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm512_setzero_ps();
    for (int64_t k = 0; k < a->cols; k += 16) {
        const __mmask16 mask = a->cols - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (a->cols - k)) - 1);
        __m512 xv[4];
        _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) xv[ii] = _mm512_maskz_loadu_ps(mask, x[ii] + k);
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
            const __m512 w = load_wf(wr[rr], k, mask, kind);
            _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm512_fmadd_ps(w, xv[ii], acc[rr][ii]);
        }
    }
    if (NR == 4 && NI == 4) {
        __m512 v[16];
        _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++)
            _Pragma("GCC unroll 4") for (int ii = 0; ii < 4; ii++) v[4 * rr + ii] = acc[rr][ii];
        const __m512 sums = reduce_4x4(v);
        _mm_storeu_ps(a->y + (i + 0) * a->ldy + r, _mm512_extractf32x4_ps(sums, 0));
        _mm_storeu_ps(a->y + (i + 1) * a->ldy + r, _mm512_extractf32x4_ps(sums, 1));
        _mm_storeu_ps(a->y + (i + 2) * a->ldy + r, _mm512_extractf32x4_ps(sums, 2));
        _mm_storeu_ps(a->y + (i + 3) * a->ldy + r, _mm512_extractf32x4_ps(sums, 3));
        return;
    }
    _Pragma("GCC unroll 4") for (int ii = 0; ii < NI; ii++)
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) a->y[(i + ii) * a->ldy + r + rr] = _mm512_reduce_add_ps(acc[rr][ii]);
}

INLINE void f32_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    wf_micro(a, r, i, NR, NI, K_F32);
}
INLINE void f16_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    wf_micro(a, r, i, NR, NI, K_F16);
}
INLINE void bf16_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI) {
    wf_micro(a, r, i, NR, NI, K_BF16);
}
DEFINE_TILE(f32, 4, 4)
DEFINE_TILE(f16, 4, 4)
DEFINE_TILE(bf16, 4, 4)

/* ---------------------------------------------------------------- table */

void mm_isa_avx512(mm_isa *isa) {
    isa->name = "avx512";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_F16] = (mm_kernel){tile_f16, NULL, NULL, NULL};
    isa->k[TR_TYPE_BF16] = (mm_kernel){tile_bf16, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_0] = (mm_kernel){tile_q5_0, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_1] = (mm_kernel){tile_q4_1, quantize_q8_1_soa_avx2, q8_1_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_1] = (mm_kernel){tile_q5_1, quantize_q8_1_soa_avx2, q8_1_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_K] = (mm_kernel){tile_q4_k, quantize_q8_k_avx2, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_K] = (mm_kernel){tile_q5_k, quantize_q8_k_avx2, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q6_K] = (mm_kernel){tile_q6_k, quantize_q8_k_avx2, q8_k_row_bytes, NULL};
}
