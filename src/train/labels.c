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
#include <stdbool.h>
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

/* Induction (screening): the input token x = the token at p-1; its latest earlier occurrence with the longest
 * match of the tokens before it (up to 8); c = the token that followed that occurrence. parts 1: found,
 * match/8, match >= 2, c == SLM top-1, found and c != SLM top-1, ln(1 + distance), ln(1 + occurrences);
 * 2: the SLM's embedding of c; 4: match >= 3, match >= 4 with c != top-1, the SLM's p(top-1) when c == top-1. */
static tr_status induction_row(const tr_train_data *d, int64_t i, unsigned parts, const tr_model *slm, float **po) {
    float *o = *po;
    const int32_t p = d->position[i];
    /* tokens at positions 1..p-1 are the truths of records i-(p-1)..i-1 when stored contiguously */
    int64_t first = i - (p - 1);
    bool ok = p >= 2 && first >= 0 && d->group[first] == d->group[i] && d->position[first] == 1;
    const int32_t *tok = ok ? d->truth + first - 1 : NULL; /* tok[q] = token at position q, q >= 1 */
    int32_t best = 0, bq = -1, occ = 0, n_top1 = 0, n_distinct = 0;
    int32_t seen[64];
    if (ok) {
        const int32_t x = tok[p - 1];
        for (int32_t q = p - 2; q >= 1; q--) {
            if (tok[q] != x) continue;
            occ++;
            const int32_t nx = tok[q + 1];
            n_top1 += nx == d->slm_top1[i];
            bool known = false;
            for (int32_t k = 0; k < n_distinct; k++) known |= seen[k] == nx;
            if (!known && n_distinct < 64) seen[n_distinct++] = nx;
            int32_t m = 1;
            while (m < 8 && q - m >= 1 && tok[q - m] == tok[p - 1 - m]) m++;
            if (m > best) best = m, bq = q;
        }
    }
    const bool found = bq >= 1;
    const int32_t c = found ? tok[bq + 1] : -1;
    int32_t long_m = 0;
    if (found) {
        long_m = 1;
        while (long_m < 32 && bq - long_m >= 1 && tok[bq - long_m] == tok[p - 1 - long_m]) long_m++;
    }
    const bool same = found && c == d->slm_top1[i];
    if (parts & 1u) {
        *o++ = found;
        *o++ = (float)best / 8.0f;
        *o++ = best >= 2;
        *o++ = same;
        *o++ = found && !same;
        *o++ = found ? logf(1.0f + (float)(p - 1 - bq)) : 0.0f;
        *o++ = logf(1.0f + (float)occ);
    }
    if (parts & 2u) {
        if (found) {
            const tr_status st = slm_token_embedding(slm, c, o);
            if (st != TR_OK) return st;
        } else
            memset(o, 0, (size_t)d->n_embd * sizeof(float));
        o += d->n_embd;
    }
    if (parts & 8u) { /* the SLM's log-probability of c against its top-1's: (e_c - e_top1) . h (tied output) */
        float dl = 0.0f;
        if (found && !same) {
            float ec[4096], et[4096];
            tr_status st;
            if (d->n_embd > 4096) return tr_fail(TR_ERR_ARG, "screening: n_embd too large");
            if ((st = slm_token_embedding(slm, c, ec)) != TR_OK ||
                (st = slm_token_embedding(slm, d->slm_top1[i], et)) != TR_OK)
                return st;
            const float *h = d->hidden + i * d->n_embd;
            for (int32_t j = 0; j < d->n_embd; j++) dl += (ec[j] - et[j]) * h[j];
        }
        *o++ = dl;
        *o++ = found ? dl + logf(d->feats[i * d->n_feats] > 1e-30f ? d->feats[i * d->n_feats] : 1e-30f) : 0.0f;
    }
    if (parts & 128u) *o++ = (float)long_m / 32.0f;
    if (parts & 32u) { /* the SLM's top-1 in the context: how often, how long ago */
        int32_t n_t = 0, last = -1;
        if (ok)
            for (int32_t q = p - 1; q >= 1; q--)
                if (tok[q] == d->slm_top1[i]) {
                    if (last < 0) last = q;
                    n_t++;
                }
        *o++ = last >= 1;
        *o++ = logf(1.0f + (float)n_t);
        *o++ = last >= 1 ? logf((float)(p - last)) : 0.0f;
    }
    if (parts & 16u) { /* how the input token was continued before: by the SLM's top-1, by others, how many ways */
        *o++ = logf(1.0f + (float)n_top1);
        *o++ = logf(1.0f + (float)(occ - n_top1));
        *o++ = logf(1.0f + (float)n_distinct);
    }
    if (parts & 4u) {
        *o++ = best >= 3;
        *o++ = best >= 4 && !same;
        *o++ = same ? d->feats[i * d->n_feats] : 0.0f;
    }
    *po = o;
    return TR_OK;
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
    const unsigned ind = induction_screen_parts();
    if (ind) {
        const tr_status st = induction_row(d, i, ind & ~64u, slm, &o);
        if (st != TR_OK || !(ind & 64u)) return st;
        const int64_t j = i - 1;
        if (j >= 0 && d->group[j] == d->group[i] && d->position[j] == d->position[i] - 1)
            return induction_row(d, j, 1u, slm, &o);
        memset(o, 0, 7 * sizeof(float));
    }
    return TR_OK;
}
