/* test_eval_api.c — tr_eval_run through the public API on the demo pair (../shared/models) and a few stories or
 * questions: the position count against an independent tokenization, the points' consistency (routed share near
 * its target, gap closed from the accuracies, the oracle at least as good as any policy, random near the straight
 * line), a trained-router file evaluated as policy "router", generation runs (text and a question format), the JSON
 * document and the output files, determinism, and the errors for bad parameters. */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "support/fixtures.h"
#include "tokroute.h"

static tr_model *slm, *llm;

static int setup(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories-student.gguf"), &mp, &slm) != TR_OK) return -1;
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &llm) != TR_OK) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tr_model_free(slm);
    tr_model_free(llm);
    return 0;
}

static tr_eval_params story_params(int64_t first, int64_t end) {
    tr_eval_params p = tr_eval_default_params();
    p.data_path = shared_path("data/tinystories/tinystories_val.txt");
    p.format = "text";
    p.first = first;
    p.end = end;
    return p;
}

static tr_eval *run_ok(const tr_eval_params *p) {
    tr_eval *e = NULL;
    tr_status st = tr_eval_run(slm, llm, p, &e);
    if (st != TR_OK) fail_msg("tr_eval_run: %s", tr_last_error());
    return e;
}

/* Target positions of stories [first, end): min(tokens after BOS, max_target) each. */
static int64_t count_positions(int64_t first, int64_t end, int32_t max_target) {
    char *text = read_file(shared_path("data/tinystories/tinystories_val.txt"), NULL);
    assert_non_null(text);
    int64_t total = 0, index = 0;
    char *story = text;
    for (;;) {
        char *sep = strstr(story, "\n<|endoftext|>\n");
        if (sep) *sep = '\0';
        char *s = story;
        while (*s == '\n' || *s == ' ') s++;
        size_t len = strlen(s);
        while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' ')) len--;
        if (len > 0 && index >= first && index < end) {
            int32_t n = 0;
            tr_tokenize_params tp = tr_tokenize_default_params();
            tr_status st = tr_tokenize(tr_model_vocab(slm), s, len, &tp, NULL, 0, &n);
            assert_true(st == TR_OK || st == TR_ERR_RANGE);
            total += n - 1 < max_target ? n - 1 : max_target;
        }
        if (len > 0) index++;
        if (!sep) break;
        story = sep + 15;
    }
    free(text);
    return total;
}

static void test_defaults_and_errors(void **state) {
    (void)state;
    tr_eval_params p = tr_eval_default_params();
    assert_string_equal(p.format, "text");
    assert_int_equal(p.n_targets, 3);
    assert_float_equal(p.target_routed[1], 0.10, 1e-12);
    assert_int_equal(p.max_target_tokens, 255);
    assert_int_equal(p.end, -1);
    assert_true(p.generate);
    tr_eval *e = (tr_eval *)1;
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_ARG); /* no data */
    assert_null(e);
    assert_non_null(strstr(tr_last_error(), "no dataset"));
    p = story_params(0, 2);
    p.format = "poems";
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_ARG);
    p = story_params(990, 1001);
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "1000 examples"));
    p = story_params(5, 5);
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_RANGE);
    p = story_params(0, 2);
    p.target_routed[0] = 1.5;
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_ARG);
    p = story_params(0, 2);
    p.n_sweep = 1;
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_ARG);
    p = story_params(0, 2);
    p.router_path = shared_path("models/no-such-router.gguf");
    assert_int_equal(tr_eval_run(slm, llm, &p, &e), TR_ERR_IO);
    assert_int_equal(tr_eval_run(NULL, llm, &p, &e), TR_ERR_ARG);
    assert_null(tr_eval_get_summary(NULL));
    assert_int_equal(tr_eval_n_policies(NULL), 0);
    tr_eval_free(NULL);
}

