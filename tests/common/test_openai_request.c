/* test_openai_request.c — the OpenAI request layer both HTTP servers share (src/common/openai_request.c): one set of
 * rules and error texts for completions and chat completions bodies, checked without a server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "common/openai_request.h"

static const char *const routing[] = {"mode", "threshold", NULL};
static const oai_endpoint completions = {.chat = false, .server = "tokroute test", .extra_fields = routing,
                                         .n_vocab = 100, .min_max_tokens = 1};
static const oai_endpoint chat = {.chat = true, .server = "tokroute test", .n_vocab = 100, .min_max_tokens = 1};

/* Parses body, expecting a 400 on param; returns the message (static). */
static const char *refused(const oai_endpoint *ep, const char *body, const char *param, const char *code) {
    static char message[sizeof(((oai_error *)0)->message)];
    oai_request r;
    oai_error e;
    const bool ok = oai_request_parse(body, strlen(body), ep, &r, &e);
    oai_request_free(&r);
    if (ok) fail_msg("accepted: %s", body);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, param);
    if (code) assert_string_equal(e.code, code);
    snprintf(message, sizeof message, "%s", e.message);
    return message;
}

static void accepted(const oai_endpoint *ep, const char *body, oai_request *r) {
    oai_error e;
    if (!oai_request_parse(body, strlen(body), ep, r, &e)) fail_msg("refused %s: %s", body, e.message);
}

/* Range errors say it plainly, integers as integers ("in [1, 1.07374e+09]" before). */
static void test_plain_ranges(void **state) {
    (void)state;
    assert_string_equal(refused(&completions, "{\"prompt\":\"a\",\"max_tokens\":-1}", "max_tokens", "bad_request"),
                        "'max_tokens' must be an integer of at least 1, not -1");
    assert_string_equal(refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                                       "\"max_completion_tokens\":2.5}", "max_completion_tokens", NULL),
                        "'max_completion_tokens' must be an integer of at least 1, not 2.5");
    assert_string_equal(refused(&completions, "{\"prompt\":\"a\",\"seed\":-1}", "seed", NULL),
                        "'seed' must be an integer from 0 to 9007199254740992, not -1");
    assert_string_equal(refused(&completions, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature", NULL),
                        "'temperature' must be a number from 0 to 2, not a string");
    assert_string_equal(refused(&completions, "{\"prompt\":\"a\",\"n\":3}", "n", NULL),
                        "'n' must be 1: one choice per request (send 3 requests)");
    assert_string_equal(refused(&completions, "{\"prompt\":[1,100]}", "prompt", NULL),
                        "prompt[1] is not a token id from 0 to 99");
}

/* max_tokens and max_completion_tokens: one limit, under either name. */
static void test_one_limit(void **state) {
    (void)state;
    oai_request r;
    accepted(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":7}", &r);
    assert_int_equal(r.max_tokens, 7);
    assert_string_equal(r.max_tokens_field, "max_completion_tokens");
    oai_request_free(&r);
    accepted(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":7,"
                    "\"max_completion_tokens\":7}", &r);
    assert_int_equal(r.max_tokens, 7);
    oai_request_free(&r);
    accepted(&completions, "{\"prompt\":\"a\"}", &r);
    assert_int_equal(r.max_tokens, -1);
    oai_request_free(&r);
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":4,\"max_completion_tokens\":5}",
            "max_completion_tokens", "bad_request");
    /* a completions-only endpoint has no max_completion_tokens */
    refused(&completions, "{\"prompt\":\"a\",\"max_completion_tokens\":5}", "max_completion_tokens", "unknown_field");
    const oai_endpoint scoring = {.chat = false, .server = "s", .n_vocab = 100, .min_max_tokens = 0};
    accepted(&scoring, "{\"prompt\":\"a\",\"max_tokens\":0}", &r);
    assert_int_equal(r.max_tokens, 0);
    oai_request_free(&r);
}

/* Unknown fields are refused by name and listed; OpenAI's unimplemented ones (and the other server's own) are
 * "unsupported"; every message is whole. */
