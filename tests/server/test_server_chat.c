/* test_server_chat.c — POST /v1/chat/completions, CORS and the end-of-generation token, over HTTP against
 * in-process servers (stories260K, a 64-token context):
 *  - chat: the messages are rendered with the server's template (prompt_token_ids are tr_chat_tokenize's) and the
 *    answer is what /v1/completions generates from those ids; streamed chunks add up to the same content, with the
 *    role first, the finish_reason last and the usage chunk when asked; logprobs in OpenAI's chat shape; every bad
 *    field is a 400 naming it (unknown and unsupported fields included); a server without a template answers 400.
 *  - CORS: without origins no CORS header and OPTIONS is a 405 with Allow; with them a preflight (no API key
 *    needed) gets 204 with the Access-Control-Allow-* headers, replies to an allowed origin carry
 *    Access-Control-Allow-Origin (a 401 too), others none; "*" answers "*".
 *  - EOS: the same model with its eos_token_id moved to a token greedy generation reaches: the completion stops
 *    there with "stop", and that token is in neither text, token_ids nor completion_tokens, streamed or not. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <curl/curl.h>

#include "support/fixtures.h"
#include "support/gguf_builder.h"
#include "support/http_call.h"
#include "tokroute.h"

#define KEY "sesame"
#define CHAT_CTX 128 /* ChatML's markers are plain text to this vocabulary: ~10 tokens each */
static tr_model *model, *eos_model;
static tr_server *plain, *chat, *any_origin, *eos_server; /* no template, no CORS / chatml, key, two origins / "*" */
static const char *eos_path;
static int32_t eos_token = -1;

static tr_server *start(const tr_model *m, int32_t n_ctx, tr_chat_template t, const char *key,
                        const char *const *origins, int32_t n_origins) {
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    p.n_threads = 1;
    p.n_ctx = n_ctx;
    p.chat_template = t;
    p.api_key = key;
    p.cors_origins = origins;
    p.n_cors_origins = n_origins;
    tr_server *s = NULL;
    return tr_server_start(m, &p, &s) == TR_OK ? s : NULL;
}

typedef http_reply reply;

/* method path [body] against srv, with extra headers (NULL-terminated list, may be NULL). */
static long call(tr_server *srv, const char *method, const char *path, const char *body, const char *const *extra,
                 reply *r) {
    return http_fetch(NULL, tr_server_port(srv), method, path, body, extra, r);
}

static const char *const with_key[] = {"Authorization: Bearer " KEY, NULL};

/* POST to the chat server with its key. */
static long chat_call(const char *path, const char *body, reply *r) {
    return call(chat, "POST", path, body, with_key, r);
}

static const cJSON *item(const cJSON *obj, const char *name) { return cJSON_GetObjectItemCaseSensitive(obj, name); }
static const cJSON *choice0(const cJSON *body) { return cJSON_GetArrayItem(item(body, "choices"), 0); }

static const char *str_of(const cJSON *obj, const char *name) {
    const cJSON *f = item(obj, name);
    return cJSON_IsString(f) ? f->valuestring : NULL;
}

static int int_of(const cJSON *obj, const char *name) {
    const cJSON *f = item(obj, name);
    assert_true(cJSON_IsNumber(f));
    return (int)f->valuedouble;
}

/* An error reply: status, param (NULL: JSON null) and code; returns the message (static). */
static const char *expect_error(const reply *r, long status, const char *param, const char *code) {
    static char message[1024];
    assert_int_equal(r->status, status);
    cJSON *j = cJSON_Parse(r->body);
    const cJSON *e = item(j, "error");
    assert_true(cJSON_IsObject(e));
    snprintf(message, sizeof message, "%s", str_of(e, "message"));
    assert_string_equal(str_of(e, "type"), status == 403 ? "permission_error" : "invalid_request_error");
    assert_string_equal(str_of(e, "code"), code);
    if (param) assert_string_equal(str_of(e, "param"), param);
    else assert_true(cJSON_IsNull(item(e, "param")));
    cJSON_Delete(j);
    return message;
}

/* The data: events of a streamed reply, parsed ([DONE] as NULL); returns the count. */
static int sse_events(char *body, cJSON **events, int cap) {
    int n = 0;
    for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6) != 0) continue;
        assert_true(n < cap);
        events[n++] = strcmp(line + 6, "[DONE]") == 0 ? NULL : cJSON_Parse(line + 6);
    }
    return n;
}

