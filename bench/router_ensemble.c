/* router_ensemble.c — what an ensemble of router files would close, measured offline: each router scores every
 * position of a collected folder, the score used is the mean of their logits, and the share of the SLM-to-LLM gap
 * closed at each routed share is printed beside the bound's (and each member's alone), as `calibrate --gap` and
 * `train-router --eval-data` print them (docs/train.md, "Toward the bound").
 *
 * usage: router_ensemble DATA_DIR SLM.gguf ROUTER.gguf [ROUTER.gguf ...]
 * (shares 10% and 20%; SLM: the model the data was collected with, for routers reading token embeddings)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tokroute.h"

#define N_SHARES 2

static const double shares[N_SHARES] = {0.1, 0.2};

static float logit_of(float p) {
    const float lo = 1e-30f, hi = 1.0f - 6e-8f;
    p = p < lo ? lo : p > hi ? hi : p;
    return logf(p) - log1pf(-p);
}

static void print_row(const char *name, const tr_gap_point *pts, const tr_gap_point *bound) {
    printf("%-28s", name);
    for (int j = 0; j < N_SHARES; j++)
        printf("  %5.1f%% [%3.0f%%]", 100 * pts[j].gap_closed, 100 * pts[j].gap_closed / bound[j].gap_closed);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: router_ensemble DATA_DIR SLM.gguf ROUTER.gguf [ROUTER.gguf ...]\n");
        return 2;
    }
    tr_train_data *data = NULL;
    tr_model *slm = NULL;
    tr_status st = tr_train_data_open(argv[1], &data);
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    if (st == TR_OK) st = tr_model_load(argv[2], &mp, &slm);
    if (st != TR_OK) {
        fprintf(stderr, "router_ensemble: %s\n", tr_last_error());
        return 1;
    }
    const int64_t n = tr_train_data_get_info(data).n_positions;
    float *one = malloc((size_t)n * sizeof(float)), *mean = calloc((size_t)n, sizeof(float));
    if (!one || !mean) return 1;
    tr_gap_point bound[N_SHARES], pts[N_SHARES];
    st = tr_train_gap_bound(data, shares, N_SHARES, bound);
    printf("%-28s  %5.1f%%         %5.1f%%  (%lld positions)\n", "bound", 100 * bound[0].gap_closed,
           100 * bound[1].gap_closed, (long long)n);
    const int n_routers = argc - 3;
    for (int r = 0; st == TR_OK && r < n_routers; r++) {
        tr_router *router = NULL;
        st = tr_router_load(argv[3 + r], NULL, &router);
        if (st == TR_OK) st = tr_router_set_slm(router, slm);
        if (st == TR_OK) st = tr_train_data_scores(data, router, one);
        if (st == TR_OK) st = tr_train_gap_scores(data, one, shares, N_SHARES, pts, NULL);
        if (st == TR_OK) print_row(argv[3 + r], pts, bound);
        for (int64_t i = 0; st == TR_OK && i < n; i++) mean[i] += logit_of(one[i]) / (float)n_routers;
        tr_router_free(router);
    }
    if (st == TR_OK) st = tr_train_gap_scores(data, mean, shares, N_SHARES, pts, NULL);
    if (st == TR_OK) print_row("mean of the logits", pts, bound);
    if (st != TR_OK) fprintf(stderr, "router_ensemble: %s\n", tr_last_error());
    free(one);
    free(mean);
    tr_model_free(slm);
    tr_train_data_free(data);
    return st == TR_OK ? 0 : 1;
}
