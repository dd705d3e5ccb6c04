/* bench_wasm.c — prefill and decode tokens/s of the device core built for WebAssembly (emcc -pthread -msimd128),
 * as `tokroute bench` measures them natively: a P-token prompt of fixed pseudo-random ids evaluated as one batch
 * (pp), then N tokens generated greedily one at a time from an empty cache (tg); one warm-up prefill, then R
 * repetitions, the best of each reported. The public C API only, token ids only (no tokenizer). Run in a page by
 * bench/wasm/page.mjs (the model file written into emscripten's file system first) or under node.
 * `bench_wasm MODEL.gguf THREADS PROMPT GEN REPS` prints one JSON line:
 * {"engine":"tokroute-wasm","threads":T,"isa":"simd128","pp":tok/s,"tg":tok/s,"pp_tokens":P,"tg_tokens":N}. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tokroute.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: bench_wasm MODEL.gguf THREADS PROMPT GEN REPS\n");
        return 2;
    }
    const int threads = atoi(argv[2]), n_prompt = atoi(argv[3]), n_gen = atoi(argv[4]), reps = atoi(argv[5]);
    if (threads < 1 || n_prompt < 1 || n_gen < 1 || reps < 1) {
        fprintf(stderr, "bench_wasm: THREADS, PROMPT, GEN and REPS must be positive\n");
        return 2;
    }
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = n_prompt > n_gen ? n_prompt : n_gen;
    cp.n_threads = threads;
    tr_model *m = NULL;
    tr_context *ctx = NULL;
    int32_t *ids = malloc(sizeof *ids * (size_t)n_prompt);
    tr_status st = ids ? TR_OK : TR_ERR_NOMEM;
    const double t_load = now_s();
    if (st == TR_OK) st = tr_model_load(argv[1], &mp, &m);
    if (st == TR_OK) st = tr_context_create(m, &cp, &ctx);
    const double load_s = now_s() - t_load;
    double pp = 0, tg = 0;
    if (st == TR_OK) {
        const int32_t n_vocab = tr_model_get_info(m)->n_vocab;
        uint32_t x = 12345; /* the ids `tokroute bench` uses */
        for (int i = 0; i < n_prompt; i++) {
            x = x * 1664525u + 1013904223u;
            ids[i] = (int32_t)(3 + (x >> 8) % (uint32_t)(n_vocab - 3));
        }
        for (int r = -1; r < reps && st == TR_OK; r++) { /* r = -1: the warm-up prefill */
            tr_context_clear(ctx);
            double t0 = now_s();
            st = tr_context_eval(ctx, ids, n_prompt, TR_EVAL_LOGITS_LAST);
            const double pp_r = n_prompt / (now_s() - t0);
            if (r < 0 || st != TR_OK) continue;
            if (pp_r > pp) pp = pp_r;
            tr_context_clear(ctx);
            int32_t id = ids[0];
            t0 = now_s();
            for (int i = 0; i < n_gen && st == TR_OK; i++) {
                st = tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST);
                if (st == TR_OK) id = tr_argmax(tr_context_logits(ctx, -1), n_vocab);
            }
            const double tg_r = n_gen / (now_s() - t0);
            if (tg_r > tg) tg = tg_r;
        }
    }
    if (st == TR_OK)
        printf("{\"engine\":\"tokroute-wasm\",\"threads\":%d,\"isa\":\"%s\",\"pp\":%.2f,\"tg\":%.2f,\"pp_tokens\":%d,"
               "\"tg_tokens\":%d,\"load_s\":%.2f}\n",
               tr_context_n_threads(ctx), tr_kernels_isa(), pp, tg, n_prompt, n_gen, load_s);
    else
        fprintf(stderr, "bench_wasm: %s\n", tr_last_error());
    tr_context_free(ctx);
    tr_model_free(m);
    free(ids);
    return st == TR_OK ? 0 : 1;
}
