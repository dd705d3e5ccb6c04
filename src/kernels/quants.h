/* quants.h — row converters shared between quants.c (dispatch, 32-element blocks) and quants_k.c (K-quants), and
 * the activation quantizers the matrix products call directly. nb counts blocks, n counts elements. */
#ifndef TR_KERNELS_QUANTS_H
#define TR_KERNELS_QUANTS_H

#include "kernels/blocks.h"

void dequant_q4_k(const block_q4_k *b, float *y, int64_t nb);
void dequant_q5_k(const block_q5_k *b, float *y, int64_t nb);
void dequant_q6_k(const block_q6_k *b, float *y, int64_t nb);
void dequant_q8_k(const block_q8_k *b, float *y, int64_t nb);
void dequant_q2_k(const block_q2_k *b, float *y, int64_t nb); /* quants_k23.c */
void dequant_q3_k(const block_q3_k *b, float *y, int64_t nb);
void dequant_iq4_nl(const block_iq4_nl *b, float *y, int64_t nb);
void dequant_iq4_xs(const block_iq4_xs *b, float *y, int64_t nb);
void quant_q4_k(const float *x, block_q4_k *b, int64_t nb);
void quant_q5_k(const float *x, block_q5_k *b, int64_t nb);
void quant_q6_k(const float *x, block_q6_k *b, int64_t nb);
void quant_q2_k(const float *x, block_q2_k *b, int64_t nb);
void quant_q3_k(const float *x, block_q3_k *b, int64_t nb);
void quant_iq4_nl(const float *x, block_iq4_nl *b, int64_t nb);
void quant_iq4_xs(const float *x, block_iq4_xs *b, int64_t nb);

/* Activation quantizers, exactly as llama.cpp quantizes activations on x86. */
void quantize_q8_0(const float *x, void *dst, int64_t n);
void quantize_q8_1(const float *x, void *dst, int64_t n);
void quantize_q8_k(const float *x, void *dst, int64_t n);

#endif /* TR_KERNELS_QUANTS_H */
