/* blocks.h — the ggml block layouts as C structs, shared by every kernel file (little-endian, no padding: each
 * struct's size is asserted against the byte count GGUF files use). Scales stored as F16 are raw uint16_t bits;
 * decode them with fp16_to_fp32. */
#ifndef TR_KERNELS_BLOCKS_H
#define TR_KERNELS_BLOCKS_H

#include <stdint.h>
#include <string.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK4_NL 32

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl), in quants_iq4.c. */
extern const int8_t iq4nl_values[16];

/* Q4_0: value = (q - 8) * d; byte j holds element j (low nibble) and element j+16 (high nibble). */
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
/* Q4_1: value = q * d + m. */
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
/* Q5_0: the fifth bit of element j is bit j of qh (a little-endian u32); value = (q - 16) * d. */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
/* Q5_1: value = q * d + m. */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
/* Q8_0: value = q * d. */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;
/* Q8_1: s = d * sum(qs), so products with offset weights (Q4_1/Q5_1) need no second pass. */
typedef struct { uint16_t d, s; int8_t qs[QK8_1]; } block_q8_1;
/* Q4_K: 8 sub-blocks of 32; 6-bit scale and min per sub-block packed in 12 bytes; value = d*sc*q - dmin*m.
 * qs holds 4 chunks of 64 elements in 32 bytes: low nibbles = first 32, high nibbles = next 32. */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_k;
/* Q5_K: as Q4_K plus qh[32]: bit 2c (2c+1) of qh[l] is the fifth bit of element 64c+l (64c+32+l). */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; }
    block_q5_k;
/* Q6_K: 16 sub-blocks of 16 with int8 scales; value = d * sc * (q - 32), q = 4 low bits from ql, 2 high from qh. */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_k;
/* IQ4_NL: value = d * iq4nl_values[q]; byte j holds element j (low nibble) and element j+16 (high nibble), as Q4_0. */
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
/* IQ4_XS: 8 sub-blocks of 32, each with a 6-bit scale ls (low 4 bits: nibble j%2 of scales_l[j/2]; high 2 bits:
 * bits 2j..2j+1 of scales_h); value = d * (ls - 32) * iq4nl_values[q]; qs as IQ4_NL, 16 bytes per sub-block. */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;
/* Q2_K: 16 sub-blocks of 16; scales[s] = 4-bit scale | 4-bit min << 4; value = d * sc * q - dmin * m, q 2 bits.
 * Element 128n + 32j + l (half n, shift j, l < 32) is bits 2j..2j+1 of qs[32n + l]; its sub-block is 8n + 2j + l/16. */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_k;
/* Q3_K: 16 sub-blocks of 16 with 6-bit scales (q3k_scale), value = d * (sc - 32) * q, q in [-4, 3]: the low 2 bits
 * from qs as Q2_K, minus 4 unless bit n*4 + j of hmask[l] is set (element 128n + 32j + l). */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[K_SCALE_SIZE]; uint16_t d; } block_q3_k;
/* Q8_K: activations for K-quant products; float scale, bsums[j] = sum of qs[16j .. 16j+15]. */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_k;

_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(block_q8_1) == 36, "Q8_1 block is 36 bytes");
_Static_assert(sizeof(block_q2_k) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(block_q3_k) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(block_q4_k) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(block_q5_k) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(block_q6_k) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");
_Static_assert(sizeof(block_q8_k) == 292, "Q8_K block is 292 bytes");

/* Q4_K/Q5_K: 6-bit scale and min of sub-block j (ggml's get_scale_min_k4). Bytes 0-3 hold scales 0-3 in their low
 * 6 bits, bytes 4-7 mins 0-3; sub-blocks 4-7 keep their low 4 bits in bytes 8-11 (scale low, min high nibble) and
 * their top 2 bits in the top bits of bytes 0-3 (scales) and 4-7 (mins). */
static inline void kquant_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Round to nearest, ties to even, for |x| < 2^22 (ggml's nearest_int: adding 1.5*2^23 leaves the rounded integer
 * in the low mantissa bits). */
static inline int nearest_int(float x) {
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Q3_K: the 6-bit scale of sub-block j (0-15), still biased by 32. Bytes 0-7 hold the low 4 bits (sub-block j < 8
 * in the low nibble of byte j, j >= 8 in the high nibble of byte j - 8); bits 2(j/4)..2(j/4)+1 of byte 8 + j%4 the
 * top 2 (ggml's kmask unpacking). */
static inline int q3k_scale(const uint8_t *scales, int j) {
    const int lo = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    return lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/* IQ4_XS: the 6-bit scale of sub-block j (0-7), still biased by 32. */
static inline int iq4xs_scale(const block_iq4_xs *b, int j) {
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4);
}

#endif /* TR_KERNELS_BLOCKS_H */
