/* test_server_sampling.c — the server's token choice is the library's sampler: every setting draws what tr_sampler
 * reseeded with the routed loop's position seed draws (so the server samples as the embedded backend does), across
 * more settings than the sampler cache holds; logit_bias steers the choice but not the reported log-probability;
 * over HTTP (stories260K): two unseeded temperature-1 completions differ, seeded ones repeat, a session that
 * resends a position (rollback) gets the same sampled token, logit_bias forces or bans ids, and the OpenAI fields
 * the server does not implement (suffix, best_of, non-zero penalties) or does not know are 400s naming them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "model/sample_math.h" /* position_seed, log_sum_exp: the routed loop's and the embedded backend's too */
#include "server/server_internal.h"
#include "support/http_call.h"
#include "support/server_fixture.h"

enum { NV = 512 };

static void lm_row(float *l, int32_t n, uint64_t seed) {
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 6.0 - 3.0);
    }
    for (int32_t i = 0; i < 8; i++) l[(i * 61) % n] = 5.0f - 0.25f * (float)i;
}

static void draws_equal_the_library_sampler(void **state) {
    (void)state;
    static const sampling settings[] = {
        {.temperature = 0.8f, .top_p = 1, .seed = 7},   {.temperature = 1.2f, .top_k = 5, .top_p = 1, .seed = 8},
        {.temperature = 0.7f, .top_p = 0.9f, .seed = 9}, {.temperature = 1, .top_k = 40, .top_p = 0.95f, .seed = 10},
        {.temperature = 2, .top_p = 0.5f, .seed = 11},  {.temperature = 1, .top_p = 1, .seed = 12}};
    token_sampler *ts = token_sampler_create();
    assert_non_null(ts);
    float logits[NV];
    int distinct_seen = 0;
    for (int round = 0; round < 3; round++) /* more settings than cached samplers, interleaved */
        for (size_t k = 0; k < sizeof settings / sizeof *settings; k++) {
            const sampling *s = &settings[k];
            const tr_sampler_params p = {.temperature = s->temperature, .top_k = s->top_k, .top_p = s->top_p, .seed = 1};
            tr_sampler *ref = NULL;
            assert_int_equal(tr_sampler_create(&p, &ref), TR_OK);
            int32_t first = -1;
            bool varied = false;
            for (int32_t pos = 0; pos < 40; pos++) {
                lm_row(logits, NV, 1000 + (uint64_t)pos);
                tr_sampler_reseed(ref, position_seed(s->seed, pos));
                const int32_t want = tr_sampler_sample(ref, logits, NV);
                float lp;
                assert_int_equal(sample_token(ts, logits, NV, s, pos, &lp, NULL, 0), want);
                const double lse = log_sum_exp(logits, NV);
                assert_float_equal(lp, (float)((double)logits[want] - lse), 1e-6);
                if (first < 0) first = want;
                varied = varied || want != first;
            }
            distinct_seen += varied;
            tr_sampler_free(ref);
        }
    assert_true(distinct_seen >= 12); /* the draws are not all one token */
    token_sampler_free(ts);
}

static void logit_bias_steers_not_reports(void **state) {
    (void)state;
    token_sampler *ts = token_sampler_create();
    assert_non_null(ts);
    float logits[NV];
    lm_row(logits, NV, 5);
    const int32_t best = tr_argmax(logits, NV);
    const double lse = log_sum_exp(logits, NV);
    const logit_bias force[] = {{300, 100.0f}, {NV + 5, 100.0f}}; /* the second is beyond n_vocab: skipped */
    sampling s = {.top_p = 1, .bias = force, .n_bias = 2};
    float lp;
    top_entry top[3];
    assert_int_equal(sample_token(ts, logits, NV, &s, 0, &lp, top, 3), 300);
    assert_float_equal(lp, (float)((double)logits[300] - lse), 1e-6); /* the model's own log-probability */
    assert_int_equal(top[0].id, best);                                  /* alternatives unbiased too */
    s.temperature = 1; /* sampled: +100 leaves nothing else */
    for (int32_t pos = 0; pos < 20; pos++) assert_int_equal(sample_token(ts, logits, NV, &s, pos, NULL, NULL, 0), 300);
    const logit_bias ban[] = {{best, -100.0f}};
    sampling g = {.top_p = 1, .bias = ban, .n_bias = 1};
    const int32_t second = sample_token(ts, logits, NV, &g, 0, NULL, NULL, 0);
    assert_int_not_equal(second, best);
    float copy[NV], row[NV];
    memcpy(copy, logits, sizeof copy);
    copy[best] = -INFINITY;
    assert_int_equal(second, tr_argmax(copy, NV));
    lm_row(row, NV, 5);
    assert_memory_equal(row, logits, sizeof row); /* the caller's row is left as it was */
    token_sampler_free(ts);
}

