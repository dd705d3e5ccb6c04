/* attn_scores.c — choosing the attention-score kernel (attn_scores.h) and sharing its positions among threads. */
#include "kernels/attn_scores.h"

#include <string.h>

attn_scores_fn attn_scores_for(int32_t hd, int32_t group) {
#if defined(__x86_64__)
    if (hd > 0 && hd % 16 == 0 && hd <= ATTN_SCORES_HD_MAX && (int64_t)group * 64 >= 7 * (int64_t)hd &&
        strcmp(kernels_isa(), "avx512") == 0)
        return attn_scores_f16_avx512;
#endif
    (void)hd;
    (void)group;
    return NULL;
}

typedef struct scores_job {
    attn_scores_fn fn;
    const uint16_t *K;
    size_t k_stride;
    int32_t n_pos, hd, rows;
    const float *q;
    float *scores;
    int64_t ldy;
} scores_job;

static void scores_task(void *arg, int ith, int nth) {
    const scores_job *j = arg;
    const int32_t blocks = (j->n_pos + 15) / 16;
    const int32_t b0 = (int32_t)((int64_t)blocks * ith / nth), b1 = (int32_t)((int64_t)blocks * (ith + 1) / nth);
    const int32_t p0 = b0 * 16, p1 = b1 * 16 < j->n_pos ? b1 * 16 : j->n_pos;
    if (p1 > p0)
        j->fn((const uint16_t *)((const char *)j->K + (size_t)p0 * j->k_stride), j->k_stride, p1 - p0, j->hd, j->q,
              j->rows, j->scores + p0, j->ldy);
}

void attn_scores_run(thread_pool *tp, attn_scores_fn fn, const uint16_t *K, size_t k_stride, int32_t n_pos,
                     int32_t hd, const float *q, int32_t rows, float *scores, int64_t ldy) {
    scores_job job = {fn, K, k_stride, n_pos, hd, rows, q, scores, ldy};
    if (tp && thread_pool_size(tp) > 1 && n_pos > 16) thread_pool_run(tp, scores_task, &job);
    else scores_task(&job, 0, 1);
}
