/* bench_router.c — what routing costs per token: tr_router_score for MLP routers (CITER's h → 2h → h → 1 at the
 * student's h = 32 and at Qwen2.5-0.5B's h = 896, with and without the maxprob/entropy features) and for each
 * training-free policy at V = 512 and V = 151936, in µs per call; then one decode step of the student SLM for the
 * ratio (the goal is a router under 1% of an SLM step).
 *
 * usage: bench_router [student.gguf]   (default: ../shared/models/stories-student.gguf from the repo root or a
 * build directory; the SLM part is skipped when the model cannot be loaded)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tokroute.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static float rand_uniform(uint64_t *seed, float scale) {
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(((double)(*seed >> 11) / 9007199254740992.0 - 0.5) * 2.0 * scale);
}

/* Best of 5 runs of the mean µs per call over enough calls to fill ~50 ms. */
static double time_score(tr_router *r, const float *hidden, int32_t n_embd, const float *logits, int32_t n_vocab) {
    float s;
    double t0 = now_us();
    int64_t n = 0;
    do {
        if (tr_router_score(r, hidden, n_embd, logits, n_vocab, &s) != TR_OK) return NAN;
        n++;
    } while (now_us() - t0 < 50e3);
    double best = INFINITY;
    for (int rep = 0; rep < 5; rep++) {
        t0 = now_us();
        for (int64_t i = 0; i < n; i++) tr_router_score(r, hidden, n_embd, logits, n_vocab, &s);
        const double per = (now_us() - t0) / (double)n;
        if (per < best) best = per;
    }
    return best;
}

static float *random_array(size_t n, float scale, uint64_t *seed) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; a && i < n; i++) a[i] = rand_uniform(seed, scale);
    return a;
}

/* Writes a CITER-shaped router with random weights to a temp file and loads it. */
static tr_router *make_mlp(int32_t h, int32_t n_vocab, unsigned features) {
    const int32_t n_feat = (features & TR_FEATURE_MAXPROB ? 1 : 0) + (features & TR_FEATURE_ENTROPY ? 1 : 0);
    const int32_t sizes[4] = {h + n_feat, 2 * h, h, 1};
    float *w[3] = {0}, *b[3] = {0};
    uint64_t seed = 42;
    for (int l = 0; l < 3; l++) {
        w[l] = random_array((size_t)sizes[l] * sizes[l + 1], 1.0f / sqrtf((float)sizes[l]), &seed);
        b[l] = random_array((size_t)sizes[l + 1], 0.1f, &seed);
    }
    const tr_mlp_router_desc d = {.n_layers = 3, .sizes = sizes, .weights = (const float *const *)w,
                                  .biases = (const float *const *)b, .features = features, .tau = 0.5f,
                                  .slm_name = "bench", .slm_n_embd = h, .slm_n_vocab = n_vocab};
    char path[64];
    snprintf(path, sizeof path, "/tmp/bench-router-%d.gguf", (int)getpid());
    tr_router *r = NULL;
    if (tr_router_write_mlp(&d, path) != TR_OK || tr_router_load(path, NULL, &r) != TR_OK)
        fprintf(stderr, "bench_router: %s\n", tr_last_error());
    unlink(path);
    for (int l = 0; l < 3; l++) {
        free(w[l]);
        free(b[l]);
    }
    return r;
}

static double bench_mlp(int32_t h, int32_t n_vocab, unsigned features, const char *label) {
    uint64_t seed = 7;
    float *hidden = random_array((size_t)h, 2.0f, &seed), *logits = random_array((size_t)n_vocab, 8.0f, &seed);
    tr_router *r = make_mlp(h, n_vocab, features);
    const double us = r ? time_score(r, hidden, h, logits, n_vocab) : NAN;
    printf("  mlp %-38s %10.3f us/call\n", label, us);
    if (r && tr_router_set_threads(r, 2) == TR_OK)
        printf("  mlp %-38s %10.3f us/call (2 threads)\n", label, time_score(r, hidden, h, logits, n_vocab));
    tr_router_free(r);
    free(hidden);
    free(logits);
    return us;
}

