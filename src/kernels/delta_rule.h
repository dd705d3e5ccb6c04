/* delta_rule.h — one step of the gated delta rule (Qwen3.5's Gated DeltaNet) for one value head: the head's state
 * S[r][i] (r: value index, i: key index, d × d floats) decays, is corrected toward v along k, and is read by q:
 *
 *   s = decay · S[r]                  (the row before the update)
 *   d_r = (v[r] − s·k) · beta
 *   S[r] = s + d_r · k
 *   out[r] = (S[r]·q) · scale
 *
 * as llama.cpp's build_delta_net_autoregressive, row by row. Each row is read once and written once (the decay,
 * the correction and both dot products in two sweeps over a row that stays in L1), where the unfused loops made six
 * sweeps over the whole state per token. The instruction set is the matrix products' (kernels_isa); every call in
 * a process uses the same code, so replays from a checkpoint are bit-identical. */
#ifndef TR_KERNELS_DELTA_RULE_H
#define TR_KERNELS_DELTA_RULE_H

#include <stdint.h>

typedef void (*delta_rule_fn)(float *state, int32_t d, const float *q, const float *k, const float *v, float decay,
                              float beta, float scale, float *out);

/* The step for heads of size d on the instruction set in use: chosen once per layer, called per token and head. */
delta_rule_fn delta_rule_for(int32_t d);

/* The portable code (every d) and the SIMD ones (d a multiple of 8 / 16; x86-64
 * only). */
void delta_rule_scalar(float *state, int32_t d, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, float *out);
void delta_rule_avx2(float *state, int32_t d, const float *q, const float *k, const float *v, float decay, float beta,
                     float scale, float *out);
void delta_rule_avx512(float *state, int32_t d, const float *q, const float *k, const float *v, float decay, float beta,
                       float scale, float *out);

#endif
