/* test_server_burst.c — the scheduler's order while a long prompt is prefilled over many passes (issue 34), counted
 * in forward passes, not timed: another session's short call waits at most for the pass in flight, another
 * session's shorter prompt is not held until the long one ends, both answer as a lone sequence would, and /metrics
 * shows the waits (tokroute_queue_wait_passes). Model: stories260K, 4 rows per pass so that a 480-token prompt
 * takes more than a hundred passes; with batching off too (one session a pass), the prompt keeps moving. And the
 * plan's rules on a queue built here: a burst's short prompts end beside the calls, a long one gets the share. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/scheduler_internal.h" /* the plan's rules, on a queue built here */
#include "server/server_internal.h"
#include "support/server_fixture.h"

#define LONG_TOKENS 480
#define BATCH_ROWS 4
#define ATTEMPTS 5 /* a loaded machine may run the whole long prompt before the other call is queued: try again */

static tr_model *model;
static server_metrics metrics;

static int setup(void **state) {
    metrics_init(&metrics);
    return server_fixture_load(&model);
}

static int teardown(void **state) { return server_fixture_free(model, NULL); }

static scheduler *make_batching(bool batch) {
    sched_params p = server_fixture_sched_params();
    p.max_batch_tokens = BATCH_ROWS;
    p.batch = batch;
    scheduler *s = server_fixture_scheduler(model, &metrics, p);
    assert_non_null(s);
    return s;
}

static scheduler *make(void) { return make_batching(true); }

static int64_t passes_so_far(void) {
    pthread_mutex_lock(&metrics.mu);
    const int64_t v = metrics.passes;
    pthread_mutex_unlock(&metrics.mu);
    return v;
}

/* One call; its status, with the answer and the passes it waited in *res. */
static int call(scheduler *s, const char *session_id, int32_t pos, const int32_t *tokens, int32_t n,
                route_result *res) {
    route_request r = {0};
    snprintf(r.session, sizeof r.session, "%s", session_id);
    r.pos = pos;
    r.tokens = (int32_t *)tokens;
    r.n_tokens = n;
    r.n_vocab = tr_model_get_info(model)->n_vocab;
    r.samp.top_p = 1;
    api_error err;
    return scheduler_route(s, &r, res, &err);
}

static int32_t reference(const int32_t *tokens, int32_t n) { return server_fixture_greedy(model, tokens, n); }

static void fill(int32_t *p, int32_t n, int32_t salt) {
    for (int32_t i = 0; i < n; i++) p[i] = 1 + (i * 37 + salt * 101) % 511;
}

typedef struct long_call {
    scheduler *s;
    char session[16];
    int32_t tokens[LONG_TOKENS];
    route_result res;
    int status;
    atomic_bool done;
} long_call;

static void *long_main(void *arg) {
    long_call *lc = arg;
    lc->status = call(lc->s, lc->session, 0, lc->tokens, LONG_TOKENS, &lc->res);
    atomic_store(&lc->done, true);
    return NULL;
}

/* Starts the long prompt on its own thread and returns once its first pass has run (false: it never did). */
static bool start_long(scheduler *s, long_call *lc, pthread_t *th, int attempt) {
    lc->s = s;
    snprintf(lc->session, sizeof lc->session, "long%d", attempt);
    fill(lc->tokens, LONG_TOKENS, attempt);
    atomic_init(&lc->done, false);
    const int64_t p0 = passes_so_far();
    assert_int_equal(pthread_create(th, NULL, long_main, lc), 0);
    for (int i = 0; i < 100000 && passes_so_far() == p0 && !atomic_load(&lc->done); i++) usleep(100);
    return passes_so_far() > p0;
}

static void finish_long(long_call *lc, pthread_t th) {
    pthread_join(th, NULL);
    assert_int_equal(lc->status, 200);
    assert_int_equal(lc->res.token, reference(lc->tokens, LONG_TOKENS));
}

/* Calls of 2 tokens on another session while the long prompt is prefilled: each one that ended before the prompt
 * did waited for at most the pass in flight when it came (in arrival order it waited for every pass of the
 * prompt's rest, more than a hundred). */
