/* test_server_score.c — scoring a whole token sequence through POST /v1/completions (prompt_logprobs, echo,
 * return_tokens_as_token_ids, vLLM's response shape) against an in-process server on stories260K, compared with the
 * embedded backend's tr_llm_score on the same model: per position of a ~100-token prompt the same top ids (except
 * where two are within 1e-3 of each other), log-probabilities within 1e-4, the prompt token's rank where the
 * reference can tell it (top 64). max_tokens 1 chooses the token the reference ranks first, with its alternatives.
 * Bad requests (K too big, negative, not an integer, ids out of range, a prompt longer than the context) are 400s
 * naming the field; scoring requests from several threads at once (with a routed completion in between, on a server
 * that scores in small chunks) give exactly the numbers of one at a time. */
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
#include <curl/curl.h>

#include "support/fixtures.h"
#include "tokroute.h"

#define REF_K 64 /* the reference's top list: ranks up to this are checked exactly */

static const char STORY[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
    "One day, she saw a big red ball under a tall tree. She ran to the ball and picked it up. Lily was very happy "
    "and she played with the ball all day. When the sun went down, her mom called her home for dinner.";

static tr_model *model;
static tr_server *srv, *srv_small; /* srv_small scores in chunks of a few rows (max_batch_tokens 7) */
static int port, port_small;
static int32_t n_ctx;
static int32_t prompt[160];
static int32_t n_prompt;

static tr_server *start(int32_t max_batch_tokens, int *port_out) {
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    p.n_threads = 1;
    if (max_batch_tokens > 0) p.max_batch_tokens = max_batch_tokens;
    tr_server *s = NULL;
    if (tr_server_start(model, &p, &s) != TR_OK) return NULL;
    *port_out = tr_server_port(s);
    return s;
}

static int setup(void **state) {
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &model) != TR_OK) return -1;
    const tr_model_info *mi = tr_model_get_info(model);
    n_ctx = mi->n_ctx_train < 4096 ? mi->n_ctx_train : 4096; /* the server's default */
    tr_tokenize_params tp = tr_tokenize_default_params();
    if (tr_tokenize(tr_model_vocab(model), STORY, strlen(STORY), &tp, prompt, 160, &n_prompt) != TR_OK) return -1;
    if (n_prompt > 100) n_prompt = 100;
    if (!(srv = start(0, &port)) || !(srv_small = start(7, &port_small))) return -1;
    return 0;
}

static int teardown(void **state) {
    tr_server_free(srv);
    tr_server_free(srv_small);
    tr_model_free(model);
    return 0;
}

/* ---------------------------------------------------------------- HTTP */

typedef struct reply {
    long status;
    char *body;
    size_t len;
} reply;

static size_t collect(char *d, size_t sz, size_t n, void *u) {
    reply *r = u;
    const size_t k = sz * n;
    char *b = realloc(r->body, r->len + k + 1);
    if (!b) return 0;
    memcpy(b + r->len, d, k);
    r->body = b;
    r->len += k;
    r->body[r->len] = 0;
    return k;
}

/* POSTs body to /v1/completions; returns the parsed reply (NULL when it is not JSON) and its status. */
static cJSON *post(int to_port, const char *body, long *status) {
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", to_port);
    reply r = {0};
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    struct curl_slist *json = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, json);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_cleanup(c);
    curl_slist_free_all(json);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    free(r.body);
    return j;
}

/* A request body: the ids, then the other fields (a JSON fragment without braces). malloc'ed. */
static char *body_of(const int32_t *ids, int32_t n, const char *fields) {
    const size_t cap = (size_t)n * 12 + strlen(fields) + 64;
    char *b = malloc(cap);
    size_t at = (size_t)snprintf(b, cap, "{\"prompt\":[");
    for (int32_t i = 0; i < n; i++) at += (size_t)snprintf(b + at, cap - at, "%s%d", i ? "," : "", ids[i]);
    snprintf(b + at, cap - at, "]%s%s}", fields[0] ? "," : "", fields);
    return b;
}

static cJSON *choice_of(cJSON *root) {
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    assert_non_null(ch);
    return ch;
}

/* ---------------------------------------------------------------- the reference */

