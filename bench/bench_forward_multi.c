/* bench_forward_multi.c — what batching across sessions buys, without HTTP: N sessions (16-token prompts) each
 * decode one token per step, either all N in one multi_forward pass (weights read once per step) or one pass per
 * session (as `tokroute serve --no-batch`). Runs the two alternately, several rounds, and prints the best
 * tokens/s of each and their ratio, so a busy machine affects both alike.
 *
 * usage: bench_forward_multi MODEL [THREADS] [STEPS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/multi.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: bench_forward_multi MODEL [THREADS] [STEPS]\n"), 2;
    const int threads = argc > 2 ? atoi(argv[2]) : 0, steps = argc > 3 ? atoi(argv[3]) : 4;
    tr_model_params mp = tr_model_default_params();
    tr_model *m = NULL;
    if (tr_model_load(argv[1], &mp, &m) != TR_OK) return fprintf(stderr, "%s\n", tr_last_error()), 1;
    const int32_t nv = tr_model_get_info(m)->n_vocab;
    enum { MAXN = 64, PROMPT = 16 };
    multi_engine *e = NULL;
    if (multi_engine_create(m, threads, MAXN, 256, &e) != TR_OK) return fprintf(stderr, "%s\n", tr_last_error()), 1;
    float *logits = malloc((size_t)MAXN * nv * sizeof *logits);
    printf("| sessions | batched tokens/s | one per pass tokens/s | ratio |\n|---|---|---|---|\n");
    const int ns[] = {1, 4, 16, 64};
    for (int k = 0; k < 4; k++) {
        const int n = ns[k];
        kv_seq *seqs[MAXN];
        int32_t prompt[PROMPT], tok[MAXN], ntok[MAXN];
        const int32_t *tp[MAXN];
        for (int i = 0; i < PROMPT; i++) prompt[i] = 1 + i * 31;
        for (int s = 0; s < n; s++) {
            kv_seq_create(m, 64, 256, &seqs[s]);
            const int32_t *pp[1] = {prompt};
            const int32_t np[1] = {PROMPT};
            if (multi_forward(e, &seqs[s], pp, np, 1, logits) != TR_OK) return fprintf(stderr, "%s\n", tr_last_error()), 1;
            tok[s] = 2 + s;
            tp[s] = &tok[s];
            ntok[s] = 1;
        }
        double best_b = 0, best_u = 0;
        for (int round = 0; round < 3; round++) {
            double t0 = now_s();
            for (int st = 0; st < steps; st++) multi_forward(e, seqs, tp, ntok, n, logits);
            const double b = (double)n * steps / (now_s() - t0);
            t0 = now_s();
            for (int st = 0; st < steps; st++)
                for (int s = 0; s < n; s++) multi_forward(e, &seqs[s], &tp[s], &ntok[s], 1, logits);
            const double u = (double)n * steps / (now_s() - t0);
            if (b > best_b) best_b = b;
            if (u > best_u) best_u = u;
            for (int s = 0; s < n; s++) kv_seq_truncate(seqs[s], PROMPT);
        }
        printf("| %d | %.1f | %.1f | %.2fx |\n", n, best_b, best_u, best_b / best_u);
        fflush(stdout);
        for (int s = 0; s < n; s++) kv_seq_free(seqs[s]);
    }
    free(logits);
    multi_engine_free(e);
    tr_model_free(m);
    return 0;
}