static double bench_policy(tr_policy p, int32_t n_vocab) {
    uint64_t seed = 11;
    float *logits = random_array((size_t)n_vocab, 8.0f, &seed);
    tr_router *r = NULL;
    double us = NAN;
    if (tr_router_create(p, &r) == TR_OK) us = time_score(r, NULL, 0, logits, n_vocab);
    printf("  %-8s V=%-6d %37.3f us/call\n", tr_policy_name(p), (int)n_vocab, us);
    tr_router_free(r);
    free(logits);
    return us;
}

/* Mean µs of one single-token decode step of the SLM (logits of that token kept, as routing needs). */
static double bench_slm_step(const char *path, int32_t n_threads) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *model = NULL;
    if (tr_model_load(path, &mp, &model) != TR_OK) return NAN;
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = n_threads;
    tr_context *ctx = NULL;
    double best = NAN;
    if (tr_context_create(model, &cp, &ctx) == TR_OK) {
        const int32_t n_vocab = tr_model_get_info(model)->n_vocab;
        for (int rep = 0; rep < 6; rep++) {
            tr_context_clear(ctx);
            int32_t tok = 1;
            const int n_steps = 200;
            const double t0 = now_us();
            for (int i = 0; i < n_steps; i++) {
                if (tr_context_eval(ctx, &tok, 1, TR_EVAL_LOGITS_LAST) != TR_OK) break;
                tok = tr_argmax(tr_context_logits(ctx, -1), n_vocab);
            }
            const double per = (now_us() - t0) / n_steps;
            if (rep > 0 && !(per >= best)) best = per; /* rep 0 warms up */
        }
    }
    tr_context_free(ctx);
    tr_model_free(model);
    return best;
}

int main(int argc, char **argv) {
    const char *candidates[] = {argc > 1 ? argv[1] : NULL, "../shared/models/stories-student.gguf",
                                "../../shared/models/stories-student.gguf"};
    const char *slm_path = NULL;
    for (size_t i = 0; i < 3 && !slm_path; i++)
        if (candidates[i] && access(candidates[i], R_OK) == 0) slm_path = candidates[i];

    printf("tokroute router benchmark (kernels: %s; single thread)\n", tr_kernels_isa());
    const double mlp32_feat = bench_mlp(32, 512, TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY,
                                        "h=32  34->64->32->1, features, V=512");
    const double mlp32 = bench_mlp(32, 512, 0, "h=32  32->64->32->1, no features");
    bench_mlp(896, 151936, TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY, "h=896 898->1792->896->1, features, V=151936");
    bench_mlp(896, 151936, 0, "h=896 896->1792->896->1, no features");
    double pol512[3];
    for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++) pol512[p - 1] = bench_policy(p, 512);
    for (tr_policy p = TR_POLICY_MAXPROB; p <= TR_POLICY_ENTROPY; p++) bench_policy(p, 151936);

    if (!slm_path) {
        printf("SLM step: stories-student.gguf not found (pass its path); ratio skipped\n");
        return 0;
    }
    const double step = bench_slm_step(slm_path, 1);
    if (isnan(step)) {
        printf("SLM step: %s did not load (%s); ratio skipped\n", slm_path, tr_last_error());
        return 0;
    }
    printf("SLM decode step (%s, 1 thread): %.3f us\n", slm_path, step);
    printf("router / SLM step:\n");
    printf("  mlp h=32 with features  %6.2f%%\n", 100.0 * mlp32_feat / step);
    printf("  mlp h=32 no features    %6.2f%%\n", 100.0 * mlp32 / step);
    for (int i = 0; i < 3; i++)
        printf("  %-8s V=512          %6.2f%%\n", tr_policy_name((tr_policy)(i + 1)), 100.0 * pol512[i] / step);
    return 0;
}
