/* matmul_impl.h — how matmul.c talks to the per-instruction-set kernels. A kernel computes one tile of the output:
 * rows [r0, r1) of W against activation rows [i0, i1), reading activations already quantized to the weight type's
 * vec_dot format (or F32 for float weights). Each instruction set fills in the tiles and activation quantizers it
 * has; what it leaves out falls back to the next lower one, down to the portable scalar code. */
#ifndef TR_KERNELS_MATMUL_IMPL_H
#define TR_KERNELS_MATMUL_IMPL_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mm_args {
    const uint8_t *w; /* weight rows */
    size_t w_stride;  /* bytes per weight row */
    const uint8_t *x; /* activation rows in vec_dot format */
    size_t x_stride;  /* bytes per activation row */
    int64_t cols;
    float *y;
    int64_t ldy;
} mm_args;

typedef void (*mm_tile_fn)(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1);
typedef void (*mm_quant_fn)(const float *x, void *dst, int64_t n);
typedef size_t (*mm_xbytes_fn)(int64_t cols);

/* A tile kernel and the activation format it reads, which it may choose: the quantized values must be llama.cpp's,
 * but their arrangement is free. quant == NULL means the tile reads the F32 activations directly. */
typedef struct mm_kernel {
    mm_tile_fn tile;
    mm_quant_fn quant;
    mm_xbytes_fn x_row_bytes;
    /* Tile over X16-layout rows (r0, r1 multiples of 16), reading the same activation format as tile; NULL when the
     * set has none (matmul then unpacks rows for tile). */
    mm_tile_fn tile_x16;
} mm_kernel;

typedef struct mm_isa {
    const char *name;
    mm_kernel k[TR_TYPE_COUNT]; /* by weight type */
} mm_isa;

/* Q8_0 activations as structure of arrays, for SIMD tiles: cols int8 quants, then cols/32 float scales (the F16
 * scale llama.cpp stores, widened). Same values as quantize_q8_0. */
void quantize_q8_0_soa(const float *x, void *dst, int64_t n);
size_t q8_0_soa_row_bytes(int64_t cols);
/* Q8_1 likewise: quants, then the scales d, then the sums s = d * sum(q) (llama.cpp's F16 values, widened). */
void quantize_q8_1_soa(const float *x, void *dst, int64_t n);
size_t q8_1_soa_row_bytes(int64_t cols);
/* Q8_K activations keep ggml's block layout. */
size_t q8_k_row_bytes(int64_t cols);

/* Each fills in what it implements, on top of what lower sets put there. */
void mm_isa_scalar(mm_isa *isa);
#if defined(__x86_64__)
void mm_isa_avx2(mm_isa *isa);
void mm_isa_avx512(mm_isa *isa);
void mm_isa_avx512_x16(mm_isa *isa); /* matmul_x16_avx512.c */
void mm_isa_avx2_x16(mm_isa *isa);   /* matmul_x16_avx2.c */
void mm_isa_avx2_iq4(mm_isa *isa);   /* matmul_iq4_avx2.c: IQ4_NL, IQ4_XS */
void mm_isa_avx512_iq4(mm_isa *isa); /* matmul_iq4_avx512.c */
void mm_isa_avx2_k23(mm_isa *isa);   /* matmul_k23_avx2.c: Q2_K, Q3_K */
void mm_isa_avx512_k23(mm_isa *isa); /* matmul_k23_avx512.c */
/* quantize_q8_0_soa_avx2 plus the int32 sum of each block's quants after the scales (the X16 tiles take weight
 * offsets back through them); row bytes cols + 8 * cols/32. The plain tiles read the same rows (they ignore the
 * sums). In quantize_avx2.c. */
void quantize_q8_0_soa_sums(const float *x, void *dst, int64_t n);
size_t q8_0_soa_sums_row_bytes(int64_t cols);
/* Bit-identical AVX2 versions of the SoA and Q8_K activation quantizers (quantize_avx2.c). */
void quantize_q8_0_soa_avx2(const float *x, void *dst, int64_t n);
void quantize_q8_k_avx2(const float *x, void *dst, int64_t n);
void quantize_q8_1_soa_avx2(const float *x, void *dst, int64_t n);
#endif
#if defined(__aarch64__)
void mm_isa_neon(mm_isa *isa);
void mm_isa_neon_x16(mm_isa *isa); /* matmul_x16_neon.c */
void mm_isa_neon_k23(mm_isa *isa); /* matmul_k23_neon.c: Q2_K, Q3_K */
void mm_isa_neon_iq4(mm_isa *isa); /* matmul_iq4_neon.c: IQ4_NL, IQ4_XS */
#endif

#if defined(__wasm_simd128__)
void mm_isa_simd128(mm_isa *isa); /* matmul_wasm.c: Q8_0, Q4_0, IQ4_NL, IQ4_XS, Q4_K, Q6_K, F32 */
#endif

/* Scalar dot products of one weight row with one activation row of n elements (also used by SIMD files for
 * leftovers). */
typedef float (*vec_dot_fn)(const void *w, const void *x, int64_t n);
float dot_f32(const void *w, const void *x, int64_t n);
float dot_f16(const void *w, const void *x, int64_t n);
float dot_bf16(const void *w, const void *x, int64_t n);
float dot_q4_0(const void *w, const void *x, int64_t n);
float dot_q4_1(const void *w, const void *x, int64_t n);
float dot_q5_0(const void *w, const void *x, int64_t n);
float dot_q5_1(const void *w, const void *x, int64_t n);
float dot_q8_0(const void *w, const void *x, int64_t n);
float dot_q4_k(const void *w, const void *x, int64_t n);
float dot_q5_k(const void *w, const void *x, int64_t n);
float dot_q6_k(const void *w, const void *x, int64_t n);
float dot_q2_k(const void *w, const void *x, int64_t n); /* quants_k23.c */
float dot_q3_k(const void *w, const void *x, int64_t n);
float dot_iq4_nl(const void *w, const void *x, int64_t n); /* quants_iq4.c */
float dot_iq4_xs(const void *w, const void *x, int64_t n);

/* Runs dot over a tile, one output at a time. */
void tile_by_dot(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1, vec_dot_fn dot);

#endif /* TR_KERNELS_MATMUL_IMPL_H */
