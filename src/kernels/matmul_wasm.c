/* matmul_wasm.c — WebAssembly SIMD128 matrix products (wasm_simd128.h); built only where the compiler targets SIMD128
 * (emcc -msimd128: __wasm_simd128__). Q8_0, Q4_0 and Q5_0 (the fallback of Q4_K_M files whose rows are not a
 * multiple of 256, e.g. qwen2.5-0.5b's 896) against Q8_0 activations widened to 16 bits; Q4_K and Q6_K against
 * Q8_K widened likewise; IQ4_NL against SoA Q8_0 and IQ4_XS against Q8_K, one dot product at a time; F32 against
 * F32: the types small models are downloaded in; every other type keeps the portable code.
 *
 * SIMD128's one integer multiply-add is i32x4.dot_i16x8_s (pmaddwd): widening the activations once per product
 * (not once per weight row) and arranging them so that each 16-byte weight load read as 16-bit lanes splits into
 * its elements by shifts and masks alone leaves the weight side a handful of instructions per block; the widened
 * tiles take one weight row against up to 4 activation rows (prefill), unpacking each weight block once. IQ4
 * indices become levels by one i8x16.swizzle. The block sums are exact integers, so only the float scaling and the
 * four-lane accumulation differ from the scalar order (within float rounding). Elsewhere the file is empty (so the
 * builds that take every kernel file, CMake's and check-neon's, need no exception). */
#if defined(__wasm_simd128__)
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/q5_0_wasm.h"
#include "kernels/quants.h"

#include <string.h>
#include <wasm_simd128.h>

/* Sum over 16 signed byte products a[i]*b[i] added into 4 int32 lanes. */
static inline v128_t dot16(v128_t acc, v128_t a, v128_t b) {
    const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b));
    const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b));
    return wasm_i32x4_add(acc, wasm_i32x4_add(lo, hi));
}

static inline float hsum_f32(v128_t v) {
    return wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1) + wasm_f32x4_extract_lane(v, 2) +
           wasm_f32x4_extract_lane(v, 3);
}

/* ---------------------------------------------------------------- Q8_0, Q4_0 × Q8_0 widened to 16 bits */

/* SIMD128's one multiply-add is i32x4.dot_i16x8_s (pmaddwd), so the activations are widened to 16 bits once per
 * product (quantize_q8_0_w16), not once per weight row, and arranged so that a weight block becomes four i16x8
 * vectors by shifts and masks alone: for block b, 32 int16 quants in the order of its elements j = 0,2,..,14 |
 * 16,18,..,30 | 1,3,..,15 | 17,19,..,31 (a 16-byte load of Q4_0 nibbles or Q8_0 bytes read as eight 16-bit lanes
 * yields exactly these: low/high nibble of the even bytes, low/high nibble of the odd bytes; for Q8_0 the even and
 * odd bytes of each half). After the nb * 32 quants: nb float scales (llama.cpp's F16 values, widened), then nb
 * int32 values 2 * sum(quants), which Q4_0 takes off each of its four lanes for its -8 offset, then per block the
 * sums of the quants each of the four i32x4.dot lanes meets (lane l: positions 2l, 2l + 1 of each group of 8),
 * which Q5_0 takes off its lanes 16 times: its lanes then hold exactly the integers of a Q8_0 block with q - 16
 * (what convert_wasm.c converts it to), so the two types' products are bit-identical. The quants are
 * quantize_q8_0's, so every block's integer sum is the scalar code's exactly. */
static size_t q8_0_w16_row_bytes(int64_t cols) { return (size_t)cols * 2 + (size_t)(cols / QK8_0) * 24; }

