/* llamacpp_ref.c — llama.cpp as a test's reference: its build, a work folder, a program compiled against it, and the
 * check of a synthetic shape against it that every family's conformance test runs. */
#include "support/llamacpp_ref.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"
#include "support/gguf_builder.h"
#include "tokroute.h"

int run_command(const char *cmd) {
    const int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

int llamacpp_ref_setup(llamacpp_ref *ref, const char *name, const char *target, const char *program) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/scripts/llamacpp.sh %s", TR_SOURCE_DIR, target);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    const bool found = fgets(ref->bin, sizeof ref->bin, p) != NULL;
    if (pclose(p) != 0 || !found) return -1;
    ref->bin[strcspn(ref->bin, "\n")] = '\0';
    snprintf(ref->work, sizeof ref->work, "/tmp/tokroute-%s-XXXXXX", name);
    if (!mkdtemp(ref->work)) return -1;
    const char *base = strrchr(program, '/');
    snprintf(ref->exe, sizeof ref->exe, "%s/%.*s", ref->work, (int)strcspn(base ? base + 1 : program, "."),
             base ? base + 1 : program);
    /* headers from the source tree next to the build: <cache>/llama.cpp-<v>/{src,build/bin} */
    const char *bin = ref->bin;
    snprintf(cmd, sizeof cmd,
             "cc -O1 -o %s %s/%s -I%s/../../src/include -I%s/../../src/ggml/include -L%s -lllama -lm -Wl,-rpath,%s",
             ref->exe, TR_SOURCE_DIR, program, bin, bin, bin, bin);
    return run_command(cmd) == 0 ? 0 : -1;
}

int llamacpp_ref_teardown(const llamacpp_ref *ref) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ref->work);
    return run_command(cmd) == 0 ? 0 : -1;
}

float *read_f32_dump(const char *path, size_t expect) {
    size_t size = 0;
    float *p = (float *)read_file(path, &size);
    assert_non_null(p);
    assert_int_equal(size, expect * sizeof(float));
    return p;
}

void read_greedy_dump(const char *prefix, int n, int32_t *token, int32_t *runner_up, double *gap) {
    char path[512];
    snprintf(path, sizeof path, "%s.greedy", prefix);
    char *text = read_file(path, NULL);
    assert_non_null(text);
    char *p = text;
    for (int i = 0; i < n; i++) {
        token[i] = (int32_t)strtol(p, &p, 10);
        runner_up[i] = (int32_t)strtol(p, &p, 10);
        gap[i] = strtod(p, &p);
    }
    free(text);
}

int reference_clear_argmax(const float *ref, size_t n_vocab) {
    const int32_t top = tr_argmax(ref, (int32_t)n_vocab);
    float second = -INFINITY;
    for (size_t j = 0; j < n_vocab; j++)
        if ((int32_t)j != top && ref[j] > second) second = ref[j];
    return ref[top] - second > 0.01f * fabsf(ref[top]) ? top : -1;
}

static const int32_t PROMPT[LLAMACPP_N_PROMPT] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                                  421, 395, 317, 426, 338, 401, 396, 267, 5, 300, 42, 17};

static bool keep(const char *name, void *user) {
    (void)name, (void)user;
    return false;
}

/* The prompt's logits and hidden states from a context with this KV cache (the caller frees both), the context
 * kept for greedy decoding in *out when out is not NULL. */
static void eval_prompt(tr_model *m, tr_kv_type kv, int32_t n_batch, float **logits, float **hidden,
                        tr_context **out) {
    const tr_model_info *in = tr_model_get_info(m);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    cp.n_batch = n_batch;
    cp.kv_type = kv;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, PROMPT, LLAMACPP_N_PROMPT, TR_EVAL_LOGITS_ALL), TR_OK);
    *logits = malloc(LLAMACPP_N_PROMPT * V * sizeof **logits);
    *hidden = malloc(LLAMACPP_N_PROMPT * E * sizeof **hidden);
    for (int i = 0; i < LLAMACPP_N_PROMPT; i++) {
        memcpy(*logits + i * V, tr_context_logits(ctx, i), V * sizeof **logits);
        memcpy(*hidden + i * E, tr_context_hidden(ctx, i), E * sizeof **hidden);
    }
    if (out) *out = ctx;
    else tr_context_free(ctx);
}

