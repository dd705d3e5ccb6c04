/* test_server_stream.c — POST /v1/route/next with "stream": true over HTTP, against an in-process server
 * (stories260K): the NDJSON lines parse; the answer line is the plain reply's (token, logprob, top_logprobs, pos,
 * verify) with "lookahead": []; the lookahead lines are the plain reply's lookahead; done comes last with the plain
 * n_evaluated, and the session then holds what a plain request leaves. "stream" of the wrong type is a 400 naming
 * it, errors before the answer are ordinary replies. A newer request for the session while the lookahead streams
 * supersedes it (the stream ends early with done; the newcomer's answer is right), and a client that hangs up after
 * the answer leaves the server healthy (the session answers again; ASan checks nothing leaks). */
#include <pthread.h>
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
#include "support/http_call.h"
#include "tokroute.h"

#define MAX_LINES 40

static tr_model *model;
static tr_server *srv;
static int port;

static int setup(void **state) {
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &model) != TR_OK) return -1;
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    p.n_threads = 1;
    if (tr_server_start(model, &p, &srv) != TR_OK) return -1;
    port = tr_server_port(srv);
    return 0;
}

static int teardown(void **state) {
    tr_server_free(srv);
    tr_model_free(model);
    return 0;
}

/* ---------------------------------------------------------------- plain requests */

typedef http_reply reply;

/* POSTs body to /v1/route/next on handle c (kept alive between calls); returns the status. */
static long post(CURL *c, const char *body, reply *r) {
    return http_fetch(c, port, "POST", "/v1/route/next", body, NULL, r);
}

static const char *content_type_of(const reply *r) {
    const char *v = http_reply_header(r, "Content-Type");
    return v ? v : "";
}

static long post_once(const char *body, reply *r) {
    CURL *c = curl_easy_init();
    const long status = post(c, body, r);
    curl_easy_cleanup(c);
    return status;
}

static int32_t int_of(const cJSON *obj, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsNumber(f)) fail_msg("no number '%s'", name);
    return (int32_t)f->valuedouble;
}

/* The ids of an array field; returns the count. */
static int ids_of(const cJSON *obj, const char *name, int32_t *ids, int cap) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsArray(a)) fail_msg("no array '%s'", name);
    int n = 0;
    for (const cJSON *x = a->child; x; x = x->next) {
        assert_true(cJSON_IsNumber(x) && n < cap);
        ids[n++] = (int32_t)x->valuedouble;
    }
    return n;
}

/* ---------------------------------------------------------------- streamed requests */

/* One streamed request on its own connection (run on a thread): the lines as they arrive. answered is signalled
 * when the first line is in; with hang_up the client closes the connection right then. */
typedef struct stream_call {
    char body[1024];
    bool hang_up;
    long status;
    char content_type[64];
    char lines[MAX_LINES][2048];
    int n_lines;
    char partial[4096];
    size_t n_partial;
    bool overflow;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool answered;
} stream_call;

static size_t split_lines(char *d, size_t sz, size_t n, void *u) {
    stream_call *s = u;
    const size_t k = sz * n;
    for (size_t i = 0; i < k; i++) {
        if (d[i] != '\n') {
            if (s->n_partial + 1 >= sizeof s->partial) s->overflow = true;
            else s->partial[s->n_partial++] = d[i];
            continue;
        }
        if (s->n_lines == MAX_LINES || s->n_partial >= sizeof s->lines[0]) {
            s->overflow = true;
        } else {
            memcpy(s->lines[s->n_lines], s->partial, s->n_partial);
            s->lines[s->n_lines++][s->n_partial] = 0;
        }
        s->n_partial = 0;
        pthread_mutex_lock(&s->mu);
        const bool first = !s->answered;
        s->answered = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (first && s->hang_up) return 0; /* curl aborts the transfer and closes the connection */
    }
    return k;
}

