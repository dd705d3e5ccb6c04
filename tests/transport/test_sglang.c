/* test_sglang.c — the SGLang backend (--sglang) against tests/support/sglang_peer.py, a real HTTP process on
 * 127.0.0.1 answering /generate as SGLang does with values computed by `tokroute logits` on stories260K: scoring a
 * 100-token story equals the embedded backend's (one request, log-probabilities within float rounding), next-token
 * calls equal the embedded greedy tokens and are incremental through the (modelled) radix cache, sampling sends a
 * per-position seed, and broken replies fail with clear errors. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>

#include "support/fixtures.h"
#include "tokroute.h"

#define N_STORY 100
#define TOP_K 8

static tr_model *llm;
static int32_t story[N_STORY + 8];

static int setup(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &llm) != TR_OK) return -1;
    /* The start of a validation story: real text, so the actual tokens are not always the model's first choice. */
    const char *text = "Once upon a time, in a big forest, there lived a rhinoceros named Roxy. Roxy loved to climb. "
                       "She climbed trees, rocks, and hills. One day, Roxy found an icy hill. She had never seen "
                       "anything like it before. It was shiny and cold, and she wanted to climb it. Roxy tried to "
                       "climb the icy hill, but it was very slippery. She tried again and again, but she kept "
                       "falling down. Roxy was sad.";
    tr_tokenize_params tp = tr_tokenize_default_params();
    int32_t n = 0;
    int32_t ids[512];
    if (tr_tokenize(tr_model_vocab(llm), text, strlen(text), &tp, ids, 512, &n) != TR_OK || n < N_STORY) return -1;
    memcpy(story, ids, sizeof story);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tr_model_free(llm);
    return 0;
}

/* ---------------------------------------------------------------- the peer */

typedef struct peer {
    FILE *pipe;
    int port;
    long pid;
    char log[256];
} peer;

/* Starts sglang_peer.py (extra: its --break list, or ""), bounded to 120 s. */
static void peer_start(peer *p, const char *extra) {
    snprintf(p->log, sizeof p->log, "%s", temp_path(".log"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec timeout 120 python3 -u %s/tests/support/sglang_peer.py %s %s --log %s %s",
             TR_SOURCE_DIR, TR_CLI_PATH, shared_path("models/stories260K.gguf"), p->log, extra);
    p->pipe = popen(cmd, "r");
    assert_non_null(p->pipe);
    assert_int_equal(fscanf(p->pipe, "%d %ld", &p->port, &p->pid), 2);
}

static void peer_stop(peer *p) {
    kill((pid_t)p->pid, SIGTERM);
    pclose(p->pipe);
    remove(p->log);
}

static tr_llm_backend *peer_backend(const peer *p) {
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", p->port);
    tr_remote_params rp = tr_remote_default_params();
    rp.url = url;
    rp.retries = 0;
    rp.timeout_ms = 30000;
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_sglang(&rp, &b), TR_OK);
    tr_llm_backend_set_breaker(b, 0, 0); /* each bad reply is judged on its own */
    return b;
}

/* The i-th POST the peer got (its JSON body), copied into buf. */
static const char *nth_post(const peer *p, int i, char *buf, size_t cap) {
    char *log = read_file(p->log, NULL);
    assert_non_null(log);
    const char *at = log;
    for (int k = 0; (at = strstr(at, "REQ POST /generate ")) != NULL; k++, at++) {
        if (k < i) continue;
        const char *body = at + strlen("REQ POST /generate "), *end = strchr(body, '\n');
        const size_t n = end ? (size_t)(end - body) : strlen(body);
        assert_true(n < cap);
        memcpy(buf, body, n);
        buf[n] = '\0';
        free(log);
        return buf;
    }
    fail_msg("the peer got no POST %d", i);
    return NULL;
}

static tr_llm_backend *embedded(void) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    tr_llm_backend *e = NULL;
    assert_int_equal(tr_llm_backend_embedded(llm, &cp, NULL, &e), TR_OK);
    return e;
}

