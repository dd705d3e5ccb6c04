/* bench_route.c — routed decoding latency on the real tiny pair: router cost per token relative to an SLM step
 * (policies and a CITER-shaped MLP), and time between tokens at routed rates near 0%, 10% and 30%, with a
 * simulated round trip of 0 and 170 ms per LLM call.
 *
 * usage: bench_route [SHARED_DIR] [--rtt-only-zero]
 * The threshold for each target rate is found by sweeping tau on the same prompt (greedy decoding is
 * deterministic, so the rate at a tau does not depend on the delay). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokroute.h"

#define N_GEN 128

typedef struct bench {
    tr_model *slm, *llm;
    int32_t prompt[64];
    int32_t n_prompt;
} bench;

static void die(const char *what) {
    fprintf(stderr, "bench_route: %s: %s\n", what, tr_last_error());
    exit(1);
}

static tr_route_stats run(bench *b, tr_router *router, tr_route_mode mode, float tau, double rtt_ms) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 512;
    tr_context *ctx;
    tr_llm_backend *llm;
    if (tr_context_create(b->slm, &cp, &ctx) != TR_OK) die("context");
    if (tr_llm_backend_embedded(b->llm, &cp, NULL, &llm) != TR_OK) die("backend");
    tr_llm_backend_set_rtt(llm, rtt_ms);
    tr_route_params rp = tr_route_default_params();
    rp.mode = mode;
    rp.tau = tau;
    rp.n_predict = N_GEN;
    rp.stop_at_eog = false;
    tr_route_stats st;
    if (tr_route_generate(ctx, router, llm, b->prompt, b->n_prompt, &rp, NULL, 0, &st) != TR_OK) die("generate");
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
    return st;
}

static void router_cost(bench *b, const char *name, tr_router *router) {
    /* Best of a few runs: the machine is shared and noisy. */
    double best_ratio = 1e9, slm_per_token = 0, router_per_token = 0;
    for (int rep = 0; rep < 5; rep++) {
        tr_route_stats st = run(b, router, TR_MODE_JOINT, 0.0f, 0.0);
        const double ratio = st.router_ms / (st.slm_ms - st.router_ms);
        if (ratio < best_ratio) {
            best_ratio = ratio;
            slm_per_token = (st.slm_ms - st.router_ms) / st.n_tokens;
            router_per_token = st.router_ms / st.n_tokens;
        }
    }
    printf("router %-8s %8.2f us/token   SLM step %8.2f us/token   router/SLM %.2f%%\n", name, router_per_token * 1e3,
           slm_per_token * 1e3, best_ratio * 100.0);
}

static tr_router *citer_mlp(int32_t h) {
    /* Random weights in CITER's shape h -> 2h -> h -> 1 (cost does not depend on the values). */
    int32_t sizes[4] = {h, 2 * h, h, 1};
    float *w[3], *bias[3];
    for (int l = 0; l < 3; l++) {
        w[l] = malloc((size_t)sizes[l] * sizes[l + 1] * sizeof(float));
        bias[l] = calloc((size_t)sizes[l + 1], sizeof(float));
        for (int32_t i = 0; i < sizes[l] * sizes[l + 1]; i++) w[l][i] = (float)((i * 7919) % 200 - 100) / 1000.0f;
    }
    tr_mlp_router_desc d = {.n_layers = 3, .sizes = sizes, .weights = (const float *const *)w,
                            .biases = (const float *const *)bias, .tau = 0.5f, .slm_name = "bench", .slm_n_embd = h,
                            .slm_n_vocab = 512};
    const char *path = "/tmp/tokroute-bench-router.gguf";
    tr_router *r = NULL;
    if (tr_router_write_mlp(&d, path) != TR_OK || tr_router_load(path, NULL, &r) != TR_OK) die("mlp router");
    remove(path);
    for (int l = 0; l < 3; l++) free(w[l]), free(bias[l]);
    return r;
}

int main(int argc, char **argv) {
    const char *shared = argc > 1 ? argv[1] : "../shared";
    char path[1024];
    bench b = {0};
    tr_model_params mp = tr_model_default_params();
    snprintf(path, sizeof path, "%s/models/stories-student.gguf", shared);
    if (tr_model_load(path, &mp, &b.slm) != TR_OK) die("SLM");
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    if (tr_model_load(path, &mp, &b.llm) != TR_OK) die("LLM");
    const char *text = "Once upon a time, there was a little dog named Max.";
    tr_tokenize_params tp = tr_tokenize_default_params();
    if (tr_tokenize(tr_model_vocab(b.slm), text, strlen(text), &tp, b.prompt, 64, &b.n_prompt) != TR_OK) die("tokenize");

    printf("== router cost (SLM: stories-student, n_embd 32, vocab 512)\n");
    const tr_policy policies[] = {TR_POLICY_MAXPROB, TR_POLICY_MARGIN, TR_POLICY_ENTROPY};
    for (size_t i = 0; i < 3; i++) {
        tr_router *r;
        if (tr_router_create(policies[i], &r) != TR_OK) die("policy");
        router_cost(&b, tr_policy_name(policies[i]), r);
        tr_router_free(r);
    }
    tr_router *mlp = citer_mlp(tr_model_get_info(b.slm)->n_embd);
    router_cost(&b, "mlp", mlp);
    tr_router_free(mlp);

    tr_router *maxprob;
    if (tr_router_create(TR_POLICY_MAXPROB, &maxprob) != TR_OK) die("policy");
    const double targets[] = {0.0, 10.0, 30.0};
    float taus[3] = {0, 0, 0};
    double got[3] = {1e9, 1e9, 1e9};
    for (int k = 0; k <= 100; k++) {
        const float tau = (float)k / 100.0f;
        tr_route_stats st = run(&b, maxprob, TR_MODE_JOINT, tau, 0.0);
        const double pct = 100.0 * st.n_routed / st.n_tokens;
        for (int t = 0; t < 3; t++)
            if (fabs(pct - targets[t]) < fabs(got[t] - targets[t])) got[t] = pct, taus[t] = tau;
    }
    printf("\n== time between tokens, %d tokens, maxprob router (TTFT excluded)\n", N_GEN);
    printf("%-8s %6s %9s %12s %12s %12s %12s\n", "rtt_ms", "tau", "routed", "mean_tbt_ms", "ttft_ms", "slm_ms",
           "llm_ms");
    const double rtts[] = {0.0, 170.0};
    for (int r = 0; r < 2; r++) {
        if (argc > 2 && strcmp(argv[2], "--rtt-only-zero") == 0 && rtts[r] > 0) break;
        for (int t = 0; t < 3; t++) {
            tr_route_stats st = run(&b, maxprob, TR_MODE_JOINT, taus[t], rtts[r]);
            printf("%-8.0f %6.2f %8.1f%% %12.3f %12.3f %12.2f %12.2f\n", rtts[r], taus[t],
                   100.0 * st.n_routed / st.n_tokens, st.mean_tbt_ms, st.ttft_ms, st.slm_ms, st.llm_ms);
        }
    }
    tr_router_free(maxprob);
    tr_model_free(b.slm);
    tr_model_free(b.llm);
    return 0;
}
