/* calibrate.c — scoring collected positions with a router, the threshold that routes a given share, and the share
 * of the SLM-to-LLM accuracy gap a router closes.
 *
 * A router scores stored positions without the logits: the stored features are exactly what it would compute
 * from them (features.c), so an MLP router reads hidden state + features off the data (the token features from
 * the examples' tokens, ngram from the router's table), and a policy reads its
 * statistic (maxprob, margin, 1 - entropy). At a target share r of n positions, the floor(r n + 0.5) lowest scores
 * are routed (ties broken by position order, so the share is exact) and tau is the lowest score not routed.
 * The oracle (router NULL in tr_train_gap) routes positions where only the LLM is right first; the bound
 * (tr_train_gap_bound) those where the LLM's expected gain p(l) - p(s) is largest.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "router/router_internal.h"
#include "train/train_internal.h"

tr_status tr_train_data_scores(const tr_train_data *d, tr_router *router, float *scores) {
    if (!d || !router || !scores) return tr_fail(TR_ERR_ARG, "tr_train_data_scores: NULL argument");
    const tr_status rows = train_data_check_rows(d, "scoring positions with a router");
    if (rows != TR_OK) return rows;
    const tr_policy policy = tr_router_policy(router);
    if (policy != TR_POLICY_MLP) {
        for (int64_t i = 0; i < d->n; i++) {
            const float *f = d->feats + i * d->n_feats;
            const logit_stats st = {.maxprob = f[0], .entropy_norm = f[1], .margin = f[2], .valid = true};
            scores[i] = policy_score(policy, &st);
        }
        return TR_OK;
    }
    mlp_net *net = router_mlp(router);
    if (net->slm_n_embd != d->n_embd || net->slm_n_vocab != d->n_vocab)
        return tr_fail(TR_ERR_ARG, "the router was trained for an SLM with hidden size %d and %d tokens, the data "
                       "has %d and %d", (int)net->slm_n_embd, (int)net->slm_n_vocab, (int)d->n_embd, (int)d->n_vocab);
    if (net->topk > d->topk)
        return tr_fail(TR_ERR_ARG, "the router reads %d top-k log-probs, the data has %d", (int)net->topk, (int)d->topk);
    if ((net->features & TR_FEATURE_TOKEN_EMBEDDING) && !net->slm)
        return tr_fail(TR_ERR_STATE, "this router reads the SLM's token embeddings: give it the SLM (tr_router_set_slm)");
    if (net->features & ROUTER_TOKEN_FEATURES) {
        const tr_status st = train_data_check_tokens(d);
        if (st != TR_OK) return st;
    }
    float *row = malloc((size_t)net->sizes[0] * sizeof(float));
    if (!row) return tr_fail(TR_ERR_NOMEM, "out of memory");
    tr_status st = TR_OK;
    for (int64_t i = 0; st == TR_OK && i < d->n; i++) {
        /* Data scored against a router reads the router's table (its own examples were never in it). */
        float ngram[TR_ROUTER_NGRAM_VALUES];
        if (net->features & TR_FEATURE_NGRAM)
            router_ngram_lookup(net->ngram, d->tokens + d->group_tokens[d->group[i]], d->position[i], d->slm_top1[i],
                                ngram);
        st = train_input_row(d, i, net->features, net->topk, net->context, net->slm, ngram, row);
        scores[i] = mlp_forward_input(net, row);
    }
    free(row);
    return st;
}

typedef struct ranked {
    float score;
    int64_t index;
} ranked;

static int compare_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

typedef enum ranking { RANK_ROUTER, RANK_ORACLE, RANK_BOUND } ranking;

/* Scores of every position sorted ascending (position order on ties): the given ones, the router's, the oracle's
 * (router and given NULL) or the bound's (bound: the negated expected gain). */
static tr_status rank_positions(const tr_train_data *d, tr_router *router, const float *given, bool bound,
                                ranked **out) {
    *out = NULL;
    if (d->n < 1) return tr_fail(TR_ERR_ARG, "no collected positions");
    float *scores = malloc((size_t)d->n * sizeof(float));
    ranked *r = malloc((size_t)d->n * sizeof(ranked));
    tr_status st = scores && r ? TR_OK : tr_fail(TR_ERR_NOMEM, "out of memory");
    if (st == TR_OK && router) st = tr_train_data_scores(d, router, scores);
    if (st == TR_OK && given) memcpy(scores, given, (size_t)d->n * sizeof(float));
    for (int64_t i = 0; st == TR_OK && i < d->n; i++) {
        const bool helps = d->slm_top1[i] != d->truth[i] && d->llm_top1[i] == d->truth[i];
        r[i].score = bound ? -expected_gain(d, i) : router || given ? scores[i] : (helps ? 0.0f : 1.0f);
        r[i].index = i;
    }
    free(scores);
    if (st != TR_OK) {
        free(r);
        return st;
    }
    qsort(r, (size_t)d->n, sizeof *r, compare_ranked);
    *out = r;
    return TR_OK;
}