/* ---------------------------------------------------------------- scoring */

/* The call fails with status and a message containing text. */
static void expect_error(tr_status got, tr_status status, const char *text) {
    if (got != status || !strstr(tr_last_error(), text))
        fail_msg("got status %d \"%s\", want %d with \"%s\"", got, tr_last_error(), status, text);
    assert_non_null(strstr(tr_last_error(), "LLM backend sglang"));
}

/* Tolerances. The peer takes log-softmax in float64 of the float32 logits `tokroute logits` writes, as
 * embedded_score does of its own; the two agree to float32 rounding of the result (on this machine exactly: the
 * same kernels on the same batch), and ids may swap only between alternatives within NEAR_TIE of each other. */
#define LP_TOL 1e-4
#define NEAR_TIE 1e-3

static double max_lp_diff;
static int n_swaps;

static void assert_same_position(const tr_llm_position *s, const tr_llm_position *e, int32_t p) {
    assert_int_equal(s->n_top, e->n_top);
    if (isnan(e->logprob)) {
        assert_true(isnan(s->logprob));
    } else {
        const double d = fabs((double)s->logprob - e->logprob);
        if (d > LP_TOL) fail_msg("position %d: log-probability %g vs embedded %g", p, s->logprob, e->logprob);
        max_lp_diff = d > max_lp_diff ? d : max_lp_diff;
    }
    for (int32_t i = 0; i < e->n_top; i++) {
        const double d = fabs((double)s->top_logprobs[i] - e->top_logprobs[i]);
        if (d > LP_TOL) fail_msg("position %d, rank %d: %g vs embedded %g", p, i, s->top_logprobs[i],
                                 e->top_logprobs[i]);
        max_lp_diff = d > max_lp_diff ? d : max_lp_diff;
        if (s->top_ids[i] != e->top_ids[i]) {
            /* A swap between near-equal alternatives: the neighbour holds the other id within NEAR_TIE. */
            const int32_t j = i + 1 < e->n_top && s->top_ids[i] == e->top_ids[i + 1] ? i + 1 : i - 1;
            if (j < 0 || j >= e->n_top || s->top_ids[i] != e->top_ids[j] ||
                fabs((double)e->top_logprobs[i] - e->top_logprobs[j]) > NEAR_TIE)
                fail_msg("position %d, rank %d: token %d vs embedded %d", p, i, s->top_ids[i], e->top_ids[i]);
            n_swaps++;
        }
    }
}

