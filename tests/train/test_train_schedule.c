/* test_train_schedule.c — the trainer's learning-rate schedule (linear warm-up, cosine to 0) and the weights'
 * moving average (Polyak, ema_decay) against their formulas; end to end, the averaged weights are what is scored
 * and written (a decay of ~0 writes the raw weights' file byte for byte, a real one another file that still
 * learns), dropout gives the same file for any thread count, and bad values are refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/fixtures.h"
#include "train/train_fixture.h"
#include "train/trainer_internal.h"

static void test_learning_rate_schedule(void **state) {
    (void)state;
    tr_train_params p = tr_train_default_params();
    p.learning_rate = 0.01f;
    p.epochs = 10;
    /* The default is constant. */
    assert_float_equal(scheduled_learning_rate(&p, 1, 100), 0.01f, 0);
    assert_float_equal(scheduled_learning_rate(&p, 1000, 100), 0.01f, 0);
    /* Warm-up over 2 epochs of 100 steps: linear from 0, then constant. */
    p.lr_warmup = 2;
    assert_float_equal(scheduled_learning_rate(&p, 50, 100), 0.01f * 0.25, 1e-12);
    assert_float_equal(scheduled_learning_rate(&p, 200, 100), 0.01f, 1e-12);
    assert_float_equal(scheduled_learning_rate(&p, 900, 100), 0.01f, 1e-12);
    /* Cosine after the warm-up: half at the middle of the 800 steps left, 0 at the last step. */
    p.lr_cosine = true;
    assert_float_equal(scheduled_learning_rate(&p, 100, 100), 0.01f * 0.5, 1e-12);
    assert_float_equal(scheduled_learning_rate(&p, 200, 100), 0.01f, 1e-12);
    assert_float_equal(scheduled_learning_rate(&p, 600, 100), 0.01f * 0.5, 1e-9);
    assert_float_equal(scheduled_learning_rate(&p, 400, 100), 0.01f * 0.5 * (1 + cos(M_PI / 4)), 1e-9);
    assert_float_equal(scheduled_learning_rate(&p, 1000, 100), 0.0, 1e-12);
    /* Cosine alone starts at the full rate. */
    p.lr_warmup = 0;
    assert_float_equal(scheduled_learning_rate(&p, 0, 100), 0.01f, 1e-12);
    assert_float_equal(scheduled_learning_rate(&p, 500, 100), 0.01f * 0.5, 1e-9);
}

static void test_weights_average(void **state) {
    (void)state;
    float avg[2] = {1.0f, -2.0f};
    const float theta[2] = {3.0f, 0.0f};
    /* Step 1: the decay is min(0.999, 2 / 11). */
    weights_average_step(avg, theta, 2, 0.999f, 1);
    const float d1 = 2.0f / 11.0f;
    assert_float_equal(avg[0], d1 * 1.0f + (1 - d1) * 3.0f, 1e-6);
    assert_float_equal(avg[1], d1 * -2.0f, 1e-6);
    /* Late steps: the decay asked for. */
    float late[1] = {1.0f};
    const float zero[1] = {0.0f};
    weights_average_step(late, zero, 1, 0.9f, 1000000);
    assert_float_equal(late[0], 0.9f, 1e-6);
    /* Constant weights stay as they are. */
    float same[1] = {0.25f};
    const float quarter[1] = {0.25f};
    for (int64_t s = 1; s <= 50; s++) weights_average_step(same, quarter, 1, 0.99f, s);
    assert_float_equal(same[0], 0.25f, 1e-7);
}

/* The SLM is right iff hidden[0] > 0.1 (noise elsewhere), the LLM always. */
static void toy_fill(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)user;
    uint64_t s = (uint64_t)ex * 1000003u + (uint64_t)pos;
    for (int k = 0; k < 4; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        hidden[k] = (float)(2.0 * (double)(s >> 11) / 9007199254740992.0 - 1.0);
    }
    r->truth = 7;
    r->slm_top1 = hidden[0] > 0.1f ? 7 : 3;
    r->llm_top1 = 7;
    r->slm_p_top1 = r->llm_p_top1 = r->slm_p_truth = r->llm_p_truth = 0.5f;
    r->stats[0] = 0.5f * (hidden[1] + 1);
    r->stats[1] = 0.25f;
    r->stats[2] = 0.125f;
    topk[0] = -0.5f;
    topk[1] = -1.5f;
}