static void quantize_q8_0_w16(const float *x, void *dst, int64_t n) {
    const int64_t nb = n / QK8_0;
    int16_t *q = dst;
    float *d = (float *)(q + n);
    int32_t *sum2 = (int32_t *)(d + nb), *lane_sums = sum2 + nb;
    for (int64_t b = 0; b < nb; b++, q += QK8_0) {
        int8_t soa[QK8_0 + sizeof(float)]; /* one block as quantize_q8_0_soa writes it: 32 quants, then the scale */
        quantize_q8_0_soa(x + QK8_0 * b, soa, QK8_0);
        memcpy(&d[b], soa + QK8_0, sizeof(float));
        int32_t s = 0;
        for (int k = 0; k < 8; k++) {
            q[k] = soa[2 * k], q[8 + k] = soa[16 + 2 * k], q[16 + k] = soa[2 * k + 1], q[24 + k] = soa[17 + 2 * k];
            s += soa[2 * k] + soa[2 * k + 1] + soa[16 + 2 * k] + soa[17 + 2 * k];
        }
        sum2[b] = 2 * s;
        for (int l = 0; l < 4; l++) {
            int32_t t = 0;
            for (int m = 0; m < 4; m++) t += q[8 * m + 2 * l] + q[8 * m + 2 * l + 1];
            lane_sums[4 * b + l] = t;
        }
    }
}

/* Four F16 values widened to float at once, exactly for every finite half: the exponent and mantissa bits moved
 * to their float places make the value times 2^-112 (a normal half a normal float, a subnormal one a subnormal
 * float, whose mantissa is the half's), so one multiply by 2^112 gives it; then the sign. */
static inline v128_t fp16x4_to_f32(uint16_t a, uint16_t b, uint16_t c, uint16_t e) {
    const v128_t h = wasm_i32x4_make(a, b, c, e);
    const v128_t magnitude = wasm_f32x4_mul(wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7FFF)), 13),
                                            wasm_f32x4_splat(0x1.0p112f));
    return wasm_v128_or(magnitude, wasm_v128_and(wasm_i32x4_shl(h, 16), wasm_i32x4_splat((int32_t)0x80000000)));
}

/* One 32-weight block as the four i16x8 vectors matching the widened activations' order. */
static inline void w16_unpack_q4_0(const block_q4_0 *q, v128_t v[4]) {
    const v128_t p = wasm_v128_load(q->qs), nib = wasm_i16x8_splat(0x0F);
    v[0] = wasm_v128_and(p, nib);
    v[1] = wasm_v128_and(wasm_u16x8_shr(p, 4), nib);
    v[2] = wasm_v128_and(wasm_u16x8_shr(p, 8), nib);
    v[3] = wasm_u16x8_shr(p, 12);
}

static inline void w16_unpack_q8_0(const block_q8_0 *q, v128_t v[4]) {
    const v128_t lo = wasm_v128_load(q->qs), hi = wasm_v128_load(q->qs + 16);
    v[0] = wasm_i16x8_shr(wasm_i16x8_shl(lo, 8), 8), v[2] = wasm_i16x8_shr(lo, 8);
    v[1] = wasm_i16x8_shr(wasm_i16x8_shl(hi, 8), 8), v[3] = wasm_i16x8_shr(hi, 8);
}

/* Q5_0: its values as bytes (q5_0_wasm.h), then even bytes and odd bytes as 16-bit lanes are the four vectors. */
static inline void w16_unpack_q5_0(const block_q5_0 *q, v128_t v[4]) {
    const v128_t low_byte = wasm_i16x8_splat(0x00FF);
    v128_t lo, hi;
    q5_0_values(q, &lo, &hi);
    v[0] = wasm_v128_and(lo, low_byte), v[2] = wasm_u16x8_shr(lo, 8);
    v[1] = wasm_v128_and(hi, low_byte), v[3] = wasm_u16x8_shr(hi, 8);
}

enum { W16_Q8_0, W16_Q4_0, W16_Q5_0 };

/* Block b of a weight row as four i16x8 vectors; Q4_0 and Q5_0 unsigned (their offsets 8 and 16 come off the sum
 * through the activations' sums: for Q4_0 2 * sum per lane is 8 * sum over the four lanes; for Q5_0 16 times each
 * lane's own sum, which leaves each lane what Q8_0's signed values give). */