static int64_t routed_count(double target, int64_t n) {
    int64_t k = (int64_t)floor(target * (double)n + 0.5);
    return k < 0 ? 0 : k > n ? n : k;
}

tr_status tr_calibrate(tr_router *router, const tr_train_data *d, double target_routed, float *tau, double *routed) {
    if (!router || !d || !tau) return tr_fail(TR_ERR_ARG, "tr_calibrate: NULL argument");
    if (!(target_routed >= 0 && target_routed <= 1)) return tr_fail(TR_ERR_ARG, "target share must be in [0, 1]");
    ranked *r;
    tr_status st = rank_positions(d, router, NULL, false, &r);
    if (st != TR_OK) return st;
    const int64_t k = routed_count(target_routed, d->n);
    /* Routing is score < tau: the k-th lowest score routes exactly those below it (ties stay together). */
    float t = k < d->n ? r[k].score : nextafterf(r[d->n - 1].score, INFINITY);
    if (t > 1.0f) t = 1.0f;
    int64_t below = 0;
    while (below < d->n && r[below].score < t) below++;
    free(r);
    *tau = t;
    if (routed) *routed = (double)below / (double)d->n;
    return TR_OK;
}

static tr_status gap_points(const tr_train_data *d, tr_router *router, const float *given, bool bound,
                            const double *targets, int32_t n, tr_gap_point *out, tr_gap_report *report) {
    if (!d || (n > 0 && (!targets || !out))) return tr_fail(TR_ERR_ARG, "tr_train_gap: NULL argument");
    for (int32_t j = 0; j < n; j++)
        if (!(targets[j] >= 0 && targets[j] <= 1)) return tr_fail(TR_ERR_ARG, "target shares must be in [0, 1]");
    ranked *r;
    tr_status st = rank_positions(d, router, given, bound, &r);
    if (st != TR_OK) return st;
    int64_t slm = 0, llm = 0, best = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const bool s = d->slm_top1[i] == d->truth[i], l = d->llm_top1[i] == d->truth[i];
        slm += s;
        llm += l;
        best += s || l;
    }
    const double n_pos = (double)d->n, slm_acc = slm / n_pos, llm_acc = llm / n_pos;
    for (int32_t j = 0; j < n; j++) {
        const int64_t k = routed_count(targets[j], d->n);
        int64_t correct = slm;
        for (int64_t q = 0; q < k; q++) {
            const int64_t i = r[q].index;
            correct += (d->llm_top1[i] == d->truth[i]) - (d->slm_top1[i] == d->truth[i]);
        }
        out[j].target_routed = targets[j];
        out[j].routed = (double)k / n_pos;
        out[j].tau = k < d->n ? r[k].score : 1.0f;
        out[j].accuracy = correct / n_pos;
        out[j].gap_closed = llm_acc != slm_acc ? (out[j].accuracy - slm_acc) / (llm_acc - slm_acc) : 0;
    }
    free(r);
    if (report) {
        report->slm_accuracy = slm_acc;
        report->llm_accuracy = llm_acc;
        report->oracle_accuracy = best / n_pos;
    }
    return TR_OK;
}

tr_status tr_train_gap(const tr_train_data *d, tr_router *router, const double *targets, int32_t n,
                       tr_gap_point *out, tr_gap_report *report) {
    return gap_points(d, router, NULL, false, targets, n, out, report);
}

tr_status tr_train_gap_scores(const tr_train_data *d, const float *scores, const double *targets, int32_t n,
                              tr_gap_point *out, tr_gap_report *report) {
    if (!scores) return tr_fail(TR_ERR_ARG, "tr_train_gap_scores: NULL scores");
    return gap_points(d, NULL, scores, false, targets, n, out, report);
}

tr_status tr_train_gap_bound(const tr_train_data *d, const double *targets, int32_t n, tr_gap_point *out) {
    return gap_points(d, NULL, NULL, true, targets, n, out, NULL);
}
