/* test_ui_openai.c — the device server's OpenAI-compatible API (tr_ui: /v1/chat/completions, /v1/completions,
 * /v1/models) over real HTTP (libcurl on 127.0.0.1): every field checked with a 400 in OpenAI's error shape naming
 * it (unknown fields too), chat without a template, 404/405 (with Allow) in the same shape, the key (Bearer, any
 * case of the scheme; required off loopback), the bounded queue (a waiting request, then 429 with Retry-After), a
 * client that hangs up cancelling its generation, and the reply shapes (usage with the routed counts equal to the
 * page's own summary for the same request). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support/fixtures.h"
#include "support/raw_http.h"
#include "support/ui_fixture.h"
#include "tokroute.h"

/* The fixture's UI with ChatML, 256 tokens at most and a model name. */
static tr_ui_params params(void) {
    tr_ui_params p = ui_fixture_params();
    p.chat_template = TR_CHAT_CHATML;
    p.max_tokens = 256;
    p.slm_name = "device-slm";
    return p;
}

typedef struct reply {
    long status;
    char *body, *headers;
    size_t len, hlen;
    cJSON *json;
} reply;

static size_t grow(char **buf, size_t *len, const char *p, size_t n) {
    char *d = realloc(*buf, *len + n + 1);
    if (!d) return 0;
    memcpy(d + *len, p, n);
    *buf = d;
    *len += n;
    d[*len] = 0;
    return n;
}
static size_t on_body(char *p, size_t size, size_t n, void *u) { reply *r = u; return grow(&r->body, &r->len, p, size * n); }
static size_t on_header(char *p, size_t size, size_t n, void *u) {
    reply *r = u;
    return grow(&r->headers, &r->hlen, p, size * n);
}

/* method NULL: GET, or POST when body is given. auth NULL: no Authorization header. */
static reply request(const tr_ui *ui, const char *method, const char *path, const char *body, const char *auth,
                     long timeout_s) {
    reply r = {0};
    char url[160], hdr[160];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", (int)tr_ui_port(ui), path);
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (auth) {
        snprintf(hdr, sizeof hdr, "Authorization: %s", auth);
        h = curl_slist_append(h, hdr);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    if (method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    r.json = r.body ? cJSON_Parse(r.body) : NULL;
    return r;
}

static void reply_free(reply *r) {
    free(r->body);
    free(r->headers);
    cJSON_Delete(r->json);
}

static const char *str(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(f) ? f->valuestring : NULL;
}
static double num(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(f) ? f->valuedouble : -1;
}

/* The reply is an error of this status in OpenAI's shape, naming param (NULL: null) with a message. */
static void assert_error(const reply *r, long status, const char *param, const char *code) {
    if (r->status != status) fprintf(stderr, "got %ld: %s\n", r->status, r->body ? r->body : "");
    assert_int_equal(r->status, status);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r->json, "error");
    assert_true(cJSON_IsObject(e));
    assert_int_equal(cJSON_GetArraySize(e), 4);
    assert_non_null(str(e, "message"));
    assert_true(strlen(str(e, "message")) > 5);
    assert_non_null(str(e, "type"));
    if (status == 400) assert_string_equal(str(e, "type"), "invalid_request_error");
    if (status == 401) assert_string_equal(str(e, "type"), "authentication_error");
    if (status == 429) assert_string_equal(str(e, "type"), "rate_limit_error");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "param");
    if (param) {
        assert_true(cJSON_IsString(p));
        assert_string_equal(p->valuestring, param);
    } else {
        assert_true(cJSON_IsNull(p));
    }
    if (code) assert_string_equal(str(e, "code"), code);
}

static void bad(const tr_ui *ui, const char *path, const char *body, const char *param, const char *code) {
    reply r = request(ui, NULL, path, body, NULL, 30);
    if (r.status != 400) fprintf(stderr, "%s %s\n", path, body);
    assert_error(&r, 400, param, code);
    reply_free(&r);
}

