/* attn_scores.h — the attention's first product against an F16 cache: scores[r][p] = q[r] · K[p] for the query
 * rows r sharing a KV head and its cached positions p. With head_dim 64 a row of K is four 16-float vectors, so a
 * general matrix product spends most of its time summing each vector's lanes; here the K rows of 16 positions are
 * turned on their side once (positions in the lanes) and every query row runs head_dim FMAs against them, with
 * nothing to sum across lanes. Each score is summed over d in order 0, 1, ..., head_dim - 1 whatever the number of
 * rows, positions or threads, so every path through the attention (decode, prefill, batched passes) gets the same
 * bits. */
#ifndef TR_KERNELS_ATTN_SCORES_H
#define TR_KERNELS_ATTN_SCORES_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* K: n_pos rows of hd F16 values, k_stride bytes apart; q: rows × hd floats; scores: rows × ldy floats, written at
 * [0, n_pos). */
typedef void (*attn_scores_fn)(const uint16_t *K, size_t k_stride, int32_t n_pos, int32_t hd, const float *q,
                               int32_t rows, float *scores, int64_t ldy);

enum { ATTN_SCORES_HD_MAX = 256 };

/* The kernel for heads of size hd with `group` query heads per KV head on the instruction set in use
 * (kernels_isa), or NULL where the matrix product serves: without AVX-512, for hd not a multiple of 16 or above
 * ATTN_SCORES_HD_MAX, and where a decoded token's rows (group) are too few to pay for turning K on its side
 * (measured at 800 positions: faster from 7 rows at hd 64, e.g. Qwen2.5-0.5B, 8.3 vs 8.7 us, and 38 vs 62 us for a
 * batched pass's 63 rows; slower at hd 128 with 6 rows, 16 vs 12 us). A model's every call gets the same answer. */
attn_scores_fn attn_scores_for(int32_t hd, int32_t group);

/* Runs fn over the positions, split among tp's threads in blocks of 16 (tp NULL: on the calling thread). */
void attn_scores_run(thread_pool *tp, attn_scores_fn fn, const uint16_t *K, size_t k_stride, int32_t n_pos,
                     int32_t hd, const float *q, int32_t rows, float *scores, int64_t ldy);

void attn_scores_f16_avx512(const uint16_t *K, size_t k_stride, int32_t n_pos, int32_t hd, const float *q,
                            int32_t rows, float *scores, int64_t ldy);

#endif
