/* matmul_avx2.c — AVX2 + FMA + F16C tiles, for x86 machines without AVX-512 VNNI. Same plan as the AVX-512 file:
 * RT rows × IT tokens micro-tiles with register accumulators, the same activation formats (SoA Q8_0, Q8_K), and
 * integer sums per block. Without vpdpbusd, byte products go through vpmaddubsw (unsigned × signed → 16-bit pairs)
 * and vpmaddwd. vpmaddubsw saturates above 32767, so signed Q8_0 weights use the sign trick (|w| × sign(w)·x,
 * at most 2·128·127) rather than a +128 shift; unsigned nibble weights (≤ 31) are safe as they are. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/avx2_inline.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL _Pragma("GCC unroll 4")

#define DEFINE_TILE(name, RT, IT)                                                                            \
    static void name##_full(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, RT, IT); }     \
    static void name##_rows(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, RT, 1); }      \
    static void name##_toks(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, 1, IT); }      \
    static void name##_one(const mm_args *a, int64_t r, int64_t i) { name##_micro(a, r, i, 1, 1); }        \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        int64_t r = r0;                                                                                     \
        for (; r + RT <= r1; r += RT) {                                                                     \
            int64_t i = i0;                                                                                 \
            for (; i + IT <= i1; i += IT) name##_full(a, r, i);                                             \
            for (; i < i1; i++) name##_rows(a, r, i);                                                       \
        }                                                                                                   \
        for (; r < r1; r++) {                                                                               \
            int64_t i = i0;                                                                                 \
            for (; i + IT <= i1; i += IT) name##_toks(a, r, i);                                             \
            for (; i < i1; i++) name##_one(a, r, i);                                                        \
        }                                                                                                   \
    }

INLINE float f16_scalar(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

/* Sums of adjacent byte products into 8 int32 lanes. */
INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* ---------------------------------------------------------------- Q8_0, Q4_0, Q5_0 × Q8_0 (SoA activations) */

enum { K_Q8_0, K_Q4_0, K_Q5_0 };

/* Block b of a row as 32 bytes in element order (signed for Q8_0, unsigned nibbles+fifth bit otherwise). */
INLINE __m256i load_w32(const uint8_t *row, int64_t b, int kind, float *scale) {
    if (kind == K_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        *scale = f16_scalar(x->d);
        return _mm256_loadu_si256((const __m256i *)x->qs);
    }
    const uint8_t *qs;
    uint32_t qh = 0;
    if (kind == K_Q4_0) {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        qs = x->qs, *scale = f16_scalar(x->d);
    } else {
        const block_q5_0 *x = (const block_q5_0 *)row + b;
        qs = x->qs, *scale = f16_scalar(x->d);
        memcpy(&qh, x->qh, 4);
    }
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
    if (kind == K_Q5_0) {
        /* Spread the 32 qh bits to bytes: byte j takes qh byte j/8, then tests bit j%8. */
        const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
        const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
        h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits);
        w = _mm256_or_si256(w, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
    }
    return w;
}

INLINE void w32_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI, const int kind) {
    const int64_t nb = a->cols / 32;
    const int8_t *xq[4];
    const float *xd[4];
    const uint8_t *wr[4];
    __m256 acc[4][4];
    UNROLL for (int ii = 0; ii < NI; ii++) {
        xq[ii] = (const int8_t *)(a->x + (size_t)(i + ii) * a->x_stride);
        xd[ii] = (const float *)(xq[ii] + a->cols);
    }
    UNROLL for (int rr = 0; rr < NR; rr++) wr[rr] = a->w + (size_t)(r + rr) * a->w_stride;
    UNROLL for (int rr = 0; rr < NR; rr++) UNROLL for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm256_setzero_ps();
    const __m256i off = _mm256_set1_epi16((short)-(kind == K_Q4_0 ? 8 : 16));
    for (int64_t b = 0; b < nb; b++) {
        __m256i xv[4], xc[4];
        UNROLL for (int ii = 0; ii < NI; ii++) {
            xv[ii] = _mm256_loadu_si256((const __m256i *)(xq[ii] + 32 * b));
            /* Nibble weights carry an offset: start from -off * (activation sums), once per token. */
            if (kind != K_Q8_0) xc[ii] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xv[ii]), off);
        }
        UNROLL for (int rr = 0; rr < NR; rr++) {
            float ws;
            const __m256i w = load_w32(wr[rr], b, kind, &ws);
            const __m256i wabs = kind == K_Q8_0 ? _mm256_sign_epi8(w, w) : w;
            UNROLL for (int ii = 0; ii < NI; ii++) {
                __m256i s;
                if (kind == K_Q8_0) s = dot_u8s8(wabs, _mm256_sign_epi8(xv[ii], w));
                else s = _mm256_add_epi32(dot_u8s8(w, xv[ii]), xc[ii]);
                acc[rr][ii] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(ws * xd[ii][b]), acc[rr][ii]);
            }
        }
    }
    UNROLL for (int ii = 0; ii < NI; ii++) UNROLL for (int rr = 0; rr < NR; rr++)
        a->y[(i + ii) * a->ldy + r + rr] = hsum8(acc[rr][ii]);
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
DEFINE_TILE(q8_0, 4, 2)
DEFINE_TILE(q4_0, 4, 2)
DEFINE_TILE(q5_0, 4, 2)

