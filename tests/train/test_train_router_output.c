/* test_train_router_output.c — what tr_train_router leaves behind (issue 24): an output that cannot be written is
 * refused before any work; a stop asked for mid-epoch writes exactly the file a run of the completed epochs writes
 * (nothing before the first epoch completes); with held-out data the τ stored is the one tr_calibrate finds there
 * for the file's own router; auxiliary outputs (aux_weight) shape the training but stay out of the file. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/fixtures.h"
#include "train/train_fixture.h"
#include "tokroute.h"

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The SLM is right iff hidden[0] > 0 (noisy), the LLM always: a learnable toy with a varied score. */
static void toy_fill(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)user;
    uint64_t s = (uint64_t)ex * 1000003u + (uint64_t)pos;
    const double x = 2.0 * ((double)(next(&s) >> 11) / 9007199254740992.0) - 1.0;
    hidden[0] = (float)x;
    for (int k = 1; k < 4; k++) hidden[k] = (float)((double)(next(&s) >> 11) / 9007199254740992.0);
    r->truth = 7;
    r->slm_top1 = x + 0.3 * hidden[1] > 0.1 ? 7 : 3;
    r->llm_top1 = 7;
    r->slm_p_top1 = r->llm_p_top1 = r->slm_p_truth = r->llm_p_truth = 0.5f;
    r->stats[0] = hidden[2];
    r->stats[1] = 0.25f;
    r->stats[2] = 0.125f;
    topk[0] = -0.5f;
    topk[1] = -1.5f;
}

static const toy_spec toy = {.n_embd = 4, .n_vocab = 16, .topk = 2, .rollouts = 0, .n_examples = 40, .per_example = 50};

typedef struct stopper {
    int32_t calls, stop_at; /* progress calls so far; stop when calls reaches stop_at (0: never) */
} stopper;

static bool progress(void *user, int64_t done, int64_t total) {
    (void)done, (void)total;
    stopper *s = user;
    return !(++s->calls >= s->stop_at && s->stop_at);
}

static tr_train_data *toy_data(char **dir) {
    *dir = strdup(temp_path(""));
    assert_int_equal(toy_write(*dir, &toy, toy_fill, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(*dir, &d), TR_OK);
    return d;
}

/* Removes a toy folder and frees its name. */
static void remove_dir(char *dir) {
    toy_remove(dir);
    free(dir);
}

static tr_train_params params(stopper *s) {
    tr_train_params p = tr_train_default_params();
    p.features &= ~(unsigned)TR_FEATURE_TOKEN_EMBEDDING; /* toy data: no SLM */
    p.labels = TR_LABEL_DROP;
    p.topk = 2;
    p.hidden[0] = 8;
    p.hidden[1] = 0;
    p.n_threads = 1;
    p.batch = 100; /* 2000 positions, ~90% for training: 18 mini-batches per epoch */
    p.patience = 100;
    p.progress = progress;
    p.progress_user = s;
    return p;
}

static void test_unwritable_output_refused_first(void **state) {
    (void)state;
    char *dir;
    tr_train_data *d = toy_data(&dir);
    stopper s = {0, 0};
    tr_train_params p = params(&s);
    assert_int_equal(tr_train_router(d, &p, "/nonexistent-dir/r.gguf", NULL), TR_ERR_IO);
    assert_non_null(strstr(tr_last_error(), "cannot write the router file /nonexistent-dir/r.gguf"));
    assert_int_equal(s.calls, 0); /* no mini-batch ran */
    /* An existing file that cannot be written: refused, and left as it was. */
    const char *ro = temp_path(".gguf");
    FILE *f = fopen(ro, "wb");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
    chmod(ro, 0444);
    if (access(ro, W_OK) != 0) { /* root writes anyway: nothing to check then */
        assert_int_equal(tr_train_router(d, &p, ro, NULL), TR_ERR_IO);
        size_t n = 0;
        char *bytes = read_file(ro, &n);
        assert_true(n == 3 && memcmp(bytes, "old", 3) == 0);
        free(bytes);
    }
    unlink(ro);
    tr_train_data_free(d);
    remove_dir(dir);
}

static void test_stop_writes_the_best_epoch_so_far(void **state) {
    (void)state;
    char *dir;
    tr_train_data *d = toy_data(&dir);
    /* The reference: two complete epochs. */
    stopper never = {0, 0};
    tr_train_params p = params(&never);
    p.epochs = 2;
    const char *ref_path = temp_path(".gguf");
    tr_train_result ref;
    assert_int_equal(tr_train_router(d, &p, ref_path, &ref), TR_OK);
    const int32_t per_epoch = never.calls / 2;
    assert_true(per_epoch > 4);
    size_t n_ref = 0, n_out = 0;
    char *ref_bytes = read_file(ref_path, &n_ref);
    assert_non_null(ref_bytes);

    /* Stopped in the middle of epoch 3 of 30: the same file, and the call says so. */
    stopper s = {0, 2 * per_epoch + per_epoch / 2};
    p = params(&s);
    p.epochs = 30;
    const char *out = temp_path(".gguf");
    tr_train_result res;
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_ERR_STATE);
    assert_non_null(strstr(tr_last_error(), "training stopped in epoch 3; the best epoch so far"));
    assert_int_equal(res.epochs_run, 2);
    assert_int_equal(res.best_epoch, ref.best_epoch);
    char *out_bytes = read_file(out, &n_out);
    assert_non_null(out_bytes);
    assert_int_equal(n_out, n_ref);
    assert_memory_equal(out_bytes, ref_bytes, n_ref);
    free(out_bytes);
    unlink(out);

    /* Stopped inside epoch 1: nothing to keep, nothing written (the output check leaves no file either). */
    s = (stopper){0, per_epoch / 2};
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_ERR_STATE);
    assert_non_null(strstr(tr_last_error(), "before any epoch completed"));
    assert_int_equal(access(out, F_OK), -1);
    free(ref_bytes);
    unlink(ref_path);
    tr_train_data_free(d);
    remove_dir(dir);
}