static void *run_stream(void *arg) {
    stream_call *s = arg;
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/route/next", port);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, s->body);
    struct curl_slist *json = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, json);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, split_lines);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK || (s->hang_up && rc == CURLE_WRITE_ERROR)) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &s->status);
        const char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        snprintf(s->content_type, sizeof s->content_type, "%s", ct ? ct : "");
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(json);
    pthread_mutex_lock(&s->mu);
    s->answered = true; /* also when it failed: nobody waits for ever */
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static stream_call *stream_begin(const char *body, bool hang_up, pthread_t *th) {
    stream_call *s = calloc(1, sizeof *s);
    assert_non_null(s);
    snprintf(s->body, sizeof s->body, "%s", body);
    s->hang_up = hang_up;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    assert_int_equal(pthread_create(th, NULL, run_stream, s), 0);
    return s;
}

static const char PROMPT[] = "[1,403,407,261,378,432,383,286]"; /* 8 tokens */

/* A new session's streamed request for PROMPT with 16 lookahead tokens. */
static stream_call *stream_prompt(const char *session, bool hang_up, pthread_t *th) {
    char body[256];
    snprintf(body, sizeof body, "{\"session\":\"%s\",\"pos\":0,\"tokens\":%s,\"lookahead\":16,\"stream\":true}",
             session, PROMPT);
    return stream_begin(body, hang_up, th);
}

static void stream_wait_answer(stream_call *s) {
    pthread_mutex_lock(&s->mu);
    while (!s->answered) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void stream_end(stream_call *s) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* Checks a finished stream's shape: the answer line (with "lookahead": []), lookahead lines, done last. Fills the
 * answer object (caller deletes), the lookahead ids and the done line's n_evaluated; returns the lookahead count. */
static int parse_stream(const stream_call *s, cJSON **answer, int32_t *la, int32_t *n_evaluated) {
    assert_int_equal(s->status, 200);
    assert_string_equal(s->content_type, "application/x-ndjson");
    assert_false(s->overflow);
    assert_int_equal(s->n_partial, 0); /* every line ends with a newline */
    assert_true(s->n_lines >= 2);
    *answer = cJSON_Parse(s->lines[0]);
    assert_non_null(*answer);
    int32_t none[1];
    assert_int_equal(ids_of(*answer, "lookahead", none, 1), 0);
    int n = 0;
    for (int i = 1; i + 1 < s->n_lines; i++) {
        cJSON *line = cJSON_Parse(s->lines[i]);
        assert_non_null(line);
        assert_int_equal(cJSON_GetArraySize(line), 1); /* {"lookahead": ID} and nothing else */
        la[n++] = int_of(line, "lookahead");
        cJSON_Delete(line);
    }
    cJSON *done = cJSON_Parse(s->lines[s->n_lines - 1]);
    assert_non_null(done);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(done, "done")));
    *n_evaluated = int_of(done, "n_evaluated");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(done, "timings");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tm, "eval_ms")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tm, "queue_ms")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tm, "queue_passes")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tm, "lookahead_ms")));
    cJSON_Delete(done);
    return n;
}

static void assert_same_field(const cJSON *a, const cJSON *b, const char *name) {
    char *x = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(a, name));
    char *y = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(b, name));
    if (!x || !y || strcmp(x, y) != 0) fail_msg("'%s' differs: %s vs %s", name, x ? x : "(none)", y ? y : "(none)");
    free(x);
    free(y);
}

/* ---------------------------------------------------------------- tests */