/* ---------------------------------------------------------------- K-quants × Q8_K */

enum { K_Q4_K, K_Q5_K, K_Q6_K };

/* Q4_K/Q5_K 6-bit scales and mins as bytes (layout in blocks.h). */
INLINE void kx_scales(const uint8_t *packed, uint8_t sc[8], uint8_t m[8]) {
    uint32_t u[3], o[4];
    memcpy(u, packed, 12);
    o[0] = u[0] & 0x3f3f3f3f;
    o[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    o[2] = u[1] & 0x3f3f3f3f;
    o[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    memcpy(sc, o, 8);
    memcpy(m, o + 2, 8);
}

/* Weights of 32-element piece p (0..7) of a K-quant block, unsigned. Q4_K/Q5_K piece p is sub-block p; Q6_K piece
 * p covers sub-blocks 2p and 2p+1 (16 each). */
INLINE __m256i kq_piece(int kind, const uint8_t *qs, const uint8_t *qh, int p) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (kind == K_Q6_K) {
        /* Half h = p/4; within it, piece k = p%4 takes ql[l] (k even) or ql[l+32] (k odd), low nibble for k < 2,
         * and the qh[l] bit pair 2k..2k+1, moved to bits 4-5. */
        const int h = p / 4, k = p % 4;
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(qs + 64 * h + 32 * (k & 1)));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
        const __m256i lo = k < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
        __m256i hi;
        if (k == 0) hi = _mm256_slli_epi16(hb, 4);
        else if (k == 1) hi = _mm256_slli_epi16(hb, 2);
        else if (k == 2) hi = hb;
        else hi = _mm256_srli_epi16(hb, 2);
        return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    }
    /* Chunk c = p/2 of 32 bytes: low nibbles are sub-block 2c, high nibbles 2c+1. */
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (p / 2)));
    __m256i w = p % 2 == 0 ? _mm256_and_si256(v, m4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (kind == K_Q5_K) {
        /* Bit p of qh[l] is the fifth bit of sub-block p's element l. */
        const __m256i bit = _mm256_set1_epi8((char)(1 << p));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
        w = _mm256_or_si256(w, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit),
                                                _mm256_set1_epi8(0x10)));
    }
    return w;
}

INLINE void kq_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI, const int kind) {
    const int64_t nb = a->cols / QK_K;
    const block_q8_k *xb[4];
    const uint8_t *wr[4];
    __m256 acc[4][4];
    UNROLL for (int ii = 0; ii < NI; ii++) xb[ii] = (const block_q8_k *)(a->x + (size_t)(i + ii) * a->x_stride);
    UNROLL for (int rr = 0; rr < NR; rr++) wr[rr] = a->w + (size_t)(r + rr) * a->w_stride;
    UNROLL for (int rr = 0; rr < NR; rr++) UNROLL for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        UNROLL for (int rr = 0; rr < NR; rr++) {
            const uint8_t *qs, *qh = NULL;
            float dw, dmin = 0.0f;
            uint8_t sc[8], mn[8];
            __m256i sc16 = _mm256_setzero_si256(); /* Q6_K: the 16 scales as words */
            if (kind == K_Q6_K) {
                const block_q6_k *w = (const block_q6_k *)wr[rr] + b;
                qs = w->ql, qh = w->qh, dw = f16_scalar(w->d);
                sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
            } else if (kind == K_Q4_K) {
                const block_q4_k *w = (const block_q4_k *)wr[rr] + b;
                qs = w->qs, dw = f16_scalar(w->d), dmin = f16_scalar(w->dmin);
                kx_scales(w->scales, sc, mn);
            } else {
                const block_q5_k *w = (const block_q5_k *)wr[rr] + b;
                qs = w->qs, qh = w->qh, dw = f16_scalar(w->d), dmin = f16_scalar(w->dmin);
                kx_scales(w->scales, sc, mn);
            }
            __m256i isum[4];
            UNROLL for (int ii = 0; ii < NI; ii++) isum[ii] = _mm256_setzero_si256();
            for (int p = 0; p < 8; p++) {
                const __m256i w = kq_piece(kind, qs, qh, p);
                __m256i s16;
                if (kind == K_Q6_K) {
                    const int8_t *s6 = ((const block_q6_k *)wr[rr] + b)->scales;
                    s16 = _mm256_set_m128i(_mm_set1_epi16(s6[2 * p + 1]), _mm_set1_epi16(s6[2 * p]));
                } else {
                    s16 = _mm256_set1_epi16(sc[p]);
                }
                UNROLL for (int ii = 0; ii < NI; ii++) {
                    const __m256i prod = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(xb[ii][b].qs + 32 * p)));
                    isum[ii] = _mm256_add_epi32(isum[ii], _mm256_madd_epi16(prod, s16));
                }
            }
            UNROLL for (int ii = 0; ii < NI; ii++) {
                const __m256i bs = _mm256_loadu_si256((const __m256i *)xb[ii][b].bsums);
                __m256 t;
                if (kind == K_Q6_K) {
                    /* q - 32: subtract 32 * sum_j sc_j * bsum_j. */
                    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5);
                    t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[ii], corr)), _mm256_set1_ps(dw));
                } else {
                    /* mins (as int32 lanes, < 64) against the pair sums of bsums (< 2^15): one madd. */
                    const __m256i pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
                    const __m256i mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)mn));
                    const __m256i mm = _mm256_madd_epi16(mins, pairs);
                    t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[ii]), _mm256_set1_ps(dw));
                    t = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(dmin), t);
                }
                acc[rr][ii] = _mm256_fmadd_ps(t, _mm256_set1_ps(xb[ii][b].d), acc[rr][ii]);
            }
        }
    }
    UNROLL for (int ii = 0; ii < NI; ii++) UNROLL for (int rr = 0; rr < NR; rr++)
        a->y[(i + ii) * a->ldy + r + rr] = hsum8(acc[rr][ii]);
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
DEFINE_TILE(q4_k, 1, 4)
DEFINE_TILE(q5_k, 1, 4)
DEFINE_TILE(q6_k, 1, 4)

