/* test_model_qwen35_llamacpp.c — the qwen35 layout (Gated DeltaNet + gated attention) against llama.cpp itself:
 * `tokroute synth`'s two reduced qwen35 shapes (qwen3.5-tiny: 3 recurrent layers and 1 attention layer, value heads
 * twice the key heads; qwen3.5-small: 8 layers, a RoPE pair left to M-RoPE's unrotated 4th section), in F32 and
 * Q8_0, loaded by llama.cpp of scripts/llamacpp.sh through llamacpp_ref.c (compiled here against that build). The
 * engine must give llama.cpp's logits and final hidden states at every prompt position within the conformance
 * tolerances (relative RMS 2e-3 for F32, 5e-2 for the quantized files; measured 1e-5 to 3e-5, and 7e-3 / 1.5e-2),
 * its argmax where its top two differ clearly, and its 16 greedy tokens decoded one at a time (a quantized file may
 * part at one of llama.cpp's own near-ties, see check_shape) — with the prompt in one chunk and in chunks of 5 or 7
 * (the recurrence carried across chunks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"
#include "support/llamacpp_ref.h"
#include "tokroute.h"

enum { N_GREEDY = 16, N_PROMPT = 24 };

static const int32_t PROMPT[N_PROMPT] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                         421, 395, 317, 426, 338, 401, 396, 267, 5, 300, 42, 17};

static llamacpp_ref llama; /* llama.cpp's build, this run's files, llamacpp_ref compiled here */

static int setup(void **state) {
    (void)state;
    return llamacpp_ref_setup(&llama, "qwen35", "llama-quantize", "tests/model/llamacpp_ref.c");
}

static int teardown(void **state) {
    (void)state;
    return llamacpp_ref_teardown(&llama);
}

static void check_shape(const char *shape, tr_type type, double tol, int32_t n_batch) {
    char model[256], prefix[256], cmd[2048], csv[1024] = "";
    snprintf(prefix, sizeof prefix, "%s/%s-%s", llama.work, shape, tr_type_name(type));
    snprintf(model, sizeof model, "%s.gguf", prefix);
    if (access(model, R_OK) != 0) {
        tr_synth_params sp = tr_synth_default_params();
        sp.shape = shape;
        sp.type = type;
        assert_int_equal(tr_synth_write(&sp, model), TR_OK);
        for (int i = 0; i < N_PROMPT; i++)
            snprintf(csv + strlen(csv), sizeof csv - strlen(csv), "%s%d", i ? "," : "", PROMPT[i]);
        snprintf(cmd, sizeof cmd, "%s %s %s %d %s", llama.exe, model, csv, N_GREEDY, prefix);
        assert_int_equal(run_command(cmd), 0);
    }
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    if (tr_model_load(model, &mp, &m) != TR_OK) fail_msg("%s: %s", model, tr_last_error());
    const tr_model_info *in = tr_model_get_info(m);
    assert_int_equal(in->arch, TR_ARCH_QWEN35);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    char path[300];
    snprintf(path, sizeof path, "%s.logits.f32", prefix);
    float *ref_logits = read_f32_dump(path, N_PROMPT * V);
    snprintf(path, sizeof path, "%s.hidden.f32", prefix);
    float *ref_hidden = read_f32_dump(path, N_PROMPT * E);

    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    cp.n_batch = n_batch;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, PROMPT, N_PROMPT, TR_EVAL_LOGITS_ALL), TR_OK);
    float *logits = malloc(N_PROMPT * V * sizeof *logits), *hidden = malloc(N_PROMPT * E * sizeof *hidden);
    int checked = 0;
    for (int i = 0; i < N_PROMPT; i++) {
        memcpy(logits + i * V, tr_context_logits(ctx, i), V * sizeof *logits);
        memcpy(hidden + i * E, tr_context_hidden(ctx, i), E * sizeof *hidden);
        const int32_t top = reference_clear_argmax(ref_logits + i * V, V);
        if (top >= 0) {
            checked++;
            if (tr_argmax(logits + i * V, (int32_t)V) != top) fail_msg("%s: argmax differs at %d", shape, i);
        }
    }
    const double el = rel_rms(logits, ref_logits, N_PROMPT * V), eh = rel_rms(hidden, ref_hidden, N_PROMPT * E);
    fprintf(stderr, "%-14s %-5s batch %2d: logits rel RMS %.2e, hidden %.2e (tolerance %.0e), argmax at %d/%d\n",
            shape, tr_type_name(type), n_batch, el, eh, tol, checked, N_PROMPT);
    assert_true(el <= tol && eh <= tol && checked > 0);

    snprintf(path, sizeof path, "%s.greedy", prefix);
    char *greedy = read_file(path, NULL);
    assert_non_null(greedy);
    char *g = greedy;
    int32_t id = tr_argmax(tr_context_logits(ctx, -1), (int32_t)V);
    for (int i = 0; i < N_GREEDY; i++) {
        const int32_t want = (int32_t)strtol(g, &g, 10), runner_up = (int32_t)strtol(g, &g, 10);
        const double gap = strtod(g, &g);
        if (id != want) {
            /* Quantized files only: with 8-bit activations one value rounded the other way can swap llama.cpp's
             * own near-tie (its two best within 2%, ours its runner-up; the recurrent state carries such roundings
             * from token to token: measured 0.89% on the Q4_0 file); the sequences part there. */
            fprintf(stderr, "  greedy %d/%d (then %d where llama.cpp has %d, runner-up %d, %.2g%% behind)\n", i,
                    N_GREEDY, id, want, runner_up, 100 * gap);
            assert_true(type != TR_TYPE_F32 && id == runner_up && gap < 2e-2);
            break;
        }
        assert_int_equal(tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST), TR_OK);
        id = tr_argmax(tr_context_logits(ctx, -1), (int32_t)V);
    }
    free(greedy);
    free(logits);
    free(hidden);
    free(ref_logits);
    free(ref_hidden);
    tr_context_free(ctx);
    tr_model_free(m);
}

static void tiny_f32(void **state) {
    (void)state;
    check_shape("qwen3.5-tiny", TR_TYPE_F32, 2e-3, 256);
    check_shape("qwen3.5-tiny", TR_TYPE_F32, 2e-3, 5);
}

static void small_f32(void **state) {
    (void)state;
    check_shape("qwen3.5-small", TR_TYPE_F32, 2e-3, 256);
    check_shape("qwen3.5-small", TR_TYPE_F32, 2e-3, 5);
}

static void tiny_q8_0(void **state) {
    (void)state;
    check_shape("qwen3.5-tiny", TR_TYPE_Q8_0, 5e-2, 256);
}

static void small_q4_0(void **state) {
    (void)state;
    check_shape("qwen3.5-small", TR_TYPE_Q4_0, 5e-2, 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_f32),
        cmocka_unit_test(small_f32),
        cmocka_unit_test(tiny_q8_0),
        cmocka_unit_test(small_q4_0),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