__attribute__((always_inline)) static inline void w16_unpack(const uint8_t *wrow, int64_t b, const int kind, v128_t v[4]) {
    if (kind == W16_Q4_0) w16_unpack_q4_0((const block_q4_0 *)wrow + b, v);
    else if (kind == W16_Q5_0) w16_unpack_q5_0((const block_q5_0 *)wrow + b, v);
    else w16_unpack_q8_0((const block_q8_0 *)wrow + b, v);
}

/* A block's lanes less the weights' offset; sum2 and lanes are the block's activation sums (quantize_q8_0_w16). */
static inline v128_t w16_offset(v128_t s, const int32_t *sum2, const int32_t *lanes, const int kind) {
    if (kind == W16_Q4_0) return wasm_i32x4_sub(s, wasm_v128_load32_splat(sum2));
    if (kind == W16_Q5_0) return wasm_i32x4_sub(s, wasm_i32x4_shl(wasm_v128_load(lanes), 4));
    return s;
}

static inline v128_t w16_block_sum(const v128_t v[4], const int16_t *x) {
    const v128_t a = wasm_i32x4_add(wasm_i32x4_dot_i16x8(v[0], wasm_v128_load(x)),
                                    wasm_i32x4_dot_i16x8(v[1], wasm_v128_load(x + 8)));
    const v128_t b = wasm_i32x4_add(wasm_i32x4_dot_i16x8(v[2], wasm_v128_load(x + 16)),
                                    wasm_i32x4_dot_i16x8(v[3], wasm_v128_load(x + 24)));
    return wasm_i32x4_add(a, b);
}

/* One weight row against NA (1..4) activation rows: each weight block unpacked once for all of them; four blocks'
 * scales widened together, each block's lanes scaled by its broadcast scale. Q4_0's and Q5_0's offsets come off
 * each block's int32 sum before it becomes a float, as the native tiles do: taken off as floats once per four blocks
 * (tried) they cancel against the unsigned sums in float and moved logits enough to flip a near-tie of 0.013
 * that the native build decides (check-portable, qwen3.5-tiny Q4_0). (Two weight rows at a time for decode measured
 * slower: V8 runs out of registers; tried again for Q8_0, each activation vector loaded once for two rows: 4.4
 * against 11.3 GMAC/s under node.) */
__attribute__((always_inline)) static inline void w16_row(const mm_args *a, int64_t r, int64_t i, const int NA, const int kind) {
    const int64_t nb = a->cols / QK8_0;
    const uint8_t *wrow = a->w + (size_t)r * a->w_stride;
    const int16_t *xq[4];
    const float *xd[4];
    const int32_t *xs[4], *xl[4];
    v128_t acc[4];
    for (int k = 0; k < NA; k++) {
        xq[k] = (const int16_t *)(a->x + (size_t)(i + k) * a->x_stride);
        xd[k] = (const float *)(xq[k] + a->cols);
        xs[k] = (const int32_t *)(xd[k] + nb);
        xl[k] = xs[k] + nb;
        acc[k] = wasm_f32x4_splat(0.0f);
    }
    const size_t bsize = kind == W16_Q4_0 ? sizeof(block_q4_0) : kind == W16_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q8_0);
#define W16_D(b) (*(const uint16_t *)(wrow + (size_t)(b) * bsize)) /* d leads every block type */
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const v128_t dw = fp16x4_to_f32(W16_D(b), W16_D(b + 1), W16_D(b + 2), W16_D(b + 3));
        v128_t sc[4];
        for (int k = 0; k < NA; k++) sc[k] = wasm_f32x4_mul(dw, wasm_v128_load(xd[k] + b));
        /* Q5_0 and Q8_0 decode: the four blocks' int32 lanes summed into one vector (lane J block J), scaled once
         * (measured faster for both, 1.1-1.4x for Q8_0; slower for Q4_0 under node); both types in the same order, so
         * a Q5_0 matrix converted to Q8_0 gives the same bits */
        if (NA == 1 && kind != W16_Q4_0) {
            v128_t s[4];
            for (int J = 0; J < 4; J++) {
                v128_t v[4];
                w16_unpack(wrow, b + J, kind, v);
                s[J] = w16_block_sum(v, xq[0] + QK8_0 * (b + J));
            }
            const v128_t s01 = wasm_i32x4_add(wasm_i32x4_shuffle(s[0], s[1], 0, 4, 1, 5), wasm_i32x4_shuffle(s[0], s[1], 2, 6, 3, 7));
            const v128_t s23 = wasm_i32x4_add(wasm_i32x4_shuffle(s[2], s[3], 0, 4, 1, 5), wasm_i32x4_shuffle(s[2], s[3], 2, 6, 3, 7));
            /* lane J: block J's whole sum, less Q5_0's offset 16 * sum x (xs holds 2 * sum x) */
            v128_t sums =
                wasm_i32x4_add(wasm_i32x4_shuffle(s01, s23, 0, 1, 4, 5), wasm_i32x4_shuffle(s01, s23, 2, 3, 6, 7));
            if (kind == W16_Q5_0) sums = wasm_i32x4_sub(sums, wasm_i32x4_shl(wasm_v128_load(xs[0] + b), 3));
            acc[0] = wasm_f32x4_add(acc[0], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sums), sc[0]));
            continue;
        }
        /* block b + J, J a constant (the lane broadcast's index must be one) */