/* ---------------------------------------------------------------- over HTTP */

static tr_model *model;
static tr_server *srv;
static int port;

static int setup(void **state) {
    (void)state;
    tr_server_params p = tr_server_default_params();
    p.n_ctx = 128;
    return server_fixture_serve(p, &model, &srv, &port);
}

static int teardown(void **state) {
    (void)state;
    return server_fixture_free(model, srv);
}

/* A completion's token_ids as a string "a,b,c" (status 200 asserted); its reported seed in *seed (when not NULL). */
static void completion_ids_seed(const char *body, char *out, size_t cap, double *seed) {
    long status = 0;
    cJSON *j = http_post_json(port, "/v1/completions", body, &status);
    if (status != 200) fprintf(stderr, "%s\n", body);
    assert_int_equal(status, 200);
    const cJSON *ids = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "token_ids");
    out[0] = 0;
    for (const cJSON *t = ids ? ids->child : NULL; t; t = t->next)
        snprintf(out + strlen(out), cap - strlen(out), "%s%d", t == ids->child ? "" : ",", (int)t->valuedouble);
    const cJSON *s = cJSON_GetObjectItem(j, "seed");
    if (seed) {
        assert_true(cJSON_IsNumber(s));
        *seed = s->valuedouble;
    }
    cJSON_Delete(j);
}

static void completion_ids(const char *body, char *out, size_t cap) { completion_ids_seed(body, out, cap, NULL); }

static void seeds_over_http(void **state) {
    (void)state;
    char a[1024], b[1024];
    const char *unseeded = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1}";
    completion_ids(unseeded, a, sizeof a);
    completion_ids(unseeded, b, sizeof b);
    assert_string_not_equal(a, b); /* a fresh seed per request (24 draws at T=1 agreeing by chance: negligible) */
    const char *seeded = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1, \"seed\": 5}";
    completion_ids(seeded, a, sizeof a);
    completion_ids(seeded, b, sizeof b);
    assert_string_equal(a, b);
    /* the seed an unseeded request drew is reported, and sent back it replays the request */
    double seed = -1, again = -1;
    completion_ids_seed(unseeded, a, sizeof a, &seed);
    char replay[256];
    snprintf(replay, sizeof replay, "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1, "
             "\"seed\": %.0f}", seed);
    completion_ids_seed(replay, b, sizeof b, &again);
    assert_string_equal(a, b);
    assert_true(again == seed);
    /* top_k 1 is greedy whatever the seed */
    completion_ids("{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 1, \"top_k\": 1}", a,
                   sizeof a);
    completion_ids("{\"prompt\": \"Once upon a time\", \"max_tokens\": 12, \"temperature\": 0}", b, sizeof b);
    assert_string_equal(a, b);
}

/* One /v1/route/next at temperature 1.5, seed 42: the token drawn. */
static int32_t route_token(const char *session, int pos, const char *tokens) {
    char req[256];
    snprintf(req, sizeof req, "{\"session\": \"%s\", \"pos\": %d, \"tokens\": %s, \"temperature\": 1.5, "
             "\"seed\": 42}", session, pos, tokens);
    long status;
    cJSON *j = http_post_json(port, "/v1/route/next", req, &status);
    assert_int_equal(status, 200);
    const int32_t t = (int32_t)cJSON_GetObjectItem(j, "token")->valuedouble;
    cJSON_Delete(j);
    return t;
}

static void resync_draws_the_same(void **state) {
    (void)state;
    const int32_t a = route_token("smp", 0, "[1, 403, 261]");
    char next[32];
    snprintf(next, sizeof next, "[%d]", a);
    const int32_t b = route_token("smp", 3, next);
    /* a rollback resends positions: the same draws; another session with the same seed: the same too */
    assert_int_equal(route_token("smp", 3, next), b);
    assert_int_equal(route_token("smp", 0, "[1, 403, 261]"), a);
    assert_int_equal(route_token("smp2", 0, "[1, 403, 261]"), a);
    assert_int_equal(route_token("smp2", 3, next), b);
}

