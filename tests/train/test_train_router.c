/* test_train_router.c — the trainer on hand-made collect folders: a separable toy set is learned to near-perfect
 * validation accuracy and the router file scores it the same way; training is deterministic for a seed whatever
 * the thread count; calibration routes exactly the asked share; the gap report matches a hand computation; label
 * modes drop and keep the right positions; bad parameters are refused. */
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

static double hash01(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 31)) * 0xD6E8FEB86659FD93ull;
    z ^= z >> 29;
    return (double)(z >> 11) / 9007199254740992.0;
}

/* Toy: hidden[0] = x in (-1, 1) decides everything: the SLM is right iff x > 0.1, the LLM always; the other
 * hidden values and the features are noise. */
static void toy_separable(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)user;
    const double x = 2 * hash01((uint64_t)ex, (uint64_t)pos) - 1;
    hidden[0] = (float)x;
    for (int k = 1; k < 4; k++) hidden[k] = (float)(2 * hash01((uint64_t)ex * 7 + (uint64_t)k, (uint64_t)pos) - 1);
    r->truth = 7;
    r->slm_top1 = x > 0.1 ? 7 : 3;
    r->llm_top1 = 7;
    r->slm_p_top1 = r->llm_p_top1 = r->slm_p_truth = r->llm_p_truth = 0.5f;
    r->stats[0] = (float)hash01((uint64_t)pos, (uint64_t)ex * 3);
    r->stats[1] = 0.25f;
    r->stats[2] = 0.125f;
    topk[0] = -0.5f;
    topk[1] = -1.5f;
}

static const toy_spec toy = {.n_embd = 4, .n_vocab = 16, .topk = 2, .rollouts = 0, .n_examples = 60, .per_example = 50};

static char *make_dir(void) {
    const char *p = temp_path("");
    char *dir = strdup(p);
    return dir;
}

static tr_train_params quiet_params(void) {
    tr_train_params p = tr_train_default_params();
    p.features &= ~(unsigned)TR_FEATURE_TOKEN_EMBEDDING; /* toy data: no SLM */
    p.labels = TR_LABEL_DROP;                            /* the hard labels these toys are built for */
    p.topk = 2;
    p.context = 0; /* these toys decide at each position alone (test_train_context covers context) */
    p.hidden[0] = 16;
    p.hidden[1] = 8;
    p.n_threads = 1;
    p.learning_rate = 3e-3f;
    p.epochs = 40;
    p.patience = 8;
    return p;
}

/* The defaults are the README's recipe: every feature with the token embedding, induction and ngram, the previous
 * position, expected labels, 256,128, the weights' moving average. */
static void test_defaults_are_the_recipe(void **state) {
    (void)state;
    const tr_train_params p = tr_train_default_params();
    /* induction: +1.8 / +2.3 points of the gap on the recipe, seed 1; ngram: +2.1 / +4.0 on the 8,000-sample
     * recipe, seed 1 (docs/train.md) */
    assert_int_equal(p.features, TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN |
                                     TR_FEATURE_TOPK_LOGPROBS | TR_FEATURE_TOKEN_EMBEDDING | TR_FEATURE_INDUCTION |
                                     TR_FEATURE_NGRAM);
    assert_int_equal(p.labels, TR_LABEL_EXPECTED);
    assert_int_equal(p.hidden[0], 256);
    assert_int_equal(p.hidden[1], 128);
    assert_int_equal(p.hidden[2], 0);
    assert_int_equal(p.topk, 8);
    assert_int_equal(p.context, 1); /* the previous position's inputs: +6 / +4 points of the gap (docs/train.md) */
    assert_float_equal(p.ema_decay, 0.9999f, 0); /* the weights' moving average: +0.9 / +1.3 points (3 seeds) */
    assert_false(p.lr_cosine);
    assert_float_equal(p.lr_warmup, 0.0f, 0);
}