/* A draft whose first branch the LLM takes (261 378 after [1,403,407]: see docs/protocol.md). */
static void test_stream_matches_plain(void **state) {
    static const char fmt[] = "{\"session\":\"%s\",\"pos\":0,\"tokens\":[1,403,407],\"top_logprobs\":3,\"lookahead\":8,"
                              "\"draft\":[{\"parent\":-1,\"tokens\":[261,378]},{\"parent\":-1,\"tokens\":[5]}]%s}";
    char body[512];
    reply plain;
    snprintf(body, sizeof body, fmt, "plain", "");
    assert_int_equal(post_once(body, &plain), 200);
    assert_string_equal(content_type_of(&plain), "application/json");
    cJSON *p = cJSON_Parse(plain.body);
    assert_non_null(p);
    int32_t plain_la[16];
    const int n_plain_la = ids_of(p, "lookahead", plain_la, 16);
    assert_int_equal(n_plain_la, 8);
    int32_t verify[8];
    assert_true(ids_of(p, "verify", verify, 8) >= 1); /* the walk entered branch 0 */

    snprintf(body, sizeof body, fmt, "streamed", ",\"stream\":true");
    pthread_t th;
    stream_call *s = stream_begin(body, false, &th);
    pthread_join(th, NULL);
    cJSON *answer;
    int32_t la[MAX_LINES], n_evaluated;
    const int n_la = parse_stream(s, &answer, la, &n_evaluated);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(answer, "session")->valuestring, "streamed");
    static const char *const same[] = {"token", "logprob", "top_logprobs", "pos", "verify"};
    for (int i = 0; i < 5; i++) assert_same_field(p, answer, same[i]);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(answer, "n_evaluated")));
    assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(answer, "timings")));
    assert_int_equal(n_la, n_plain_la);
    assert_memory_equal(la, plain_la, sizeof *la * (size_t)n_la);
    assert_int_equal(n_evaluated, int_of(p, "n_evaluated"));
    cJSON_Delete(answer);
    stream_end(s);

    /* Both sessions now hold the same n_evaluated tokens: the next request after them answers alike. */
    char next[256];
    reply a, b;
    snprintf(next, sizeof next, "{\"session\":\"plain\",\"pos\":%d,\"tokens\":[%d]}", n_evaluated, plain_la[7]);
    assert_int_equal(post_once(next, &a), 200);
    snprintf(next, sizeof next, "{\"session\":\"streamed\",\"pos\":%d,\"tokens\":[%d]}", n_evaluated, plain_la[7]);
    assert_int_equal(post_once(next, &b), 200);
    cJSON *ja = cJSON_Parse(a.body), *jb = cJSON_Parse(b.body);
    assert_same_field(ja, jb, "token");
    assert_same_field(ja, jb, "pos");
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    cJSON_Delete(p);
}

static void test_stream_errors(void **state) {
    static const char *const wrong[] = {"1", "\"true\"", "null", "[]", "{}"};
    char body[256];
    reply r;
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "{\"session\":\"e\",\"pos\":0,\"tokens\":[1],\"stream\":%s}", wrong[i]);
        assert_int_equal(post_once(body, &r), 400);
        assert_non_null(strstr(r.body, "\"field\":\"stream\""));
    }
    /* "stream": false is the plain reply. */
    assert_int_equal(post_once("{\"session\":\"e\",\"pos\":0,\"tokens\":[1,403],\"lookahead\":2,\"stream\":false}", &r),
                     200);
    assert_string_equal(content_type_of(&r), "application/json");
    cJSON *j = cJSON_Parse(r.body);
    int32_t la[4];
    assert_int_equal(ids_of(j, "lookahead", la, 4), 2);
    cJSON_Delete(j);
    /* An error before the answer is an ordinary reply: 409 with the server's pos, as JSON. */
    assert_int_equal(post_once("{\"session\":\"e\",\"pos\":9,\"tokens\":[5],\"lookahead\":2,\"stream\":true}", &r), 409);
    assert_string_equal(content_type_of(&r), "application/json");
    j = cJSON_Parse(r.body);
    assert_int_equal(int_of(j, "pos"), 4); /* 2 tokens, the answer and the first lookahead token */
    cJSON_Delete(j);
}

/* The greedy continuation of PROMPT: the answer and 16 lookahead tokens, from a plain request. */
static void reference(int32_t *answer, int32_t *la16) {
    char body[256];
    reply r;
    snprintf(body, sizeof body, "{\"session\":\"ref\",\"pos\":0,\"tokens\":%s,\"lookahead\":16}", PROMPT);
    assert_int_equal(post_once(body, &r), 200);
    cJSON *j = cJSON_Parse(r.body);
    *answer = int_of(j, "token");
    assert_int_equal(ids_of(j, "lookahead", la16, 16), 16);
    cJSON_Delete(j);
}