static tr_status move_eos(tr_gguf_writer *w, void *user) {
    return tr_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos_token);
}

static int setup(void **state) {
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &model) != TR_OK) return -1;
    static const char *const two[] = {"http://app.test", "https://other.test:8443"}, *const star[] = {"*"};
    if (!(plain = start(model, 64, TR_CHAT_NONE, NULL, NULL, 0)) ||
        !(chat = start(model, CHAT_CTX, TR_CHAT_CHATML, KEY, two, 2)) ||
        !(any_origin = start(model, 64, TR_CHAT_NONE, NULL, star, 1)))
        return -1;
    /* The EOS model: eos_token_id moved to the 4th token greedy generation gives after [1, 403] (one not among the
     * first three), so the same request must stop after 3 tokens. */
    reply r;
    if (call(plain, "POST", "/v1/completions", "{\"prompt\": [1, 403], \"max_tokens\": 8, \"temperature\": 0}", NULL,
             &r) != 200)
        return -1;
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *ids = item(choice0(j),
                                                        "token_ids");
    const int cand = cJSON_GetArraySize(ids) == 8 ? (int)cJSON_GetArrayItem(ids, 3)->valuedouble : -1;
    bool earlier = false;
    for (int i = 0; i < 3 && cand >= 0; i++) earlier |= (int)cJSON_GetArrayItem(ids, i)->valuedouble == cand;
    if (!earlier) eos_token = cand;
    cJSON_Delete(j);
    if (eos_token < 0) return -1;
    eos_path = strdup(temp_path(".gguf"));
    tr_gguf *g = NULL;
    rewrite_hooks hooks = {.extra = move_eos};
    if (tr_gguf_open(shared_path("models/stories260K.gguf"), &g) != TR_OK || gguf_rewrite(g, eos_path, &hooks) != TR_OK)
        return -1;
    tr_gguf_close(g);
    if (tr_model_load(eos_path, &mp, &eos_model) != TR_OK) return -1;
    if (!(eos_server = start(eos_model, 64, TR_CHAT_NONE, NULL, NULL, 0))) return -1;
    return 0;
}

static int teardown(void **state) {
    tr_server_free(plain);
    tr_server_free(chat);
    tr_server_free(any_origin);
    tr_server_free(eos_server);
    tr_model_free(model);
    tr_model_free(eos_model);
    if (eos_path) unlink(eos_path);
    free((void *)eos_path);
    return 0;
}

/* ---------------------------------------------------------------- chat */

static const char *const two_messages =
    "\"messages\": [{\"role\": \"system\", \"content\": \"You tell stories.\"}, "
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Once upon \"}, "
    "{\"type\": \"text\", \"text\": \"a time\"}]}]";