static void test_fields(void **state) {
    (void)state;
    const char *msg = refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"bogus\":1}", "bogus",
                              "unknown_field");
    assert_non_null(strstr(msg, "max_completion_tokens"));
    assert_int_equal(msg[strlen(msg) - 1], ')'); /* not cut */
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[]}", "tools", "unsupported_field");
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"mode\":\"slm\"}", "mode",
            "unsupported_field");
    refused(&completions, "{\"prompt\":\"a\",\"echo\":true}", "echo", "unsupported_field");
    refused(&completions, "{\"prompt\":\"a\",\"presence_penalty\":1}", "presence_penalty", "unsupported_field");
    oai_request r;
    accepted(&completions, "{\"prompt\":\"a\",\"mode\":\"slm\",\"user\":\"u\",\"presence_penalty\":0}", &r);
    assert_string_equal(r.prompt_text, "a");
    oai_request_free(&r);
    refused(&completions, "{\"prompt\":\"a\",\"user\":5}", "user", "bad_request");
    /* the longest refusal: an unknown field on an endpoint with many fields, still whole */
    static const char *const many[] = {"mode", "threshold", "policy", "target_routed", "max_routed", "echo",
                                       "prompt_logprobs", "return_token_ids", "return_tokens_as_token_ids", NULL};
    const oai_endpoint big = {.chat = true, .server = "tokroute serve", .extra_fields = many, .n_vocab = 100,
                              .min_max_tokens = 1};
    msg = refused(&big, "{\"a_rather_long_field_name_that_nobody_would_send_on_purpose_really\":1}",
                  "a_rather_long_field_name_that_nobody_would_send_on_purpose_really", "unknown_field");
    assert_non_null(strstr(msg, "return_tokens_as_token_ids)"));
    oai_error e;
    oai_no_chat_template(&e, "tokroute serve", "a-model-with-a-fairly-long-name-Q4_K_M.gguf");
    const char *tail = "or send the prompt as text to /v1/completions";
    assert_string_equal(e.message + strlen(e.message) - strlen(tail), tail);
}

/* stream_options: only with stream, only include_usage (unknown members refused on both servers). */
static void test_stream_options(void **state) {
    (void)state;
    refused(&completions, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", "stream_options", NULL);
    const char *msg = refused(&completions, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"x\":1}}",
                              "stream_options", "unknown_field");
    assert_non_null(strstr(msg, "'x'"));
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream\":true,"
                   "\"stream_options\":{\"include_usage\":1}}", "stream_options", "bad_request");
    oai_request r;
    accepted(&completions, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &r);
    assert_true(r.stream && r.include_usage);
    oai_request_free(&r);
}

/* Messages: name is accepted (and not rendered) on both servers; tool calls are unsupported. */
static void test_messages(void **state) {
    (void)state;
    oai_request r;
    accepted(&chat, "{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\",\"name\":\"ops\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}],"
                    "\"name\":\"ann\"}]}", &r);
    assert_int_equal(r.chat.n, 2);
    assert_string_equal(r.chat.messages[0].role, "system");
    assert_string_equal(r.chat.messages[1].content, "ab");
    oai_request_free(&r);
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":1}]}", "messages[0].name", NULL);
    refused(&chat, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":[]}]}",
            "messages[0].tool_calls", "unsupported_field");
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"colour\":1}]}", "messages[0].colour",
            "unknown_field");
}

/* logit_bias: ids in the vocabulary, each once ("5" and "05" are one id), biases from -100 to 100. */
static void test_logit_bias(void **state) {
    (void)state;
    oai_request r;
    accepted(&completions, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":10,\"99\":-100,\"0\":1}}", &r);
    assert_int_equal(r.n_bias, 3);
    assert_int_equal(r.bias[1].id, 99);
    oai_request_free(&r);
    assert_string_equal(refused(&completions, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":1,\"7\":1,\"05\":2}}",
                                "logit_bias", NULL), "logit_bias names token 5 twice");
    refused(&completions, "{\"prompt\":\"a\",\"logit_bias\":{\"100\":1}}", "logit_bias", NULL);
    refused(&completions, "{\"prompt\":\"a\",\"logit_bias\":{\"-1\":1}}", "logit_bias", NULL);
    refused(&completions, "{\"prompt\":\"a\",\"logit_bias\":{\"1\":101}}", "logit_bias", NULL);
    /* every id of the vocabulary once: accepted; one more entry is a duplicate */
    char body[2048];
    int at = snprintf(body, sizeof body, "{\"prompt\":\"a\",\"logit_bias\":{");
    for (int i = 99; i >= 0; i--) at += snprintf(body + at, sizeof body - (size_t)at, "%s\"%d\":1", i < 99 ? "," : "", i);
    snprintf(body + at, sizeof body - (size_t)at, "}}");
    accepted(&completions, body, &r);
    assert_int_equal(r.n_bias, 100);
    oai_request_free(&r);
}