static void test_calibrated_tau_is_stored(void **state) {
    (void)state;
    char *dir, *held_dir;
    tr_train_data *d = toy_data(&dir), *held = toy_data(&held_dir);
    stopper never = {0, 0};
    tr_train_params p = params(&never);
    p.epochs = 4;
    const char *out = temp_path(".gguf");
    tr_train_result res;
    /* Without held-out data the file keeps p.tau. */
    p.tau = 0.25f;
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(out, NULL, &r), TR_OK);
    assert_true(tr_router_default_tau(r) == 0.25f && res.tau == 0.25f);
    tr_router_free(r);
    for (int k = 0; k < 3; k++) {
        const double targets[3] = {0.05, 0.2, 0.5};
        p.calibration = held;
        p.target_routed = targets[k];
        assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
        assert_int_equal(tr_router_load(out, NULL, &r), TR_OK);
        float tau = 0;
        double routed = 0;
        assert_int_equal(tr_calibrate(r, held, targets[k], &tau, &routed), TR_OK);
        assert_true(tr_router_default_tau(r) == tau && res.tau == tau);
        assert_true(fabs(res.calibration_routed - routed) < 1e-12 && fabs(routed - targets[k]) < 0.01);
        tr_router_free(r);
    }
    p.target_routed = 1.5;
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_ERR_ARG);
    unlink(out);
    tr_train_data_free(d);
    tr_train_data_free(held);
    remove_dir(dir);
    remove_dir(held_dir);
}

/* With aux_weight the network has four more outputs while it trains; the file written is a router of the same
 * shape as one trained without them (one output), which loads and calibrates like any other, and its weights are
 * not those of the plain run (the extra targets moved the shared layers). */
static void test_auxiliary_outputs_left_out_of_the_file(void **state) {
    (void)state;
    char *dir;
    tr_train_data *d = toy_data(&dir);
    stopper never = {0, 0};
    tr_train_params p = params(&never);
    p.epochs = 3;
    char plain_path[512], aux_path[512];
    snprintf(plain_path, sizeof plain_path, "%s", temp_path(".gguf"));
    snprintf(aux_path, sizeof aux_path, "%s", temp_path(".gguf"));
    assert_int_equal(tr_train_router(d, &p, plain_path, NULL), TR_OK);
    p.aux_weight = 1.0f;
    assert_int_equal(tr_train_router(d, &p, aux_path, NULL), TR_OK);
    size_t n_plain = 0, n_aux = 0;
    char *plain = read_file(plain_path, &n_plain), *aux = read_file(aux_path, &n_aux);
    assert_non_null(plain);
    assert_non_null(aux);
    assert_int_equal(n_plain, n_aux);
    assert_memory_not_equal(plain, aux, n_plain);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(aux_path, NULL, &r), TR_OK);
    float tau = 0;
    double routed = 0;
    assert_int_equal(tr_calibrate(r, d, 0.2, &tau, &routed), TR_OK);
    assert_true(fabs(routed - 0.2) < 0.01);
    tr_router_free(r);
    p.aux_weight = -1;
    assert_int_equal(tr_train_router(d, &p, aux_path, NULL), TR_ERR_ARG);
    free(plain);
    free(aux);
    unlink(plain_path);
    unlink(aux_path);
    tr_train_data_free(d);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unwritable_output_refused_first),
        cmocka_unit_test(test_auxiliary_outputs_left_out_of_the_file),
        cmocka_unit_test(test_stop_writes_the_best_epoch_so_far),
        cmocka_unit_test(test_calibrated_tau_is_stored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
