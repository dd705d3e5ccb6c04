/* attention.c — causal multi-head attention over the KV cache, with grouped-query heads, split across the thread
 * pool by (token, head) pairs.
 *
 * With an F16 cache we round the query and the attention weights to F16 before their products, as llama.cpp does
 * (it converts the other operand of an F16 matrix product to F16); sums stay in float.
 */
#include <math.h>

#include "kernels/fp16.h"
#include "model/model_internal.h"

typedef struct attention_job {
    tr_context *ctx;
    int layer;
    const float *q;
    int32_t n;
    float *out;
} attention_job;

static float dot_f16_row(const float *q, const uint16_t *k, int32_t n) {
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) sum += q[i] * fp16_to_fp32(k[i]);
    return sum;
}

static float dot_f32_row(const float *q, const float *k, int32_t n) {
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) sum += q[i] * k[i];
    return sum;
}

static void attend_one(const attention_job *job, int32_t t, int32_t h, float *scores) {
    const tr_context *ctx = job->ctx;
    const tr_model *m = ctx->model;
    const int32_t hd = m->info.head_dim;
    const int32_t group = m->info.n_head / m->info.n_head_kv;
    const int32_t kvh = h / group;
    const int32_t n_pos = ctx->n_past + t + 1;
    const bool f32 = ctx->kv.f32;
    const uint8_t *K = ctx->kv.k[job->layer], *V = ctx->kv.v[job->layer];
    const size_t row = ctx->kv.row_bytes;
    const float scale = 1.0f / sqrtf((float)hd);

    float qh[1024];
    const float *qsrc = job->q + (int64_t)t * m->q_dim + (int64_t)h * hd;
    for (int32_t i = 0; i < hd; i++) qh[i] = f32 ? qsrc[i] : fp16_to_fp32(fp32_to_fp16(qsrc[i]));

    for (int32_t j = 0; j < n_pos; j++) {
        const uint8_t *krow = K + (size_t)j * row;
        const float s = f32 ? dot_f32_row(qh, (const float *)krow + (int64_t)kvh * hd, hd)
                            : dot_f16_row(qh, (const uint16_t *)krow + (int64_t)kvh * hd, hd);
        scores[j] = s * scale;
    }
    softmax_inplace(scores, n_pos);

    float *o = job->out + (int64_t)t * m->q_dim + (int64_t)h * hd;
    for (int32_t i = 0; i < hd; i++) o[i] = 0.0f;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint8_t *vrow = V + (size_t)j * row;
        if (f32) {
            const float p = scores[j];
            const float *v = (const float *)vrow + (int64_t)kvh * hd;
            for (int32_t i = 0; i < hd; i++) o[i] += p * v[i];
        } else {
            const float p = fp16_to_fp32(fp32_to_fp16(scores[j]));
            const uint16_t *v = (const uint16_t *)vrow + (int64_t)kvh * hd;
            for (int32_t i = 0; i < hd; i++) o[i] += p * fp16_to_fp32(v[i]);
        }
    }
}

static void attention_task(void *arg, int ith, int nth) {
    const attention_job *job = arg;
    const int32_t n_head = job->ctx->model->info.n_head;
    const int64_t total = (int64_t)job->n * n_head;
    float *scores = job->ctx->act.scores + (int64_t)ith * job->ctx->kv.n_ctx;
    /* Later tokens see more positions: interleave pairs so threads get similar work. */
    for (int64_t idx = ith; idx < total; idx += nth) attend_one(job, (int32_t)(idx / n_head), (int32_t)(idx % n_head), scores);
}

void attention(tr_context *ctx, int layer, const float *q, int32_t n, float *out) {
    attention_job job = {ctx, layer, q, n, out};
    const tr_model *m = ctx->model;
    const int64_t work = (int64_t)n * m->info.n_head * (ctx->n_past + n) * m->info.head_dim * 2;
    run_parallel(ctx, attention_task, &job, work);
}