static void test_separable_toy_is_learned(void **state) {
    (void)state;
    char *dir = make_dir();
    assert_int_equal(toy_write(dir, &toy, toy_separable, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    const tr_train_data_info info = tr_train_data_get_info(d);
    assert_int_equal(info.n_positions, 3000);
    assert_int_equal(info.n_examples, 60);
    assert_int_equal(info.llm_correct, 3000);

    tr_train_params p = quiet_params();
    tr_train_result res;
    const char *out = temp_path(".gguf");
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
    assert_true(res.n_val > 100 && res.n_train > 2000);
    assert_int_equal(res.n_train + res.n_val, 3000);
    assert_int_equal(res.n_dropped, 0);
    assert_true(res.best_val_accuracy > 0.98);

    /* The file (standardization folded in) scores the data as the trainer saw it: the router's own threshold 0.5
     * separates the classes on every position but a few near the boundary. */
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(out, NULL, &r), TR_OK);
    assert_int_equal(tr_router_topk(r), 2);
    float *scores = malloc(3000 * sizeof(float));
    assert_int_equal(tr_train_data_scores(d, r, scores), TR_OK);
    int wrong = 0;
    for (int64_t i = 0; i < 3000; i++) wrong += (scores[i] >= 0.5f) != (d->slm_top1[i] == 7);
    assert_true(wrong < 60);
    free(scores);
    tr_router_free(r);
    unlink(out);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

/* The pairwise loss learns the toy's ranking (the positions where routing gains score lowest) and, with no held-out
 * data, writes the τ that routes target_routed of its validation split; the epoch kept is the best by gain share. */
static void test_pairwise_ranks_and_calibrates(void **state) {
    (void)state;
    char *dir = make_dir();
    assert_int_equal(toy_write(dir, &toy, toy_separable, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    tr_train_params p = quiet_params();
    p.loss = TR_LOSS_PAIRWISE;
    p.labels = TR_LABEL_GAIN; /* the realized gain: 1 where the SLM is wrong (the toy's LLM is always right), else 0 */
    /* The toy's tokens are all the same: ngram's values say nothing but its gain mean, left out of each example, is
     * lower the more of the example's positions gain (each example is 1% of the counts), a spurious signal the
     * ranking loss follows on so few positions. */
    p.features &= ~(unsigned)TR_FEATURE_NGRAM;
    p.target_routed = 0.2;
    tr_train_result res;
    const char *out = temp_path(".gguf");
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
    assert_true(res.best_val_gain_share > 0.95);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(out, NULL, &r), TR_OK);
    const float tau = tr_router_default_tau(r);
    assert_true(tau > 0 && tau < 1);
    float *scores = malloc(3000 * sizeof(float));
    assert_int_equal(tr_train_data_scores(d, r, scores), TR_OK);
    int below = 0, below_gain = 0;
    for (int64_t i = 0; i < 3000; i++) {
        below += scores[i] < tau;
        below_gain += scores[i] < tau && d->slm_top1[i] != 7;
    }
    assert_true(below > 3000 * 0.15 && below < 3000 * 0.25); /* the validation split's 20%, near it on all */
    assert_true(below_gain > below * 0.97);                  /* and those are where routing gains */
    p.loss = (tr_train_loss)7;
    assert_int_equal(tr_train_router(d, &p, out, NULL), TR_ERR_ARG);
    free(scores);
    tr_router_free(r);
    unlink(out);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

static char *train_to_bytes(const tr_train_data *d, uint64_t seed, int32_t threads, size_t *n) {
    tr_train_params p = quiet_params();
    p.seed = seed;
    p.n_threads = threads;
    p.epochs = 3;
    p.batch = 200; /* not a multiple of the chunk size */
    p.hidden[0] = 80; /* wider than the trainer's product tiles (64 columns): full and partial panels */
    p.hidden[1] = 70;
    const char *out = temp_path(".gguf");
    assert_int_equal(tr_train_router(d, &p, out, NULL), TR_OK);
    char *bytes = read_file(out, n);
    unlink(out);
    assert_non_null(bytes);
    return bytes;
}

static void test_deterministic_for_a_seed(void **state) {
    (void)state;
    char *dir = make_dir();
    assert_int_equal(toy_write(dir, &toy, toy_separable, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    size_t n1, n2, n3, n4;
    char *a = train_to_bytes(d, 5, 1, &n1), *b = train_to_bytes(d, 5, 1, &n2);
    char *c = train_to_bytes(d, 5, 3, &n3), *e = train_to_bytes(d, 6, 2, &n4);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    assert_int_equal(n1, n3);
    assert_memory_equal(a, c, n1); /* the thread count does not change a bit */
    assert_int_equal(n1, n4);
    assert_memory_not_equal(a, e, n1);
    free(a);
    free(b);
    free(c);
    free(e);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

/* maxprob = distinct values; calibrating maxprob at a share routes exactly that share. */
static void toy_ranked(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden) {
    (void)topk;
    (void)hidden;
    const int32_t *pattern = user; /* per position of example 0: 0 both wrong, 1 only SLM, 2 only LLM, 3 both */
    const int32_t kind = pattern[pos - 1];
    r->truth = 5;
    r->slm_top1 = (kind & 1) ? 5 : 1;
    r->llm_top1 = (kind & 2) ? 5 : 2;
    r->stats[0] = (float)pos / 16.0f; /* position 1 is the least confident */
    /* The LLM's expected gain p(l) - p(s): 0.6 where only the LLM is right, 0.3 where both are wrong, 0.1 where only
     * the SLM is (0 where both agree, whatever is stored). */
    r->llm_p_top1 = 0.8f;
    r->llm_p_slm_top1 = kind == 2 ? 0.2f : kind == 0 ? 0.5f : 0.7f;
    (void)ex;
}

static void test_calibration_and_gap(void **state) {
    (void)state;
    /* 10 positions, least confident first: LLM-only, both, both wrong, LLM-only, SLM-only, both, both wrong, ... */
    int32_t pattern[10] = {2, 3, 0, 2, 1, 3, 0, 3, 2, 1};
    const toy_spec s = {.n_embd = 2, .n_vocab = 8, .topk = 1, .n_examples = 1, .per_example = 10};
    char *dir = make_dir();
    assert_int_equal(toy_write(dir, &s, toy_ranked, pattern), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    tr_router *mp = NULL;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &mp), TR_OK);
    float tau = -1;
    double routed = -1;
    assert_int_equal(tr_calibrate(mp, d, 0.3, &tau, &routed), TR_OK);
    assert_float_equal(tau, 4.0f / 16.0f, 0);  /* positions 1..3 have scores below it */
    assert_float_equal(routed, 0.3, 1e-12);
    assert_int_equal(tr_calibrate(mp, d, 0.0, &tau, &routed), TR_OK);
    assert_float_equal(routed, 0.0, 0);
    assert_int_equal(tr_calibrate(mp, d, 1.0, &tau, &routed), TR_OK);
    assert_float_equal(routed, 1.0, 0);

    /* SLM right at 5 of 10 (kinds 1, 3), LLM at 6 (kinds 2, 3). Routing the 2 lowest (kinds 2, 3): +1 → 0.6,
     * gap closed (0.6 - 0.5) / (0.6 - 0.5) = 1. Routing 4 (2, 3, 0, 2): +2 → 0.7, gap closed 2. */
    const double targets[2] = {0.2, 0.4};
    tr_gap_point pts[2];
    tr_gap_report rep;
    assert_int_equal(tr_train_gap(d, mp, targets, 2, pts, &rep), TR_OK);
    assert_float_equal(rep.slm_accuracy, 0.5, 1e-12);
    assert_float_equal(rep.llm_accuracy, 0.6, 1e-12);
    assert_float_equal(rep.oracle_accuracy, 0.8, 1e-12);
    assert_float_equal(pts[0].accuracy, 0.6, 1e-12);
    assert_float_equal(pts[0].gap_closed, 1.0, 1e-9);
    assert_float_equal(pts[1].accuracy, 0.7, 1e-12);
    assert_float_equal(pts[1].routed, 0.4, 1e-12);
    /* Scores given per position rank as a router's would (router_ensemble combines several this way). */
    float given[10];
    tr_gap_point from_scores[2];
    assert_int_equal(tr_train_data_scores(d, mp, given), TR_OK);
    assert_int_equal(tr_train_gap_scores(d, given, targets, 2, from_scores, NULL), TR_OK);
    assert_float_equal(from_scores[0].accuracy, 0.6, 1e-12);
    assert_float_equal(from_scores[1].accuracy, 0.7, 1e-12);
    for (int i = 0; i < 10; i++) given[i] = -given[i]; /* the most confident first: 10 (SLM-only), 9 (LLM-only) */
    assert_int_equal(tr_train_gap_scores(d, given, targets, 2, from_scores, NULL), TR_OK);
    assert_float_equal(from_scores[0].accuracy, 0.5, 1e-12);
    assert_float_equal(from_scores[0].gap_closed, 0.0, 1e-9);
    assert_int_equal(tr_train_gap_scores(d, NULL, targets, 2, from_scores, NULL), TR_ERR_ARG);
    /* The oracle routes the three LLM-only positions first. */
    const double t3[1] = {0.3};
    assert_int_equal(tr_train_gap(d, NULL, t3, 1, pts, &rep), TR_OK);
    assert_float_equal(pts[0].accuracy, 0.8, 1e-12);
    /* The bound routes by expected gain: the three LLM-only positions, then the both-wrong ones (no gain), then the
     * SLM-only ones (a loss); at the same routed counts as the policies. */
    const double tb[2] = {0.3, 0.7};
    assert_int_equal(tr_train_gap_bound(d, tb, 2, pts), TR_OK);
    assert_float_equal(pts[0].accuracy, 0.8, 1e-12);
    assert_float_equal(pts[0].gap_closed, 3.0, 1e-9);
    assert_float_equal(pts[0].routed, 0.3, 1e-12);
    assert_float_equal(pts[1].accuracy, 0.6, 1e-12); /* + 2 both wrong (0), + 2 SLM-only (-2) */
    assert_int_equal(tr_train_gap_bound(NULL, tb, 1, pts), TR_ERR_ARG);

    /* Labels: shortcut kinds 1, 3 → 1 and 2 → 0; the two both-wrong positions are dropped or kept by mode. */
    tr_train_params p = quiet_params();
    p.topk = 1;
    p.val_fraction = 0;
    p.epochs = 1;
    tr_train_result res;
    const char *out = temp_path(".gguf");
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
    assert_int_equal(res.n_dropped, 2);
    assert_int_equal(res.n_train, 8);
    assert_float_equal(res.positive_share, 5.0 / 8.0, 1e-12);
    p.labels = TR_LABEL_SLM;
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
    assert_int_equal(res.n_dropped, 0);
    assert_float_equal(res.positive_share, 7.0 / 10.0, 1e-12);
    p.labels = TR_LABEL_ROLLOUT; /* this data has no rollouts */
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "rollouts"));
    p.labels = TR_LABEL_DROP;
    p.topk = 2; /* more than the data's 1 */
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_ERR_ARG);
    p.topk = 1;
    p.learning_rate = 0;
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_ERR_ARG);

    /* A trained MLP router calibrated on the same data routes the asked share too. */
    p = quiet_params();
    p.topk = 1;
    p.val_fraction = 0;
    p.epochs = 2;
    assert_int_equal(tr_train_router(d, &p, out, &res), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(out, NULL, &r), TR_OK);
    assert_int_equal(tr_calibrate(r, d, 0.5, &tau, &routed), TR_OK);
    assert_float_equal(routed, 0.5, 1e-12);
    tr_router_free(r);
    unlink(out);
    tr_router_free(mp);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

/* Two folders add up; a folder of another SLM size is refused and leaves the data as it was. */
static void test_folders_add_up(void **state) {
    (void)state;
    char *a = make_dir(), *b = make_dir(), *c = make_dir();
    assert_int_equal(toy_write(a, &toy, toy_separable, NULL), 0);
    assert_int_equal(toy_write(b, &toy, toy_separable, NULL), 0);
    toy_spec other = toy;
    other.n_embd = 5;
    assert_int_equal(toy_write(c, &other, toy_separable, NULL), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(a, &d), TR_OK);
    assert_int_equal(tr_train_data_add(d, b), TR_OK);
    assert_int_equal(tr_train_data_get_info(d).n_positions, 6000);
    assert_int_equal(tr_train_data_get_info(d).n_examples, 120);
    assert_int_equal(tr_train_data_add(d, c), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "another SLM"));
    assert_int_equal(tr_train_data_get_info(d).n_positions, 6000);
    tr_train_data_free(d);
    toy_remove(a);
    toy_remove(b);
    toy_remove(c);
    free(a);
    free(b);
    free(c);
}

/* CITER's shortcut and the both-wrong modes, position by position (truth 5; -1 = dropped). */
static void test_label_rule(void **state) {
    (void)state;
    const tr_label_mode modes[4] = {TR_LABEL_DROP, TR_LABEL_SLM, TR_LABEL_LLM, TR_LABEL_ROLLOUT};
    /* slm, llm, rollout_slm, rollout_llm → labels under drop, slm, llm, rollout */
    const struct { int32_t s, l, rs, rl; int want[4]; } cases[] = {
        {5, 5, -1, -1, {1, 1, 1, 1}},  /* both right: the SLM (it is free) */
        {5, 2, -1, -1, {1, 1, 1, 1}},  /* only the SLM */
        {3, 5, -1, -1, {0, 0, 0, 0}},  /* only the LLM */
        {3, 2, 1, 3, {-1, 1, 0, 0}},   /* both wrong, the LLM's token continues better */
        {3, 2, 2, 0, {-1, 1, 0, 1}},   /* both wrong, the SLM's continues better */
        {3, 2, 2, 2, {-1, 1, 0, 1}},   /* a tie goes to the SLM */
        {3, 2, -1, -1, {-1, 1, 0, -1}}, /* not rolled out: nothing to decide by */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int m = 0; m < 4; m++)
            assert_int_equal(label_rule(5, cases[c].s, cases[c].l, cases[c].rs, cases[c].rl, modes[m]), cases[c].want[m]);
    const int32_t cont[5] = {4, 9, 9, 1, 2}, ref[5] = {4, 8, 9, 1, 3};
    assert_int_equal(rollout_matches(cont, ref, 5), 3);
    assert_int_equal(rollout_matches(cont, ref, 0), 0);
    tr_label_mode m;
    assert_int_equal(tr_label_mode_from_name("rollout", &m), TR_OK);
    assert_int_equal(m, TR_LABEL_ROLLOUT);
    assert_int_equal(tr_label_mode_from_name("soft", &m), TR_ERR_ARG);
    assert_string_equal(tr_label_mode_name(TR_LABEL_SLM), "slm");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_rule),
        cmocka_unit_test(test_defaults_are_the_recipe),
        cmocka_unit_test(test_separable_toy_is_learned),
        cmocka_unit_test(test_pairwise_ranks_and_calibrates),
        cmocka_unit_test(test_deterministic_for_a_seed),
        cmocka_unit_test(test_calibration_and_gap),
        cmocka_unit_test(test_folders_add_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
