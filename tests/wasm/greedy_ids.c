/* greedy_ids.c — GGUF → greedy token ids with the public C API only, built natively and with emcc so
 * scripts/check-portable.sh can compare the two on the same file: the wasm32 build (run under node, reading the
 * file through NODERAWFS) must pick the same ids as the native one, and its logits may differ only by the float
 * rounding of a different summation order (printed: the largest |difference| of the chosen token's logit is for the
 * script to judge). A standalone program (no cmocka under emscripten): `greedy_ids MODEL.gguf N_TOKENS THREADS
 * [NAME=VALUE]` prints "id logit" (the logit to 9 significant digits: exactly the float) per generated token after
 * a fixed 8-token prompt, NAME=VALUE set in the environment first (node does not pass its environment to the
 * module; e.g. TOKROUTE_CONVERT=0, which keeps Q5_0 unconverted); `greedy_ids --synth SHAPE TYPE OUT.gguf`
 * writes a random-weight model of a real shape (tr_synth_write, as `tokroute synth`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokroute.h"

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--synth") == 0) {
        tr_synth_params sp = tr_synth_default_params();
        sp.shape = argv[2];
        sp.mixed_q4_k_m = strcmp(argv[3], "q4_k_m") == 0; /* as `tokroute synth --type q4_k_m` */
        if (tr_type_from_name(sp.mixed_q4_k_m ? "q4_k" : argv[3], &sp.type) == TR_OK &&
            tr_synth_write(&sp, argv[4]) == TR_OK)
            return 0;
        fprintf(stderr, "greedy_ids: %s\n", tr_last_error());
        return 1;
    }
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: greedy_ids MODEL.gguf N_TOKENS THREADS [NAME=VALUE]\n");
        return 2;
    }
    if (argc == 5 && putenv(argv[4]) != 0) return 2;
    const int n_gen = atoi(argv[2]);
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    tr_context *ctx = NULL;
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = atoi(argv[3]);
    if (tr_model_load(argv[1], &mp, &m) != TR_OK || tr_context_create(m, &cp, &ctx) != TR_OK) {
        fprintf(stderr, "greedy_ids: %s\n", tr_last_error());
        tr_model_free(m);
        return 1;
    }
    const int32_t n_vocab = tr_model_get_info(m)->n_vocab;
    int32_t prompt[8];
    for (int i = 0; i < 8; i++) prompt[i] = (int32_t)((i * 37 + 1) % n_vocab); /* a fixed prompt */
    tr_status st = tr_context_eval(ctx, prompt, 8, TR_EVAL_LOGITS_LAST);
    for (int i = 0; i < n_gen && st == TR_OK; i++) {
        const float *logits = tr_context_logits(ctx, -1);
        const int32_t id = tr_argmax(logits, n_vocab);
        printf("%d %.9g\n", id, logits[id]);
        st = tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST);
    }
    if (st != TR_OK) fprintf(stderr, "greedy_ids: %s\n", tr_last_error());
    tr_context_free(ctx);
    tr_model_free(m);
    return st == TR_OK ? 0 : 1;
}