#define W16_BLOCK(J)                                                                                         \
    do {                                                                                                     \
        v128_t v[4];                                                                                         \
        w16_unpack(wrow, b + (J), kind, v);                                                                  \
        for (int k = 0; k < NA; k++) {                                                                       \
            const int64_t bj = b + (J);                                                                      \
            const v128_t s = w16_offset(w16_block_sum(v, xq[k] + QK8_0 * bj), xs[k] + bj, xl[k] + 4 * bj, kind); \
            const v128_t scale = wasm_i32x4_shuffle(sc[k], sc[k], J, J, J, J);                               \
            acc[k] = wasm_f32x4_add(acc[k], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s), scale));             \
        }                                                                                                    \
    } while (0)
        W16_BLOCK(0);
        W16_BLOCK(1);
        W16_BLOCK(2);
        W16_BLOCK(3);
#undef W16_BLOCK
    }
    for (; b < nb; b++) { /* rows whose block count is not a multiple of 4 */
        v128_t v[4];
        w16_unpack(wrow, b, kind, v);
        const float dw = fp16_to_fp32(W16_D(b));
        for (int k = 0; k < NA; k++) {
            const v128_t s = w16_offset(w16_block_sum(v, xq[k] + QK8_0 * b), xs[k] + b, xl[k] + 4 * b, kind);
            acc[k] = wasm_f32x4_add(acc[k], wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s), wasm_f32x4_splat(dw * xd[k][b])));
        }
    }
#undef W16_D
    for (int k = 0; k < NA; k++) a->y[(i + k) * a->ldy + r] = hsum_f32(acc[k]);
}

__attribute__((always_inline)) static inline void w16_tile(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1, const int kind) {
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) w16_row(a, r, i, 4, kind);
        switch (i1 - i) {
        case 3: w16_row(a, r, i, 3, kind); break;
        case 2: w16_row(a, r, i, 2, kind); break;
        case 1: w16_row(a, r, i, 1, kind); break;
        default: break;
        }
    }
}

static void tile_q8_0(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    w16_tile(a, r0, r1, i0, i1, W16_Q8_0);
}
static void tile_q4_0(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    w16_tile(a, r0, r1, i0, i1, W16_Q4_0);
}
static void tile_q5_0(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    w16_tile(a, r0, r1, i0, i1, W16_Q5_0);
}

/* ---------------------------------------------------------------- IQ4_NL × SoA Q8_0, IQ4_XS × Q8_K */

/* 32 weights (16 index bytes, low nibbles first) turned into their signed levels by one swizzle each, against 32
 * int8 activations. */
static inline v128_t iq4_block(v128_t acc, v128_t table, const uint8_t *qs, const int8_t *x) {
    const v128_t v = wasm_v128_load(qs);
    acc = dot16(acc, wasm_i8x16_swizzle(table, wasm_v128_and(v, wasm_i8x16_splat(0x0F))), wasm_v128_load(x));
    return dot16(acc, wasm_i8x16_swizzle(table, wasm_u8x16_shr(v, 4)), wasm_v128_load(x + 16));
}