static void test_fields_refused(void **state) {
    tr_ui_params p = params();
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    const char *C = "/v1/completions", *CH = "/v1/chat/completions";
    bad(ui, C, "{\"prompt\":\"a\",\"foo\":1}", "foo", "unknown_field");
    bad(ui, C, "{\"prompt\":\"a\",\"frequency_penalty\":0.5}", "frequency_penalty", "unsupported_field");
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logit_bias\":{}}", "logit_bias", "unsupported_field");
    bad(ui, C, "{\"prompt\":\"a\",\"echo\":true}", "echo", "unsupported_field");
    bad(ui, C, "{\"prompt\":\"a\",\"best_of\":2}", "best_of", "unsupported_field");
    bad(ui, C, "{\"prompt\":\"a\",\"temperature\":2.5}", "temperature", "bad_request");
    bad(ui, C, "{\"prompt\":\"a\",\"temperature\":-0.1}", "temperature", "bad_request");
    bad(ui, C, "{\"prompt\":\"a\",\"top_p\":1.5}", "top_p", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"seed\":-1}", "seed", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"seed\":1.5}", "seed", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"n\":2}", "n", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"stop\":\"\"}", "stop", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"stop\":[1]}", "stop", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"logprobs\":3}", "logprobs", "unsupported_field");
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":1}", "logprobs", NULL);
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":2}",
        "top_logprobs", NULL);
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":0}", "top_logprobs", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"max_tokens\":300}", "max_tokens", NULL); /* above the server's --max-tokens */
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":4,\"max_completion_tokens\":5}",
        "max_completion_tokens", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"mode\":\"both\"}", "mode", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"threshold\":1.5}", "threshold", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"threshold\":\"0.5\"}", "threshold", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"policy\":\"best\"}", "policy", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"policy\":\"router\"}", "policy", NULL); /* no router file */
    bad(ui, C, "{\"prompt\":\"a\",\"target_routed\":2}", "target_routed", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"target_routed\":0.2,\"max_routed\":0.1}", "max_routed", NULL); /* cap below target */
    bad(ui, C, "{\"prompt\":\"a\",\"max_routed\":-1}", "max_routed", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", "stream_options", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"x\":1}}", "stream_options", NULL);
    bad(ui, C, "{\"prompt\":\"a\",\"model\":42}", "model", NULL);
    bad(ui, C, "{\"prompt\":[\"a\",\"b\"]}", "prompt", NULL);
    bad(ui, C, "{\"prompt\":[1,99999]}", "prompt", NULL);
    bad(ui, C, "{\"prompt\":42}", "prompt", NULL);
    bad(ui, C, "{}", "prompt", NULL);
    bad(ui, C, "{\"prompt\":\"a\\u0000b\"}", "prompt", NULL);
    bad(ui, C, "{\"prompt\":", NULL, NULL);
    bad(ui, C, "[1]", NULL, NULL);
    bad(ui, CH, "{\"messages\":[]}", "messages", NULL);
    bad(ui, CH, "{\"messages\":[{\"role\":\"tool\",\"content\":\"a\"}]}", "messages[0].role", NULL);
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":5}]}", "messages[0].name", NULL);
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[]}]}", "messages[0].tool_calls",
        "unsupported_field");
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
        "messages[0].content", NULL);
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"prompt\":\"a\"}", "prompt", "unknown_field");
    /* A prompt that fills the SLM's context, and max_tokens past what it leaves. */
    char *long_prompt = malloc(40000);
    int at = snprintf(long_prompt, 40000, "{\"prompt\":[");
    for (int i = 0; i < 600; i++) at += snprintf(long_prompt + at, 40000 - (size_t)at, "%s5", i ? "," : "");
    snprintf(long_prompt + at, 40000 - (size_t)at, "]}");
    bad(ui, C, long_prompt, "prompt", "context_length_exceeded");
    at = snprintf(long_prompt, 40000, "{\"max_tokens\":200,\"prompt\":[");
    for (int i = 0; i < 400; i++) at += snprintf(long_prompt + at, 40000 - (size_t)at, "%s5", i ? "," : "");
    snprintf(long_prompt + at, 40000 - (size_t)at, "]}");
    bad(ui, C, long_prompt, "max_tokens", "context_length_exceeded");
    free(long_prompt);
    /* Range errors said "in [1, 1.07374e+09]": now plainly, integers as integers. */
    reply r = request(ui, NULL, C, "{\"prompt\":\"a\",\"max_tokens\":-1}", NULL, 30);
    assert_error(&r, 400, "max_tokens", "bad_request");
    assert_string_equal(str(cJSON_GetObjectItem(r.json, "error"), "message"),
                        "'max_tokens' must be an integer of at least 1, not -1");
    reply_free(&r);
    /* A message's name is accepted (and not rendered), as on tokroute serve (it was refused here). */
    r = request(ui, NULL, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":\"ann\"}],"
                "\"max_tokens\":2,\"temperature\":0,\"user\":\"u-1\"}", NULL, 30);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    /* Still serving. */
    r = request(ui, NULL, C, "{\"prompt\":\"Once\",\"max_tokens\":3,\"temperature\":0}", NULL, 30);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    tr_ui_stop(ui);

    /* No chat template: a chat request is a clear 400, completions still work. */
    p.chat_template = TR_CHAT_NONE;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    bad(ui, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", "messages", "no_chat_template");
    r = request(ui, NULL, CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", NULL, 30);
    assert_non_null(strstr(str(cJSON_GetObjectItem(r.json, "error"), "message"), "--chat-template"));
    reply_free(&r);
    tr_ui_stop(ui);
    /* No LLM: only mode slm. */
    p = params();
    p.open_backend = NULL;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    bad(ui, C, "{\"prompt\":\"a\",\"mode\":\"joint\"}", "mode", NULL);
    r = request(ui, NULL, C, "{\"prompt\":\"Once\",\"max_tokens\":3}", NULL, 30);
    assert_int_equal(r.status, 200);
    assert_int_equal((int)num(cJSON_GetObjectItem(r.json, "usage"), "routed_tokens"), 0);
    reply_free(&r);
    tr_ui_stop(ui);
}

static void test_methods_and_paths(void **state) {
    tr_ui_params p = params();
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    const struct {
        const char *method, *path, *allow;
    } cases[] = {{"GET", "/v1/chat/completions", "Allow: POST"}, {"GET", "/v1/completions", "Allow: POST"},
                 {"DELETE", "/v1/completions", "Allow: POST"}, {"POST", "/v1/models", "Allow: GET, HEAD"},
                 {"PUT", "/api/info", "Allow: GET, HEAD"},     {"GET", "/api/generate", "Allow: POST"},
                 {"POST", "/", "Allow: GET, HEAD"},            {"OPTIONS", "/v1/chat/completions", "Allow: POST"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r = request(ui, cases[i].method, cases[i].path, strcmp(cases[i].method, "POST") ? NULL : "{}", NULL, 10);
        assert_error(&r, 405, NULL, "method_not_allowed");
        assert_non_null(r.headers);
        if (!strstr(r.headers, cases[i].allow)) fprintf(stderr, "%s %s:\n%s", cases[i].method, cases[i].path, r.headers);
        assert_non_null(strstr(r.headers, cases[i].allow));
        reply_free(&r);
    }
    reply r = request(ui, NULL, "/v1/embeddings", "{}", NULL, 10);
    assert_error(&r, 404, NULL, "not_found");
    reply_free(&r);
    r = request(ui, NULL, "/v1/models", NULL, NULL, 10);
    assert_int_equal(r.status, 200);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "data"), 0);
    assert_string_equal(str(r.json, "object"), "list");
    assert_string_equal(str(m, "id"), "device-slm");
    assert_string_equal(str(m, "object"), "model");
    reply_free(&r);
    /* Replies name the model /v1/models lists, whatever the request named. */
    r = request(ui, NULL, "/v1/completions", "{\"model\":\"gpt-4o\",\"prompt\":\"Once\",\"max_tokens\":2}", NULL, 30);
    assert_int_equal(r.status, 200);
    assert_string_equal(str(r.json, "model"), "device-slm");
    assert_int_equal(strncmp(str(r.json, "id"), "cmpl-", 5), 0);
    reply_free(&r);
    tr_ui_stop(ui);
}

