/* test_router_induction.c — the induction feature (issue 32): its seven values on hand-made token sequences (no
 * earlier occurrence, a match of 1, a match capped at 8, ties going to the latest occurrence, the continuation
 * equal to the SLM's top-1), and a router reading them: the file lists "induction", scoring refuses a position
 * whose tokens it was not given (tr_router_tokens), copies what it is given (the caller's buffer may change), and
 * scores from the values; routers without the feature ignore tokens. */
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

#include "router/router_internal.h"
#include "support/fixtures.h"
#include "tokroute.h"

#define BOS 99

static void values(const int32_t *tok, int64_t p, int32_t top1, float *out) {
    for (int k = 0; k < TR_ROUTER_INDUCTION_VALUES; k++) out[k] = -7.0f; /* every value written */
    router_induction_values(tok, p, top1, out);
}

static void expect(const float *got, float found, float m, float m2, float same, float other, float dist, float occ) {
    const float want[TR_ROUTER_INDUCTION_VALUES] = {found, m, m2, same, other, dist, occ};
    for (int k = 0; k < TR_ROUTER_INDUCTION_VALUES; k++)
        if (got[k] != want[k]) fail_msg("value %d: got %.9g, want %.9g", k, (double)got[k], (double)want[k]);
}

static void test_no_occurrence(void **state) {
    (void)state;
    const int32_t tok[] = {BOS, 1, 2, 3, 4, 5};
    float v[TR_ROUTER_INDUCTION_VALUES];
    values(tok, 6, 3, v); /* x = 5, never before */
    expect(v, 0, 0, 0, 0, 0, 0, 0);
    values(tok, 1, 3, v); /* position 1 reads only BOS: nothing */
    expect(v, 0, 0, 0, 0, 0, 0, 0);
    /* BOS (position 0) never counts as an occurrence, even of the same id. */
    const int32_t bos_again[] = {7, 1, 7};
    values(bos_again, 3, 1, v);
    expect(v, 0, 0, 0, 0, 0, 0, 0);
}

static void test_match_of_one(void **state) {
    (void)state;
    /* x = tok[5] = 2 occurred at q = 2 (followed by 3); the tokens before differ (1 vs 4). */
    const int32_t tok[] = {BOS, 1, 2, 3, 4, 2};
    float v[TR_ROUTER_INDUCTION_VALUES];
    values(tok, 6, 7, v);
    expect(v, 1, 1.0f / 8.0f, 0, 0, 1, logf(1.0f + 3.0f), logf(2.0f));
    values(tok, 6, 3, v); /* the continuation c = 3 is the SLM's top-1 */
    expect(v, 1, 1.0f / 8.0f, 0, 1, 0, logf(4.0f), logf(2.0f));
}

static void test_match_capped_at_eight(void **state) {
    (void)state;
    /* Ten tokens, then the same ten again: at p = 21, x = tok[20] = 10 matches q = 10 over all ten, capped at 8. */
    int32_t tok[21];
    tok[0] = BOS;
    for (int i = 1; i <= 10; i++) tok[i] = tok[i + 10] = i;
    float v[TR_ROUTER_INDUCTION_VALUES];
    values(tok, 21, 11, v); /* c = tok[11] = 1 */
    expect(v, 1, 1.0f, 1, 0, 1, logf(1.0f + 10.0f), logf(2.0f));
    /* The match stops at position 1: q = 3 can match at most 3 tokens (q - m >= 1). */
    const int32_t short_run[] = {BOS, 5, 6, 7, 8, 5, 6, 7};
    values(short_run, 8, 8, v); /* x = 7 at q = 3, tokens before 6, 5 match: m = 3, c = 8 */
    expect(v, 1, 3.0f / 8.0f, 1, 1, 0, logf(1.0f + 4.0f), logf(2.0f));
}

static void test_ties_go_to_the_latest(void **state) {
    (void)state;
    /* x = 4 occurred at q = 2, 6 and 9, each after another token than the 8 before x: m = 1 for all three; the
     * latest (q = 9, followed by 7, distance 12 - 9) wins. */
    const int32_t tok[] = {BOS, 1, 4, 5, 2, 3, 4, 6, 9, 4, 7, 8, 4};
    float v[TR_ROUTER_INDUCTION_VALUES];
    values(tok, 13, 6, v); /* x = tok[12] = 4, before it 8: no earlier 4 follows an 8 */
    expect(v, 1, 1.0f / 8.0f, 0, 0, 1, logf(1.0f + 3.0f), logf(1.0f + 3.0f));
    values(tok, 13, 7, v); /* c = 7 is the SLM's top-1 */
    expect(v, 1, 1.0f / 8.0f, 0, 1, 0, logf(1.0f + 3.0f), logf(1.0f + 3.0f));
}

static void test_longer_match_beats_later(void **state) {
    (void)state;
    /* x = 4: q = 2 follows 3 (as x does at p - 2), q = 5 follows 1. The longer match (q = 2) wins over the later. */
    const int32_t tok[] = {BOS, 3, 4, 8, 1, 4, 9, 3, 4};
    float v[TR_ROUTER_INDUCTION_VALUES];
    values(tok, 9, 8, v);
    expect(v, 1, 2.0f / 8.0f, 1, 1, 0, logf(1.0f + 6.0f), logf(3.0f));
}