static inline int32_t hsum_i32(v128_t v) {
    return wasm_i32x4_extract_lane(v, 0) + wasm_i32x4_extract_lane(v, 1) + wasm_i32x4_extract_lane(v, 2) +
           wasm_i32x4_extract_lane(v, 3);
}

static float simd128_iq4_nl(const void *w, const void *x, int64_t n) {
    const block_iq4_nl *wb = w;
    const int8_t *xq = x;
    const float *xd = (const float *)(xq + n);
    const v128_t table = wasm_v128_load(iq4nl_values);
    v128_t acc = wasm_f32x4_splat(0.0f);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        const v128_t s = iq4_block(wasm_i32x4_splat(0), table, wb[b].qs, xq + 32 * b);
        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s),
                                                 wasm_f32x4_splat(fp16_to_fp32(wb[b].d) * xd[b])));
    }
    return hsum_f32(acc);
}

static float simd128_iq4_xs(const void *w, const void *x, int64_t n) {
    const block_iq4_xs *wb = w;
    const block_q8_k *xb = x;
    const v128_t table = wasm_v128_load(iq4nl_values);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        v128_t acc = wasm_i32x4_splat(0);
        for (int j = 0; j < 8; j++) {
            const v128_t s = iq4_block(wasm_i32x4_splat(0), table, wb[b].qs + 16 * j, xb[b].qs + 32 * j);
            acc = wasm_i32x4_add(acc, wasm_i32x4_mul(s, wasm_i32x4_splat(iq4xs_scale(&wb[b], j) - 32)));
        }
        sum += xb[b].d * fp16_to_fp32(wb[b].d) * (float)hsum_i32(acc);
    }
    return sum;
}

/* ---------------------------------------------------------------- Q4_K, Q6_K × Q8_K widened to 16 bits */

/* Q8_K activations widened to 16 bits once per product, each group of 16 elements as its 8 even then its 8 odd
 * ones: a 16-byte load of Q4_K nibbles or Q6_K bits read as eight 16-bit lanes splits into exactly these halves. The
 * weights' sub-block scales are multiplied into the 16-bit weights (|q * scale| <= 945 for Q4_K, 4096 for Q6_K),
 * so a whole super-block sums in int32 (at most 256 * 4096 * 128 < 2^31), exactly as the scalar code's. */
typedef struct {
    float d;
    int16_t bsums[QK_K / 16];
    int16_t qs[QK_K];
} block_q8_k_w16;

static size_t q8_k_w16_row_bytes(int64_t cols) { return (size_t)(cols / QK_K) * sizeof(block_q8_k_w16); }

static void quantize_q8_k_w16(const float *x, void *dst, int64_t n) {
    block_q8_k_w16 *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        block_q8_k k; /* quantize_q8_k's values, rearranged */
        quantize_q8_k(x + QK_K * b, &k, QK_K);
        y[b].d = k.d;
        memcpy(y[b].bsums, k.bsums, sizeof k.bsums);
        for (int g = 0; g < QK_K / 16; g++)
            for (int m = 0; m < 8; m++) y[b].qs[16 * g + m] = k.qs[16 * g + 2 * m], y[b].qs[16 * g + 8 + m] = k.qs[16 * g + 2 * m + 1];
    }
}

/* The int32 lanes of one 16-element group: even-element and odd-element weights against the group's activations. */
static inline v128_t kw16_group(v128_t even, v128_t odd, const int16_t *x) {
    return wasm_i32x4_add(wasm_i32x4_dot_i16x8(even, wasm_v128_load(x)), wasm_i32x4_dot_i16x8(odd, wasm_v128_load(x + 8)));
}

/* One weight row against NA (1..4) activation rows, each super-block's weights unpacked once for all of them.
 * Q4_K's sub-block scales multiply the int32 dot products (one i32x4.mul per sub-block and activation row instead
 * of one i16x8.mul per 8 weights); Q6_K's multiply its unsigned 6-bit weights (|q * scale| <= 63 * 128), whose
 * offset of 32 comes off through the activations' 16-element sums (bsums). */