static void test_key(void **state) {
    tr_ui_params p = params();
    tr_ui *ui = (tr_ui *)1;
    p.host = "0.0.0.0"; /* beyond loopback: a key is required */
    assert_int_equal(tr_ui_start(&p, &ui), TR_ERR_ARG);
    assert_null(ui);
    assert_non_null(strstr(tr_last_error(), "key"));
    p.host = NULL;
    p.api_key = "s3cret-key";
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":2}";
    reply r = request(ui, NULL, "/v1/completions", body, NULL, 10);
    assert_error(&r, 401, NULL, "invalid_api_key");
    assert_non_null(strstr(r.headers, "WWW-Authenticate: Bearer"));
    reply_free(&r);
    const char *wrong[] = {"Bearer s3cret-kez", "Bearer s3cret-key2", "Basic s3cret-key", "s3cret-key", "Bearer "};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        r = request(ui, NULL, "/v1/completions", body, wrong[i], 10);
        assert_error(&r, 401, NULL, "invalid_api_key");
        reply_free(&r);
    }
    const char *right[] = {"Bearer s3cret-key", "bearer s3cret-key", "BEARER  s3cret-key"};
    for (size_t i = 0; i < sizeof right / sizeof right[0]; i++) {
        r = request(ui, NULL, "/v1/completions", body, right[i], 30);
        assert_int_equal(r.status, 200);
        reply_free(&r);
    }
    r = request(ui, NULL, "/v1/models", NULL, NULL, 10);
    assert_int_equal(r.status, 401);
    reply_free(&r);
    r = request(ui, NULL, "/api/info", NULL, NULL, 10); /* the page's API too */
    assert_int_equal(r.status, 401);
    reply_free(&r);
    r = request(ui, NULL, "/", NULL, NULL, 10); /* the page itself asks for the key */
    assert_int_equal(r.status, 200);
    reply_free(&r);
    tr_ui_stop(ui);
}