static void score_equals_embedded(void **state) {
    (void)state;
    peer p;
    peer_start(&p, "");
    tr_llm_backend *s = peer_backend(&p), *e = embedded();
    static tr_llm_position out_s[N_STORY + 1], out_e[N_STORY + 1];
    char body[8192];

    /* Every position of the story and the one after it: one request, max_new_tokens 1 for the last. */
    assert_int_equal(tr_llm_score(e, story, N_STORY, 1, N_STORY + 1, TOP_K, out_e), TR_OK);
    if (tr_llm_score(s, story, N_STORY, 1, N_STORY + 1, TOP_K, out_s) != TR_OK) fail_msg("%s", tr_last_error());
    for (int32_t q = 1; q <= N_STORY; q++) assert_same_position(&out_s[q - 1], &out_e[q - 1], q);
    nth_post(&p, 0, body, sizeof body);
    assert_non_null(strstr(body, "\"max_new_tokens\":1"));
    assert_non_null(strstr(body, "\"temperature\":0"));
    assert_non_null(strstr(body, "\"return_logprob\":true"));
    assert_non_null(strstr(body, "\"logprob_start_len\":0"));
    assert_non_null(strstr(body, "\"top_logprobs_num\":8"));
    tr_llm_score_stats st = tr_llm_backend_score_stats(s);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.positions, N_STORY);
    assert_int_equal(st.tokens_evaluated, N_STORY); /* nothing cached yet */
    assert_true(st.bytes_sent > 0 && st.bytes_received > st.bytes_sent);

    /* A middle range: a prefill-only request (max_new_tokens 0), the same values as the first request's. */
    static tr_llm_position mid[30];
    assert_int_equal(tr_llm_score(s, story, N_STORY, 50, 80, TOP_K, mid), TR_OK);
    for (int32_t q = 50; q < 80; q++) assert_same_position(&mid[q - 50], &out_e[q - 1], q);
    nth_post(&p, 1, body, sizeof body);
    assert_non_null(strstr(body, "\"max_new_tokens\":0"));
    assert_int_equal(tr_llm_backend_score_stats(s).requests, 2);

    /* Restricted to the ids below A: SGLang cannot restrict its top list, so spare alternatives are asked for and
     * the ids >= A dropped. A is the smallest bound that leaves every position 8 ids among its unrestricted top 16,
     * so the spares make up for what is dropped; the lists equal the embedded backend's restricted ones (same ids,
     * log-probabilities shifted by a constant per position: the server normalizes over every id). */
    static tr_llm_position wide[10], cut[10], cut_e[10];
    assert_int_equal(tr_llm_score(e, story, 20, 10, 20, 2 * TOP_K, wide), TR_OK);
    int32_t allowed = 512, n_dropped = 0;
    for (bool fits = true; fits && allowed > 1;) {
        for (int32_t q = 0; q < 10 && fits; q++) {
            int32_t below = 0;
            for (int32_t i = 0; i < 2 * TOP_K; i++) below += wide[q].top_ids[i] < allowed - 1;
            fits = below >= TOP_K;
        }
        if (fits) allowed--;
    }
    for (int32_t q = 0; q < 10; q++)
        for (int32_t i = 0; i < TOP_K; i++) n_dropped += wide[q].top_ids[i] >= allowed;
    assert_true(n_dropped > 0); /* ids from the unrestricted top 8 are dropped */
    tr_llm_backend_set_allowed(s, allowed);
    tr_llm_backend_set_allowed(e, allowed);
    if (tr_llm_score(s, story, 20, 10, 20, TOP_K, cut) != TR_OK) fail_msg("%s", tr_last_error());
    assert_int_equal(tr_llm_score(e, story, 20, 10, 20, TOP_K, cut_e), TR_OK);
    nth_post(&p, 2, body, sizeof body);
    assert_non_null(strstr(body, "\"top_logprobs_num\":16"));
    for (int32_t q = 0; q < 10; q++) {
        assert_int_equal(cut[q].n_top, TOP_K);
        assert_memory_equal(cut[q].top_ids, cut_e[q].top_ids, TOP_K * sizeof *cut[q].top_ids);
        const double shift = (double)cut_e[q].top_logprobs[0] - cut[q].top_logprobs[0];
        for (int32_t i = 0; i < TOP_K; i++)
            assert_true(fabs((double)cut_e[q].top_logprobs[i] - cut[q].top_logprobs[i] - shift) < LP_TOL);
    }
    print_message("score restricted to ids < %d: %d of the unrestricted top-%d ids dropped over 10 positions\n",
                  allowed, n_dropped, TOP_K);
    /* Cutting more than the spares make up for: a clear error, not a short list. */
    tr_llm_backend_set_allowed(s, allowed - 40);
    expect_error(tr_llm_score(s, story, 20, 10, 20, TOP_K, cut), TR_ERR_RANGE, "outside the allowed range");
    tr_llm_backend_set_allowed(s, 0);
    print_message("score: max |logprob difference| %.3g over %d positions x (1 + %d), %d near-tie swaps\n",
                  max_lp_diff, N_STORY, TOP_K, n_swaps);
    tr_llm_backend_free(s);
    tr_llm_backend_free(e);
    peer_stop(&p);
}

/* ---------------------------------------------------------------- next token */