static void test_call_beside_long_prompt(void **state) {
    scheduler *s = make();
    int overlapped = 0;
    for (int attempt = 0; attempt < ATTEMPTS && overlapped == 0; attempt++) {
        long_call *lc = calloc(1, sizeof *lc);
        pthread_t th;
        assert_true(start_long(s, lc, &th, attempt));
        char name[16];
        snprintf(name, sizeof name, "short%d", attempt);
        int32_t seq[64];
        fill(seq, 64, 7 + attempt);
        for (int32_t pos = 0; pos + 2 <= 64 && !atomic_load(&lc->done); pos += 2) {
            route_result res;
            assert_int_equal(call(s, name, pos, seq + pos, 2, &res), 200);
            assert_in_range(res.queue_passes, 0, 1);
            assert_int_equal(res.token, reference(seq, pos + 2));
            if (atomic_load(&lc->done)) break; /* the prompt may have ended first: this one proves nothing */
            overlapped++;
        }
        finish_long(lc, th);
        free(lc);
    }
    assert_true(overlapped > 0);
    scheduler_free(s);
}

/* Another session's prompt of 40 tokens (more than a call's rows, so itself prefilled over passes) that arrives
 * while the long one is prefilled starts at the next pass and ends before it. */
static void test_prompt_beside_long_prompt(void **state) {
    scheduler *s = make();
    bool proved = false;
    for (int attempt = 0; attempt < ATTEMPTS && !proved; attempt++) {
        long_call *lc = calloc(1, sizeof *lc);
        pthread_t th;
        assert_true(start_long(s, lc, &th, 10 + attempt));
        char name[16];
        snprintf(name, sizeof name, "prompt%d", attempt);
        int32_t p[40];
        fill(p, 40, 3 + attempt);
        route_result res;
        assert_int_equal(call(s, name, 0, p, 40, &res), 200);
        assert_in_range(res.queue_passes, 0, 1);
        assert_int_equal(res.token, reference(p, 40));
        proved = !atomic_load(&lc->done); /* else the long prompt may have ended before this one came */
        finish_long(lc, th);
        free(lc);
    }
    assert_true(proved);
    scheduler_free(s);
}

/* A caller that keeps its session's calls coming until the long prompt is done (bounded). */
typedef struct caller {
    scheduler *s;
    const long_call *lc;
    char session[16];
    atomic_int n_calls; /* read by the test's thread while the caller runs */
    int32_t max_wait;
} caller;

#define CALLER_MAX_CALLS 2000

static void *caller_main(void *arg) {
    caller *c = arg;
    int32_t seq[2];
    for (int32_t pos = 0; atomic_load(&c->n_calls) < CALLER_MAX_CALLS && !atomic_load(&c->lc->done); pos += 2) {
        if (pos + 2 > 500) pos = 0; /* starts the session over before its context is full */
        fill(seq, 2, pos + c->session[0]);
        route_result res;
        if (call(c->s, c->session, pos, seq, 2, &res) != 200) break;
        atomic_fetch_add(&c->n_calls, 1);
        if (res.queue_passes > c->max_wait) c->max_wait = res.queue_passes;
    }
    return NULL;
}

/* With batching off (--no-batch: one session a pass) a prompt keeps moving while other sessions' calls keep
 * coming: calls and prompts take turns, so the long prompt's 120 passes of its own take at most twice as many
 * passes in all (were calls always first, two callers, each calling again while the other's pass runs, would hold
 * it until they stop: thousands of passes), and a call waits for at most its turn behind the other caller and the
 * prompt. Counted in passes, not timed. */
