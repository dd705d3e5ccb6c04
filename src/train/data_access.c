/* data_access.c — loaded collected data read position by position: the stored values, each position's training
 * label under a mode and the router's input rows (tokroute/train.h). What bindings and checks read, so they see
 * exactly what training sees (labels.c's rule, train_input_row's row) rather than a second reading of the files. */
#include <inttypes.h>

#include "common/error.h"
#include "train/train_internal.h"

tr_status tr_train_data_position(const tr_train_data *d, int64_t i, tr_train_position *out) {
    if (!d || !out) return tr_fail(TR_ERR_ARG, "tr_train_data_position: NULL argument");
    if (i < 0 || i >= d->n)
        return tr_fail(TR_ERR_RANGE, "position %" PRId64 " is outside the data's %" PRId64, i, d->n);
    const tr_status rows = train_data_check_rows(d, "tr_train_data_position");
    if (rows != TR_OK) return rows;
    const float *p = d->probs + i * COLLECT_N_PROBS, *f = d->feats + i * d->n_feats;
    *out = (tr_train_position){
        .example = d->example[i], .position = d->position[i], .group = d->group[i], .truth = d->truth[i], .slm_top1 = d->slm_top1[i],
        .llm_top1 = d->llm_top1[i], .slm_p_top1 = p[0], .llm_p_top1 = p[1], .slm_p_truth = p[2],
        .llm_p_truth = p[3], .llm_p_slm_top1 = p[4], .slm_p_llm_top1 = p[5], .maxprob = f[0], .entropy = f[1],
        .margin = f[2], .rollout_slm = d->rollout_slm[i], .rollout_llm = d->rollout_llm[i]};
    return TR_OK;
}

tr_status tr_train_data_labels(const tr_train_data *d, tr_label_mode mode, float *labels) {
    if (!d || !labels) return tr_fail(TR_ERR_ARG, "tr_train_data_labels: NULL argument");
    if ((int)mode < (int)TR_LABEL_DROP || (int)mode > (int)TR_LABEL_MIXED)
        return tr_fail(TR_ERR_ARG, "unknown label mode %d", (int)mode);
    for (int64_t i = 0; i < d->n; i++) labels[i] = label_of(d, i, mode);
    return TR_OK;
}

tr_status tr_train_data_inputs(const tr_train_data *d, unsigned features, int32_t topk, const tr_model *slm,
                               int64_t first, int64_t n, float *out) {
    if (!d || (n > 0 && !out)) return tr_fail(TR_ERR_ARG, "tr_train_data_inputs: NULL argument");
    const tr_status rows = train_data_check_rows(d, "tr_train_data_inputs");
    if (rows != TR_OK) return rows;
    if (first < 0 || n < 0 || first > d->n || n > d->n - first)
        return tr_fail(TR_ERR_RANGE, "positions [%" PRId64 ", %" PRId64 ") are outside the data's %" PRId64, first,
                       first + n, d->n);
    const unsigned known = TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN | TR_FEATURE_TOPK_LOGPROBS |
                           TR_FEATURE_TOKEN_EMBEDDING;
    if (features & TR_FEATURE_NGRAM)
        return tr_fail(TR_ERR_UNSUPPORTED, "the ngram feature is not given here: its training values are "
                       "leave-one-example-out over the whole training set, which tr_train_router computes");
    if (features & ~known) return tr_fail(TR_ERR_ARG, "unknown feature bits 0x%x", features & ~known);
    if ((features & TR_FEATURE_TOPK_LOGPROBS) && (topk < 1 || topk > d->topk))
        return tr_fail(TR_ERR_ARG, "topk %d is outside 1..%d (the data's)", (int)topk, (int)d->topk);
    if ((features & TR_FEATURE_TOKEN_EMBEDDING) && !slm)
        return tr_fail(TR_ERR_ARG, "the token_embedding feature needs the SLM");
    if (slm && (features & TR_FEATURE_TOKEN_EMBEDDING) && tr_model_get_info(slm)->n_embd != d->n_embd)
        return tr_fail(TR_ERR_ARG, "the SLM's n_embd %d is not the data's %d", (int)tr_model_get_info(slm)->n_embd,
                       (int)d->n_embd);
    const int32_t k = (features & TR_FEATURE_TOPK_LOGPROBS) ? topk : 0;
    const int64_t width = d->n_embd + tr_router_feature_width(features, k, d->n_embd);
    for (int64_t r = 0; r < n; r++) {
        const tr_status st = train_input_row(d, first + r, features, k, 0, slm, NULL, out + r * width);
        if (st != TR_OK) return st;
    }
    return TR_OK;
}