/* The embedded backend's scoring of ids: positions 1 .. n (n: the token after them), top REF_K. */
static tr_llm_position *reference(const int32_t *ids, int32_t n) {
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = 1;
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_embedded(model, &cp, NULL, &b), TR_OK);
    tr_llm_position *out = calloc((size_t)n, sizeof *out);
    assert_int_equal(tr_llm_score(b, ids, n, 1, n + 1, REF_K, out), TR_OK);
    tr_llm_backend_free(b);
    return out;
}

/* The reference's log-probability of id at a position (NAN when it is not in the top REF_K). */
static double ref_logprob(const tr_llm_position *r, int32_t id) {
    for (int32_t i = 0; i < r->n_top; i++)
        if (r->top_ids[i] == id) return r->top_logprobs[i];
    return NAN;
}

static char *piece(int32_t id) {
    static char buf[64];
    int32_t n = tr_token_to_piece(tr_model_vocab(model), id, true, buf, (int32_t)sizeof buf - 1);
    buf[n < 0 ? 0 : n] = 0;
    return buf;
}

static double max_lp_diff;

/* One position's entry of prompt_logprobs against the reference: K or K + 1 keys, the token's own entry with its
 * true rank, the ranks 1..K the reference's top K (ids equal or within 1e-3 of each other), log-probabilities
 * within 1e-4, decoded_token the token's text. */
static void check_position(const cJSON *entry, int32_t token, int32_t k, const tr_llm_position *ref) {
    assert_true(cJSON_IsObject(entry));
    const int n_keys = cJSON_GetArraySize(entry);
    int32_t by_rank[REF_K + 2];
    for (int i = 0; i <= REF_K + 1; i++) by_rank[i] = -1;
    bool has_token = false;
    int token_rank = 0;
    for (const cJSON *e = entry->child; e; e = e->next) {
        char *end = NULL;
        const long id = strtol(e->string, &end, 10);
        assert_true(*end == 0 && id >= 0 && id < 512);
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(e, "logprob");
        const cJSON *rank = cJSON_GetObjectItemCaseSensitive(e, "rank");
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(e, "decoded_token");
        assert_true(cJSON_IsNumber(lp) && cJSON_IsNumber(rank) && cJSON_IsString(dec));
        assert_string_equal(dec->valuestring, piece((int32_t)id));
        const int r = (int)rank->valuedouble;
        assert_true(r >= 1);
        if (id == token) {
            has_token = true;
            token_rank = r;
            const double d = fabs(lp->valuedouble - ref->logprob);
            if (d > max_lp_diff) max_lp_diff = d;
            assert_true(d < 1e-4);
            const double ref_lp = ref_logprob(ref, token);
            if (isnan(ref_lp)) {
                assert_true(r > REF_K);
            } else { /* its rank is its place in the reference's list, up to a near-tie */
                assert_true(r <= REF_K);
                assert_true(ref->top_ids[r - 1] == token || fabs(ref->top_logprobs[r - 1] - ref_lp) < 1e-3);
            }
        }
        if (r <= k) {
            assert_int_equal(by_rank[r], -1); /* one id per rank */
            by_rank[r] = (int32_t)id;
            const double d = fabs(lp->valuedouble - ref->top_logprobs[r - 1]);
            if (d > max_lp_diff) max_lp_diff = d;
            assert_true(d < 1e-4);
            if (ref->top_ids[r - 1] != id) {
                const double other = ref_logprob(ref, (int32_t)id);
                assert_false(isnan(other));
                assert_true(fabs(other - ref->top_logprobs[r - 1]) < 1e-3);
            }
        } else {
            assert_int_equal(id, token); /* the only entry ranked after the top K */
        }
    }
    assert_true(has_token);
    for (int32_t r = 1; r <= k; r++) assert_true(by_rank[r] >= 0);
    assert_int_equal(n_keys, token_rank <= k ? k : k + 1); /* the token beside the top K when not in it */
}

/* Checks a whole prompt_logprobs array for ids against the reference. */
static void check_prompt_logprobs(const cJSON *pl, const int32_t *ids, int32_t n, int32_t k,
                                  const tr_llm_position *ref) {
    assert_true(cJSON_IsArray(pl));
    assert_int_equal(cJSON_GetArraySize(pl), n);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(pl, 0)));
    for (int32_t p = 1; p < n; p++) check_position(cJSON_GetArrayItem(pl, p), ids[p], k, &ref[p - 1]);
}