static void test_prompt_moves_without_batching(void **state) {
    scheduler *s = make_batching(false);
    bool proved = false;
    for (int attempt = 0; attempt < ATTEMPTS && !proved; attempt++) {
        long_call *lc = calloc(1, sizeof *lc);
        caller callers[2];
        pthread_t th, cth[2];
        /* The callers first, so that calls wait from the prompt's first pass on. */
        lc->s = s;
        snprintf(lc->session, sizeof lc->session, "nb%d", attempt);
        fill(lc->tokens, LONG_TOKENS, 20 + attempt);
        atomic_init(&lc->done, false);
        for (int i = 0; i < 2; i++) {
            memset(&callers[i], 0, sizeof callers[i]);
            callers[i].s = s;
            callers[i].lc = lc;
            atomic_init(&callers[i].n_calls, 0);
            snprintf(callers[i].session, sizeof callers[i].session, "%c%d", 'a' + i, attempt);
            assert_int_equal(pthread_create(&cth[i], NULL, caller_main, &callers[i]), 0);
        }
        while (atomic_load(&callers[0].n_calls) + atomic_load(&callers[1].n_calls) < 4) usleep(100);
        assert_int_equal(pthread_create(&th, NULL, long_main, lc), 0);
        pthread_join(th, NULL);
        const int32_t passes = lc->res.span_passes, own = LONG_TOKENS / BATCH_ROWS;
        for (int i = 0; i < 2; i++) pthread_join(cth[i], NULL);
        assert_int_equal(lc->status, 200);
        assert_int_equal(lc->res.token, reference(lc->tokens, LONG_TOKENS));
        print_message("attempt %d: %d passes from the prompt's queueing to its answer (%d of its own); longest call "
                      "wait %d, %d passes\n", attempt, passes, own, callers[0].max_wait, callers[1].max_wait);
        assert_true(passes <= 2 * own + 2);
        for (int i = 0; i < 2; i++) assert_in_range(callers[i].max_wait, 0, 3);
        /* Proved only when calls kept coming throughout (a loaded machine may stall the callers): many passes of
         * theirs among the prompt's. */
        proved = passes - own >= own / 4;
        free(lc);
    }
    assert_true(proved);
    scheduler_free(s);
}

/* A scheduler whose pass cost was measured as 25 ms fixed + 1 ms a row (passes of up to 512 rows), with n_calls
 * calls of 8 tokens queued first, already in the pass (calls first), then n_prompts prompts of prompt_tokens, not
 * started. One static queue: each call replaces the last. */
static scheduler *plan_queue(int n_calls, int n_prompts, int32_t prompt_tokens) {
    static scheduler s;
    static job jobs[64];
    static route_request reqs[64];
    memset(&s, 0, sizeof s);
    s.p.max_batch_tokens = 512;
    for (int32_t rows = 64; rows <= 512; rows *= 2) plan_observe_pass(&s, rows, 25.0 + rows);
    job **tail = &s.queue;
    for (int i = 0; i < n_calls + n_prompts; i++) {
        const int32_t n = i < n_calls ? 8 : prompt_tokens;
        reqs[i] = (route_request){.n_tokens = n};
        jobs[i] = (job){.kind = JOB_ROUTE, .req = &reqs[i], .runnable = true, .n_feed = n, .chunk = i < n_calls ? n : 0};
        *tail = &jobs[i];
        tail = &jobs[i].next;
    }
    return &s;
}

/* The plan's prompt order on a queue built by plan_queue: a pass of 512 rows whose cost was measured as 25 ms fixed +
 * 1 ms a row. n_calls calls of 8 tokens queue first, then n_prompts prompts of prompt_tokens (not started); returns the
 * prompt rows the plan puts beside the calls and how many of the prompts end in the pass (*n_ending). */
static int32_t plan_prompt_rows_beside(int n_calls, int n_prompts, int32_t prompt_tokens, int *n_ending) {
    scheduler *s = plan_queue(n_calls, n_prompts, prompt_tokens);
    const int32_t call_rows = 8 * n_calls;
    int32_t budget = plan_prompt_rows(s, call_rows, n_calls > 0), rows = call_rows, max_rows;
    *n_ending = 0;
    for (job *j; rows < 512 && (j = plan_next_prompt(s, budget, 512 - rows, &max_rows));) {
        j->chunk = plan_rows_left(j) < max_rows ? plan_rows_left(j) : max_rows;
        *n_ending += j->chunk == plan_rows_left(j);
        rows += j->chunk;
        budget -= j->chunk;
    }
    return rows - call_rows;
}

