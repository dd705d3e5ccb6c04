/* kv_q8.h — the Q8_0 KV cache's rows and the two attention kernels that read them in place.
 *
 * A row holds one (KV head, position): head_dim values in blocks of `block` values, each block an F16 scale
 * d = amax/127 followed by `block` int8 values q = round(x/d) (llama.cpp's Q8_0 rounding). With block 32 the bytes
 * are exactly Q8_0's (block_q8_0); heads narrower than 32, or not a multiple of it, use blocks of 16 or 8 so a
 * position's row is always whole blocks and truncating the cache stays a matter of positions.
 *
 * The kernels take causal rows: row r of a block of queries attends to positions [0, valid0 + r / group), as
 * attention.c lays out (token, query head of the group). Each instruction set has its own file; kv_q8.c picks the
 * one the matrix products use (kernels_isa), falling back to the scalar code for blocks narrower than 32. */
#ifndef TR_KERNELS_KV_Q8_H
#define TR_KERNELS_KV_Q8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Rotation before quantizing (as llama.cpp does for a quantized cache since its PR 21038): for head_dim a multiple
 * of 64, queries and keys are turned by an orthonormal Walsh-Hadamard matrix over runs of kvq8_rot_k values (the
 * largest power of two dividing head_dim), values and each head's attention output over runs of 64. Scores are
 * unchanged in exact arithmetic, but the rotation spreads a few large channels over the whole run, so a block's
 * scale (amax/127) no longer crushes the others. 0: no rotation. */
int kvq8_rot_k(int64_t head_dim);
int kvq8_rot_v(int64_t head_dim);
/* x <- H x on each run of `run` values of n (run a power of two dividing n; H symmetric, H H = I). */
void kvq8_rotate(float *x, int64_t n, int run);

/* The widest of 32, 16, 8 dividing head_dim; 0 when none does (the cache cannot be Q8_0). */
int kvq8_block_for(int64_t head_dim);
/* Bytes of a row of n values (n a multiple of block). */
size_t kvq8_row_bytes(int64_t n, int block);
void kvq8_quantize_row(const float *x, void *dst, int64_t n, int block);
void kvq8_dequantize_row(const void *src, float *dst, int64_t n, int block);

/* Where a block of causal rows reads and writes. K and V: n_pos rows of hd values, `stride` bytes apart. */
typedef struct kvq8_rows {
    const uint8_t *data;
    size_t stride;
    int64_t hd;
    int block;
} kvq8_rows;

typedef struct kvq8_causal {
    int32_t rows, valid0, group; /* row r sees positions [0, valid0 + r / group) */
} kvq8_causal;

/* scores[r * ld + p] = q[r * hd ..] · K[p] for the positions row r sees (others are left alone); q in float, K
 * dequantized on the fly. */
void kvq8_scores(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld);
/* out[r * hd ..] = sum over the positions p row r sees of P[r * ldp + p] * V[p]. P must hold zeros from a row's
 * last position up to the longest row's (the SIMD versions read them instead of testing each row's length). */
void kvq8_mix(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out);

/* Per-instruction-set versions (block 32 only; the scalar ones take any block). */
typedef struct kvq8_kernels {
    void (*scores)(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld);
    void (*mix)(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out);
} kvq8_kernels;

void kvq8_scores_scalar(const kvq8_rows *K, const float *q, kvq8_causal c, float *scores, size_t ld);
void kvq8_mix_scalar(const kvq8_rows *V, const float *P, size_t ldp, kvq8_causal c, float *out);
#if defined(__x86_64__)
extern const kvq8_kernels kvq8_avx2, kvq8_avx512;
#endif
#if defined(__aarch64__)
extern const kvq8_kernels kvq8_neon;
#endif

static inline int32_t kvq8_row_valid(kvq8_causal c, int32_t r) { return c.valid0 + r / c.group; }

/* The SIMD files' block: an F16 scale, then 32 int8 values (block_q8_0's 34 bytes). */
#define KVQ8_QK 32
#define KVQ8_BLOCK_BYTES 34
/* A block's scale as F16 bits (each file converts them its own way). */
static inline uint16_t kvq8_scale_bits(const uint8_t *block) {
    uint16_t d;
    memcpy(&d, block, sizeof d);
    return d;
}

#endif /* TR_KERNELS_KV_Q8_H */
