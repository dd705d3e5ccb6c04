/* q5_0_wasm.h — a Q5_0 block's 32 five-bit values (0..31) as bytes in two SIMD128 vectors, shared by the Q5_0 product
 * (matmul_wasm.c) and its exact conversion to Q8_0 at load (convert_wasm.c). WebAssembly SIMD128 builds only. */
#ifndef TR_KERNELS_Q5_0_WASM_H
#define TR_KERNELS_Q5_0_WASM_H

#include "kernels/blocks.h"

#include <wasm_simd128.h>

/* Elements 0..15 in *lo, 16..31 in *hi, in order: the 16 low nibbles of qs are elements 0..15 in byte order, the
 * high ones 16..31, and each byte gets 0x10 where its element's fifth bit (bit j of qh for element j) is set (qh's
 * bytes spread over 8 lanes each by one shuffle, each lane testing its own bit). */
static inline void q5_0_values(const block_q5_0 *q, v128_t *lo, v128_t *hi) {
    const v128_t p = wasm_v128_load(q->qs), h = wasm_v128_load32_splat(q->qh);
    const v128_t nib = wasm_i8x16_splat(0x0F), five = wasm_i8x16_splat(0x10);
    const v128_t bit = wasm_u8x16_make(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    const v128_t h_lo = wasm_v128_and(wasm_i8x16_shuffle(h, h, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), bit);
    const v128_t h_hi = wasm_v128_and(wasm_i8x16_shuffle(h, h, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), bit);
    *lo = wasm_v128_or(wasm_v128_and(p, nib), wasm_v128_and(wasm_i8x16_eq(h_lo, bit), five));
    *hi = wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(p, 4), nib), wasm_v128_and(wasm_i8x16_eq(h_hi, bit), five));
}

#endif /* TR_KERNELS_Q5_0_WASM_H */