static void next_token_equals_embedded(void **state) {
    (void)state;
    peer p;
    peer_start(&p, "");
    tr_llm_backend *s = peer_backend(&p), *e = embedded();
    const int32_t lengths[] = {1, 5, 20, 50, 99};
    char body[8192];
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        int32_t id_s = -1, id_e = -2;
        float lp_s = NAN, lp_e = NAN;
        if (tr_llm_next_token_ex(s, story, lengths[i], &id_s, &lp_s) != TR_OK) fail_msg("%s", tr_last_error());
        assert_int_equal(tr_llm_next_token_ex(e, story, lengths[i], &id_e, &lp_e), TR_OK);
        assert_int_equal(id_s, id_e);
        assert_true(fabs((double)lp_s - lp_e) < LP_TOL);
        nth_post(&p, (int)i, body, sizeof body);
        char want[64];
        snprintf(want, sizeof want, "\"logprob_start_len\":%d", lengths[i] - 1);
        assert_non_null(strstr(body, want));
        assert_non_null(strstr(body, "\"max_new_tokens\":1"));
        assert_non_null(strstr(body, "\"temperature\":0"));
        assert_null(strstr(body, "sampling_seed"));
    }
    /* Routed calls one token apart: the radix cache holds the prefix, so each evaluates one token. */
    int32_t seq[N_STORY + 4];
    memcpy(seq, story, 60 * sizeof *seq);
    int64_t before = tr_llm_backend_stats(s).tokens_evaluated;
    for (int32_t n = 60; n < 64; n++) {
        assert_int_equal(tr_llm_next_token(s, seq, n, &seq[n]), TR_OK);
        int32_t ref = -1;
        assert_int_equal(tr_llm_next_token(e, seq, n, &ref), TR_OK);
        assert_int_equal(seq[n], ref);
        const int64_t now = tr_llm_backend_stats(s).tokens_evaluated;
        if (n > 60) assert_int_equal(now - before, 1);
        before = now;
    }
    tr_llm_backend_free(s);
    tr_llm_backend_free(e);
    peer_stop(&p);
}

/* splitmix64 of (seed, position), as the backend derives a position's seed. */
static uint64_t position_seed(uint64_t seed, int32_t pos) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * ((uint64_t)pos + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void sampling_sends_position_seeds(void **state) {
    (void)state;
    peer p;
    peer_start(&p, "");
    tr_llm_backend *s = peer_backend(&p);
    tr_sampler_params sp = tr_sampler_default_params();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.seed = 42;
    assert_int_equal(tr_llm_backend_set_sampling(s, &sp), TR_OK);
    int32_t a = -1, b = -1, c = -1;
    assert_int_equal(tr_llm_next_token(s, story, 30, &a), TR_OK);
    assert_int_equal(tr_llm_next_token(s, story, 31, &c), TR_OK);
    assert_int_equal(tr_llm_next_token(s, story, 30, &b), TR_OK);
    assert_int_equal(a, b); /* the same (seed, position): the same draw */
    char body[8192], want[96];
    nth_post(&p, 0, body, sizeof body);
    assert_non_null(strstr(body, "\"temperature\":0.8,"));
    assert_non_null(strstr(body, "\"top_k\":40"));
    assert_non_null(strstr(body, "\"top_p\":0.95"));
    snprintf(want, sizeof want, "\"sampling_seed\":%llu", (unsigned long long)(position_seed(42, 30) & 0x7FFFFFFF));
    assert_non_null(strstr(body, want));
    nth_post(&p, 1, body, sizeof body);
    snprintf(want, sizeof want, "\"sampling_seed\":%llu", (unsigned long long)(position_seed(42, 31) & 0x7FFFFFFF));
    assert_non_null(strstr(body, want));
    /* top_k 0 and top_p 1 are "off": -1 and 1 for SGLang. */
    sp.top_k = 0;
    sp.top_p = 1.0f;
    assert_int_equal(tr_llm_backend_set_sampling(s, &sp), TR_OK);
    assert_int_equal(tr_llm_next_token(s, story, 30, &a), TR_OK);
    nth_post(&p, 3, body, sizeof body);
    assert_non_null(strstr(body, "\"top_k\":-1"));
    assert_non_null(strstr(body, "\"top_p\":1,"));
    /* Back to greedy. */
    sp.temperature = 0;
    assert_int_equal(tr_llm_backend_set_sampling(s, &sp), TR_OK);
    assert_int_equal(tr_llm_next_token(s, story, 30, &a), TR_OK);
    nth_post(&p, 4, body, sizeof body);
    assert_null(strstr(body, "sampling_seed"));
    assert_non_null(strstr(body, "\"temperature\":0}"));
    sp.temperature = 1.0f;
    sp.top_p = 1.5f;
    assert_int_equal(tr_llm_backend_set_sampling(s, &sp), TR_ERR_ARG);
    tr_llm_backend_free(s);
    peer_stop(&p);
}

/* ---------------------------------------------------------------- broken replies */

static void bad_next_token_replies(void **state) {
    (void)state;
    peer p;
    peer_start(&p, "--break not-json,no-id,id-mismatch,abort,http-400,http-500,ok,id-big");
    tr_llm_backend *s = peer_backend(&p);
    int32_t id = -1;
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_FORMAT, "not JSON");
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_FORMAT, "names no generated token");
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_FORMAT, "output_token_logprobs[0] names");
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_FORMAT, "The server is overloaded");
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_FORMAT, "HTTP 400: logprob_start_len (7)");
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_NETWORK, "HTTP 500: scheduler crashed");
    assert_int_equal(tr_llm_next_token(s, story, 10, &id), TR_OK); /* the backend still works */
    tr_llm_backend_set_allowed(s, 512);
    expect_error(tr_llm_next_token(s, story, 10, &id), TR_ERR_RANGE, "100000");
    assert_int_equal(tr_llm_backend_stats(s).failures, 7);
    tr_llm_backend_free(s);
    peer_stop(&p);
}