static void test_token_level_points(void **state) {
    (void)state;
    tr_eval_params p = story_params(0, 6);
    p.generate = false;
    p.n_targets = 4;
    p.target_routed[3] = 0.5;
    tr_eval *e = run_ok(&p);
    const tr_eval_summary *s = tr_eval_get_summary(e);
    assert_int_equal(s->n_examples, 6);
    assert_int_equal(s->n_positions, count_positions(0, 6, 255));
    assert_true(s->slm_accuracy > 0.2 && s->slm_accuracy < s->llm_accuracy && s->llm_accuracy < 0.9);
    assert_true(s->best_of_both >= s->llm_accuracy);
    const char *names[] = {"maxprob", "margin", "entropy", "random", "oracle"};
    assert_int_equal(tr_eval_n_policies(e), 5);
    for (int k = 0; k < 5; k++) assert_string_equal(tr_eval_policy_name(e, k), names[k]);
    assert_null(tr_eval_policy_name(e, 5));
    const double n = (double)s->n_positions;
    for (int t = 0; t < 4; t++) {
        tr_eval_point o;
        assert_int_equal(tr_eval_get_point(e, 4, t, &o), TR_OK);
        assert_true(isnan(o.tau));
        for (int k = 0; k < 4; k++) {
            tr_eval_point pt;
            assert_int_equal(tr_eval_get_point(e, k, t, &pt), TR_OK);
            assert_float_equal(pt.target_routed, p.target_routed[t], 0);
            assert_true(fabs(pt.routed - pt.target_routed) <= 2.0 / n); /* scores are (nearly) distinct */
            assert_float_equal(pt.gap_closed, (pt.accuracy - s->slm_accuracy) / (s->llm_accuracy - s->slm_accuracy),
                               1e-9);
            assert_true(o.accuracy >= pt.accuracy - 2.0 / n);
            if (k < 3 && t > 0) assert_true(pt.tau > 0 && pt.tau <= 1);
            if (k == 3) assert_true(fabs(pt.gap_closed - pt.target_routed) < 0.1); /* random ≈ the straight line */
            /* The bound beside every policy, at the policy's own share: no policy beats it, maxprob reaches part */
            assert_true(pt.bound_gap_closed > 0 && pt.bound_gap_closed <= o.gap_closed + 2.0 / n);
            assert_true(pt.gap_closed <= pt.bound_gap_closed + 0.02);
            assert_float_equal(pt.share_of_bound, pt.gap_closed / pt.bound_gap_closed, 1e-12);
            if (k == 0 && t > 0) assert_true(pt.share_of_bound > 0.1 && pt.share_of_bound < 0.9);
        }
    }
    tr_eval_point pt;
    assert_int_equal(tr_eval_get_point(e, 0, 4, &pt), TR_ERR_RANGE);
    assert_int_equal(tr_eval_get_point(e, -1, 0, &pt), TR_ERR_RANGE);

    /* The same parameters give the same points. */
    tr_eval *again = run_ok(&p);
    for (int k = 0; k < 5; k++)
        for (int t = 0; t < 4; t++) {
            tr_eval_point a, b;
            tr_eval_get_point(e, k, t, &a);
            tr_eval_get_point(again, k, t, &b);
            assert_true(a.accuracy == b.accuracy && a.routed == b.routed &&
                        (a.tau == b.tau || (isnan(a.tau) && isnan(b.tau))));
        }
    tr_eval_free(again);
    tr_eval_free(e);
}

static void write_router(const char *path) {
    const tr_model_info *in = tr_model_get_info(slm);
    const int32_t sizes[3] = {in->n_embd + 1, 4, 1};
    float *w0 = calloc((size_t)sizes[0] * 4, sizeof *w0), b0[4] = {0}, w1[4] = {1, 0, 0, 0}, b1[1] = {-1};
    w0[in->n_embd] = 4; /* unit 0 = 4 · maxprob: the router is a monotone function of the SLM's max-prob */
    const float *ws[2] = {w0, w1}, *bs[2] = {b0, b1};
    tr_mlp_router_desc d = {.n_layers = 2, .sizes = sizes, .weights = ws, .biases = bs,
                            .features = TR_FEATURE_MAXPROB, .tau = 0.5f, .slm_name = in->name,
                            .slm_n_embd = in->n_embd, .slm_n_vocab = in->n_vocab};
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    free(w0);
}

