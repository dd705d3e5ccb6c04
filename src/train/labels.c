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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "model/model_internal.h"
#include "router/router_internal.h"
#include "train/train_internal.h"

int32_t rtok_extra_width(int32_t n_embd);
/* SCREENING: the SLM's output matrix as floats, and the top-8 ids of a stored hidden state through it. */
static float *rtok_out;
static int32_t rtok_vocab, rtok_checked;
static void rtok_topk(const tr_model *slm, const tr_train_data *d, int64_t i, int32_t *ids, float *lps, int32_t k) {
    const weight_matrix *w = &slm->output;
    const int32_t n = d->n_embd;
    if (!rtok_out) {
        rtok_vocab = (int32_t)w->rows;
        rtok_out = malloc((size_t)w->rows * (size_t)n * sizeof(float));
        const size_t stride = w->row_stride ? w->row_stride : type_row_bytes(w->type, w->cols);
        for (int32_t r = 0; r < rtok_vocab; r++) dequantize_row(w->type, (const char *)w->data + (size_t)r * stride, rtok_out + (size_t)r * n, n);
    }
    const float *h = d->hidden + i * n;
    float best[16];
    for (int32_t j = 0; j < k; j++) best[j] = -INFINITY, ids[j] = -1;
    double m = -INFINITY, s = 0;
    float *lg = malloc((size_t)rtok_vocab * sizeof(float));
    for (int32_t v = 0; v < rtok_vocab; v++) {
        const float *r = rtok_out + (size_t)v * n;
        float a = 0;
        for (int32_t e = 0; e < n; e++) a += r[e] * h[e];
        lg[v] = a;
        if (a > m) m = a;
        if (!(a > best[k - 1])) continue;
        int32_t j = k - 1;
        while (j > 0 && best[j - 1] < a) best[j] = best[j - 1], ids[j] = ids[j - 1], j--;
        best[j] = a, ids[j] = v;
    }
    for (int32_t v = 0; v < rtok_vocab; v++) s += exp(lg[v] - m);
    free(lg);
    for (int32_t j = 0; j < k; j++) lps[j] = (float)(best[j] - m - log(s));
    /* the stored top-1 first (kernels may differ in the last bits) */
    if (ids[0] != d->slm_top1[i]) {
        for (int32_t j = 1; j < k; j++) if (ids[j] == d->slm_top1[i]) { int32_t t = ids[j]; ids[j] = ids[0]; ids[0] = t; float u = lps[j]; lps[j] = lps[0]; lps[0] = u; break; }
    }
    if (getenv("TR_RTOK_STATS")) {
        static int64_t npos, ndis, in2, in8;
        static double g, g2, g8;
        const float *p = d->probs + i * COLLECT_N_PROBS;
        npos++;
        if (d->slm_top1[i] != d->llm_top1[i]) {
            const double gi = p[1] - p[4] > 0 ? p[1] - p[4] : 0;
            ndis++, g += gi;
            if (d->llm_top1[i] == ids[1]) in2++, g2 += gi;
            for (int32_t j = 1; j < k; j++) if (d->llm_top1[i] == ids[j]) { in8++, g8 += gi; break; }
        }
        if (npos % 50000 == 0 || i == d->n - 1)
            fprintf(stderr, "rtok stats %lld positions: %lld disagree (%.3f); LLM top-1 = SLM top-2 in %.3f of them (%.3f of the expected gain), in the SLM top-2..8 in %.3f (%.3f)\n",
                    (long long)npos, (long long)ndis, (double)ndis / npos, (double)in2 / ndis, g2 / g, (double)in8 / ndis, g8 / g);
    }
    if (getenv("TR_RTOK_CHECK") && rtok_checked < 5000) {
        rtok_checked++;
        const float *f = d->feats + i * d->n_feats + COLLECT_N_STATS;
        float worst = 0;
        for (int32_t j = 0; j < k && j < d->topk; j++) { float e = fabsf(f[j] - lps[j]); if (e > worst) worst = e; }
        if (rtok_checked <= 5 || worst > 1e-3f || ids[0] != d->slm_top1[i])
            fprintf(stderr, "rtok check %lld: top1 stored %d computed %d top2 %d top3 %d; lp stored %.5f %.5f %.5f computed %.5f %.5f %.5f; worst |diff| %.2e\n",
                    (long long)i, d->slm_top1[i], ids[0], ids[1], ids[2], f[0], f[1], f[2], lps[0], lps[1], lps[2], worst);
    }
}

static void rtok_embed_add(const tr_model *slm, int32_t id, float c, float *o, int32_t n) {
    float e[4096];
    slm_token_embedding(slm, id, e);
    for (int32_t j = 0; j < n; j++) o[j] += c * e[j];
}

static float *rtok_extra(const tr_train_data *d, int64_t i, const tr_model *slm, float *o) {
    const char *l = getenv("TR_RTOK_LEVER");
    if (!l || !*l) return o;
    const int32_t n = d->n_embd;
    memset(o, 0, (size_t)rtok_extra_width(n) * sizeof(float));
    int32_t ids[8];
    float lps[8];
    rtok_topk(slm, d, i, ids, lps, 8);
    if (strstr(l, "top2")) rtok_embed_add(slm, ids[1], 1, o, n), o += n;
    if (strstr(l, "top3")) rtok_embed_add(slm, ids[1], 1, o, n), o += n, rtok_embed_add(slm, ids[2], 1, o, n), o += n;
    if (strstr(l, "pw")) {
        double z = 0;
        for (int32_t j = 0; j < 8; j++) z += exp(lps[j]);
        for (int32_t j = 0; j < 8; j++) rtok_embed_add(slm, ids[j], (float)(exp(lps[j]) / z), o, n);
        o += n;
    }
    if (strstr(l, "diff")) rtok_embed_add(slm, ids[1], 1, o, n), rtok_embed_add(slm, ids[0], -1, o, n), o += n;
    if (strstr(l, "prev")) {
        const int64_t j = i - 1;
        if (j >= 0 && d->group[j] == d->group[i] && d->position[j] == d->position[i] - 1)
            rtok_embed_add(slm, d->truth[j], 1, o, n);
        o += n;
    }
    if (strstr(l, "onehot")) {
        if (d->slm_top1[i] >= 0 && d->slm_top1[i] < 512) o[d->slm_top1[i]] = 1;
        o += 512;
    }
    if (strstr(l, "lp2")) *o++ = lps[1];
    if (strstr(l, "cos")) {
        float e[3][4096];
        for (int32_t t = 0; t < 3; t++) slm_token_embedding(slm, ids[t], e[t]);
        for (int32_t t = 1; t < 3; t++) {
            double ab = 0, aa = 0, bb = 0;
            for (int32_t j = 0; j < n; j++) ab += e[0][j] * e[t][j], aa += e[0][j] * e[0][j], bb += e[t][j] * e[t][j];
            *o++ = aa > 0 && bb > 0 ? (float)(ab / sqrt(aa * bb)) : 0.0f;
        }
    }
    return o;
}

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
    rtok_extra(d, i, slm, o);
    return TR_OK;
}
