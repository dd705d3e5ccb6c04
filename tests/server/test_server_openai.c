/* test_server_openai.c — the OpenAI-compatible edges of the LLM server over HTTP, against an in-process server
 * (stories260K, a 64-token context): every error is {"error": {message, type, param, code}} (and keeps "field" and
 * the 409's "pos" for tokroute's clients); a batch of prompts is refused as such; max_tokens beyond the context and
 * temperature outside [0, 2] are 400s; a wrong method on a known route is a 405 with Allow; stream_options
 * include_usage ends the stream with a usage chunk without choices; "model" is what /v1/models lists and ids are
 * random. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <curl/curl.h>

#include "support/fixtures.h"
#include "support/http_call.h"
#include "tokroute.h"

static tr_model *model;
static tr_server *srv;
static int port;

static int setup(void **state) {
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &model) != TR_OK) return -1;
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    p.n_threads = 1;
    p.n_ctx = 64;
    if (tr_server_start(model, &p, &srv) != TR_OK) return -1;
    port = tr_server_port(srv);
    return 0;
}

static int teardown(void **state) {
    tr_server_free(srv);
    tr_model_free(model);
    return 0;
}

typedef http_reply reply;

/* method path [body]: the status, body and headers in r. */
static long call(const char *method, const char *path, const char *body, reply *r) {
    return http_fetch(NULL, port, method, path, body, NULL, r);
}

/* The reply's Allow header, "" when absent. */
static const char *allow_of(const reply *r) {
    const char *v = http_reply_header(r, "Allow");
    return v ? v : "";
}

static const char *str_of(const cJSON *obj, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(f) ? f->valuestring : NULL;
}

/* Checks an error reply's shape: status, type, param (NULL: JSON null) and code; returns the message (static). */
static const char *expect_error(const reply *r, long status, const char *type, const char *param, const char *code) {
    static char message[256];
    assert_int_equal(r->status, status);
    cJSON *j = cJSON_Parse(r->body);
    assert_non_null(j);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    assert_true(cJSON_IsObject(e));
    assert_non_null(str_of(e, "message"));
    snprintf(message, sizeof message, "%s", str_of(e, "message"));
    assert_string_equal(str_of(e, "type"), type);
    assert_string_equal(str_of(e, "code"), code);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "param");
    if (param) {
        assert_string_equal(str_of(e, "param"), param);
        assert_string_equal(str_of(e, "field"), param); /* what src/transport reads */
    } else {
        assert_true(cJSON_IsNull(p));
    }
    cJSON_Delete(j);
    return message;
}

static void test_error_shape(void **state) {
    reply r;
    call("POST", "/v1/completions", "{\"prompt\": 5}", &r);
    expect_error(&r, 400, "invalid_request_error", "prompt", "bad_request");
    call("POST", "/v1/completions", "{not json", &r);
    expect_error(&r, 400, "invalid_request_error", NULL, "bad_request");
    call("POST", "/v1/route/next", "{\"session\": \"t\", \"pos\": 0, \"tokens\": [1, 512]}", &r);
    expect_error(&r, 400, "invalid_request_error", "tokens", "bad_request");
    call("GET", "/v1/nothing", NULL, &r);
    expect_error(&r, 404, "not_found_error", NULL, "not_found");
    /* 409 keeps the server's pos at the top level */
    call("POST", "/v1/route/next", "{\"session\": \"never\", \"pos\": 3, \"tokens\": [5]}", &r);
    expect_error(&r, 409, "invalid_request_error", "pos", "pos_mismatch");
    cJSON *j = cJSON_Parse(r.body);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "pos")));
    cJSON_Delete(j);
}

static void test_batch_refused(void **state) {
    reply r;
    const char *bodies[] = {"{\"prompt\": [\"a\", \"b\"]}", "{\"prompt\": [[1, 2], [3, 4]]}"};
    for (int i = 0; i < 2; i++) {
        call("POST", "/v1/completions", bodies[i], &r);
        const char *msg = expect_error(&r, 400, "invalid_request_error", "prompt", "bad_request");
        assert_non_null(strstr(msg, "batches are not supported"));
        assert_null(strstr(msg, "token id"));
    }
    /* a batch of one is one prompt */
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [\"Once\"], \"max_tokens\": 2}", &r), 200);
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [[1, 403]], \"max_tokens\": 2}", &r), 200);
}

