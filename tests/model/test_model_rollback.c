/* test_model_rollback.c — rollback stays exact on every family with per-sequence state beyond the KV cache
 * (qwen35's recurrent layers, lfm2's convolution windows: seq_state.c). Such a state cannot be truncated, so a
 * truncation restores a checkpoint and replays the kept tokens after it; here a context that generated further, took
 * a detour and was truncated must give the same logits as one that never left the path: bit for bit where a
 * checkpoint sits at the truncation point (the start of a recent evaluation, the tail of a batch), and where tokens
 * are replayed too (the same chunks' rows go through the same products). The server's path (kv_seq +
 * multi_forward) is held to a tr_context the same way, with two sequences in one pass. And a hostile qwen35 file:
 * broken ssm metadata and a missing DeltaNet tensor are refused with a message, not run. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/multi.h"
#include "support/fixtures.h"
#include "tokroute.h"

enum { N_PROMPT = 20, N_GEN = 12, N_DETOUR = 6 };

static const int32_t PROMPT[N_PROMPT] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376,
                                         298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
static const char *const SHAPES[] = {"qwen3.5-tiny", "lfm2-tiny"};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };
static char paths[N_SHAPES][128];
static const char *path; /* the file of the test running */

static int setup(void **state) {
    (void)state;
    for (int i = 0; i < N_SHAPES; i++) {
        snprintf(paths[i], sizeof paths[i], "/tmp/tokroute-rb-%s-%d.gguf", SHAPES[i], (int)getpid());
        tr_synth_params sp = tr_synth_default_params();
        sp.shape = SHAPES[i];
        sp.type = TR_TYPE_Q8_0;
        if (tr_synth_write(&sp, paths[i]) != TR_OK) return -1;
    }
    path = paths[0];
    return 0;
}

static int teardown(void **state) {
    (void)state;
    int rc = 0;
    for (int i = 0; i < N_SHAPES; i++) rc |= unlink(paths[i]);
    return rc;
}

static tr_model *load(void) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    if (tr_model_load(path, &mp, &m) != TR_OK) fail_msg("%s", tr_last_error());
    return m;
}

static tr_context *context(const tr_model *m, int32_t n_batch) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 96;
    cp.n_threads = 2;
    cp.n_batch = n_batch;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    return ctx;
}

/* The reference path: the prompt, then N_GEN greedy tokens one at a time; logits after each of the N_GEN + 1
 * evaluations. */
static void reference(const tr_model *m, int32_t *gen, float *logits) {
    const int32_t V = tr_model_get_info(m)->n_vocab;
    tr_context *ctx = context(m, 64);
    assert_int_equal(tr_context_eval(ctx, PROMPT, N_PROMPT, TR_EVAL_LOGITS_LAST), TR_OK);
    for (int i = 0; i <= N_GEN; i++) {
        memcpy(logits + (size_t)i * V, tr_context_logits(ctx, -1), (size_t)V * sizeof(float));
        if (i == N_GEN) break;
        gen[i] = tr_argmax(tr_context_logits(ctx, -1), V);
        assert_int_equal(tr_context_eval(ctx, &gen[i], 1, TR_EVAL_LOGITS_LAST), TR_OK);
    }
    tr_context_free(ctx);
}

/* Whether the context's last logits are the reference's row i (bit for bit); tracks the worst difference. */
static bool same_as(const tr_context *ctx, const float *ref, int32_t V, int32_t i, double *worst) {
    const float *l = tr_context_logits(ctx, -1), *r = ref + (size_t)i * V;
    const double e = rel_rms(l, r, (size_t)V);
    *worst = e > *worst ? e : *worst;
    return memcmp(l, r, (size_t)V * sizeof *l) == 0;
}

/* Goes the reference path, takes a detour of N_DETOUR tokens, truncates to `to` (a position of the path) and
 * continues along the path: the logits must be the reference's, bit for bit. */