static void test_stream_superseded(void **state) {
    int32_t ref_answer, ref_la[16];
    reference(&ref_answer, ref_la);
    CURL *warm = curl_easy_init(); /* the newcomer's connection, opened beforehand so it leaves at once */
    reply r;
    post(warm, "{\"session\":\"warm\",\"pos\":0,\"tokens\":[1]}", &r);
    int superseded = 0, attempts = 0;
    /* The worker needs well under a millisecond for 16 lookahead passes of this model, so the newcomer does not
     * always arrive in time; with superseding it does within a few attempts, without it never. */
    for (; attempts < 300 && superseded < 3; attempts++) {
        char body[256], session[32];
        snprintf(session, sizeof session, "sup%d", attempts);
        pthread_t th;
        stream_call *s = stream_prompt(session, false, &th);
        stream_wait_answer(s);
        /* The newcomer keeps the answer: pos 8 + [answer]; its answer is the first lookahead token. */
        snprintf(body, sizeof body, "{\"session\":\"%s\",\"pos\":8,\"tokens\":[%d]}", session, ref_answer);
        assert_int_equal(post(warm, body, &r), 200);
        cJSON *j = cJSON_Parse(r.body);
        assert_int_equal(int_of(j, "token"), ref_la[0]);
        assert_int_equal(int_of(j, "pos"), 9);
        cJSON_Delete(j);
        pthread_join(th, NULL);
        cJSON *answer;
        int32_t la[MAX_LINES], n_evaluated;
        const int n_la = parse_stream(s, &answer, la, &n_evaluated);
        assert_int_equal(int_of(answer, "token"), ref_answer);
        assert_true(n_la <= 16);
        assert_memory_equal(la, ref_la, sizeof *la * (size_t)n_la); /* a prefix of the greedy continuation */
        assert_int_equal(n_evaluated, 8 + n_la);                   /* one pass per lookahead token produced */
        superseded += n_la < 16;
        cJSON_Delete(answer);
        stream_end(s);
    }
    curl_easy_cleanup(warm);
    print_message("superseded %d of %d streams\n", superseded, attempts);
    assert_true(superseded >= 1);
}

/* The route_next streams /metrics counts as ended: completed + failed + abandoned. */
static long streams_ended(void) {
    static reply r;
    assert_int_equal(http_fetch(NULL, port, "GET", "/metrics", NULL, NULL, &r), 200);
    long sum = 0;
    static const char *const outcomes[] = {"completed", "failed", "abandoned"};
    for (int o = 0; o < 3; o++) {
        char key[96];
        snprintf(key, sizeof key, "\ntokroute_streams_total{route=\"route_next\",outcome=\"%s\"} ", outcomes[o]);
        const char *at = strstr(r.body, key);
        if (!at) fail_msg("no %s in /metrics", key + 1);
        sum += strtol(at + strlen(key), NULL, 10);
    }
    return sum;
}

static void test_stream_hang_up(void **state) {
    int32_t ref_answer, ref_la[16];
    reference(&ref_answer, ref_la);
    const long ended_before = streams_ended();
    for (int attempt = 0; attempt < 10; attempt++) {
        char body[256], session[32];
        snprintf(session, sizeof session, "gone%d", attempt);
        pthread_t th;
        stream_call *s = stream_prompt(session, true, &th);
        pthread_join(th, NULL);
        assert_int_equal(s->status, 200);
        assert_int_equal(s->n_lines, 1);
        stream_end(s);
        /* The session is free again and answers right (its stream's job finished, hung up or not). */
        reply r;
        snprintf(body, sizeof body, "{\"session\":\"%s\",\"pos\":8,\"tokens\":[%d],\"lookahead\":1}", session,
                 ref_answer);
        assert_int_equal(post_once(body, &r), 200);
        cJSON *j = cJSON_Parse(r.body);
        assert_int_equal(int_of(j, "token"), ref_la[0]);
        int32_t la[2];
        assert_int_equal(ids_of(j, "lookahead", la, 2), 1);
        assert_int_equal(la[0], ref_la[1]);
        cJSON_Delete(j);
    }
    /* Each of the 10 streams counted once in /metrics, however it ended (its client hung up after the answer). */
    long ended = 0;
    for (int i = 0; i < 100 && (ended = streams_ended() - ended_before) < 10; i++) usleep(20 * 1000);
    assert_int_equal(ended, 10);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_matches_plain),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_stream_superseded),
        cmocka_unit_test(test_stream_hang_up),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