/* A burst: 16 sessions' 64-token prompts came together, the first pass took 8 of them, and their 8 sessions' calls
 * are back. The calls join the pass first, and the 7 prompts that fit in the rest end in it too (the last one in the
 * next pass), as llama-server's round would take every waiting prompt: held to the share (200 rows here: three
 * prompts and a chunk of a fourth), the burst's last prompts waited for passes of the sessions served first, and
 * the all-calls p99 of a burst was theirs. A long prompt beside the same calls still gets only that share (the
 * calls' wait stays a pass of about three times their own cost), and so does a prompt that does not end. */
static void test_burst_prompts_end_beside_calls(void **state) {
    int n_ending;
    assert_int_equal(plan_prompt_rows_beside(8, 8, 64, &n_ending), 448);
    assert_int_equal(n_ending, 7);
    /* The share: 8 times the fixed cost's worth of rows, more than twice the calls' cost (178 rows). */
    assert_int_equal(plan_prompt_rows_beside(8, 1, 4000, &n_ending), 200);
    assert_int_equal(n_ending, 0);
    assert_int_equal(plan_prompt_rows_beside(8, 2, 460, &n_ending), 200);
    assert_int_equal(n_ending, 0);
    /* No calls and none due, and all the prompts fit: they take what they need, each whole. */
    assert_int_equal(plan_prompt_rows_beside(0, 7, 64, &n_ending), 448);
    assert_int_equal(n_ending, 7);
}

/* The first two passes of a burst of n prompts of prompt_tokens (16 sessions' 64-token prompts: 1,024 rows, two
 * passes of 512) with no call in them or due, filled by the plan as fill_pass does; the prompts ending in each pass
 * and the fewest and most rows a prompt took in the first. */
static void burst_passes(int n, int32_t prompt_tokens, int ending[2], int32_t *min_chunk, int32_t *max_chunk) {
    scheduler *s = plan_queue(0, n, prompt_tokens);
    *min_chunk = 512;
    *max_chunk = 0;
    for (int pass = 0; pass < 2; pass++) {
        int32_t budget = plan_prompt_rows(s, 0, false), rows = 0, max_rows;
        ending[pass] = 0;
        for (job *j; rows < 512 && (j = plan_next_prompt(s, budget, 512 - rows, &max_rows));) {
            j->started = true; /* admit: the job's feed is its tokens */
            j->chunk = plan_rows_left(j) < max_rows ? plan_rows_left(j) : max_rows;
            ending[pass] += j->chunk == plan_rows_left(j);
            if (pass == 0) {
                *min_chunk = j->chunk < *min_chunk ? j->chunk : *min_chunk;
                *max_chunk = j->chunk > *max_chunk ? j->chunk : *max_chunk;
            }
            rows += j->chunk;
            budget -= j->chunk;
        }
        /* the pass ran: the chunks are fed, the ended prompts leave the queue (their sessions' calls come later) */
        for (job **pp = &s->queue; *pp;) {
            job *j = *pp;
            j->fed += j->chunk;
            j->chunk = 0;
            if (j->fed == j->n_feed) *pp = j->next;
            else pp = &j->next;
        }
    }
}

/* A burst whose short prompts do not all fit in the first pass: they share it in equal chunks and all end in the
 * second, so no session's calls start while the rest of the burst's prompts still fill passes beside them. Before,
 * the first pass took 8 of 16 prompts whole; the first 8 sessions' first calls then waited for a pass holding the
 * other prompts (448 rows: the other-calls p99 of bench/serve_fair.sh's 64-token bursts at N = 16), and the last prompt
 * ended a pass later still. */
static void test_burst_prompts_share_first_pass(void **state) {
    int ending[2];
    int32_t lo, hi;
    burst_passes(16, 64, ending, &lo, &hi);
    print_message("16 x 64: %d then %d prompts end; first-pass chunks %d-%d rows\n", ending[0], ending[1], lo, hi);
    assert_int_equal(ending[0], 0);
    assert_int_equal(ending[1], 16);
    assert_int_equal(lo, 32);
    assert_int_equal(hi, 32);
    /* Uneven: 20 prompts of 40 rows (800): 25-26 rows each first, 14-15 left, all end in the second pass. */
    burst_passes(20, 40, ending, &lo, &hi);
    assert_int_equal(ending[0], 0);
    assert_int_equal(ending[1], 20);
    assert_in_range(lo, 25, 26);
    assert_in_range(hi, 25, 26);
    /* Prompts that all fit take what they need, each whole, as before. */
    burst_passes(4, 64, ending, &lo, &hi);
    assert_int_equal(ending[0], 4);
    assert_int_equal(lo, 64);
}

