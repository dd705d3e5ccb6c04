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
#include "tokroute.h"

enum { N_GREEDY = 16, N_PROMPT = 24 };

static const int32_t PROMPT[N_PROMPT] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                         421, 395, 317, 426, 338, 401, 396, 267, 5, 300, 42, 17};

static char llama_bin[512];
static char work[64];
static char ref_exe[128];

static int run(const char *cmd) {
    const int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

static int setup(void **state) {
    (void)state;
    FILE *p = popen(TR_SOURCE_DIR "/scripts/llamacpp.sh llama-quantize", "r");
    if (!p || !fgets(llama_bin, sizeof llama_bin, p)) return -1;
    if (pclose(p) != 0) return -1;
    llama_bin[strcspn(llama_bin, "\n")] = '\0';
    snprintf(work, sizeof work, "/tmp/tokroute-qwen35-XXXXXX");
    if (!mkdtemp(work)) return -1;
    snprintf(ref_exe, sizeof ref_exe, "%s/llamacpp_ref", work);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cc -O1 -o %s %s/tests/model/llamacpp_ref.c -I%s/../../src/include -I%s/../../src/ggml/include -L%s "
             "-lllama -lm -Wl,-rpath,%s",
             ref_exe, TR_SOURCE_DIR, llama_bin, llama_bin, llama_bin, llama_bin);
    return run(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    return run(cmd) == 0 ? 0 : -1;
}

static float *load_f32(const char *path, size_t expect) {
    size_t size = 0;
    float *p = (float *)read_file(path, &size);
    assert_non_null(p);
    assert_int_equal(size, expect * sizeof(float));
    return p;
}

static void check_shape(const char *shape, tr_type type, double tol, int32_t n_batch) {
    char model[256], prefix[256], cmd[2048], csv[1024] = "";
    snprintf(prefix, sizeof prefix, "%s/%s-%s", work, shape, tr_type_name(type));
    snprintf(model, sizeof model, "%s.gguf", prefix);
    if (access(model, R_OK) != 0) {
        tr_synth_params sp = tr_synth_default_params();
        sp.shape = shape;
        sp.type = type;
        assert_int_equal(tr_synth_write(&sp, model), TR_OK);
        for (int i = 0; i < N_PROMPT; i++)
            snprintf(csv + strlen(csv), sizeof csv - strlen(csv), "%s%d", i ? "," : "", PROMPT[i]);
        snprintf(cmd, sizeof cmd, "%s %s %s %d %s", ref_exe, model, csv, N_GREEDY, prefix);
        assert_int_equal(run(cmd), 0);
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
    float *ref_logits = load_f32(path, N_PROMPT * V);
    snprintf(path, sizeof path, "%s.hidden.f32", prefix);
    float *ref_hidden = load_f32(path, N_PROMPT * E);

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
        const float *ref = ref_logits + i * V;
        const int32_t top = tr_argmax(ref, (int32_t)V);
        float second = -INFINITY;
        for (size_t j = 0; j < V; j++)
            if ((int32_t)j != top && ref[j] > second) second = ref[j];
        if (ref[top] - second > 0.01f * fabsf(ref[top])) {
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