__attribute__((always_inline)) static inline void kw16_row(const mm_args *a, int64_t r, int64_t i, const int NA,
                                                           const bool q6) {
    const int64_t nb = a->cols / QK_K;
    const uint8_t *wrow = a->w + (size_t)r * a->w_stride;
    const block_q8_k_w16 *x[4];
    float sum[4] = {0};
    for (int k = 0; k < NA; k++) x[k] = (const block_q8_k_w16 *)(a->x + (size_t)(i + k) * a->x_stride);
    const v128_t nib = wasm_i16x8_splat(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        v128_t acc[4];
        for (int k = 0; k < NA; k++) acc[k] = wasm_i32x4_splat(0);
        if (!q6) {
            const block_q4_k *w = (const block_q4_k *)wrow + b;
            int32_t summ[4] = {0};
            for (int c = 0; c < 4; c++) { /* chunk c: groups 4c, 4c+1 (sub-block 2c), 4c+2, 4c+3 (sub-block 2c+1) */
                uint8_t sc_lo, m_lo, sc_hi, m_hi;
                kquant_scale_min(2 * c, w->scales, &sc_lo, &m_lo);
                kquant_scale_min(2 * c + 1, w->scales, &sc_hi, &m_hi);
                v128_t lo[4], hi[4];
                for (int h = 0; h < 2; h++) {
                    const v128_t p = wasm_v128_load(w->qs + 32 * c + 16 * h);
                    const v128_t e0 = wasm_v128_and(p, nib), o0 = wasm_v128_and(wasm_u16x8_shr(p, 8), nib);
                    const v128_t e1 = wasm_v128_and(wasm_u16x8_shr(p, 4), nib), o1 = wasm_u16x8_shr(p, 12);
                    for (int k = 0; k < NA; k++) {
                        const int16_t *xq = x[k][b].qs + 16 * (4 * c + h);
                        const v128_t l = kw16_group(e0, o0, xq), u = kw16_group(e1, o1, xq + 32);
                        lo[k] = h ? wasm_i32x4_add(lo[k], l) : l, hi[k] = h ? wasm_i32x4_add(hi[k], u) : u;
                    }
                }
                const v128_t lo_scale = wasm_i32x4_splat(sc_lo), hi_scale = wasm_i32x4_splat(sc_hi);
                for (int k = 0; k < NA; k++) {
                    acc[k] = wasm_i32x4_add(acc[k], wasm_i32x4_add(wasm_i32x4_mul(lo[k], lo_scale), wasm_i32x4_mul(hi[k], hi_scale)));
                    const int16_t *bs = x[k][b].bsums + 4 * c;
                    summ[k] += m_lo * (bs[0] + bs[1]) + m_hi * (bs[2] + bs[3]);
                }
            }
            const float d = fp16_to_fp32(w->d), dmin = fp16_to_fp32(w->dmin);
            for (int k = 0; k < NA; k++) sum[k] += x[k][b].d * (d * (float)hsum_i32(acc[k]) - dmin * (float)summ[k]);
        } else {
            const block_q6_k *w = (const block_q6_k *)wrow + b;
            const v128_t low4 = wasm_i16x8_splat(0x0F), bits45 = wasm_i16x8_splat(0x30);
            for (int h = 0; h < 2; h++)
                for (int part = 0; part < 2; part++) {
                    const v128_t vh = wasm_v128_load(w->qh + 32 * h + 16 * part);
                    for (int k4 = 0; k4 < 4; k4++) { /* elements 128h + 32k4 + 16part + 0..15: one group, one scale */
                        const v128_t vl = wasm_v128_load(w->ql + 64 * h + 32 * (k4 & 1) + 16 * part);
                        const v128_t lo_e = k4 < 2 ? wasm_v128_and(vl, low4) : wasm_v128_and(wasm_u16x8_shr(vl, 4), low4);
                        const v128_t lo_o = k4 < 2 ? wasm_v128_and(wasm_u16x8_shr(vl, 8), low4) : wasm_u16x8_shr(vl, 12);
                        const v128_t hi_e = k4 < 2 ? wasm_i16x8_shl(vh, 4 - 2 * k4) : wasm_u16x8_shr(vh, 2 * k4 - 4);
                        const v128_t hi_o = wasm_u16x8_shr(vh, 4 + 2 * k4);
                        const int g = 8 * h + 2 * k4 + part;
                        const v128_t scale = wasm_i16x8_splat(w->scales[g]);
                        const v128_t e = wasm_i16x8_mul(wasm_v128_or(lo_e, wasm_v128_and(hi_e, bits45)), scale);
                        const v128_t o = wasm_i16x8_mul(wasm_v128_or(lo_o, wasm_v128_and(hi_o, bits45)), scale);
                        for (int k = 0; k < NA; k++) acc[k] = wasm_i32x4_add(acc[k], kw16_group(e, o, x[k][b].qs + 16 * g));
                    }
                }
            /* the offset: 32 * sum over groups of scale * bsum, as one 16-bit dot product of the 16 of each */
            const v128_t sc8 = wasm_v128_load(w->scales);
            const v128_t sc_lo = wasm_i16x8_extend_low_i8x16(sc8), sc_hi = wasm_i16x8_extend_high_i8x16(sc8);
            const float d = fp16_to_fp32(w->d);
            for (int k = 0; k < NA; k++) {
                const v128_t off = wasm_i32x4_add(wasm_i32x4_dot_i16x8(sc_lo, wasm_v128_load(x[k][b].bsums)),
                                                  wasm_i32x4_dot_i16x8(sc_hi, wasm_v128_load(x[k][b].bsums + 8)));
                sum[k] += x[k][b].d * d * (float)(hsum_i32(acc[k]) - 32 * hsum_i32(off));
            }
        }
    }
    for (int k = 0; k < NA; k++) a->y[(i + k) * a->ldy + r] = sum[k];
}