/* A burst's next prompts from the sessions of the last pass (the same sessions, prompts of 300 tokens): while one of
 * them is still to come back its call is due, and the prompts are held to the share (200 rows here); once every one
 * is back, nobody else waits on the pass and they take all of it (the rule before held the share whenever the last
 * pass had several sessions and ended recently). */
static void test_prompts_take_pass_when_all_back(void **state) {
    static scheduler s;
    static session xs[2];
    static job jobs[2];
    static route_request reqs[2];
    memset(&s, 0, sizeof s);
    s.p.max_batch_tokens = 512;
    for (int32_t rows = 64; rows <= 512; rows *= 2) plan_observe_pass(&s, rows, 25.0 + rows);
    s.n_passes = 5;
    s.last_pass_seqs = 2;
    s.sessions = &xs[0];
    for (int i = 0; i < 2; i++) {
        xs[i] = (session){.last_pass = 5, .next = i == 0 ? &xs[1] : NULL};
        snprintf(xs[i].id, sizeof xs[i].id, "%c", 'a' + i);
        reqs[i] = (route_request){.n_tokens = 300};
        snprintf(reqs[i].session, sizeof reqs[i].session, "%c", 'a' + i);
        jobs[i] = (job){.kind = JOB_ROUTE, .req = &reqs[i], .runnable = true};
    }
    s.queue = &jobs[0]; /* a is back, b not yet */
    assert_int_equal(plan_count_returned(&s), 1);
    assert_true(plan_calls_due(&s, true));
    assert_int_equal(plan_prompt_rows(&s, 0, plan_calls_due(&s, true)), 200);
    jobs[0].next = &jobs[1]; /* both back */
    assert_int_equal(plan_count_returned(&s), 2);
    assert_false(plan_calls_due(&s, true));
    assert_int_equal(plan_prompt_rows(&s, 0, plan_calls_due(&s, true)), 512);
    jobs[0].next = NULL; /* b not back, but the last pass ended long ago: gone quiet */
    assert_false(plan_calls_due(&s, false));
}

/* The waits are in /metrics: a histogram of passes and one of seconds, counted once per route request. */
static void test_wait_metrics(void **state) {
    scheduler *s = make();
    pthread_mutex_lock(&metrics.mu);
    int64_t before = 0;
    for (int i = 0; i <= WAIT_BUCKETS; i++) before += metrics.wait_passes_hist[i];
    pthread_mutex_unlock(&metrics.mu);
    int32_t p[8];
    fill(p, 8, 1);
    route_result res;
    assert_int_equal(call(s, "m", 0, p, 8, &res), 200);
    assert_int_equal(call(s, "m", 8, NULL, 0, &res), 200);
    pthread_mutex_lock(&metrics.mu);
    int64_t after = 0, after_ms = 0;
    for (int i = 0; i <= WAIT_BUCKETS; i++) after += metrics.wait_passes_hist[i];
    for (int i = 0; i <= LAT_BUCKETS; i++) after_ms += metrics.wait_ms_hist[i];
    pthread_mutex_unlock(&metrics.mu);
    assert_int_equal(after, before + 2);
    assert_int_equal(after_ms, after);
    char *text = metrics_render(&metrics);
    assert_non_null(text);
    char want[96];
    snprintf(want, sizeof want, "tokroute_queue_wait_passes_count %lld\n", (long long)after);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "tokroute_queue_wait_passes_bucket{le=\"1\"}"));
    assert_non_null(strstr(text, "tokroute_queue_wait_seconds_count"));
    free(text);
    scheduler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_call_beside_long_prompt),
        cmocka_unit_test(test_prompt_beside_long_prompt),
        cmocka_unit_test(test_prompt_moves_without_batching),
        cmocka_unit_test(test_burst_prompts_end_beside_calls),
        cmocka_unit_test(test_burst_prompts_share_first_pass),
        cmocka_unit_test(test_prompts_take_pass_when_all_back),
        cmocka_unit_test(test_wait_metrics),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