static void test_chat_reply(void **state) {
    reply r;
    char body[2048];
    snprintf(body, sizeof body, "{%s, \"max_tokens\": 6, \"temperature\": 0, \"model\": \"any\"}", two_messages);
    assert_int_equal(chat_call("/v1/chat/completions", body, &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    assert_string_equal(str_of(j, "object"), "chat.completion");
    assert_int_equal(strncmp(str_of(j, "id"), "chatcmpl-", 9), 0);
    const cJSON *c0 = choice0(j);
    const cJSON *msg = item(c0, "message");
    assert_string_equal(str_of(msg, "role"), "assistant");
    assert_string_equal(str_of(c0, "finish_reason"), "length");
    assert_true(cJSON_IsNull(item(c0, "logprobs")));
    assert_int_equal(int_of(item(j, "usage"), "completion_tokens"), 6);
    /* the prompt is the messages rendered in ChatML and tokenized as tr_chat_tokenize does (BOS, template text) */
    const tr_chat_message msgs[] = {{"system", "You tell stories."}, {"user", "Once upon a time"}};
    int32_t want[CHAT_CTX], n_want = 0;
    assert_int_equal(
        tr_chat_tokenize(tr_model_vocab(model), TR_CHAT_CHATML, msgs, 2, true, true, want, CHAT_CTX, &n_want), TR_OK);
    const cJSON *pids = item(c0, "prompt_token_ids");
    assert_int_equal(cJSON_GetArraySize(pids), n_want);
    assert_int_equal(int_of(item(j, "usage"), "prompt_tokens"), n_want);
    int at = snprintf(body, sizeof body, "{\"prompt\": [");
    for (int i = 0; i < n_want; i++) {
        assert_int_equal((int)cJSON_GetArrayItem(pids, i)->valuedouble, want[i]);
        at += snprintf(body + at, sizeof body - (size_t)at, "%s%d", i ? ", " : "", want[i]);
    }
    snprintf(body + at, sizeof body - (size_t)at, "], \"max_tokens\": 6, \"temperature\": 0}");
    /* and the answer is what /v1/completions generates from those ids */
    reply rc;
    assert_int_equal(chat_call("/v1/completions", body, &rc), 200);
    cJSON *jc = cJSON_Parse(rc.body);
    const cJSON *cc0 = choice0(jc);
    assert_string_equal(str_of(msg, "content"), str_of(cc0, "text"));
    char *a = cJSON_PrintUnformatted(item(c0, "token_ids")),
         *b = cJSON_PrintUnformatted(item(cc0, "token_ids"));
    assert_string_equal(a, b);
    free(a);
    free(b);
    cJSON_Delete(jc);
    cJSON_Delete(j);
}

static void test_chat_stream(void **state) {
    reply r;
    char body[1024], whole[256];
    snprintf(body, sizeof body, "{%s, \"max_completion_tokens\": 5, \"temperature\": 0, \"logprobs\": true, "
                                "\"top_logprobs\": 2}", two_messages);
    assert_int_equal(chat_call("/v1/chat/completions", body, &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *c0 = choice0(j);
    snprintf(whole, sizeof whole, "%s", str_of(item(c0, "message"), "content"));
    const cJSON *content = item(item(c0, "logprobs"), "content");
    assert_int_equal(cJSON_GetArraySize(content), 5);
    for (const cJSON *e = content->child; e; e = e->next) {
        assert_non_null(str_of(e, "token"));
        assert_true(item(e, "logprob")->valuedouble <= 0);
        assert_true(cJSON_IsArray(item(e, "bytes")));
        assert_int_equal(cJSON_GetArraySize(item(e, "top_logprobs")), 2);
    }
    cJSON_Delete(j);

    snprintf(body, sizeof body, "{%s, \"max_completion_tokens\": 5, \"temperature\": 0, \"logprobs\": true, "
                                "\"top_logprobs\": 2, \"stream\": true, \"stream_options\": {\"include_usage\": true}}",
             two_messages);
    assert_int_equal(chat_call("/v1/chat/completions", body, &r), 200);
    cJSON *ev[32];
    const int n = sse_events(r.body, ev, 32);
    assert_true(n >= 4);
    assert_null(ev[n - 1]); /* [DONE] */
    const cJSON *d0 = item(choice0(ev[0]), "delta");
    assert_string_equal(str_of(d0, "role"), "assistant");
    char streamed[256] = "";
    int n_entries = 0;
    const char *finish = NULL;
    for (int i = 0; i < n - 2; i++) {
        assert_string_equal(str_of(ev[i], "object"), "chat.completion.chunk");
        assert_true(cJSON_IsNull(item(ev[i], "usage")));
        const cJSON *ch = choice0(ev[i]);
        const char *piece = str_of(item(ch, "delta"), "content");
        if (piece) strncat(streamed, piece, sizeof streamed - strlen(streamed) - 1);
        const cJSON *lp = item(ch, "logprobs");
        if (cJSON_IsObject(lp)) n_entries += cJSON_GetArraySize(item(lp, "content"));
        const cJSON *fr = item(ch, "finish_reason");
        if (i < n - 3) assert_true(cJSON_IsNull(fr));
        else finish = cJSON_IsString(fr) ? fr->valuestring : NULL;
    }
    assert_string_equal(streamed, whole);
    assert_int_equal(n_entries, 5);
    assert_non_null(finish);
    assert_string_equal(finish, "length");
    /* the usage chunk: no choices */
    assert_int_equal(cJSON_GetArraySize(item(ev[n - 2], "choices")), 0);
    assert_int_equal(int_of(item(ev[n - 2], "usage"), "completion_tokens"), 5);
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i]);
}

static void test_chat_default_limit(void **state) {
    /* without a limit the answer may fill the context (OpenAI's default), not 16 tokens */
    reply r;
    assert_int_equal(chat_call("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                                                       "\"temperature\": 0}", &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *u = item(j, "usage");
    const char *finish = str_of(choice0(j), "finish_reason");
    if (strcmp(finish, "length") == 0) assert_int_equal(int_of(u, "total_tokens"), CHAT_CTX);
    else assert_string_equal(finish, "stop");
    assert_true(int_of(u, "completion_tokens") > 16 || strcmp(finish, "stop") == 0);
    cJSON_Delete(j);
}

static void test_chat_validation(void **state) {
#define ONE_MESSAGE "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]"
    static const struct {
        const char *body, *param, *code;
    } cases[] = {
        {ONE_MESSAGE ", \"bogus_field\": 1}", "bogus_field", "unknown_field"},
        {ONE_MESSAGE ", \"frequency_penalty\": 0.5}", "frequency_penalty", "unsupported_field"},
        {ONE_MESSAGE ", \"tools\": []}", "tools", "unsupported_field"},
        {ONE_MESSAGE ", \"n\": 2}", "n", "bad_request"},
        {"{\"model\": \"m\"}", "messages", "bad_request"},
        {"{\"messages\": []}", "messages", "bad_request"},
        {"{\"messages\": \"hello\"}", "messages", "bad_request"},
        {"{\"messages\": [\"hello\"]}", "messages[0]", "bad_request"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"x\"}]}",
         "messages[1].role", "bad_request"},
        {"{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role", "bad_request"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content", "bad_request"},
        {"{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content", "bad_request"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
         "messages[0].content", "bad_request"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": []}]}",
         "messages[0].tool_calls", "unsupported_field"},
        {ONE_MESSAGE ", \"logprobs\": 2}", "logprobs", "bad_request"},
        {ONE_MESSAGE ", \"top_logprobs\": 2}", "top_logprobs", "bad_request"},
        {ONE_MESSAGE ", \"logprobs\": true, \"top_logprobs\": 21}",
         "top_logprobs", "bad_request"},
        {ONE_MESSAGE ", \"max_tokens\": 0}", "max_tokens", "bad_request"},
        {ONE_MESSAGE ", \"max_completion_tokens\": 1000}",
         "max_completion_tokens", "bad_request"},
        {ONE_MESSAGE ", \"temperature\": 2.5}", "temperature", "bad_request"},
        {ONE_MESSAGE ", \"top_p\": -1}", "top_p", "bad_request"},
        {ONE_MESSAGE ", \"seed\": 1.5}", "seed", "bad_request"},
        {ONE_MESSAGE ", \"stream\": \"yes\"}", "stream", "bad_request"},
        {ONE_MESSAGE ", \"stream_options\": {\"include_usage\": true}}",
         "stream_options", "bad_request"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", "messages", "bad_request"},
        {ONE_MESSAGE ", \"model\": 7}", "model", "bad_request"},
        {"[1, 2]", NULL, "bad_request"},
        {"{not json", NULL, "bad_request"},
    };
    reply r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        chat_call("/v1/chat/completions", cases[i].body, &r);
        const char *msg = expect_error(&r, 400, cases[i].param, cases[i].code);
        if (cases[i].param) assert_non_null(strstr(msg, strncmp(cases[i].param, "messages[", 9) == 0 ? "messages["
                                                                                                   : cases[i].param));
    }
    /* messages that do not fit the context once rendered */
    char body[2048];
    int at = snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"");
    for (int i = 0; i < 160; i++) at += snprintf(body + at, sizeof body - (size_t)at, "story ");
    snprintf(body + at, sizeof body - (size_t)at, "\"}]}");
    chat_call("/v1/chat/completions", body, &r);
    assert_non_null(strstr(expect_error(&r, 400, "messages", "bad_request"), "context of 128"));
    /* messages that fill the context exactly: nothing can be generated (the default limit would be 0) */
    char content[1024] = "";
    int32_t n_tokens = 0;
    for (int k = 0; k < 400 && n_tokens != CHAT_CTX; k++) {
        strcat(content, k % 2 ? "a" : " ");
        const tr_chat_message m = {"user", content};
        tr_chat_tokenize(tr_model_vocab(model), TR_CHAT_CHATML, &m, 1, true, true, NULL, 0, &n_tokens);
    }
    assert_int_equal(n_tokens, CHAT_CTX);
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", content);
    chat_call("/v1/chat/completions", body, &r);
    assert_non_null(strstr(expect_error(&r, 400, "messages", "bad_request"), "fills the context"));
    /* the key is checked as for every route */
    assert_int_equal(call(chat, "POST", "/v1/chat/completions", "{\"messages\": []}", NULL, &r), 401);
}

static void test_chat_without_template(void **state) {
    reply r;
    call(plain, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
         NULL, &r);
    const char *msg = expect_error(&r, 400, "messages", "no_chat_template");
    assert_non_null(strstr(msg, "--chat-template"));
    /* the whole message: it was cut mid-word at 200 bytes */
    const char *tail = "or send the prompt as text to /v1/completions";
    assert_true(strlen(msg) > strlen(tail));
    assert_string_equal(msg + strlen(msg) - strlen(tail), tail);
    /* an unknown template value is refused at start */
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    p.chat_template = (tr_chat_template)99;
    tr_server *s = (tr_server *)0x1;
    assert_int_equal(tr_server_start(model, &p, &s), TR_ERR_ARG);
}

/* ---------------------------------------------------------------- CORS */

static void test_no_cors(void **state) {
    reply r;
    const char *const origin[] = {"Origin: http://app.test", "Access-Control-Request-Method: POST", NULL};
    call(plain, "OPTIONS", "/v1/chat/completions", NULL, origin, &r);
    expect_error(&r, 405, NULL, "method_not_allowed");
    assert_string_equal(http_reply_header(&r, "Allow"), "POST");
    assert_null(http_reply_header(&r, "Access-Control-Allow-Origin"));
    assert_int_equal(call(plain, "GET", "/v1/models", NULL, origin, &r), 200);
    assert_null(http_reply_header(&r, "Access-Control-Allow-Origin"));
}

static void test_cors_preflight(void **state) {
    reply r;
    const char *const pre[] = {"Origin: http://app.test", "Access-Control-Request-Method: POST",
                               "Access-Control-Request-Headers: authorization, content-type, x-stainless-os", NULL};
    /* no key on a preflight: answered anyway */
    assert_int_equal(call(chat, "OPTIONS", "/v1/chat/completions", NULL, pre, &r), 204);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "http://app.test");
    assert_string_equal(http_reply_header(&r, "Vary"), "Origin");
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Methods"), "POST, OPTIONS");
    const char *allowed = http_reply_header(&r, "Access-Control-Allow-Headers");
    assert_non_null(allowed);
    assert_non_null(strstr(allowed, "Authorization"));
    assert_non_null(strstr(allowed, "Content-Type"));
    assert_non_null(strstr(allowed, "x-stainless-os"));
    assert_non_null(http_reply_header(&r, "Access-Control-Max-Age"));
    assert_int_equal(call(chat, "OPTIONS", "/v1/models", NULL, pre, &r), 204);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Methods"), "GET, OPTIONS");
    /* the second origin, and one not allowed */
    const char *const other[] = {"Origin: https://other.test:8443", NULL};
    const char *const evil[] = {"Origin: http://evil.test", NULL};
    assert_int_equal(call(chat, "OPTIONS", "/v1/completions", NULL, other, &r), 204);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "https://other.test:8443");
    call(chat, "OPTIONS", "/v1/completions", NULL, evil, &r);
    expect_error(&r, 403, NULL, "cors_origin");
    assert_null(http_reply_header(&r, "Access-Control-Allow-Origin"));
    /* an unknown path is no preflight: the key first, then 404 */
    assert_int_equal(call(chat, "OPTIONS", "/v1/nothing", NULL, pre, &r), 401);
    assert_int_equal(call(chat, "OPTIONS", "/v1/nothing", NULL, with_key, &r), 404);
    /* asked-for headers are kept to header-name characters */
    const char *const odd[] = {"Origin: http://app.test", "Access-Control-Request-Headers: x-a;\"b\"", NULL};
    assert_int_equal(call(chat, "OPTIONS", "/health", NULL, odd, &r), 204);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Headers"), "Authorization, Content-Type, x-ab");
}

static void test_cors_replies(void **state) {
    reply r;
    const char *const allowed[] = {"Origin: http://app.test", "Authorization: Bearer " KEY, NULL};
    const char *const evil[] = {"Origin: http://evil.test", "Authorization: Bearer " KEY, NULL};
    const char *const no_key[] = {"Origin: http://app.test", NULL};
    assert_int_equal(call(chat, "POST", "/v1/completions", "{\"prompt\": [1], \"max_tokens\": 1}", allowed, &r), 200);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "http://app.test");
    assert_int_equal(call(chat, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": "
                                                               "\"x\"}], \"max_tokens\": 2, \"stream\": true}",
                          allowed, &r), 200);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "http://app.test");
    assert_int_equal(call(chat, "POST", "/v1/completions", "{\"prompt\": [1], \"max_tokens\": 1}", evil, &r), 200);
    assert_null(http_reply_header(&r, "Access-Control-Allow-Origin"));
    /* errors too, so the page can read them */
    assert_int_equal(call(chat, "GET", "/v1/models", NULL, no_key, &r), 401);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "http://app.test");
    /* OPTIONS with an API key configured but no Origin: the methods */
    assert_int_equal(call(chat, "OPTIONS", "/v1/models", NULL, NULL, &r), 204);
    assert_string_equal(http_reply_header(&r, "Allow"), "GET, OPTIONS");
    /* "*" */
    const char *const any[] = {"Origin: http://anything.test:1234", NULL};
    assert_int_equal(call(any_origin, "GET", "/v1/models", NULL, any, &r), 200);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "*");
    assert_null(http_reply_header(&r, "Vary"));
    assert_int_equal(call(any_origin, "OPTIONS", "/v1/chat/completions", NULL, any, &r), 204);
    assert_string_equal(http_reply_header(&r, "Access-Control-Allow-Origin"), "*");
    /* origins are checked at start */
    const char *const bad[][1] = {{"localhost:3000"}, {"http://a.test, http://b.test"}, {""}};
    for (int i = 0; i < 3; i++) {
        tr_server_params p = tr_server_default_params();
        p.port = 0;
        p.cors_origins = bad[i];
        p.n_cors_origins = 1;
        tr_server *s = NULL;
        assert_int_equal(tr_server_start(model, &p, &s), TR_ERR_ARG);
        assert_null(s);
    }
}