__attribute__((always_inline)) static inline void kw16_tile(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1, const bool q6) {
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) kw16_row(a, r, i, 4, q6);
        switch (i1 - i) {
        case 3: kw16_row(a, r, i, 3, q6); break;
        case 2: kw16_row(a, r, i, 2, q6); break;
        case 1: kw16_row(a, r, i, 1, q6); break;
        default: break;
        }
    }
}

static void tile_q4_k(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    kw16_tile(a, r0, r1, i0, i1, false);
}
static void tile_q6_k(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    kw16_tile(a, r0, r1, i0, i1, true);
}

/* ---------------------------------------------------------------- F32 × F32 */

static float simd128_f32(const void *w, const void *x, int64_t n) {
    const float *a = w, *b = x;
    v128_t acc = wasm_f32x4_splat(0.0f);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4)
        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_v128_load(a + k), wasm_v128_load(b + k)));
    float s = hsum_f32(acc);
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

/* ---------------------------------------------------------------- table */

#define SIMD128_TILE(name)                                                                                  \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        tile_by_dot(a, r0, r1, i0, i1, simd128_##name);                                                     \
    }
SIMD128_TILE(f32)
SIMD128_TILE(iq4_nl)
SIMD128_TILE(iq4_xs)

void mm_isa_simd128(mm_isa *isa) {
    isa->name = "simd128";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0_w16, q8_0_w16_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0_w16, q8_0_w16_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_0] = (mm_kernel){tile_q5_0, quantize_q8_0_w16, q8_0_w16_row_bytes, NULL};
    isa->k[TR_TYPE_IQ4_NL] = (mm_kernel){tile_iq4_nl, quantize_q8_0_soa, q8_0_soa_row_bytes, NULL};
    isa->k[TR_TYPE_IQ4_XS] = (mm_kernel){tile_iq4_xs, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q4_K] = (mm_kernel){tile_q4_k, quantize_q8_k_w16, q8_k_w16_row_bytes, NULL};
    isa->k[TR_TYPE_Q6_K] = (mm_kernel){tile_q6_k, quantize_q8_k_w16, q8_k_w16_row_bytes, NULL};
}
#else
typedef int matmul_wasm_not_built; /* ISO C wants a declaration in every file */
#endif