/* ---------------------------------------------------------------- the queue and hanging up */

typedef struct client {
    const tr_ui *ui;
    const char *body;
    long timeout_s;
    reply r;
} client;

static void *run_client(void *arg) {
    client *c = arg;
    c->r = request(c->ui, NULL, "/v1/completions", c->body, NULL, c->timeout_s);
    return NULL;
}

/* /api/status's field (active, waiting). */
static int status_field(const tr_ui *ui, const char *name) {
    reply r = request(ui, NULL, "/api/status", NULL, NULL, 10);
    const int v = (int)num(r.json, name);
    reply_free(&r);
    return v;
}

static bool wait_for(const tr_ui *ui, const char *name, int value) {
    for (int i = 0; i < 600; i++) {
        if (status_field(ui, name) == value) return true;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_queue(void **state) {
    ui_rtt_ms = 20; /* every token routed (mode llm) waits 20 ms: 400 tokens take 8 s */
    tr_ui_params p = params();
    p.max_queued = 1;
    p.max_tokens = 400;
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    client a = {ui, "{\"prompt\":\"Once upon a time\",\"mode\":\"llm\",\"max_tokens\":400,\"stop\":\"@@@\"}", 60, {0}};
    client b = {ui, "{\"prompt\":\"Once\",\"mode\":\"slm\",\"max_tokens\":3}", 60, {0}};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, run_client, &a), 0);
    assert_true(wait_for(ui, "active", 1));
    assert_int_equal(pthread_create(&tb, NULL, run_client, &b), 0);
    assert_true(wait_for(ui, "waiting", 1));
    /* One running, one waiting: a third is refused with 429 and a Retry-After. */
    reply c = request(ui, NULL, "/v1/completions", b.body, NULL, 10);
    assert_error(&c, 429, NULL, "rate_limit_exceeded");
    assert_non_null(strstr(c.headers, "Retry-After: "));
    reply_free(&c);
    /* The page's generations share the queue. */
    c = request(ui, NULL, "/api/generate", "{\"prompt\":\"a\",\"max_tokens\":1}", NULL, 10);
    assert_int_equal(c.status, 429);
    reply_free(&c);
    /* Cancel the first (by its id); the waiting one runs and answers. */
    reply s = request(ui, NULL, "/api/status", NULL, NULL, 10);
    char cancel[64];
    snprintf(cancel, sizeof cancel, "{\"id\":%d}", (int)cJSON_GetArrayItem(cJSON_GetObjectItem(s.json, "running"), 0)->valuedouble);
    reply_free(&s);
    s = request(ui, NULL, "/api/cancel", cancel, NULL, 10);
    assert_non_null(strstr(s.body, "true"));
    reply_free(&s);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.r.status, 200); /* cancelled: what was generated so far */
    assert_true(num(cJSON_GetObjectItem(a.r.json, "usage"), "completion_tokens") < 400);
    assert_int_equal(b.r.status, 200);
    assert_int_equal((int)num(cJSON_GetObjectItem(b.r.json, "usage"), "completion_tokens"), 3);
    reply_free(&a.r);
    reply_free(&b.r);

    /* A client that hangs up, waiting for a whole reply (a reset: a FIN alone may be a client that only shut its
     * sending side, test_ui_http) or streaming (curl gives up after 1 s and closes; the next event written finds
     * it gone), cancels its generation. */
    const char *bodies[] = {a.body, "{\"prompt\":\"Once upon a time\",\"mode\":\"llm\",\"max_tokens\":400,\"stream\":true}"};
    for (int i = 0; i < 2; i++) {
        client d = {ui, bodies[i], 1, {0}};
        if (i == 0) {
            const int fd = raw_connect(NULL, (int)tr_ui_port(ui));
            assert_true(fd >= 0);
            char head[256];
            snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n", strlen(a.body));
            raw_send_all(fd, head, strlen(head));
            raw_send_all(fd, a.body, strlen(a.body));
            assert_true(wait_for(ui, "active", 1));
            sleep(1);
            raw_reset(fd);
        } else {
            pthread_t td;
            assert_int_equal(pthread_create(&td, NULL, run_client, &d), 0);
            pthread_join(td, NULL); /* curl gave up after 1 s */
            assert_int_equal(d.r.status, 0); /* timed out */
        }
        const time_t t0 = time(NULL);
        assert_true(wait_for(ui, "active", 0));
        assert_true(time(NULL) - t0 < 6); /* not the 8 s the generation would take */
        reply_free(&d.r);
    }
    tr_ui_stop(ui);
    ui_rtt_ms = 0;
}

