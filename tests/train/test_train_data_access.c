/* test_train_data_access.c — reading loaded collected data position by position (tr_train_data_position,
 * tr_train_data_labels, tr_train_data_inputs): a hand-made folder whose every value is a function of (example,
 * position) reads back exactly; labels follow the label rule (drop, slm, expected); input rows are the hidden state
 * then the chosen features in order; bad arguments are refused with a message. */
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
#include "tokroute.h"

enum { N_EMBD = 5, TOPK = 4, N_EX = 3, PER_EX = 6 };

/* Position (ex, pos): truth 7; the SLM is right when pos % 3 == 0, the LLM when pos % 2 == 0 (both wrong at
 * pos 1, 5); distinct values everywhere else. */
static void fill(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)user;
    const float base = (float)(ex * 100 + pos);
    r->truth = 7;
    r->slm_top1 = pos % 3 == 0 ? 7 : 3;
    r->llm_top1 = pos % 2 == 0 ? 7 : 4;
    r->slm_p_top1 = 0.5f, r->llm_p_top1 = 0.25f, r->slm_p_truth = 0.125f, r->llm_p_truth = 0.0625f;
    r->llm_p_slm_top1 = 0.1f, r->slm_p_llm_top1 = 0.2f;
    r->stats[0] = 0.01f * (float)pos, r->stats[1] = 0.02f * (float)pos, r->stats[2] = 0.03f * (float)pos;
    if (pos == 5) r->rollout_slm = 2, r->rollout_llm = 1;
    for (int k = 0; k < TOPK; k++) topk[k] = -(float)k - 0.5f * (float)pos;
    for (int k = 0; k < N_EMBD; k++) hidden[k] = base + 0.25f * (float)k;
}

static tr_train_data *open_toy(void) {
    const char *dir = temp_path("access");
    const toy_spec spec = {.n_embd = N_EMBD, .n_vocab = 16, .topk = TOPK, .rollouts = 4, .n_examples = N_EX,
                           .per_example = PER_EX};
    assert_int_equal(toy_write(dir, &spec, fill, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    return d;
}

static void test_positions_read_back(void **state) {
    (void)state;
    tr_train_data *d = open_toy();
    for (int64_t i = 0; i < N_EX * PER_EX; i++) {
        const int32_t ex = (int32_t)(i / PER_EX), pos = (int32_t)(i % PER_EX) + 1;
        tr_train_position p;
        assert_int_equal(tr_train_data_position(d, i, &p), TR_OK);
        assert_int_equal(p.example, ex);
        assert_int_equal(p.position, pos);
        assert_int_equal(p.group, ex);
        assert_int_equal(p.truth, 7);
        assert_int_equal(p.slm_top1, pos % 3 == 0 ? 7 : 3);
        assert_int_equal(p.llm_top1, pos % 2 == 0 ? 7 : 4);
        assert_true(p.slm_p_top1 == 0.5f && p.llm_p_top1 == 0.25f && p.slm_p_truth == 0.125f);
        assert_true(p.llm_p_truth == 0.0625f && p.llm_p_slm_top1 == 0.1f && p.slm_p_llm_top1 == 0.2f);
        assert_true(p.maxprob == 0.01f * (float)pos && p.entropy == 0.02f * (float)pos);
        assert_true(p.margin == 0.03f * (float)pos);
        assert_int_equal(p.rollout_slm, pos == 5 ? 2 : -1);
        assert_int_equal(p.rollout_llm, pos == 5 ? 1 : -1);
    }
    tr_train_position p;
    assert_int_equal(tr_train_data_position(d, N_EX * PER_EX, &p), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "outside"));
    assert_int_equal(tr_train_data_position(d, -1, &p), TR_ERR_RANGE);
    tr_train_data_free(d);
}

static void test_labels_follow_the_rule(void **state) {
    (void)state;
    tr_train_data *d = open_toy();
    float labels[N_EX * PER_EX];
    assert_int_equal(tr_train_data_labels(d, TR_LABEL_DROP, labels), TR_OK);
    for (int i = 0; i < N_EX * PER_EX; i++) {
        const int pos = i % PER_EX + 1;
        const float want = pos % 3 == 0 ? 1.0f : pos % 2 == 0 ? 0.0f : -1.0f; /* both wrong: dropped */
        assert_true(labels[i] == want);
    }
    assert_int_equal(tr_train_data_labels(d, TR_LABEL_SLM, labels), TR_OK);
    assert_true(labels[0] == 1.0f); /* pos 1: both wrong → 1 */
    assert_int_equal(tr_train_data_labels(d, TR_LABEL_ROLLOUT, labels), TR_OK);
    assert_true(labels[0] == -1.0f && labels[4] == 1.0f); /* pos 1 not rolled out; pos 5: 2 >= 1 → SLM */
    /* expected: g = p_LLM(LLM's top-1) - p_LLM(SLM's top-1) = 0.25 - 0.1 where the top-1s differ */
    assert_int_equal(tr_train_data_labels(d, TR_LABEL_EXPECTED, labels), TR_OK);
    assert_true(fabsf(labels[0] - 0.5f * (1.0f - (0.25f - 0.1f))) < 1e-7f);
    assert_int_equal(tr_train_data_labels(d, (tr_label_mode)99, labels), TR_ERR_ARG);
    tr_train_data_free(d);
}

static void test_input_rows(void **state) {
    (void)state;
    tr_train_data *d = open_toy();
    const unsigned f = TR_FEATURE_MAXPROB | TR_FEATURE_MARGIN | TR_FEATURE_TOPK_LOGPROBS;
    const int32_t width = N_EMBD + 2 + 3;
    assert_int_equal(width, N_EMBD + tr_router_feature_width(f, 3, N_EMBD));
    float rows[2 * (N_EMBD + 5)];
    assert_int_equal(tr_train_data_inputs(d, f, 3, NULL, 7, 2, rows), TR_OK); /* example 1, positions 2 and 3 */
    for (int r = 0; r < 2; r++) {
        const int pos = 2 + r;
        const float *row = rows + r * width;
        for (int k = 0; k < N_EMBD; k++) assert_true(row[k] == (float)(100 + pos) + 0.25f * (float)k);
        assert_true(row[N_EMBD] == 0.01f * (float)pos);     /* maxprob */
        assert_true(row[N_EMBD + 1] == 0.03f * (float)pos); /* margin (entropy not chosen) */
        for (int k = 0; k < 3; k++) assert_true(row[N_EMBD + 2 + k] == -(float)k - 0.5f * (float)pos);
    }
    assert_int_equal(tr_train_data_inputs(d, f, TOPK + 1, NULL, 0, 1, rows), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "topk"));
    assert_int_equal(tr_train_data_inputs(d, TR_FEATURE_TOKEN_EMBEDDING, 0, NULL, 0, 1, rows), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "SLM"));
    assert_int_equal(tr_train_data_inputs(d, 0, 0, NULL, N_EX * PER_EX - 1, 2, rows), TR_ERR_RANGE);
    assert_int_equal(tr_train_data_inputs(d, 0, 0, NULL, N_EX * PER_EX, 0, rows), TR_OK);
    tr_train_data_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positions_read_back),
        cmocka_unit_test(test_labels_follow_the_rule),
        cmocka_unit_test(test_input_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
