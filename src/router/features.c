/* features.c — the inputs an MLP router may read besides the hidden state, and their names.
 *
 * Order after the hidden state is fixed by bit: maxprob, entropy (H / ln V), margin (p1 - p2), then the k largest
 * log-probabilities in descending order. The first three come from logit_stats_compute (policy.c), so a router
 * feature equals the training-free policy of the same name; a top-k log-prob is (l_i - m) + ln p1, since p1 = 1 / s
 * with s = sum exp(l_j - m), and is floored at ROUTER_TOPK_FLOOR so a vanishing probability stays a finite input.
 * The same function fills collected training data (src/train), so the trainer and the router see equal numbers.
 * Last comes the SLM's input embedding of its top-1 token (R2R), n_embd values decoded from the model's token
 * embedding table (slm_token_embedding), which neither the logits nor collected data hold.
 * Induction (router_induction_values) comes after the context positions: where the token the SLM just read
 * occurred before and what followed it then, from the sequence's tokens (decode: tr_router_tokens; training: the
 * collected tokens), so both sides compute it here with the same float operations.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/model_internal.h"
#include "router/router_internal.h"

static const struct {
    unsigned bit;
    const char *name;
} feature_names[] = {
    {TR_FEATURE_MAXPROB, "maxprob"},
    {TR_FEATURE_ENTROPY, "entropy"},
    {TR_FEATURE_MARGIN, "margin"},
    {TR_FEATURE_TOPK_LOGPROBS, "topk_logprobs"},
    {TR_FEATURE_TOKEN_EMBEDDING, "token_embedding"},
    {TR_FEATURE_INDUCTION, "induction"},
};
#define N_FEATURES (int)(sizeof feature_names / sizeof feature_names[0])

const char *tr_router_feature_name(unsigned feature_bit) {
    for (int i = 0; i < N_FEATURES; i++)
        if (feature_names[i].bit == feature_bit) return feature_names[i].name;
    return NULL;
}

unsigned feature_from_name(const char *name) {
    if (!name) return 0;
    for (int i = 0; i < N_FEATURES; i++)
        if (strcmp(name, feature_names[i].name) == 0) return feature_names[i].bit;
    return strcmp(name, "topk") == 0 ? TR_FEATURE_TOPK_LOGPROBS : 0;
}

int32_t tr_router_feature_width(unsigned features, int32_t topk, int32_t n_embd) {
    int32_t n = 0;
    n += (features & TR_FEATURE_TOKEN_EMBEDDING) && n_embd > 0 ? n_embd : 0;
    n += (features & TR_FEATURE_MAXPROB) ? 1 : 0;
    n += (features & TR_FEATURE_ENTROPY) ? 1 : 0;
    n += (features & TR_FEATURE_MARGIN) ? 1 : 0;
    n += (features & TR_FEATURE_TOPK_LOGPROBS) && topk > 0 ? topk : 0;
    return n;
}

int32_t tr_router_context_width(unsigned features, int32_t topk, int32_t n_embd) {
    return n_embd + tr_router_feature_width(features & ROUTER_LOGIT_FEATURES, topk, n_embd);
}

int32_t router_extra_width(void) {
    const char *e = getenv("TOKROUTE_EXTRA");
    return e ? atoi(e) : 0;
}

int32_t tr_router_input_width(unsigned features, int32_t topk, int32_t n_embd, int32_t context) {
    return router_extra_width() + n_embd + tr_router_feature_width(features, topk, n_embd) +
           (context > 0 ? context * tr_router_context_width(features, topk, n_embd) : 0) +
           ((features & TR_FEATURE_INDUCTION) ? TR_ROUTER_INDUCTION_VALUES : 0);
}

tr_status tr_router_features_parse(const char *list, unsigned *features) {
    if (!list || !features) return tr_fail(TR_ERR_ARG, "tr_router_features_parse: NULL argument");
    *features = 0;
    if (strcmp(list, "none") == 0) return TR_OK;
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        char name[32];
        if (n == 0 || n >= sizeof name)
            return tr_fail(TR_ERR_ARG, "bad feature list '%s' (known: maxprob, entropy, margin, topk, token_embedding, induction)",
                           list);
        memcpy(name, p, n);
        name[n] = '\0';
        const unsigned bit = feature_from_name(name);
        if (!bit)
            return tr_fail(TR_ERR_ARG,
                           "unknown router feature '%s' (known: maxprob, entropy, margin, topk, token_embedding, induction)", name);
        *features |= bit;
        p += n;
        if (*p == ',') p++;
    }
    return TR_OK;
}

/* The k largest of n logits, descending (k small: insertion into a sorted run). */
static void top_logits(const float *logits, int32_t n, int32_t k, float *best) {
    for (int32_t j = 0; j < k; j++) best[j] = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        const float l = logits[i];
        if (!(l > best[k - 1])) continue;
        int32_t j = k - 1;
        while (j > 0 && best[j - 1] < l) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = l;
    }
}