/* ---------------------------------------------------------------- replies */

static void test_replies(void **state) {
    tr_ui_params p = params();
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    /* The routed counts equal the page's summary of the same generation. */
    reply page = request(ui, NULL, "/api/generate", "{\"prompt\":\"Once upon a time\",\"tau\":0.9,\"max_tokens\":24}",
                         NULL, 60);
    assert_int_equal(page.status, 200);
    const char *n_routed = strstr(page.body, "\"n_routed\":");
    assert_non_null(n_routed);
    reply r = request(ui, NULL, "/v1/completions",
                      "{\"prompt\":\"Once upon a time\",\"threshold\":0.9,\"max_tokens\":24,\"temperature\":0,"
                      "\"logprobs\":0}", NULL, 60);
    assert_int_equal(r.status, 200);
    const cJSON *u = cJSON_GetObjectItem(r.json, "usage"), *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "choices"), 0);
    assert_int_equal((int)num(u, "routed_tokens"), atoi(n_routed + 11));
    assert_true(num(u, "routed_tokens") > 0);
    assert_int_equal((int)num(u, "prompt_tokens") + (int)num(u, "completion_tokens"), (int)num(u, "total_tokens"));
    assert_true(num(u, "llm_calls") >= num(u, "routed_tokens"));
    assert_true(num(u, "llm_wait_ms") >= 0);
    assert_string_equal(str(r.json, "object"), "text_completion");
    assert_string_equal(str(ch, "finish_reason"), "length");
    const cJSON *lp = cJSON_GetObjectItem(ch, "logprobs");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), 24);
    assert_true(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "token_logprobs"), 0)->valuedouble <= 0);
    /* The page's token texts, joined, are the completion's text. */
    char text[4096] = "";
    for (const char *t = page.body; (t = strstr(t, "\"text\":\"")); t += 8) {
        const char *end = strchr(t + 8, '"');
        strncat(text, t + 8, (size_t)(end - t - 8));
    }
    assert_string_equal(text, str(ch, "text"));
    reply_free(&page);
    /* stop: the text ends before the stop string, which is never shown. */
    char stop_body[256];
    char word[8] = {0};
    memcpy(word, text + 10, 3);
    snprintf(stop_body, sizeof stop_body,
             "{\"prompt\":\"Once upon a time\",\"threshold\":0.9,\"max_tokens\":24,\"temperature\":0,\"stop\":[\"%s\"]}",
             word);
    reply_free(&r);
    r = request(ui, NULL, "/v1/completions", stop_body, NULL, 60);
    ch = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "choices"), 0);
    assert_string_equal(str(ch, "finish_reason"), "stop");
    assert_null(strstr(str(ch, "text"), word));
    assert_int_equal(strncmp(str(ch, "text"), text, strlen(str(ch, "text"))), 0);
    reply_free(&r);
    /* Chat, streamed with usage: a role chunk, content chunks, a finish chunk, the usage chunk with no choices, [DONE]. */
    r = request(ui, NULL, "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story.\"},{\"role\":\"user\",\"content\":"
                "[{\"type\":\"text\",\"text\":\"A cat\"}]}],\"max_completion_tokens\":8,\"seed\":7,\"temperature\":0.8,"
                "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"mode\":\"joint\",\"policy\":\"entropy\"}",
                NULL, 60);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"delta\":{\"role\":\"assistant\""));
    assert_non_null(strstr(r.body, "\"finish_reason\":\"length\""));
    assert_non_null(strstr(r.body, "\"choices\":[],\"usage\":{\"prompt_tokens\":"));
    assert_non_null(strstr(r.body, "\"completion_tokens\":8,"));
    const char *done = strstr(r.body, "data: [DONE]\n\n");
    assert_non_null(done);
    assert_int_equal(strlen(done), 14);
    reply_free(&r);
    tr_ui_stop(ui);
}