static void test_limits(void **state) {
    reply r;
    /* 4 prompt tokens in a 64-token context: 60 may be generated, 61 is refused */
    call("POST", "/v1/completions", "{\"prompt\": [1, 403, 407, 261], \"max_tokens\": 61}", &r);
    const char *msg = expect_error(&r, 400, "invalid_request_error", "max_tokens", "bad_request");
    assert_non_null(strstr(msg, "60"));
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [1, 403, 407, 261], \"max_tokens\": 60, "
                                                     "\"temperature\": 0}", &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(u, "completion_tokens")->valuedouble, 60);
    cJSON_Delete(j);
    /* the default max_tokens (16) is cut to what fits: 60 prompt tokens leave 4 */
    char body[1024];
    int at = snprintf(body, sizeof body, "{\"prompt\": [1");
    for (int i = 1; i < 60; i++) at += snprintf(body + at, sizeof body - (size_t)at, ", 300");
    snprintf(body + at, sizeof body - (size_t)at, "]}");
    assert_int_equal(call("POST", "/v1/completions", body, &r), 200);
    j = cJSON_Parse(r.body);
    u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(u, "completion_tokens")->valuedouble, 4);
    cJSON_Delete(j);
    /* temperature in [0, 2] */
    const char *bad[] = {"2.5", "-0.1", "100"};
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"prompt\": [1], \"max_tokens\": 1, \"temperature\": %s}", bad[i]);
        call("POST", "/v1/completions", body, &r);
        expect_error(&r, 400, "invalid_request_error", "temperature", "bad_request");
    }
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [1], \"max_tokens\": 1, \"temperature\": 2}", &r),
                     200);
}

static void test_method_not_allowed(void **state) {
    reply r;
    const struct {
        const char *method, *path, *allow;
    } cases[] = {{"GET", "/v1/completions", "POST"},     {"DELETE", "/v1/completions", "POST"},
                 {"GET", "/v1/route/next", "POST"},      {"POST", "/health", "GET"},
                 {"PUT", "/metrics", "GET"},             {"POST", "/v1/models", "GET"},
                 {"GET", "/v1/route/sessions/x", "DELETE"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        call(cases[i].method, cases[i].path, NULL, &r);
        expect_error(&r, 405, "invalid_request_error", NULL, "method_not_allowed");
        assert_string_equal(allow_of(&r), cases[i].allow);
    }
    assert_int_equal(call("GET", "/v1/nothing", NULL, &r), 404);
    assert_string_equal(allow_of(&r), "");
}

/* The data: events of a streamed reply, parsed (the last one, [DONE], as NULL); returns the count. */
static int sse_events(char *body, cJSON **events, int cap) {
    int n = 0;
    for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6) != 0) continue;
        assert_true(n < cap);
        events[n++] = strcmp(line + 6, "[DONE]") == 0 ? NULL : cJSON_Parse(line + 6);
    }
    return n;
}

static void test_include_usage(void **state) {
    reply r;
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [1, 403], \"max_tokens\": 3, \"stream\": true, "
                                                     "\"stream_options\": {\"include_usage\": true}}", &r), 200);
    cJSON *ev[16];
    const int n = sse_events(r.body, ev, 16);
    assert_int_equal(n, 5); /* 3 tokens, the usage chunk, [DONE] */
    assert_null(ev[4]);
    for (int i = 0; i < 3; i++) {
        assert_non_null(ev[i]);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ev[i], "choices")), 1);
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ev[i], "usage")));
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(ev[3], "choices");
    assert_true(cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 0);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(ev[3], "usage");
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(u, "completion_tokens")->valuedouble, 3);
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens")->valuedouble, 2);
    for (int i = 0; i < 4; i++) cJSON_Delete(ev[i]);
    /* without it: usage on the last token chunk, as before */
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [1, 403], \"max_tokens\": 2, \"stream\": true}", &r),
                     200);
    assert_int_equal(sse_events(r.body, ev, 16), 3);
    assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ev[1], "usage")));
    cJSON_Delete(ev[0]);
    cJSON_Delete(ev[1]);
    /* stream_options without stream, or of the wrong shape */
    call("POST", "/v1/completions", "{\"prompt\": [1], \"stream_options\": {\"include_usage\": true}}", &r);
    expect_error(&r, 400, "invalid_request_error", "stream_options", "bad_request");
    call("POST", "/v1/completions", "{\"prompt\": [1], \"stream\": true, \"stream_options\": {\"include_usage\": 1}}",
         &r);
    expect_error(&r, 400, "invalid_request_error", "stream_options", "bad_request");
    /* unknown members are refused, as on the device (serve accepted them) */
    call("POST", "/v1/completions", "{\"prompt\": [1], \"stream\": true, \"stream_options\": {\"include_usage\": true, "
         "\"continuous_usage_stats\": true}}", &r);
    assert_non_null(strstr(expect_error(&r, 400, "invalid_request_error", "stream_options", "unknown_field"),
                           "'continuous_usage_stats'"));
}

