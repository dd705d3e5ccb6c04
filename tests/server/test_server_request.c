/* test_server_request.c — route_request_parse on valid and hostile bodies: every malformed or out-of-range input is
 * refused with 400 and the field at fault, nothing is read out of bounds (this runs under ASan in make test), and
 * a valid body yields exactly its fields. Also the sampler: greedy picks the lowest id among equal maxima, n_vocab
 * restricts the choice, and a seeded draw depends only on (seed, position). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/server_internal.h"

enum { NV = 512, NCTX = 256 };

static void expect_bad(const char *body, const char *field) {
    route_request r;
    api_error e = {0};
    if (route_request_parse(body, strlen(body), NV, NCTX, &r, &e)) fail_msg("accepted: %s", body);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "bad_request");
    if (strcmp(e.field, field) != 0) fail_msg("%s: field '%s', expected '%s' (%s)", body, e.field, field, e.message);
    assert_null(r.tokens);
}

static void test_valid(void **state) {
    const char *body = "{\"session\":\"dev1-7f3a\",\"pos\":5,\"tokens\":[1,403,511],\"top_logprobs\":2,"
                       "\"n_vocab\":500,\"lookahead\":3,\"temperature\":0.7,\"top_k\":40,\"top_p\":0.9,\"seed\":99,"
                       "\"stream\":true}";
    route_request r;
    api_error e = {0};
    assert_true(route_request_parse(body, strlen(body), NV, NCTX, &r, &e));
    assert_string_equal(r.session, "dev1-7f3a");
    assert_int_equal(r.pos, 5);
    assert_int_equal(r.n_tokens, 3);
    assert_int_equal(r.tokens[2], 511);
    assert_int_equal(r.top_logprobs, 2);
    assert_int_equal(r.n_vocab, 500);
    assert_int_equal(r.lookahead, 3);
    assert_int_equal(r.samp.top_k, 40);
    assert_true(r.samp.temperature > 0.69f && r.samp.temperature < 0.71f);
    assert_int_equal(r.samp.seed, 99);
    assert_true(r.stream);
    route_request_free(&r);
    /* Defaults; empty tokens are fine with pos > 0. */
    body = "{\"session\":\"a\",\"pos\":3,\"tokens\":[]}";
    assert_true(route_request_parse(body, strlen(body), NV, NCTX, &r, &e));
    assert_int_equal(r.n_tokens, 0);
    assert_int_equal(r.n_vocab, NV);
    assert_int_equal(r.top_logprobs, 0);
    assert_true(r.samp.temperature <= 0);
    assert_false(r.stream);
    route_request_free(&r);
    body = "{\"session\":\"a\",\"pos\":3,\"tokens\":[],\"stream\":false}";
    assert_true(route_request_parse(body, strlen(body), NV, NCTX, &r, &e));
    assert_false(r.stream);
    route_request_free(&r);
    /* The body need not be NUL-terminated: only len bytes are read. */
    char buf[64];
    memcpy(buf, "{\"session\":\"a\",\"pos\":0,\"tokens\":[7]}XXXXXXXX", 44);
    assert_true(route_request_parse(buf, 36, NV, NCTX, &r, &e));
    assert_int_equal(r.tokens[0], 7);
    route_request_free(&r);
}

/* A field not in the protocol is refused by name (it was ignored: a misspelt "lookahed" ran without lookahead). */
static void test_unknown_field(void **state) {
    static const char *const bodies[] = {"{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"lookahed\":3}",
                                         "{\"lookahed\":3,\"session\":\"a\",\"pos\":0,\"tokens\":[1]}"};
    for (int i = 0; i < 2; i++) {
        route_request r;
        api_error e = {0};
        if (route_request_parse(bodies[i], strlen(bodies[i]), NV, NCTX, &r, &e)) fail_msg("accepted: %s", bodies[i]);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.code, "unknown_field");
        assert_string_equal(e.field, "lookahed");
        assert_non_null(strstr(e.message, "unknown field 'lookahed'"));
        assert_null(r.tokens);
    }
}