static const toy_spec toy = {.n_embd = 4, .n_vocab = 16, .topk = 2, .rollouts = 0, .n_examples = 40, .per_example = 50};

static tr_train_params toy_params(void) {
    tr_train_params p = tr_train_default_params();
    p.features &= ~(unsigned)TR_FEATURE_TOKEN_EMBEDDING; /* toy data: no SLM */
    p.labels = TR_LABEL_DROP;
    p.topk = 2;
    p.context = 0;
    p.hidden[0] = 16;
    p.hidden[1] = 8;
    p.n_threads = 1;
    p.learning_rate = 3e-3f;
    p.epochs = 6;
    p.patience = 6;
    p.batch = 64;
    p.ema_decay = 0; /* the raw weights first; the test sets the average */
    return p;
}

static char *train_bytes(const tr_train_data *d, const tr_train_params *p, size_t *n, tr_train_result *res) {
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_train_router(d, p, path, res), TR_OK);
    char *bytes = read_file(path, n);
    assert_non_null(bytes);
    unlink(path);
    return bytes;
}

static void test_average_is_what_is_kept(void **state) {
    (void)state;
    char *dir = strdup(temp_path(""));
    assert_int_equal(toy_write(dir, &toy, toy_fill, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    tr_train_params p = toy_params();
    tr_train_result raw_res, tiny_res, ema_res;
    size_t n_raw, n_tiny, n_ema;
    char *raw = train_bytes(d, &p, &n_raw, &raw_res);
    /* A decay of 1e-9 makes the average the weights themselves (to the last bit): the same file, the same epoch. */
    p.ema_decay = 1e-9f;
    char *tiny = train_bytes(d, &p, &n_tiny, &tiny_res);
    assert_int_equal(n_raw, n_tiny);
    assert_memory_equal(raw, tiny, n_raw);
    assert_int_equal(raw_res.best_epoch, tiny_res.best_epoch);
    /* A real decay: another file (the average is scored and written), which still separates the toy. */
    p.ema_decay = 0.99f;
    char *ema = train_bytes(d, &p, &n_ema, &ema_res);
    assert_int_equal(n_raw, n_ema);
    assert_memory_not_equal(raw, ema, n_raw);
    assert_true(ema_res.best_val_accuracy > 0.9);
    assert_true(ema_res.best_val_loss != raw_res.best_val_loss);
    /* The schedule changes the steps: another file again, still learning. */
    p.ema_decay = 0;
    p.lr_cosine = true;
    p.lr_warmup = 1;
    size_t n_cos;
    tr_train_result cos_res;
    char *cosine = train_bytes(d, &p, &n_cos, &cos_res);
    assert_memory_not_equal(raw, cosine, n_raw);
    assert_true(cos_res.best_val_accuracy > 0.9);
    /* Dropout: another file, the same for any thread count (the masks are the seed's, step's and chunk's), still
     * learning. */
    p.lr_cosine = false;
    p.lr_warmup = 0;
    p.dropout = 0.1f;
    size_t n_d1, n_d3;
    tr_train_result d1_res, d3_res;
    char *drop1 = train_bytes(d, &p, &n_d1, &d1_res);
    p.n_threads = 3;
    char *drop3 = train_bytes(d, &p, &n_d3, &d3_res);
    p.n_threads = 1;
    assert_int_equal(n_d1, n_d3);
    assert_memory_equal(drop1, drop3, n_d1);
    assert_memory_not_equal(raw, drop1, n_raw);
    assert_true(d1_res.best_val_accuracy > 0.9);
    p.dropout = 0.95f;
    assert_int_equal(tr_train_router(d, &p, temp_path(".gguf"), NULL), TR_ERR_ARG);
    p.dropout = 0;
    free(drop1);
    free(drop3);
    /* Bad values are refused. */
    const char *path = temp_path(".gguf");
    p.ema_decay = 1.0f;
    assert_int_equal(tr_train_router(d, &p, path, NULL), TR_ERR_ARG);
    p.ema_decay = -0.5f;
    assert_int_equal(tr_train_router(d, &p, path, NULL), TR_ERR_ARG);
    p.ema_decay = 0;
    p.lr_warmup = (float)p.epochs + 1;
    assert_int_equal(tr_train_router(d, &p, path, NULL), TR_ERR_ARG);
    free(raw);
    free(tiny);
    free(ema);
    free(cosine);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learning_rate_schedule),
        cmocka_unit_test(test_weights_average),
        cmocka_unit_test(test_average_is_what_is_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