/* Sampling without a seed: a fresh draw per request, reported as the reply's "seed" (the device used seed 0, so
 * every unseeded request gave the same text); the reported seed replays the reply. 64 tokens at temperature 1:
 * two draws agreeing on all of them is negligible. */
static void test_unseeded_sampling(void **state) {
    tr_ui_params p = params();
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    static const char body[] = "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":1,\"mode\":\"slm\"}";
    reply a = request(ui, NULL, "/v1/completions", body, NULL, 60), b = request(ui, NULL, "/v1/completions", body, NULL, 60);
    assert_int_equal(a.status, 200);
    assert_int_equal(b.status, 200);
    const char *text_a = str(cJSON_GetArrayItem(cJSON_GetObjectItem(a.json, "choices"), 0), "text");
    const char *text_b = str(cJSON_GetArrayItem(cJSON_GetObjectItem(b.json, "choices"), 0), "text");
    assert_string_not_equal(text_a, text_b);
    const double seed_a = num(a.json, "seed"), seed_b = num(b.json, "seed");
    assert_true(seed_a != seed_b);
    char replay[256];
    snprintf(replay, sizeof replay, "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":1,"
             "\"mode\":\"slm\",\"seed\":%.0f}", seed_a);
    for (int k = 0; k < 2; k++) { /* the seed replays the run, and a seeded request repeats */
        reply c = request(ui, NULL, "/v1/completions", replay, NULL, 60);
        assert_int_equal(c.status, 200);
        assert_string_equal(str(cJSON_GetArrayItem(cJSON_GetObjectItem(c.json, "choices"), 0), "text"), text_a);
        assert_true(num(c.json, "seed") == seed_a);
        reply_free(&c);
    }
    reply_free(&a);
    reply_free(&b);
    /* the chat endpoint and streamed chunks carry it too */
    reply c = request(ui, NULL, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                      "\"max_tokens\":2,\"seed\":42,\"stream\":true}", NULL, 60);
    assert_int_equal(c.status, 200);
    assert_non_null(strstr(c.body, "\"seed\":42,"));
    reply_free(&c);
    tr_ui_stop(ui);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unseeded_sampling),
        cmocka_unit_test(test_fields_refused), cmocka_unit_test(test_methods_and_paths), cmocka_unit_test(test_key),
        cmocka_unit_test(test_queue),          cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, ui_fixture_setup, ui_fixture_teardown);
}