/* No seed: a fresh draw each time (within what JSON carries exactly), reported; a seed: kept. */
static void test_seed(void **state) {
    (void)state;
    oai_request a, b;
    accepted(&completions, "{\"prompt\":\"a\"}", &a);
    accepted(&completions, "{\"prompt\":\"a\"}", &b);
    assert_false(a.seed_given);
    assert_true(a.seed != b.seed); /* 53 random bits each: equal once in 2^53 */
    assert_true(a.seed < (UINT64_C(1) << 53));
    oai_request_free(&a);
    oai_request_free(&b);
    accepted(&completions, "{\"prompt\":\"a\",\"seed\":9007199254740992}", &a);
    assert_true(a.seed_given);
    assert_true(a.seed == UINT64_C(9007199254740992));
    oai_request_free(&a);
}

/* The reported seed is the integer itself: cJSON wrote 8123456789012345 as 8.12345678901235e+15, a different seed. */
static void test_seed_printed_exactly(void **state) {
    (void)state;
    static const uint64_t seeds[] = {8123456789012345u, 9007199254740992u, 8100000000000001u, 0, 42};
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        cJSON *head = oai_reply_head("cmpl-x", "text_completion", 1.0, "m", seeds[i]);
        char *json = cJSON_PrintUnformatted(head), *end = NULL;
        const char *at = strstr(json, "\"seed\":");
        assert_non_null(at);
        const unsigned long long got = strtoull(at + 7, &end, 10);
        if (got != seeds[i] || (*end != ',' && *end != '}')) fail_msg("seed %llu written as %s", (unsigned long long)seeds[i], at);
        cJSON_free(json);
        cJSON_Delete(head);
    }
}

/* logprobs: chat true/false + top_logprobs (which needs it); completions a count, 0 included. */
static void test_logprobs(void **state) {
    (void)state;
    oai_request r;
    accepted(&completions, "{\"prompt\":\"a\",\"logprobs\":0}", &r);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 0);
    oai_request_free(&r);
    accepted(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":3}", &r);
    assert_true(r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    oai_request_free(&r);
    refused(&chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":0}", "top_logprobs", NULL);
    refused(&completions, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", NULL);
    refused(&completions, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", NULL);
}

static void test_prompt_shapes(void **state) {
    (void)state;
    oai_request r;
    accepted(&completions, "{\"prompt\":[[1,2,3]]}", &r);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 3);
    oai_request_free(&r);
    accepted(&completions, "{\"prompt\":[\"hi\"]}", &r);
    assert_string_equal(r.prompt_text, "hi");
    oai_request_free(&r);
    refused(&completions, "{\"prompt\":[\"a\",\"b\"]}", "prompt", NULL);
    refused(&completions, "{\"prompt\":[]}", "prompt", NULL);
    refused(&completions, "{\"prompt\":\"a\\u0000b\"}", "prompt", NULL);
    oai_error e;
    assert_false(oai_request_parse("[1]", 3, &completions, &r, &e));
    oai_request_free(&r);
    assert_int_equal(e.status, 400);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_ranges),   cmocka_unit_test(test_one_limit), cmocka_unit_test(test_fields),
        cmocka_unit_test(test_stream_options), cmocka_unit_test(test_messages),  cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_seed), cmocka_unit_test(test_seed_printed_exactly),           cmocka_unit_test(test_logprobs),  cmocka_unit_test(test_prompt_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
