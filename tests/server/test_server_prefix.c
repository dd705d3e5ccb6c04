/* test_server_prefix.c — prefix reuse across /v1/completions requests (stories260K): a request that repeats or
 * extends an earlier completion's tokens evaluates only what is new (usage.prompt_tokens_details.cached_tokens), and
 * its tokens and log-probabilities equal those of a fresh evaluation on a server that has cached nothing; chat
 * completions reuse too; concurrent requests for one prefix each get a correct answer; under a KV budget that holds
 * two sessions, the least recently used cached prefix is evicted (and a client's session is not lost for it). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "model/multi.h"
#include "support/fixtures.h"
#include "support/http_call.h"
#include "tokroute.h"

static tr_model *model;

static int load(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    return tr_model_load(shared_path("models/stories260K.gguf"), &mp, &model) == TR_OK ? 0 : -1;
}

static int unload(void **state) {
    (void)state;
    tr_model_free(model);
    return 0;
}

static tr_server *start(int64_t kv_budget_bytes, int *port) {
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    p.n_threads = 1;
    p.n_ctx = 256;
    p.chat_template = TR_CHAT_CHATML;
    if (kv_budget_bytes > 0) p.kv_budget_bytes = kv_budget_bytes;
    tr_server *srv = NULL;
    assert_int_equal(tr_server_start(model, &p, &srv), TR_OK);
    *port = tr_server_port(srv);
    return srv;
}

typedef struct answer {
    int32_t ids[64];
    double logprobs[64];
    int n, cached;
} answer;

/* A prompt of n ids: a fixed walk through the vocabulary from first (prompts from different firsts share none). */
static void prompt_ids(int32_t first, int n, char *out, size_t cap) {
    snprintf(out, cap, "[%d", first);
    for (int i = 1; i < n; i++) snprintf(out + strlen(out), cap - strlen(out), ", %d", (first + i * 37) % 500 + 10);
    snprintf(out + strlen(out), cap - strlen(out), "]");
}

static answer complete(int port, const char *path, const char *body) {
    long status;
    cJSON *j = http_post_json(port, path, body, &status);
    if (status != 200) fprintf(stderr, "%ld: %s\n", status, body);
    assert_int_equal(status, 200);
    answer a = {0};
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    for (const cJSON *t = cJSON_GetObjectItem(choice, "token_ids")->child; t && a.n < 64; t = t->next)
        a.ids[a.n++] = (int32_t)t->valuedouble;
    const cJSON *lp = cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "logprobs"), "token_logprobs");
    int i = 0;
    for (const cJSON *t = lp ? lp->child : NULL; t && i < 64; t = t->next) a.logprobs[i++] = t->valuedouble;
    const cJSON *details = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details");
    a.cached = (int)cJSON_GetObjectItem(details, "cached_tokens")->valuedouble;
    cJSON_Delete(j);
    return a;
}

static void assert_same(const answer *a, const answer *b) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        assert_int_equal(a->ids[i], b->ids[i]);
        assert_true(fabs(a->logprobs[i] - b->logprobs[i]) < 1e-4);
    }
}

static void reuse_equals_fresh(void **state) {
    (void)state;
    int port, fresh_port;
    tr_server *srv = start(0, &port), *fresh = start(0, &fresh_port);
    char ids[2048], body[4096];
    prompt_ids(3, 100, ids, sizeof ids);
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 8, \"temperature\": 0, \"logprobs\": 1}", ids);
    const answer first = complete(port, "/v1/completions", body);
    assert_int_equal(first.cached, 0);
    assert_int_equal(first.n, 8);
    const answer again = complete(port, "/v1/completions", body); /* the same prompt: all but its last token */
    assert_int_equal(again.cached, 99);
    assert_same(&again, &first);
    /* extended by what was generated and 5 more: the parked session holds the prompt + 7 generated tokens */
    ids[strlen(ids) - 1] = 0;
    for (int i = 0; i < first.n; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), ", %d", first.ids[i]);
    strcat(ids, ", 40, 41, 42, 43, 44]");
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 8, \"temperature\": 0, \"logprobs\": 1}", ids);
    const answer longer = complete(port, "/v1/completions", body);
    assert_int_equal(longer.cached, 107);
    const answer ref = complete(fresh_port, "/v1/completions", body);
    assert_int_equal(ref.cached, 0);
    assert_same(&longer, &ref);
    /* a prompt that diverges reuses only the shared part (the parked session: 112 + 7 tokens) */
    prompt_ids(3, 90, ids, sizeof ids);
    ids[strlen(ids) - 1] = 0;
    strcat(ids, ", 7, 8, 9]");
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 4, \"temperature\": 0, \"logprobs\": 1}", ids);
    const answer diverged = complete(port, "/v1/completions", body);
    assert_int_equal(diverged.cached, 90);
    const answer diverged_ref = complete(fresh_port, "/v1/completions", body);
    assert_same(&diverged, &diverged_ref);
    /* one sharing less than half of what a cached prefix holds starts afresh and leaves it */
    prompt_ids(3, 20, ids, sizeof ids);
    ids[strlen(ids) - 1] = 0;
    strcat(ids, ", 7, 8, 9]");
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 4, \"temperature\": 0}", ids);
    assert_int_equal(complete(port, "/v1/completions", body).cached, 0);
    /* chat: the same messages again reuse the rendered prompt */
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story.\"}], \"max_tokens\": 6, "
                       "\"temperature\": 0, \"logprobs\": true}";
    long status;
    cJSON *c1 = http_post_json(port, "/v1/chat/completions", chat, &status);
    assert_int_equal(status, 200);
    cJSON *c2 = http_post_json(port, "/v1/chat/completions", chat, &status);
    assert_int_equal(status, 200);
    const cJSON *u1 = cJSON_GetObjectItem(c1, "usage"), *u2 = cJSON_GetObjectItem(c2, "usage");
    assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(u2, "prompt_tokens_details"), "cached_tokens")
                         ->valuedouble,
                     (int)cJSON_GetObjectItem(u1, "prompt_tokens")->valuedouble - 1);
    char *t1 = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c1, "choices"), 0),
                                                          "token_ids"));
    char *t2 = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c2, "choices"), 0),
                                                          "token_ids"));
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    cJSON_Delete(c1);
    cJSON_Delete(c2);
    tr_server_free(fresh);
    tr_server_free(srv);
}

