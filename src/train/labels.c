/* labels.c — which model a collected position prefers, and the router's input row for it.
 *
 * CITER's shortcut: the SLM's top-1 equals the reference → 1 (keep the SLM's token); else the LLM's does → 0
 * (route). Where both are wrong the mode decides: dropped, 1, 0, or by rollouts — collect continued K tokens
 * greedily with the SLM after each model's token and counted positions matching the reference; the token whose
 * continuation matches more wins, ties going to the SLM (it costs nothing). The expected mode ignores the realized
 * reference. The soft modes regress (1 - g) / 2 on the accuracy g routing gains (realized, -1..1; expected under the
 * LLM's distribution, p_LLM(LLM's top-1) - p_LLM(SLM's top-1); or their mean): the metric is the SLM's accuracy
 * plus the gains of the routed positions, so ranking by expected gain is what it rewards. Labels are computed at
 * training time
 * from what collect stored, so one collect serves every labelling.
 */
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "router/router_internal.h"
#include "train/train_internal.h"

static const char *const label_names[] = {
    [TR_LABEL_DROP] = "drop",
    [TR_LABEL_SLM] = "slm",
    [TR_LABEL_ROLLOUT] = "rollout",
    [TR_LABEL_LLM] = "llm",
    [TR_LABEL_GAIN] = "gain",
    [TR_LABEL_EXPECTED] = "expected",
    [TR_LABEL_MIXED] = "mixed",
};
#define N_LABEL_MODES (int)(sizeof label_names / sizeof label_names[0])

const char *tr_label_mode_name(tr_label_mode m) {
    return (int)m >= 0 && (int)m < N_LABEL_MODES ? label_names[m] : "unknown";
}

tr_status tr_label_mode_from_name(const char *name, tr_label_mode *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "tr_label_mode_from_name: NULL argument");
    for (int i = 0; i < N_LABEL_MODES; i++) {
        if (strcasecmp(name, label_names[i]) == 0) {
            *out = (tr_label_mode)i;
            return TR_OK;
        }
    }
    return tr_fail(TR_ERR_ARG, "unknown label mode '%s' (known: drop, slm, rollout, llm, gain, expected, mixed)", name);
}

int label_rule(int32_t truth, int32_t slm_top1, int32_t llm_top1, int32_t rollout_slm, int32_t rollout_llm,
               tr_label_mode mode) {
    if (slm_top1 == truth) return 1;
    if (llm_top1 == truth) return 0;
    switch (mode) {
    case TR_LABEL_SLM: return 1;
    case TR_LABEL_LLM: return 0;
    case TR_LABEL_ROLLOUT:
        if (rollout_slm < 0 || rollout_llm < 0) return -1; /* not rolled out: nothing to decide by */
        return rollout_slm >= rollout_llm ? 1 : 0;
    case TR_LABEL_DROP:
    case TR_LABEL_GAIN:
    case TR_LABEL_EXPECTED:
    case TR_LABEL_MIXED: break; /* soft targets: label_of */
    }
    return -1;
}

float label_of(const tr_train_data *d, int64_t i, tr_label_mode mode) {
    if (mode == TR_LABEL_GAIN || mode == TR_LABEL_EXPECTED || mode == TR_LABEL_MIXED) {
        const float *p = d->probs + i * COLLECT_N_PROBS;
        const float realized = (float)(d->llm_top1[i] == d->truth[i]) - (float)(d->slm_top1[i] == d->truth[i]);
        float expected = d->slm_top1[i] == d->llm_top1[i] ? 0.0f : p[1] - p[4];
        expected = expected > 0 ? expected : 0.0f;
        const float g = mode == TR_LABEL_GAIN ? realized : mode == TR_LABEL_EXPECTED ? expected : 0.5f * (realized + expected);
        return 0.5f * (1.0f - g);
    }
    return (float)label_rule(d->truth[i], d->slm_top1[i], d->llm_top1[i], d->rollout_slm[i], d->rollout_llm[i], mode);
}

int32_t rollout_matches(const int32_t *cont, const int32_t *ref, int32_t n) {
    int32_t m = 0;
    for (int32_t j = 0; j < n; j++) m += cont[j] == ref[j];
    return m;
}

/* Hidden state and logit features of position i; returns the end of what it wrote. */
static float *position_inputs(const tr_train_data *d, int64_t i, unsigned features, int32_t topk, float *o) {
    memcpy(o, d->hidden + i * d->n_embd, (size_t)d->n_embd * sizeof(float));
    o += d->n_embd;
    const float *f = d->feats + i * d->n_feats;
    if (features & TR_FEATURE_MAXPROB) *o++ = f[0];
    if (features & TR_FEATURE_ENTROPY) *o++ = f[1];
    if (features & TR_FEATURE_MARGIN) *o++ = f[2];
    if (features & TR_FEATURE_TOPK_LOGPROBS)
        for (int32_t k = 0; k < topk; k++) *o++ = f[COLLECT_N_STATS + k];
    return o;
}

int32_t router_extra_width(void);

tr_status train_input_row(const tr_train_data *d, int64_t i, unsigned features, int32_t topk, int32_t context,
                          const tr_model *slm, float *out) {
    float *o = position_inputs(d, i, features, topk, out);
    if (features & TR_FEATURE_TOKEN_EMBEDDING) {
        const tr_status st = slm_token_embedding(slm, d->slm_top1[i], o);
        if (st != TR_OK) return st;
        o += d->n_embd;
    }
    const int32_t width = tr_router_context_width(features, topk, d->n_embd);
    for (int32_t k = 1; k <= context; k++, o += width) {
        /* Records are stored in position order per example: p - k is k records back when it was predicted. */
        const int64_t j = i - k;
        if (j >= 0 && d->group[j] == d->group[i] && d->position[j] == d->position[i] - k)
            position_inputs(d, j, features, topk, o);
        else
            memset(o, 0, (size_t)width * sizeof(float));
    }
    if (features & TR_FEATURE_INDUCTION) {
        const int32_t g = d->group[i], p = d->position[i];
        if (d->group_tokens[g] < 0 || d->group_n_tokens[g] < p)
            return tr_fail(TR_ERR_STATE, "example %d has no tokens before position %d (induction)", (int)d->example[i],
                           (int)p);
        router_induction_values(d->tokens + d->group_tokens[g], p, d->slm_top1[i], o);
        o += TR_ROUTER_INDUCTION_VALUES;
    }
    const int32_t ne = router_extra_width();
    if (ne > 0) {
        if (!d->extra) return tr_fail(TR_ERR_STATE, "TOKROUTE_EXTRA set and no extra.f32");
        memcpy(o, d->extra + i * ne, (size_t)ne * sizeof(float));
    }
    return TR_OK;
}

tr_status train_data_check_tokens(const tr_train_data *d) {
    for (int64_t i = 0; i < d->n; i++) {
        const int32_t g = d->group[i];
        if (d->group_tokens[g] < 0 || d->group_n_tokens[g] < d->position[i])
            return tr_fail(TR_ERR_ARG, "the induction feature reads each example's tokens, and example %d's prompt "
                           "was not stored (collected before tokens.bin): collect this data again, or drop the "
                           "feature (--features without induction)", (int)d->example[i]);
    }
    return TR_OK;
}