/* ---------------------------------------------------------------- tests */

static void test_prompt_logprobs_match_embedded(void **state) {
    assert_true(n_prompt >= 90);
    tr_llm_position *ref = reference(prompt, n_prompt);
    const int32_t ks[] = {0, 1, 8, 64};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        char fields[96];
        snprintf(fields, sizeof fields, "\"max_tokens\":0,\"prompt_logprobs\":%d", ks[t]);
        char *body = body_of(prompt, n_prompt, fields);
        long status = 0;
        cJSON *root = post(port, body, &status);
        free(body);
        assert_int_equal(status, 200);
        cJSON *ch = choice_of(root);
        check_prompt_logprobs(cJSON_GetObjectItemCaseSensitive(ch, "prompt_logprobs"), prompt, n_prompt, ks[t], ref);
        const cJSON *pids = cJSON_GetObjectItemCaseSensitive(ch, "prompt_token_ids");
        assert_int_equal(cJSON_GetArraySize(pids), n_prompt);
        for (int32_t i = 0; i < n_prompt; i++)
            assert_int_equal((int32_t)cJSON_GetArrayItem(pids, i)->valuedouble, prompt[i]);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ch, "token_ids")), 0);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(ch, "text")->valuestring, "");
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ch, "logprobs")));
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
        assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens")->valuedouble, n_prompt);
        assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens")->valuedouble, 0);
        cJSON_Delete(root);
    }
    print_message("prompt_logprobs vs embedded: %d positions, max |difference| %.3g\n", n_prompt - 1, max_lp_diff);
    free(ref);
}

/* max_tokens 1 with prompt_logprobs: one pass scores the prompt and chooses the token after it, the reference's
 * first; logprobs 5 lists its alternatives as "token_id:N" (return_tokens_as_token_ids); a plain completion
 * (no scoring, the session path) chooses the same token. */
static void test_one_generated_token(void **state) {
    tr_llm_position *ref = reference(prompt, n_prompt);
    const tr_llm_position *after = &ref[n_prompt - 1];
    char *body = body_of(prompt, n_prompt, "\"max_tokens\":1,\"temperature\":0,\"prompt_logprobs\":3,\"logprobs\":5,"
                                           "\"return_tokens_as_token_ids\":true");
    long status = 0;
    cJSON *root = post(port, body, &status);
    free(body);
    assert_int_equal(status, 200);
    cJSON *ch = choice_of(root);
    check_prompt_logprobs(cJSON_GetObjectItemCaseSensitive(ch, "prompt_logprobs"), prompt, n_prompt, 3, ref);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(ch, "token_ids");
    assert_int_equal(cJSON_GetArraySize(ids), 1);
    const int32_t token = (int32_t)cJSON_GetArrayItem(ids, 0)->valuedouble;
    assert_int_equal(token, after->top_ids[0]);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(ch, "logprobs");
    char name[32];
    snprintf(name, sizeof name, "token_id:%d", token);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, "tokens"), 0)->valuestring, name);
    assert_true(fabs(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"), 0)->valuedouble -
                     after->top_logprobs[0]) < 1e-4);
    const cJSON *alt = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), 0);
    assert_int_equal(cJSON_GetArraySize(alt), 5);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "token_id:%d", after->top_ids[i]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(alt, name);
        assert_non_null(v);
        assert_true(fabs(v->valuedouble - after->top_logprobs[i]) < 1e-4);
    }
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ch, "finish_reason")->valuestring, "length");
    cJSON_Delete(root);

    body = body_of(prompt, n_prompt, "\"max_tokens\":1,\"temperature\":0");
    root = post(port, body, &status);
    free(body);
    assert_int_equal(status, 200);
    ch = choice_of(root);
    assert_int_equal((int32_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ch, "token_ids"), 0)->valuedouble,
                     token);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ch, "prompt_logprobs")));
    cJSON_Delete(root);
    free(ref);
}