static void test_router_file_and_outputs(void **state) {
    (void)state;
    char router[256];
    snprintf(router, sizeof router, "%s", temp_path(".gguf"));
    write_router(router);
    tr_eval_params p = story_params(10, 14);
    p.router_path = router;
    p.max_new_tokens = 12;
    tr_eval *e = run_ok(&p);
    assert_int_equal(tr_eval_n_policies(e), 6);
    assert_string_equal(tr_eval_policy_name(e, 0), "router");
    for (int t = 0; t < 3; t++) { /* sigmoid(4·maxprob − 1) orders positions as maxprob does */
        tr_eval_point r, m;
        tr_eval_get_point(e, 0, t, &r);
        tr_eval_get_point(e, 1, t, &m);
        assert_float_equal(r.accuracy, m.accuracy, 0.005); /* equal up to float ties in the sigmoid */
        assert_float_equal(r.routed, m.routed, 0.005);
    }
    char *json = NULL;
    assert_int_equal(tr_eval_to_json(e, false, &json), TR_OK);
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(root, "slm_accuracy")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(root, "llm_accuracy")));
    const cJSON *pol = cJSON_GetObjectItem(root, "policies");
    assert_int_equal(cJSON_GetArraySize(pol), 5); /* the oracle has its own key */
    const cJSON *rp = cJSON_GetObjectItem(pol, "router");
    assert_int_equal(cJSON_GetArraySize(rp), 3);
    const char *keys[] = {"target_routed", "tau", "routed", "accuracy", "gap_closed", "bound_gap_closed",
                          "share_of_bound"};
    for (int k = 0; k < 7; k++) assert_true(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetArrayItem(rp, 1), keys[k])));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(root, "oracle")), 3);
    assert_null(cJSON_GetObjectItem(root, "sweep"));
    const cJSON *runs = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "generation"), "runs");
    /* slm, llm, 4 scored policies × 3 targets × (teacher-forced τ, τ following the routed share) */
    assert_int_equal(cJSON_GetArraySize(runs), 2 + 4 * 3 * 2);
    assert_false(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(runs, 2), "controlled")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(runs, 3), "controlled")));
    const cJSON *slm_run = cJSON_GetArrayItem(runs, 0), *llm_run = cJSON_GetArrayItem(runs, 1);
    assert_string_equal(cJSON_GetObjectItem(slm_run, "mode")->valuestring, "slm");
    assert_float_equal(cJSON_GetObjectItem(slm_run, "routed")->valuedouble, 0, 0);
    assert_float_equal(cJSON_GetObjectItem(llm_run, "routed")->valuedouble, 1, 0);
    assert_int_equal(cJSON_GetObjectItem(slm_run, "tokens")->valuedouble, 4 * 12);
    /* Greedy LLM text scores a lower perplexity under the LLM than the SLM's own text. */
    assert_true(cJSON_GetObjectItem(llm_run, "perplexity")->valuedouble <
                cJSON_GetObjectItem(slm_run, "perplexity")->valuedouble);
    const cJSON *lat = cJSON_GetObjectItem(cJSON_GetArrayItem(runs, 5), "latency");
    const char *lkeys[] = {"routed_tokens", "slm_ms", "ttft_ms", "tbt_ms", "llm_ms", "overall_ms"};
    for (int k = 0; k < 6; k++) assert_true(cJSON_IsNumber(cJSON_GetObjectItem(lat, lkeys[k])));
    cJSON_Delete(root);
    free(json);

    char dir[256];
    snprintf(dir, sizeof dir, "%s/a/b", temp_path(".d"));
    assert_int_equal(tr_eval_write(e, dir), TR_OK);
    const char *files[] = {"eval.json", "tokens.csv", "sweep.csv", "generate.csv", "latency.csv",
                           "accuracy_vs_routed.svg", "routed_vs_tau.svg"};
    for (int i = 0; i < 7; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        struct stat sb;
        if (stat(path, &sb) != 0 || sb.st_size < 100) fail_msg("%s missing or short", path);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/eval.json", dir);
    char *full = read_file(path, NULL);
    root = cJSON_Parse(full);
    assert_non_null(root);
    const cJSON *sw = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "sweep"), "margin");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(sw, "tau_grid"), "tau")), 101);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(sw, "share_grid"), "routed")), 101);
    cJSON_Delete(root);
    free(full);
    assert_int_equal(tr_eval_write(e, "/proc/no/such/dir"), TR_ERR_IO);
    tr_eval_free(e);
    remove(router);
}

static void test_question_format(void **state) {
    (void)state;
    tr_eval_params p = tr_eval_default_params();
    p.data_path = shared_path("data/arc_challenge/arc_challenge.jsonl");
    p.format = "arc";
    p.first = 0;
    p.end = 2;
    p.max_new_tokens = 6;
    p.n_targets = 1;
    tr_eval *e = run_ok(&p);
    assert_int_equal(tr_eval_get_summary(e)->n_examples, 2);
    assert_true(tr_eval_get_summary(e)->n_positions >= 2 * 5); /* "The answer is C." */
    char *json = NULL;
    assert_int_equal(tr_eval_to_json(e, false, &json), TR_OK);
    cJSON *root = cJSON_Parse(json);
    const cJSON *g = cJSON_GetObjectItem(root, "generation");
    assert_string_equal(cJSON_GetObjectItem(g, "kind")->valuestring, "task");
    const cJSON *runs = cJSON_GetObjectItem(g, "runs");
    assert_int_equal(cJSON_GetArraySize(runs), 2 + 3 * 2);
    for (int i = 0; i < cJSON_GetArraySize(runs); i++) {
        const cJSON *r = cJSON_GetArrayItem(runs, i);
        double acc = cJSON_GetObjectItem(r, "accuracy")->valuedouble;
        assert_true(acc >= 0 && acc <= 1);
        assert_int_equal(cJSON_GetObjectItem(r, "examples")->valuedouble + cJSON_GetObjectItem(r, "skipped")->valuedouble, 2);
    }
    cJSON_Delete(root);
    free(json);
    tr_eval_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_errors),
        cmocka_unit_test(test_token_level_points),
        cmocka_unit_test(test_router_file_and_outputs),
        cmocka_unit_test(test_question_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