void router_logit_features(unsigned features, int32_t topk, const float *logits, int32_t n_vocab, float *out) {
    logit_stats st;
    logit_stats_compute(logits, n_vocab, &st);
    int32_t k = 0;
    if (features & TR_FEATURE_MAXPROB) out[k++] = st.maxprob;
    if (features & TR_FEATURE_ENTROPY) out[k++] = st.entropy_norm;
    if (features & TR_FEATURE_MARGIN) out[k++] = st.margin;
    if (!(features & TR_FEATURE_TOPK_LOGPROBS) || topk < 1) return;
    float *lp = out + k;
    if (!st.valid || !(st.maxprob > 0)) {
        for (int32_t j = 0; j < topk; j++) lp[j] = 0.0f;
        return;
    }
    const int32_t have = topk < n_vocab ? topk : n_vocab;
    top_logits(logits, n_vocab, have, lp);
    const float m = lp[0], log_p1 = logf(st.maxprob);
    for (int32_t j = 0; j < topk; j++) {
        const float v = j < have ? (lp[j] - m) + log_p1 : ROUTER_TOPK_FLOOR;
        lp[j] = v > ROUTER_TOPK_FLOOR ? v : ROUTER_TOPK_FLOOR; /* also -inf (masked) logits */
    }
}

tr_status slm_token_embedding(const tr_model *slm, int32_t id, float *out) {
    const weight_matrix *e = &slm->tok_embd;
    if (id < 0 || id >= e->rows) return tr_fail(TR_ERR_RANGE, "token %d is outside the SLM's embeddings", (int)id);
    const size_t stride = e->row_stride ? e->row_stride : type_row_bytes(e->type, e->cols);
    return dequantize_row(e->type, (const char *)e->data + (size_t)id * stride, out, e->cols);
}

void router_induction_values(const int32_t *tok, int64_t p, int32_t slm_top1, float *out) {
    int32_t best = 0, occ = 0;
    int64_t bq = -1;
    if (p >= 2) {
        const int32_t x = tok[p - 1];
        for (int64_t q = p - 2; q >= 1; q--) { /* latest first: a tie keeps the latest q */
            if (tok[q] != x) continue;
            occ++;
            int32_t m = 1;
            while (m < ROUTER_INDUCTION_MATCH_MAX && q - m >= 1 && tok[q - m] == tok[p - 1 - m]) m++;
            if (m > best) best = m, bq = q;
        }
    }
    const bool found = bq >= 1;
    const bool same = found && tok[bq + 1] == slm_top1;
    out[0] = found;
    out[1] = (float)best / (float)ROUTER_INDUCTION_MATCH_MAX;
    out[2] = best >= 2;
    out[3] = same;
    out[4] = found && !same;
    out[5] = found ? logf(1.0f + (float)(p - 1 - bq)) : 0.0f;
    out[6] = logf(1.0f + (float)occ);
}