static void rollback_case(const tr_model *m, const int32_t *gen, const float *ref, int32_t to, int32_t n_batch) {
    const int32_t V = tr_model_get_info(m)->n_vocab;
    int32_t path_tokens[N_PROMPT + N_GEN];
    memcpy(path_tokens, PROMPT, sizeof PROMPT);
    memcpy(path_tokens + N_PROMPT, gen, N_GEN * sizeof *gen);
    tr_context *ctx = context(m, n_batch);
    assert_int_equal(tr_context_eval(ctx, PROMPT, N_PROMPT, TR_EVAL_LOGITS_LAST), TR_OK);
    for (int i = 0; i < N_GEN; i++) assert_int_equal(tr_context_eval(ctx, &gen[i], 1, TR_EVAL_LOGITS_LAST), TR_OK);
    for (int i = 0; i < N_DETOUR; i++) {
        const int32_t t = (int32_t)(17 + 31 * i) % V;
        assert_int_equal(tr_context_eval(ctx, &t, 1, TR_EVAL_LOGITS_LAST), TR_OK);
    }
    assert_int_equal(tr_context_truncate(ctx, to), TR_OK);
    assert_int_equal(tr_context_n_past(ctx), to);
    int32_t same = 0, steps = 0;
    double worst = 0;
    if (to < N_PROMPT) { /* the rest of the prompt in one evaluation, as the reference had it */
        assert_int_equal(tr_context_eval(ctx, PROMPT + to, N_PROMPT - to, TR_EVAL_LOGITS_LAST), TR_OK);
        same += same_as(ctx, ref, V, 0, &worst);
        steps++;
    }
    for (int32_t pos = to < N_PROMPT ? N_PROMPT : to; pos < N_PROMPT + N_GEN; pos++) {
        assert_int_equal(tr_context_eval(ctx, &path_tokens[pos], 1, TR_EVAL_LOGITS_LAST), TR_OK);
        same += same_as(ctx, ref, V, pos - N_PROMPT + 1, &worst);
        steps++;
    }
    fprintf(stderr, "truncate to %2d (batch %2d): %d/%d steps bit-identical to the fresh run, worst rel RMS %.1e\n",
            to, n_batch, same, steps, worst);
    assert_int_equal(same, steps);
    tr_context_free(ctx);
}

static void rollback_context(int shape) {
    path = paths[shape];
    fprintf(stderr, "%s\n", SHAPES[shape]);
    tr_model *m = load();
    const int32_t V = tr_model_get_info(m)->n_vocab;
    int32_t gen[N_GEN];
    float *ref = malloc((size_t)(N_GEN + 1) * V * sizeof *ref);
    reference(m, gen, ref);
    /* recent eval starts (a checkpoint each), then positions inside the prompt's batch (replayed) */
    const int32_t to[] = {N_PROMPT + 11, N_PROMPT + 10, N_PROMPT + 8, N_PROMPT + 3, N_PROMPT, N_PROMPT - 2, 7, 0};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) rollback_case(m, gen, ref, to[i], 64);
    rollback_case(m, gen, ref, 7, 3); /* the prompt in chunks of 3: replay crosses chunk boundaries */
    free(ref);
    tr_model_free(m);
}

/* The server's sessions: two sequences share each pass; one is rolled back (kv_seq_truncate) and continues. Each
 * must give what a tr_context gives along the same evaluations. */