/* Every chunk's choice has its logprobs member, null where no token was generated: a streamed max_tokens 0 with
 * logprobs left it out. */
static void test_stream_choice_shape(void **state) {
    reply r;
    assert_int_equal(call("POST", "/v1/completions", "{\"prompt\": [1], \"max_tokens\": 0, \"logprobs\": 1, "
                          "\"stream\": true}", &r), 200);
    assert_non_null(strstr(r.body, "\"logprobs\":null,\"finish_reason\":\"length\""));
    assert_non_null(strstr(r.body, "\"index\":0,\"text\":\"\""));
}

/* Range errors say it plainly, integers as integers (was "in [0, 1.04858e+06] (an integer)"). */
static void test_plain_range_errors(void **state) {
    reply r;
    call("POST", "/v1/completions", "{\"prompt\": [1], \"max_tokens\": -1}", &r);
    assert_string_equal(expect_error(&r, 400, "invalid_request_error", "max_tokens", "bad_request"),
                        "'max_tokens' must be an integer of at least 0, not -1");
    call("POST", "/v1/completions", "{\"prompt\": [1], \"seed\": 1.5}", &r);
    assert_string_equal(expect_error(&r, 400, "invalid_request_error", "seed", "bad_request"),
                        "'seed' must be an integer from 0 to 9007199254740992, not 1.5");
}

static void test_model_and_ids(void **state) {
    reply r;
    assert_int_equal(call("GET", "/v1/models", NULL, &r), 200);
    cJSON *models = cJSON_Parse(r.body);
    const cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(models, "data"), 0);
    const char *name = str_of(m0, "id");
    assert_non_null(name);
    assert_string_equal(str_of(m0, "object"), "model");
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m0, "meta"), "n_vocab")
                         ->valuedouble, 512);
    assert_int_equal(call("GET", "/health", NULL, &r), 200);
    cJSON *h = cJSON_Parse(r.body);
    assert_string_equal(str_of(h, "model"), name);
    cJSON_Delete(h);
    char ids[2][64];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(call("POST", "/v1/completions", "{\"model\": \"whatever\", \"prompt\": [1], \"max_tokens\": 1}",
                              &r), 200);
        cJSON *c = cJSON_Parse(r.body);
        assert_string_equal(str_of(c, "model"), name);
        const char *id = str_of(c, "id");
        assert_non_null(id);
        /* cmpl- and 24 hex digits: random, so unique across restarts too */
        assert_int_equal(strlen(id), 29);
        assert_int_equal(strncmp(id, "cmpl-", 5), 0);
        for (const char *p = id + 5; *p; p++) assert_true(isxdigit((unsigned char)*p));
        snprintf(ids[i], sizeof ids[i], "%s", id);
        cJSON_Delete(c);
    }
    assert_string_not_equal(ids[0], ids[1]);
    cJSON_Delete(models);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_shape),       cmocka_unit_test(test_batch_refused),
        cmocka_unit_test(test_limits),            cmocka_unit_test(test_method_not_allowed),
        cmocka_unit_test(test_include_usage),     cmocka_unit_test(test_plain_range_errors),
        cmocka_unit_test(test_stream_choice_shape),     cmocka_unit_test(test_model_and_ids),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