static void logit_bias_over_http(void **state) {
    (void)state;
    char ids[1024];
    completion_ids("{\"prompt\": [1, 403], \"max_tokens\": 6, \"temperature\": 0, \"logit_bias\": {\"300\": 100}}", ids,
                   sizeof ids);
    assert_string_equal(ids, "300,300,300,300,300,300");
    completion_ids("{\"prompt\": [1, 403], \"max_tokens\": 6, \"temperature\": 0.9, \"seed\": 3, "
                   "\"logit_bias\": {\"300\": 100}}", ids, sizeof ids);
    assert_string_equal(ids, "300,300,300,300,300,300");
    char greedy[1024];
    completion_ids("{\"prompt\": [1, 403], \"max_tokens\": 1, \"temperature\": 0}", greedy, sizeof greedy);
    char req[256];
    snprintf(req, sizeof req, "{\"prompt\": [1, 403], \"max_tokens\": 1, \"temperature\": 0, \"logit_bias\": "
             "{\"%s\": -100}}", greedy);
    completion_ids(req, ids, sizeof ids);
    assert_string_not_equal(ids, greedy); /* banned */
}

static void refused_fields(void **state) {
    (void)state;
    static const struct {
        const char *path, *body, *param, *code;
    } cases[] = {
        {"/v1/completions", "{\"prompt\": \"a\", \"suffix\": \"b\"}", "suffix", "unsupported_field"},
        {"/v1/completions", "{\"prompt\": \"a\", \"best_of\": 2}", "best_of", "unsupported_field"},
        {"/v1/completions", "{\"prompt\": \"a\", \"presence_penalty\": 0.5}", "presence_penalty", "unsupported_field"},
        {"/v1/completions", "{\"prompt\": \"a\", \"frequency_penalty\": -1}", "frequency_penalty", "unsupported_field"},
        {"/v1/completions", "{\"prompt\": \"a\", \"typo_field\": 1}", "typo_field", "unknown_field"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"512\": 1}}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"-1\": 1}}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"x\": 1}}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 101}}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"5\": \"1\"}}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": [[5, 1]]}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 1, \"5\": 2}}", "logit_bias", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"top_k\": 1.5}", "top_k", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", "stop", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stop\": [\"\"]}", "stop", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\", \"stop\": 5}", "stop", "bad_request"},
        {"/v1/completions", "{\"prompt\": \"a\\u0000b\"}", "prompt", "bad_request"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        long status;
        cJSON *j = http_post_json(port, cases[i].path, cases[i].body, &status);
        const cJSON *e = cJSON_GetObjectItem(j, "error");
        if (status != 400) fprintf(stderr, "case %zu: %s -> %ld\n", i, cases[i].body, status);
        assert_int_equal(status, 400);
        assert_string_equal(cJSON_GetObjectItem(e, "param")->valuestring, cases[i].param);
        assert_string_equal(cJSON_GetObjectItem(e, "code")->valuestring, cases[i].code);
        cJSON_Delete(j);
    }
    /* What is honoured as it stands: penalties of 0, a null suffix-free request with user and top_k -1. */
    char ids[256];
    completion_ids("{\"prompt\": \"a\", \"max_tokens\": 2, \"presence_penalty\": 0, \"frequency_penalty\": 0, "
                   "\"user\": \"u\", \"top_k\": -1, \"logit_bias\": {}}", ids, sizeof ids);
}

int main(void) {
    const struct CMUnitTest units[] = {
        cmocka_unit_test(draws_equal_the_library_sampler),
        cmocka_unit_test(logit_bias_steers_not_reports),
    };
    const struct CMUnitTest http[] = {
        cmocka_unit_test(seeds_over_http),
        cmocka_unit_test(resync_draws_the_same),
        cmocka_unit_test(logit_bias_over_http),
        cmocka_unit_test(refused_fields),
    };
    const int failed = cmocka_run_group_tests(units, NULL, NULL);
    return failed + cmocka_run_group_tests(http, setup, teardown);
}