static void rollback_multi(int shape) {
    path = paths[shape];
    tr_model *m = load();
    const int32_t V = tr_model_get_info(m)->n_vocab;
    multi_engine *e = NULL;
    assert_int_equal(multi_engine_create(m, 2, 64, 96, &e), TR_OK);
    kv_seq *s[2];
    tr_context *c[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kv_seq_create(m, 8, 96, &s[i]), TR_OK);
        c[i] = context(m, 64);
    }
    float *logits = malloc(2 * (size_t)V * sizeof *logits);
    const int32_t *toks[2] = {PROMPT, PROMPT + 5};
    int32_t n[2] = {N_PROMPT, 9};
    int32_t next[2];
    for (int step = 0; step < 16; step++) {
        if (step == 8) { /* sequence 0 goes back 5 positions (a rejected speculation), sequence 1 to 4 */
            kv_seq_truncate(s[0], s[0]->n_past - 5);
            assert_int_equal(tr_context_truncate(c[0], tr_context_n_past(c[0]) - 5), TR_OK);
            kv_seq_truncate(s[1], 4);
            assert_int_equal(tr_context_truncate(c[1], 4), TR_OK);
        }
        for (int i = 0; i < 2; i++) assert_int_equal(kv_seq_reserve(s[i], s[i]->n_past + n[i]), TR_OK);
        assert_int_equal(multi_forward(e, s, toks, n, 2, logits), TR_OK);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(tr_context_eval(c[i], toks[i], n[i], TR_EVAL_LOGITS_LAST), TR_OK);
            const float *l = tr_context_logits(c[i], -1);
            const double err = rel_rms(logits + (size_t)i * V, l, (size_t)V);
            if (err > 1e-5) fail_msg("step %d, sequence %d: rel RMS %.2e from the context", step, i, err);
            assert_int_equal(tr_argmax(logits + (size_t)i * V, V), tr_argmax(l, V));
            assert_int_equal(s[i]->n_past, tr_context_n_past(c[i]));
            next[i] = tr_argmax(l, V);
            toks[i] = &next[i];
            n[i] = 1;
        }
    }
    free(logits);
    for (int i = 0; i < 2; i++) {
        kv_seq_free(s[i]);
        tr_context_free(c[i]);
    }
    multi_engine_free(e);
    tr_model_free(m);
}

/* Rewrites the first occurrence of `from` in the file by `to` (same length) into a copy; returns its path. */
static const char *patched(const char *from, const void *to, size_t n, const char *tag) {
    static char out[160];
    snprintf(out, sizeof out, "%s.%s.gguf", path, tag);
    size_t size = 0;
    char *buf = read_file(path, &size);
    assert_non_null(buf);
    char *at = memmem(buf, size, from, strlen(from));
    assert_non_null(at);
    memcpy(at + strlen(from) - n, to, n);
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, size, f), size);
    fclose(f);
    free(buf);
    return out;
}

static void expect_refused(const char *file, const char *words) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    const tr_status st = tr_model_load(file, &mp, &m);
    fprintf(stderr, "refused: %s\n", tr_last_error());
    assert_int_not_equal(st, TR_OK);
    assert_null(m);
    assert_non_null(strstr(tr_last_error(), words));
    unlink(file);
}

static void rollback_context_qwen35(void **state) {
    (void)state;
    rollback_context(0);
}
static void rollback_context_lfm2(void **state) {
    (void)state;
    rollback_context(1);
}
static void rollback_multi_qwen35(void **state) {
    (void)state;
    rollback_multi(0);
}
static void rollback_multi_lfm2(void **state) {
    (void)state;
    rollback_multi(1);
}

static void hostile(void **state) {
    (void)state;
    path = paths[0];
    /* ssm.group_count 3 does not divide the 8 value heads (a key's value follows its name and a 4-byte type) */
    size_t size = 0;
    char *b = read_file(path, &size);
    assert_non_null(b);
    const char *key = "qwen35.ssm.group_count";
    char *at = memmem(b, size, key, strlen(key));
    assert_non_null(at);
    const uint32_t three = 3;
    memcpy(at + strlen(key) + 4, &three, 4);
    char out[160];
    snprintf(out, sizeof out, "%s.groups.gguf", path);
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, size, f), size);
    fclose(f);
    free(b);
    expect_refused(out, "group_count");
    expect_refused(patched("blk.0.ssm_a", "b", 1, "missing"), "blk.0.ssm_a");
    expect_refused(patched("qwen35.ssm.conv_kernel", "x", 1, "nokernel"), "ssm.conv_kernel");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rollback_context_qwen35),
        cmocka_unit_test(rollback_context_lfm2),
        cmocka_unit_test(rollback_multi_qwen35),
        cmocka_unit_test(rollback_multi_lfm2),
        cmocka_unit_test(hostile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
