/* bench_remote.c — round trip of one routed token on a remote LLM backend, at several context lengths. The
 * session protocol (--server) sends only the new token, so its cost should stay flat with the context; the
 * prefix-resending backends (--openai, --llamacpp) send and match the whole prefix every call, even when the
 * engine's prefix cache spares the evaluation.
 *
 * usage: bench_remote [--server URL] [--openai URL] [--llamacpp URL] [--ctx 64,1024] [--iters N] [--vocab N]
 * Per backend and context: one call builds the context (not timed), then N calls each append the previous answer
 * (one new token, as a routed token does) and are timed; prints median and mean ms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokroute.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(const char *kind, const char *url, int32_t ctx, int iters, int32_t n_vocab) {
    tr_remote_params rp = tr_remote_default_params();
    rp.url = url;
    tr_llm_backend *b = NULL;
    tr_status st = strcmp(kind, "server") == 0   ? tr_llm_backend_server(&rp, &b)
                   : strcmp(kind, "openai") == 0 ? tr_llm_backend_openai(&rp, &b)
                                                 : tr_llm_backend_llamacpp(&rp, &b);
    if (st != TR_OK) return fprintf(stderr, "bench_remote: %s\n", tr_last_error()), 1;
    int32_t *seq = malloc(((size_t)ctx + (size_t)iters + 1) * sizeof *seq);
    double *ms = malloc((size_t)iters * sizeof *ms);
    uint32_t x = 7;
    seq[0] = 1;
    for (int32_t i = 1; i < ctx; i++) x = x * 1664525u + 1013904223u, seq[i] = 3 + (int32_t)((x >> 8) % (uint32_t)(n_vocab - 3));
    int32_t next;
    int rc = 0;
    if ((st = tr_llm_next_token(b, seq, ctx, &next)) != TR_OK) {
        fprintf(stderr, "bench_remote: %s: %s\n", kind, tr_last_error());
        rc = 1;
    }
    int32_t len = ctx;
    for (int i = 0; rc == 0 && i < iters; i++) {
        seq[len++] = next;
        const double t0 = now_ms();
        if (tr_llm_next_token(b, seq, len, &next) != TR_OK) {
            fprintf(stderr, "bench_remote: %s: %s\n", kind, tr_last_error());
            rc = 1;
        }
        ms[i] = now_ms() - t0;
    }
    if (rc == 0) {
        double sum = 0;
        for (int i = 0; i < iters; i++) sum += ms[i];
        qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
        const tr_llm_stats s = tr_llm_backend_stats(b);
        printf("%-9s context %5d: median %7.3f ms  mean %7.3f ms  (%d calls, %lld tokens evaluated)\n", kind, ctx,
               ms[iters / 2], sum / iters, iters, (long long)s.tokens_evaluated);
    }
    free(ms);
    free(seq);
    tr_llm_backend_free(b);
    return rc;
}

int main(int argc, char **argv) {
    const char *urls[3] = {NULL, NULL, NULL}, *kinds[3] = {"server", "openai", "llamacpp"};
    char ctx_list[256] = "64,1024";
    int iters = 100;
    int32_t n_vocab = 512;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--server") == 0) urls[0] = argv[i + 1];
        else if (strcmp(argv[i], "--openai") == 0) urls[1] = argv[i + 1];
        else if (strcmp(argv[i], "--llamacpp") == 0) urls[2] = argv[i + 1];
        else if (strcmp(argv[i], "--ctx") == 0) snprintf(ctx_list, sizeof ctx_list, "%s", argv[i + 1]);
        else if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--vocab") == 0) n_vocab = atoi(argv[i + 1]);
        else return fprintf(stderr, "bench_remote: unknown option %s\n", argv[i]), 2;
    }
    if (iters < 1 || n_vocab < 4) return fprintf(stderr, "bench_remote: bad --iters or --vocab\n"), 2;
    int rc = 0;
    for (char *tok = strtok(ctx_list, ","); tok; tok = strtok(NULL, ",")) {
        const int32_t ctx = atoi(tok);
        if (ctx < 2) return fprintf(stderr, "bench_remote: bad context %s\n", tok), 2;
        for (int k = 0; k < 3; k++)
            if (urls[k]) rc |= run(kinds[k], urls[k], ctx, iters, n_vocab);
    }
    return rc;
}