static void test_hostile(void **state) {
    expect_bad("", "");
    expect_bad("{", "");
    expect_bad("null", "");
    expect_bad("[]", "");
    expect_bad("\"session\"", "");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1]", "");
    expect_bad("{\"pos\":0,\"tokens\":[1]}", "session");
    expect_bad("{\"session\":\"\",\"pos\":0,\"tokens\":[1]}", "session");
    expect_bad("{\"session\":\"a b\",\"pos\":0,\"tokens\":[1]}", "session");
    expect_bad("{\"session\":\"../etc\",\"pos\":0,\"tokens\":[1]}", "session");
    expect_bad("{\"session\":\"a\\u0000b\",\"pos\":0,\"tokens\":[1]}", "");
    expect_bad("{\"session\":7,\"pos\":0,\"tokens\":[1]}", "session");
    expect_bad("{\"session\":\"a\",\"tokens\":[1]}", "pos");
    expect_bad("{\"session\":\"a\",\"pos\":\"0\",\"tokens\":[1]}", "pos");
    expect_bad("{\"session\":\"a\",\"pos\":-1,\"tokens\":[1]}", "pos");
    expect_bad("{\"session\":\"a\",\"pos\":0.5,\"tokens\":[1]}", "pos");
    expect_bad("{\"session\":\"a\",\"pos\":1e300,\"tokens\":[1]}", "pos");
    expect_bad("{\"session\":\"a\",\"pos\":257,\"tokens\":[]}", "pos");
    expect_bad("{\"session\":\"a\",\"pos\":0}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":{}}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[512]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1,-1]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1,2.5]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1,null]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[[1]]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1e10]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":250,\"tokens\":[1,1,1,1,1,1,1]}", "tokens");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"top_logprobs\":21}", "top_logprobs");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"top_logprobs\":true}", "top_logprobs");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"n_vocab\":0}", "n_vocab");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"n_vocab\":513}", "n_vocab");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"lookahead\":17}", "lookahead");
    expect_bad("{\"session\":\"a\",\"pos\":250,\"tokens\":[1],\"lookahead\":16}", "lookahead");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"temperature\":-1}", "temperature");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"temperature\":\"x\"}", "temperature");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"top_p\":1.5}", "top_p");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"top_k\":-3}", "top_k");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"seed\":-3}", "seed");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"stream\":1}", "stream");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"stream\":\"true\"}", "stream");
    expect_bad("{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"stream\":null}", "stream");
    /* Deep nesting and long garbage must not crash. */
    char *deep = malloc(200001);
    memset(deep, '[', 200000);
    deep[200000] = 0;
    expect_bad(deep, "");
    free(deep);
}

static void test_sampler(void **state) {
    float logits[8] = {0, 3, 1, 3, -2, 2, 0, 0};
    const sampling greedy = {.top_p = 1};
    float lp;
    token_sampler *ts = token_sampler_create();
    assert_non_null(ts);
    top_entry top[4];
    assert_int_equal(sample_token(ts, logits, 8, &greedy, 0, &lp, top, 4), 1);
    assert_int_equal(top[0].id, 1);
    assert_int_equal(top[1].id, 3);
    assert_int_equal(top[2].id, 5);
    assert_true(lp < 0 && top[0].logprob >= top[1].logprob && top[1].logprob > top[2].logprob);
    assert_int_equal(sample_token(ts, logits, 3, &greedy, 0, &lp, NULL, 0), 1);
    assert_int_equal(sample_token(ts, logits, 1, &greedy, 0, &lp, NULL, 0), 0); /* n_vocab restricts */
    const sampling hot = {.temperature = 5.0f, .top_p = 1, .seed = 1234};
    int seen[8] = {0};
    for (int pos = 0; pos < 200; pos++) {
        const int32_t a = sample_token(ts, logits, 8, &hot, pos, &lp, NULL, 0);
        assert_int_equal(sample_token(ts, logits, 8, &hot, pos, &lp, NULL, 0), a); /* same (seed, position) */
        seen[a]++;
    }
    int distinct = 0;
    for (int i = 0; i < 8; i++) distinct += seen[i] > 0;
    assert_true(distinct >= 4);
    const sampling k2 = {.temperature = 5.0f, .top_k = 2, .top_p = 1, .seed = 1234};
    for (int pos = 0; pos < 100; pos++) {
        const int32_t a = sample_token(ts, logits, 8, &k2, pos, &lp, NULL, 0);
        assert_true(a == 1 || a == 3);
    }
    token_sampler_free(ts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_unknown_field),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