static void check(const llamacpp_ref *llama, const char *shape, const char *variant,
                  tr_status (*set_keys)(tr_gguf_writer *w, void *user), tr_arch arch, tr_type type, tr_kv_type kv,
                  double tol, int32_t n_batch) {
    char model[256], prefix[256], ref_prefix[300], cmd[2048], csv[1024] = "";
    const bool kv_q8 = kv == TR_KV_Q8_0;
    snprintf(prefix, sizeof prefix, "%s/%s%s%s-%s", llama->work, shape, variant ? "-" : "", variant ? variant : "",
             tr_type_name(type));
    snprintf(model, sizeof model, "%s.gguf", prefix);
    snprintf(ref_prefix, sizeof ref_prefix, "%s%s", prefix, kv_q8 ? "-kv-q8_0" : "");
    char ref_logits_path[320];
    snprintf(ref_logits_path, sizeof ref_logits_path, "%s.logits.f32", ref_prefix);
    if (access(model, R_OK) != 0) {
        tr_synth_params sp = tr_synth_default_params();
        sp.shape = shape;
        sp.type = type;
        char synth[300];
        snprintf(synth, sizeof synth, "%s.synth", prefix);
        assert_int_equal(tr_synth_write(&sp, set_keys ? synth : model), TR_OK);
        if (set_keys) { /* the shape's file with the variant's keys */
            tr_gguf *g = NULL;
            assert_int_equal(tr_gguf_open(synth, &g), TR_OK);
            const rewrite_hooks hooks = {keep, keep, set_keys, NULL};
            assert_int_equal(gguf_rewrite(g, model, &hooks), TR_OK);
            tr_gguf_close(g);
            remove(synth);
        }
    }
    if (access(ref_logits_path, R_OK) != 0) { /* llama.cpp's outputs with the same cache */
        for (int i = 0; i < LLAMACPP_N_PROMPT; i++)
            snprintf(csv + strlen(csv), sizeof csv - strlen(csv), "%s%d", i ? "," : "", PROMPT[i]);
        snprintf(cmd, sizeof cmd, "%s%s %s %s %d %s", kv_q8 ? "LLAMACPP_REF_KV_Q8_0=1 " : "", llama->exe, model, csv,
                 LLAMACPP_N_GREEDY, ref_prefix);
        assert_int_equal(run_command(cmd), 0);
    }
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    if (tr_model_load(model, &mp, &m) != TR_OK) fail_msg("%s: %s", model, tr_last_error());
    const tr_model_info *in = tr_model_get_info(m);
    assert_int_equal(in->arch, arch);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    char path[320];
    float *ref_logits = read_f32_dump(ref_logits_path, LLAMACPP_N_PROMPT * V);
    snprintf(path, sizeof path, "%s.hidden.f32", ref_prefix);
    float *ref_hidden = read_f32_dump(path, LLAMACPP_N_PROMPT * E);

    tr_context *ctx = NULL;
    float *logits, *hidden;
    eval_prompt(m, kv, n_batch, &logits, &hidden, &ctx);
    int checked = 0;
    for (int i = 0; i < LLAMACPP_N_PROMPT; i++) {
        const int32_t top = reference_clear_argmax(ref_logits + i * V, V);
        if (top >= 0) {
            checked++;
            if (tr_argmax(logits + i * V, (int32_t)V) != top) fail_msg("%s: argmax differs at %d", shape, i);
        }
    }
    const double el = rel_rms(logits, ref_logits, LLAMACPP_N_PROMPT * V), eh = rel_rms(hidden, ref_hidden, LLAMACPP_N_PROMPT * E);
    fprintf(stderr, "%-14s %-5s batch %2d%s: logits rel RMS %.2e, hidden %.2e (tolerance %.0e), argmax at %d/%d\n",
            shape, tr_type_name(type), n_batch, kv_q8 ? " q8_0 cache" : "", el, eh, tol, checked, LLAMACPP_N_PROMPT);
    assert_true(el <= tol && eh <= tol && checked > 0);
    if (kv_q8) { /* the tolerance tells the caches apart: an F16 cache against llama.cpp's q8_0 one exceeds it */
        float *l16, *h16;
        eval_prompt(m, TR_KV_F16, n_batch, &l16, &h16, NULL);
        const double el16 = rel_rms(l16, ref_logits, LLAMACPP_N_PROMPT * V);
        const double eh16 = rel_rms(h16, ref_hidden, LLAMACPP_N_PROMPT * E);
        fprintf(stderr, "%-14s %-5s batch %2d: an f16 cache against llama.cpp's q8_0 one: logits %.2e, hidden %.2e\n",
                shape, tr_type_name(type), n_batch, el16, eh16);
        assert_true(el16 > tol && eh16 > tol);
        free(l16), free(h16);
    }

    snprintf(path, sizeof path, "%s.greedy", ref_prefix);
    char *greedy = read_file(path, NULL);
    assert_non_null(greedy);
    char *g = greedy;
    int32_t id = tr_argmax(tr_context_logits(ctx, -1), (int32_t)V);
    for (int i = 0; i < LLAMACPP_N_GREEDY; i++) {
        const int32_t want = (int32_t)strtol(g, &g, 10), runner_up = (int32_t)strtol(g, &g, 10);
        const double gap = strtod(g, &g);
        if (id != want) {
            /* Quantized files only: with 8-bit activations one value rounded the other way can swap llama.cpp's
             * own near-tie (its two best within 2%, ours its runner-up; a recurrent state carries such roundings
             * from token to token: measured 0.89% on qwen35's Q4_0 file); the sequences part there. */
            fprintf(stderr, "  greedy %d/%d (then %d where llama.cpp has %d, runner-up %d, %.2g%% behind)\n", i,
                    LLAMACPP_N_GREEDY, id, want, runner_up, 100 * gap);
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

void llamacpp_check_shape(const llamacpp_ref *llama, const char *shape, tr_arch arch, tr_type type, double tol,
                          int32_t n_batch) {
    check(llama, shape, NULL, NULL, arch, type, TR_KV_F16, tol, n_batch);
}

void llamacpp_check_variant(const llamacpp_ref *llama, const char *shape, const char *variant,
                            tr_status (*set_keys)(tr_gguf_writer *w, void *user), tr_arch arch, tr_type type,
                            double tol, int32_t n_batch) {
    check(llama, shape, variant, set_keys, arch, type, TR_KV_F16, tol, n_batch);
}

void llamacpp_check_kv(const llamacpp_ref *llama, const char *shape, tr_arch arch, tr_type type, tr_kv_type kv,
                       double tol, int32_t n_batch) {
    check(llama, shape, NULL, NULL, arch, type, kv, tol, n_batch);
}