/* echo with logprobs and max_tokens 0: the text is the prompt decoded, the logprobs object lists the prompt's
 * tokens (the first with null), as vLLM; prompt_logprobs comes with K = logprobs. */
static void test_echo(void **state) {
    tr_llm_position *ref = reference(prompt, n_prompt);
    char *body = body_of(prompt, n_prompt, "\"max_tokens\":0,\"echo\":true,\"logprobs\":2");
    long status = 0;
    cJSON *root = post(port, body, &status);
    free(body);
    assert_int_equal(status, 200);
    cJSON *ch = choice_of(root);
    char *text = NULL;
    assert_int_equal(tr_detokenize(tr_model_vocab(model), prompt, n_prompt, true, false, &text), TR_OK);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ch, "text")->valuestring, text);
    free(text);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(ch, "logprobs");
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *tlp = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    assert_int_equal(cJSON_GetArraySize(toks), n_prompt);
    assert_int_equal(cJSON_GetArraySize(tlp), n_prompt);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(tlp, 0)) && cJSON_IsNull(cJSON_GetArrayItem(top, 0)));
    for (int32_t p = 1; p < n_prompt; p++) {
        assert_string_equal(cJSON_GetArrayItem(toks, p)->valuestring, piece(prompt[p]));
        assert_true(fabs(cJSON_GetArrayItem(tlp, p)->valuedouble - ref[p - 1].logprob) < 1e-4);
        const int n_alt = cJSON_GetArraySize(cJSON_GetArrayItem(top, p));
        assert_true(n_alt >= 2 && n_alt <= 3);
    }
    check_prompt_logprobs(cJSON_GetObjectItemCaseSensitive(ch, "prompt_logprobs"), prompt, n_prompt, 2, ref);
    cJSON_Delete(root);
    free(ref);
}

static void test_one_token_prompt(void **state) {
    long status = 0;
    cJSON *root = post(port, "{\"prompt\":[1],\"max_tokens\":0,\"prompt_logprobs\":5}", &status);
    assert_int_equal(status, 200);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(choice_of(root), "prompt_logprobs");
    assert_int_equal(cJSON_GetArraySize(pl), 1);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(pl, 0)));
    cJSON_Delete(root);
}

/* A 400 naming field whose message holds words. */
static void expect_400(const char *body, const char *field, const char *words) {
    long status = 0;
    cJSON *root = post(port, body, &status);
    assert_int_equal(status, 400);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "field")->valuestring, field);
    const char *msg = cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring;
    if (!strstr(msg, words)) fail_msg("message \"%s\" lacks \"%s\"", msg, words);
    cJSON_Delete(root);
}

static void test_bad_requests(void **state) {
    expect_400("{\"prompt\":[1,2,3],\"max_tokens\":0,\"prompt_logprobs\":65}", "prompt_logprobs",
               "Requested prompt logprobs of 65, which is greater than max allowed: 64");
    expect_400("{\"prompt\":[1,2,3],\"max_tokens\":0,\"prompt_logprobs\":-1}", "prompt_logprobs", "from 0 to 64");
    expect_400("{\"prompt\":[1,2,3],\"max_tokens\":0,\"prompt_logprobs\":2.5}", "prompt_logprobs", "integer");
    expect_400("{\"prompt\":[1,2,3],\"max_tokens\":0,\"prompt_logprobs\":\"3\"}", "prompt_logprobs", "integer");
    expect_400("{\"prompt\":[1,512,3],\"max_tokens\":0,\"prompt_logprobs\":1}", "prompt",
               "prompt[1] is not a token id from 0 to 511");
    expect_400("{\"prompt\":[1,-4],\"max_tokens\":0,\"prompt_logprobs\":1}", "prompt", "prompt[1] is not a token id");
    expect_400("{\"prompt\":[1,2],\"max_tokens\":0,\"prompt_logprobs\":1,\"stream\":true}", "prompt_logprobs",
               "stream");
    expect_400("{\"prompt\":[1,2],\"max_tokens\":0,\"echo\":3}", "echo", "true or false");
    expect_400("{\"prompt\":[1,2],\"max_tokens\":0,\"return_tokens_as_token_ids\":\"yes\"}",
               "return_tokens_as_token_ids", "true or false");
    /* Longer than the context: refused; exactly the context: scored with max_tokens 0, refused with 1. */
    int32_t *ids = malloc((size_t)(n_ctx + 1) * sizeof *ids);
    for (int32_t i = 0; i <= n_ctx; i++) ids[i] = prompt[i % n_prompt];
    char *body = body_of(ids, n_ctx + 1, "\"max_tokens\":0,\"prompt_logprobs\":0");
    char words[64];
    snprintf(words, sizeof words, "exceed the context of %d tokens", n_ctx);
    expect_400(body, "prompt", words);
    free(body);
    body = body_of(ids, n_ctx, "\"max_tokens\":1,\"prompt_logprobs\":0");
    expect_400(body, "prompt", "fills the context");
    free(body);
    body = body_of(ids, n_ctx, "\"max_tokens\":0,\"prompt_logprobs\":0");
    long status = 0;
    cJSON *root = post(port, body, &status);
    free(body);
    assert_int_equal(status, 200);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(choice_of(root), "prompt_logprobs");
    assert_int_equal(cJSON_GetArraySize(pl), n_ctx);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(pl, n_ctx - 1)), 1); /* K = 0: the token alone */
    cJSON_Delete(root);
    free(ids);
}