static void bad_score_replies(void **state) {
    (void)state;
    peer p;
    peer_start(&p, "--break short,misaligned,null-lp,top-null,top-bad-id,inf,unordered,not-json,ok");
    tr_llm_backend *s = peer_backend(&p);
    tr_llm_position out[20];
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "input_token_logprobs has 19 entries");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "(a misaligned reply)");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "input_token_logprobs[1] has no");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "no list for position 1");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "input_top_logprobs, position 1");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "input_token_logprobs[1] is not");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "not in descending order");
    expect_error(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_ERR_FORMAT, "not JSON");
    assert_int_equal(tr_llm_score(s, story, 20, 1, 21, 4, out), TR_OK);
    assert_int_equal(tr_llm_backend_score_stats(s).requests, 9);
    tr_llm_backend_free(s);
    peer_stop(&p);
}

/* SGLang reports no vocabulary size: 0 with no error from a live server, 0 with a reason from an absent one. */
static void n_vocab_is_unknown(void **state) {
    (void)state;
    peer p;
    peer_start(&p, "");
    tr_llm_backend *s = peer_backend(&p);
    assert_int_equal(tr_llm_backend_n_vocab(s), 0);
    assert_string_equal(tr_last_error(), "");
    tr_llm_backend_free(s);
    char *log = read_file(p.log, NULL);
    assert_non_null(strstr(log, "REQ GET /get_model_info"));
    free(log);
    peer_stop(&p);

    tr_remote_params rp = tr_remote_default_params();
    rp.url = "http://127.0.0.1:1"; /* nothing listens there */
    rp.retries = 0;
    rp.timeout_ms = 2000;
    assert_int_equal(tr_llm_backend_sglang(&rp, &s), TR_OK);
    assert_int_equal(tr_llm_backend_n_vocab(s), 0);
    assert_true(strlen(tr_last_error()) > 0);
    tr_llm_backend_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(score_equals_embedded),
        cmocka_unit_test(next_token_equals_embedded),
        cmocka_unit_test(sampling_sends_position_seeds),
        cmocka_unit_test(bad_next_token_replies),
        cmocka_unit_test(bad_score_replies),
        cmocka_unit_test(n_vocab_is_unknown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