/* ---------------------------------------------------------------- F32, F16, BF16 × F32 */

enum { K_F32, K_F16, K_BF16 };

INLINE __m256 load_wf(const uint8_t *row, int64_t k, int kind) {
    if (kind == K_F32) return _mm256_loadu_ps((const float *)row + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
    if (kind == K_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float wf_scalar(const uint8_t *row, int64_t k, int kind) {
    if (kind == K_F32) return ((const float *)row)[k];
    const uint16_t h = ((const uint16_t *)row)[k];
    return kind == K_F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

INLINE void wf_micro(const mm_args *a, int64_t r, int64_t i, const int NR, const int NI, const int kind) {
    const float *x[4];
    const uint8_t *wr[4];
    __m256 acc[4][4];
    UNROLL for (int ii = 0; ii < NI; ii++) x[ii] = (const float *)(a->x + (size_t)(i + ii) * a->x_stride);
    UNROLL for (int rr = 0; rr < NR; rr++) wr[rr] = a->w + (size_t)(r + rr) * a->w_stride;
    UNROLL for (int rr = 0; rr < NR; rr++) UNROLL for (int ii = 0; ii < NI; ii++) acc[rr][ii] = _mm256_setzero_ps();
    const int64_t n8 = a->cols / 8 * 8;
    for (int64_t k = 0; k < n8; k += 8) {
        UNROLL for (int rr = 0; rr < NR; rr++) {
            const __m256 w = load_wf(wr[rr], k, kind);
            UNROLL for (int ii = 0; ii < NI; ii++)
                acc[rr][ii] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[ii] + k), acc[rr][ii]);
        }
    }
    UNROLL for (int ii = 0; ii < NI; ii++) UNROLL for (int rr = 0; rr < NR; rr++) {
        float s = hsum8(acc[rr][ii]);
        for (int64_t k = n8; k < a->cols; k++) s += wf_scalar(wr[rr], k, kind) * x[ii][k];
        a->y[(i + ii) * a->ldy + r + rr] = s;
    }
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
DEFINE_TILE(f32, 2, 4)
DEFINE_TILE(f16, 2, 4)
DEFINE_TILE(bf16, 2, 4)

/* ---------------------------------------------------------------- table */

void mm_isa_avx2(mm_isa *isa) {
    isa->name = "avx2";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_F16] = (mm_kernel){tile_f16, NULL, NULL, NULL};
    isa->k[TR_TYPE_BF16] = (mm_kernel){tile_bf16, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_0] = (mm_kernel){tile_q5_0, quantize_q8_0_soa_avx2, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_K] = (mm_kernel){tile_q4_k, quantize_q8_k_avx2, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_K] = (mm_kernel){tile_q5_k, quantize_q8_k_avx2, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q6_K] = (mm_kernel){tile_q6_k, quantize_q8_k_avx2, q8_k_row_bytes, NULL};
}