/* ---------------------------------------------------------------- the end-of-sequence token */

static void test_eos_not_counted(void **state) {
    reply r, ref;
    /* what the unchanged model generates before it: 3 tokens */
    assert_int_equal(call(plain, "POST", "/v1/completions", "{\"prompt\": [1, 403], \"max_tokens\": 3, "
                                                            "\"temperature\": 0}", NULL, &ref), 200);
    cJSON *jref = cJSON_Parse(ref.body);
    const cJSON *cref = choice0(jref);
    const char *asked = "{\"prompt\": [1, 403], \"max_tokens\": 8, \"temperature\": 0, \"logprobs\": 1}";
    assert_int_equal(call(eos_server, "POST", "/v1/completions", asked, NULL, &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *c0 = choice0(j);
    assert_string_equal(str_of(c0, "finish_reason"), "stop");
    assert_string_equal(str_of(c0, "text"), str_of(cref, "text"));
    const cJSON *ids = item(c0, "token_ids");
    assert_int_equal(cJSON_GetArraySize(ids), 3);
    for (const cJSON *t = ids->child; t; t = t->next) assert_int_not_equal((int)t->valuedouble, eos_token);
    assert_int_equal(int_of(item(j, "usage"), "completion_tokens"), 3);
    const cJSON *lp = item(c0, "logprobs");
    assert_int_equal(cJSON_GetArraySize(item(lp, "tokens")), 3);
    cJSON_Delete(j);
    /* streamed: the same text, no chunk for the EOS token's text */
    asked = "{\"prompt\": [1, 403], \"max_tokens\": 8, \"temperature\": 0, \"stream\": true}";
    assert_int_equal(call(eos_server, "POST", "/v1/completions", asked, NULL, &r), 200);
    cJSON *ev[16];
    const int n = sse_events(r.body, ev, 16);
    assert_null(ev[n - 1]);
    char text[256] = "";
    int n_ids = 0;
    for (int i = 0; i < n - 1; i++) {
        const cJSON *ch = choice0(ev[i]);
        strncat(text, str_of(ch, "text"), sizeof text - strlen(text) - 1);
        const cJSON *tids = item(ch, "token_ids");
        for (const cJSON *t = tids->child; t; t = t->next, n_ids++)
            assert_int_not_equal((int)t->valuedouble, eos_token);
        if (i == n - 2) {
            assert_string_equal(str_of(ch, "finish_reason"), "stop");
            assert_int_equal(int_of(item(ev[i], "usage"), "completion_tokens"), 3);
        }
    }
    assert_int_equal(n_ids, 3);
    assert_string_equal(text, str_of(cref, "text"));
    for (int i = 0; i < n; i++) cJSON_Delete(ev[i]);
    cJSON_Delete(jref);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_reply),        cmocka_unit_test(test_chat_stream),
        cmocka_unit_test(test_chat_default_limit), cmocka_unit_test(test_chat_validation),
        cmocka_unit_test(test_chat_without_template), cmocka_unit_test(test_no_cors),
        cmocka_unit_test(test_cors_preflight),    cmocka_unit_test(test_cors_replies),
        cmocka_unit_test(test_eos_not_counted),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