typedef struct racer {
    int port;
    const char *body;
    answer a;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    long status;
    cJSON *j = http_post_json(r->port, "/v1/completions", r->body, &status);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *ids = cJSON_GetObjectItem(choice, "token_ids");
    for (const cJSON *t = ids ? ids->child : NULL; t && r->a.n < 64; t = t->next)
        r->a.ids[r->a.n++] = status == 200 ? (int32_t)t->valuedouble : -1;
    cJSON_Delete(j);
    return NULL;
}

static void concurrent_requests_share_safely(void **state) {
    (void)state;
    int port;
    tr_server *srv = start(0, &port);
    char ids[2048], body[4096];
    prompt_ids(11, 80, ids, sizeof ids);
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": 6, \"temperature\": 0, \"logprobs\": 1}", ids);
    const answer ref = complete(port, "/v1/completions", body);
    racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){.port = port, .body = body};
        pthread_create(&th[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].a.n, ref.n);
        assert_memory_equal(r[i].a.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n);
    }
    tr_server_free(srv);
}

static void evicted_under_the_budget(void **state) {
    (void)state;
    /* room for two 128-position sessions (and a little), not three */
    const int64_t budget = (int64_t)kv_seq_bytes_for(model, 128) * 2 + 1024;
    int port;
    tr_server *srv = start(budget, &port);
    char ids[3][2048], body[3][4096];
    for (int k = 0; k < 3; k++) {
        prompt_ids(100 * k + 1, 100, ids[k], sizeof ids[k]);
        snprintf(body[k], sizeof body[k], "{\"prompt\": %s, \"max_tokens\": 4, \"temperature\": 0}", ids[k]);
    }
    assert_int_equal(complete(port, "/v1/completions", body[0]).cached, 0);
    assert_int_equal(complete(port, "/v1/completions", body[1]).cached, 0);
    assert_int_equal(complete(port, "/v1/completions", body[1]).cached, 99); /* [1] is the most recent now */
    assert_int_equal(complete(port, "/v1/completions", body[2]).cached, 0);  /* evicts [0] to make room */
    assert_int_equal(complete(port, "/v1/completions", body[0]).cached, 0);  /* gone: evaluated again */
    assert_int_equal(complete(port, "/v1/completions", body[0]).cached, 99);
    /* a client's session is kept over a cached prefix: it stays while completions come and go */
    long status;
    cJSON *j = http_post_json(port, "/v1/route/next", "{\"session\": \"keep\", \"pos\": 0, \"tokens\": [1, 2, 3]}",
                              &status);
    assert_int_equal(status, 200);
    cJSON_Delete(j);
    for (int k = 0; k < 3; k++) complete(port, "/v1/completions", body[k]);
    j = http_post_json(port, "/v1/route/next", "{\"session\": \"keep\", \"pos\": 3, \"tokens\": [4]}", &status);
    assert_int_equal(status, 200);
    cJSON_Delete(j);
    tr_server_free(srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reuse_equals_fresh),
        cmocka_unit_test(concurrent_requests_share_safely),
        cmocka_unit_test(evicted_under_the_budget),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