/* A router over hidden size 1 whose only weight reads one induction value (the first: found). */
static tr_router *found_router(unsigned features) {
    const int32_t n_in = tr_router_input_width(features, 0, 1, 0);
    float w[16] = {0}, b[1] = {0};
    w[n_in - TR_ROUTER_INDUCTION_VALUES] = 2.0f;
    const int32_t sizes[2] = {n_in, 1};
    const float *const ws[1] = {w}, *const bs[1] = {b};
    const tr_mlp_router_desc d = {.n_layers = 1, .sizes = sizes, .weights = ws, .biases = bs, .features = features,
                                  .tau = 0.5f, .slm_n_embd = 1, .slm_n_vocab = 4};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    unlink(path);
    return r;
}

static void test_router_reads_the_tokens(void **state) {
    (void)state;
    unsigned f = 0;
    assert_int_equal(tr_router_features_parse("maxprob,induction", &f), TR_OK);
    assert_int_equal(f, TR_FEATURE_MAXPROB | TR_FEATURE_INDUCTION);
    assert_string_equal(tr_router_feature_name(TR_FEATURE_INDUCTION), "induction");
    assert_int_equal(tr_router_input_width(TR_FEATURE_INDUCTION, 0, 4, 2), 4 + 2 * 4 + 7);
    assert_int_equal(tr_router_feature_width(TR_FEATURE_INDUCTION, 0, 4), 0);
    tr_router *r = found_router(TR_FEATURE_MAXPROB | TR_FEATURE_INDUCTION);
    assert_int_equal(tr_router_features(r), TR_FEATURE_MAXPROB | TR_FEATURE_INDUCTION);
    const float h[1] = {0.0f}, logits[4] = {0, 0, 5, 0};
    float s = 0;
    /* No tokens yet: refused with a message naming the call. */
    assert_int_equal(tr_router_score_at(r, 3, h, 1, logits, 4, &s), TR_ERR_STATE);
    assert_non_null(strstr(tr_last_error(), "tr_router_tokens"));
    int32_t seq[4] = {BOS, 1, 2, 1};
    assert_int_equal(tr_router_tokens(r, seq, 3), TR_OK);
    assert_int_equal(tr_router_score_at(r, 4, h, 1, logits, 4, &s), TR_ERR_STATE); /* needs 0..3 */
    assert_int_equal(tr_router_score_at(r, 3, h, 1, logits, 4, &s), TR_OK);
    assert_true(fabsf(s - 0.5f) < 1e-6f); /* x = 2 never before: found 0 */
    assert_int_equal(tr_router_tokens(r, seq, 4), TR_OK);
    seq[1] = 3; /* the router holds a copy */
    assert_int_equal(tr_router_score_at(r, 4, h, 1, logits, 4, &s), TR_OK);
    assert_true(fabsf(s - 1.0f / (1.0f + expf(-2.0f))) < 1e-6f); /* x = 1 at q = 1: found */
    /* A rollback: the branch's tokens replace the old ones. */
    const int32_t branch[4] = {BOS, 1, 2, 3};
    assert_int_equal(tr_router_tokens(r, branch, 4), TR_OK);
    assert_int_equal(tr_router_score_at(r, 4, h, 1, logits, 4, &s), TR_OK);
    assert_true(fabsf(s - 0.5f) < 1e-6f);
    tr_router_reset(r); /* a new sequence forgets them */
    assert_int_equal(tr_router_score_at(r, 2, h, 1, logits, 4, &s), TR_ERR_STATE);
    assert_int_equal(tr_router_tokens(r, NULL, 2), TR_ERR_ARG);
    /* tr_router_score continues after the latest position scored (1 after a reset), context or not. */
    const int32_t again[4] = {BOS, 1, 2, 1};
    assert_int_equal(tr_router_tokens(r, again, 4), TR_OK);
    for (int k = 1; k <= 3; k++) assert_int_equal(tr_router_score(r, h, 1, logits, 4, &s), TR_OK);
    assert_true(fabsf(s - 0.5f) < 1e-6f); /* position 3: x = 2, never before */
    assert_int_equal(tr_router_score(r, h, 1, logits, 4, &s), TR_OK);
    assert_true(fabsf(s - 1.0f / (1.0f + expf(-2.0f))) < 1e-6f); /* position 4: x = 1 at q = 1 */
    tr_router_free(r);
    /* Policies and routers without the feature ignore tokens. */
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &r), TR_OK);
    assert_int_equal(tr_router_tokens(r, branch, 4), TR_OK);
    tr_router_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_occurrence),
        cmocka_unit_test(test_match_of_one),
        cmocka_unit_test(test_match_capped_at_eight),
        cmocka_unit_test(test_ties_go_to_the_latest),
        cmocka_unit_test(test_longer_match_beats_later),
        cmocka_unit_test(test_router_reads_the_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