/* ---------------------------------------------------------------- at once */

typedef struct job {
    int to_port;
    char *body;
    pthread_barrier_t *go;
    long status;
    char *result; /* choices[0].prompt_logprobs (scoring) or token_ids, printed */
} job;

static char *result_of(cJSON *root) {
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(ch, "prompt_logprobs");
    return cJSON_PrintUnformatted(cJSON_IsArray(pl) ? pl : cJSON_GetObjectItemCaseSensitive(ch, "token_ids"));
}

static void *run_job(void *arg) {
    job *j = arg;
    if (j->go) pthread_barrier_wait(j->go);
    cJSON *root = post(j->to_port, j->body, &j->status);
    j->result = root ? result_of(root) : NULL;
    cJSON_Delete(root);
    return NULL;
}

/* Two scoring requests (different prompts) and a routed completion, at once, several times, on the server that
 * scores in chunks of 7 rows (interleaved with the completion's passes) and on the default one: each gives exactly
 * what it gives alone, and the chunked scoring equals the one-pass scoring. */
static void test_concurrent_scoring(void **state) {
    int32_t other[100];
    for (int32_t i = 0; i < n_prompt; i++) other[i] = prompt[n_prompt - 1 - i];
    other[0] = 1;
    char *bodies[3] = {body_of(prompt, n_prompt, "\"max_tokens\":0,\"prompt_logprobs\":16"),
                       body_of(other, n_prompt, "\"max_tokens\":1,\"temperature\":0,\"prompt_logprobs\":4"),
                       body_of(prompt, 20, "\"max_tokens\":12,\"temperature\":0")};
    char *alone[3];
    for (int k = 0; k < 3; k++) {
        job j = {.to_port = port, .body = bodies[k]};
        run_job(&j);
        assert_int_equal(j.status, 200);
        alone[k] = j.result;
    }
    const int ports[2] = {port_small, port};
    for (int round = 0; round < 6; round++) {
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 3);
        job jobs[3];
        pthread_t th[3];
        for (int k = 0; k < 3; k++) {
            jobs[k] = (job){.to_port = ports[round % 2], .body = bodies[k], .go = &go};
            pthread_create(&th[k], NULL, run_job, &jobs[k]);
        }
        for (int k = 0; k < 3; k++) pthread_join(th[k], NULL);
        pthread_barrier_destroy(&go);
        for (int k = 0; k < 3; k++) {
            assert_int_equal(jobs[k].status, 200);
            assert_non_null(jobs[k].result);
            assert_string_equal(jobs[k].result, alone[k]);
            free(jobs[k].result);
        }
    }
    for (int k = 0; k < 3; k++) {
        free(alone[k]);
        free(bodies[k]);
    }
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_logprobs_match_embedded),
        cmocka_unit_test(test_one_generated_token),
        cmocka_unit_test(test_echo),
        cmocka_unit_test(test_one_token_prompt),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_concurrent_scoring),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
