/* scheduler.c — the session table and the one worker thread that runs every forward pass.
 *
 * HTTP threads queue jobs and sleep on them; the worker takes, per pass, the waiting jobs of distinct sessions (up
 * to max_batch_tokens rows and MAX_SEQS sessions, or one session with batching off; calls first, then prompt
 * chunks: scheduler_plan.c) and evaluates them together with multi_forward, so the weights are read once for all. Only the worker touches sessions, so the table
 * needs no finer locking; the mutex guards the queue and is released during the pass and while the pass's rows
 * choose their tokens (sample.c; shared among n_threads chooser threads), so a sampled token never holds up an
 * HTTP thread queueing a job.
 *
 * Memory: a session's KV cache starts at 64 positions and doubles on demand up to n_ctx (kv_seq). The sum of the
 * caches' bytes never exceeds kv_budget_bytes: growing or creating a session first evicts least-recently-used idle
 * sessions (cached prefixes first), and fails with 503 when nothing is left to evict. A long prompt is evaluated
 * over several passes, after the other sessions' calls (fill_pass, scheduler_plan.c).
 *
 * Prefix reuse (llama.cpp's cache_prompt, vLLM's prefix cache): a finished completion's private session is parked
 * rather than freed — unnamed, kept with its KV as a cached prefix, evicted like any idle session. A request that
 * asks for it (reuse_prefix, a new private session at pos 0) takes over the cached session of its own API key
 * (route_request.owner; another key's is never considered) sharing the longest prefix with its tokens (at least half
 * of what that one holds), truncated to that prefix (at most all tokens but the last, whose logits are wanted), and
 * evaluates only the rest; the result's n_reused says how many it skipped.
 *
 * Streamed jobs (route_stream): the job lives on the heap, owned by the HTTP response. The worker announces the
 * answer as soon as it and the draft walk are known, then each lookahead token, on the job's condition variable;
 * the response's thread waits there. Their lookahead stops after the pass in flight when the client is gone
 * (cancelled) or when a newer request for the session waits: the answer is out, so the newcomer should not wait
 * for a hint. A streamed job is freed only once the worker has finished it (done, unlinked from the queue).
 *
 * Score jobs (a whole sequence scored for /v1/completions' prompt_logprobs) need every row's logits, which
 * multi_forward does not keep, so they run on a private scoring context (tr_context_eval with TR_EVAL_LOGITS_ALL),
 * one at a time in arrival order, a chunk of rows per worker iteration right after that iteration's batched pass:
 * a long prompt neither waits for the sessions nor stalls them for more than a chunk. The log-softmax and top-K of
 * each row are computed by the worker with the mutex released, like a pass. The scoring context's KV cache counts
 * against kv_budget_bytes like a session's (grown by doubling to the longest sequence scored, evicting idle
 * sessions to make room), and its rows of logits are bounded to SCORE_LOGITS_BYTES per chunk.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "server/scheduler_internal.h"
#include "transport/backend.h" /* draft_child */

#define SCORE_CHUNK_ROWS 256                  /* rows per scoring chunk (as the embedded backend's scoring) ... */
#define SCORE_LOGITS_BYTES ((size_t)64 << 20) /* ... fewer with a large vocabulary: this much logits per chunk */

/* The gather window: until every session of the last pass has its next request waiting, the worker waits up to
 * this fraction of the last pass's duration (at most GATHER_MAX_MS) for them, instead of starting a pass without
 * them: a request that misses a pass waits for all of it and then its own, twice the others' latency (the p99 of
 * a loaded server). Each routed token costs its client a network round trip, so without the window batches
 * fragment: the first requests back run while the rest arrive. Only the last pass's own sessions are counted
 * (requests that waited through it do not stand in for them), and the wait ends as soon as they are all back, so
 * it costs nothing when every client answers; a client that does not come back costs the others at most 20% of a
 * pass, and with a tiny model (sub-millisecond passes) nearly nothing. */
#define GATHER_FRACTION 0.2
#define GATHER_MAX_MS 250.0


int32_t scheduler_n_ctx(const scheduler *s) { return s->p.n_ctx; }

/* ---------------------------------------------------------------- jobs */

static void finish(job *j, int status) {
    j->status = status;
    j->done = true;
    if (j->sess) {
        j->sess->busy = false;
        j->sess->last_used_ms = sched_now_ms();
    }
    pthread_cond_broadcast(&j->cv);
}

static void fail(job *j, int status, const char *code, const char *field, const char *msg) {
    api_error_set(j->err, status, code, field, "%s", msg);
    finish(j, status);
}

/* Resolves the session and the tokens to evaluate. Returns false when the job finished (with an error). */
static bool start_job(scheduler *s, job *j) {
    const route_request *r = j->req;
    session *x = sched_find_session(s, r->session);
    int32_t reused = 0;
    if (!x) {
        if (r->pos > 0) {
            api_error_set(j->err, 409, "pos_mismatch", "pos", "unknown session: the server holds 0 tokens");
            j->err->pos = 0;
            finish(j, 409);
            return false;
        }
        if (r->reuse_prefix && (x = sched_find_prefix(s, r->owner, r->tokens, r->n_tokens, &reused))) {
            snprintf(x->id, sizeof x->id, "%s", r->session); /* taken over: the request's own session now */
            x->cached = false;
        } else if (!(x = sched_create_session(s, r->session))) {
            fail(j, 503, "busy", "", "no session slot or KV budget left");
            return false;
        }
        x->owner = r->owner;
    }
    if (r->pos > x->seq->n_past) {
        api_error_set(j->err, 409, "pos_mismatch", "pos", "pos %d is beyond the %d tokens the server holds", r->pos,
                      x->seq->n_past);
        j->err->pos = x->seq->n_past;
        finish(j, 409);
        return false;
    }
    kv_seq_truncate(x->seq, r->pos + reused);
    j->res->n_reused = reused;
    if (r->n_tokens == 0) {
        /* No new tokens: evaluate the last held token again for its logits. */
        kv_seq_truncate(x->seq, r->pos - 1);
        j->own_feed[0] = x->seq->tokens[r->pos - 1];
        j->feed = j->own_feed;
        j->n_feed = 1;
    } else {
        j->feed = r->tokens + reused;
        j->n_feed = r->n_tokens - reused;
    }
    j->la_left = r->lookahead;
    j->node = -1;
    j->walking = r->draft.n_branches > 0;
    j->sess = x;
    x->busy = true;
    j->started = true;
    return true;
}

/* A streamed job: the answer and the draft walk are final; its HTTP thread may send them now. */
static void announce_answer(job *j) {
    j->res->queue_ms = j->t_start_ms - j->t_enqueue_ms;
    *j->answer = *j->res;
    j->answered = true;
    pthread_cond_broadcast(&j->cv);
}

/* Whether a job should compute another lookahead token: not for a streamed job whose client is gone, nor for one
 * whose session has a newer request waiting (queued after it, not started). */
static bool lookahead_wanted(const job *j) {
    if (!j->answer) return true;
    if (j->cancelled) return false;
    for (const job *q = j->next; q; q = q->next)
        if (q->kind == JOB_ROUTE && !q->started && strcmp(q->req->session, j->sess->id) == 0) return false;
    return true;
}

/* The token the row after the job's last fed token chooses: the answer (with its log-probabilities), the answer
 * after a draft branch (drawn like the answer: greedy, or from (seed, position)), or the next lookahead token
 * (greedy). A chooser thread (choose_all) with the mutex released: what it reads of the job and its session changes
 * only on the worker, which waits for the choosers. */
static void choose(token_sampler *ts, const job *j, const float *logits, choice *c) {
    const route_request *r = j->req;
    const int32_t pos = j->sess->seq->n_past;
    c->n_top = 0;
    if (!j->main_done) {
        c->token = sample_token(ts, logits, r->n_vocab, &r->samp, pos, &c->logprob, c->top, r->top_logprobs);
        c->n_top = r->top_logprobs < r->n_vocab ? r->top_logprobs : r->n_vocab;
    } else if (j->walking) {
        c->token = sample_token(ts, logits, r->n_vocab, &r->samp, pos, NULL, NULL, 0);
    } else {
        sampling greedy = r->samp;
        greedy.temperature = 0;
        c->token = sample_token(ts, logits, r->n_vocab, &greedy, pos, NULL, NULL, 0);
    }
}

/* The rows of a pass that end their job's feed choose, shared among the chooser threads (each row's choice is
 * its own: a log-sum-exp over the vocabulary, 0.5-1 ms at 151,936 entries, so 16 rows on one thread held up
 * every client for ~10 ms a pass). Each thread has its own sampler; a row's token does not depend on which. */
typedef struct choose_job {
    scheduler *s;
    job *const *jobs;
    int32_t n_seq;
    atomic_int next;
} choose_job;

static void choose_task(void *arg, int ith, int nth) {
    (void)nth;
    choose_job *cj = arg;
    scheduler *s = cj->s;
    const int32_t n_vocab = s->model->info.n_vocab;
    for (;;) {
        const int32_t b = atomic_fetch_add_explicit(&cj->next, 1, memory_order_relaxed);
        if (b >= cj->n_seq) break;
        const job *j = cj->jobs[b];
        if (j->fed + j->chunk >= j->n_feed)
            choose(s->samplers[ith], j, s->logits + (size_t)b * n_vocab, &s->choices[b]);
    }
}

static void choose_all(scheduler *s, job *const *jobs, int32_t n_seq) {
    choose_job cj = {.s = s, .jobs = jobs, .n_seq = n_seq};
    atomic_init(&cj.next, 0);
    /* A small vocabulary's rows cost less than waking a thread. */
    if (n_seq > 1 && (int64_t)n_seq * s->model->info.n_vocab >= 65536)
        thread_pool_run(multi_engine_pool(s->engine), choose_task, &cj); /* the pass's threads, idle now */
    else choose_task(&cj, 0, 1);
}

/* After the job's last fed token: takes the choice (the answer, a draft answer or a lookahead token; see choose),
 * then feeds what comes next (the draft branch starting with it, else the lookahead). True when the job is done.
 * The walk and the lookahead stop at the end of the session's context. */
static bool take_choice(scheduler *s, job *j, const choice *c) {
    const route_request *r = j->req;
    route_result *res = j->res;
    const int32_t pos = j->sess->seq->n_past;
    const int32_t t = c->token;
    if (!j->main_done) {
        res->token = t;
        res->logprob = c->logprob;
        memcpy(res->top, c->top, (size_t)c->n_top * sizeof *res->top);
        res->n_top = c->n_top;
        res->pos = pos;
        j->main_done = true;
    } else if (j->walking) {
        res->verify[res->n_verify++] = t;
    } else {
        res->lookahead[res->n_lookahead++] = t;
        j->la_left--;
        if (j->answer) pthread_cond_broadcast(&j->cv);
    }
    if (j->walking) {
        const tr_llm_draft *d = &r->draft;
        const int32_t b = draft_child(d, j->node, t);
        if (b >= 0 && res->n_verify < TR_DRAFT_BRANCHES_MAX && pos + d->start[b + 1] - d->start[b] <= s->p.n_ctx) {
            j->node = b;
            j->feed = d->tokens + d->start[b];
            j->n_feed = d->start[b + 1] - d->start[b];
            j->fed = 0;
            return false;
        }
        j->walking = false;
    }
    if (j->answer && !j->answered) announce_answer(j);
    if (j->la_left <= 0 || pos >= s->p.n_ctx || !lookahead_wanted(j)) return true;
    j->own_feed[0] = t;
    j->feed = j->own_feed;
    j->n_feed = 1;
    j->fed = 0;
    return false;
}

static void unlink_job(scheduler *s, job *j) {
    for (job **pp = &s->queue; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            return;
        }
}

/* Deletes a session, or parks it as a cached prefix (JOB_PARK; one holding no token is deleted). */
static void run_delete(scheduler *s, job *j) {
    session *x = sched_find_session(s, j->delete_id);
    if (!x) {
        finish(j, 404);
        return;
    }
    if (x->busy) return; /* after its running job */
    if (j->kind == JOB_PARK && x->seq->n_past > 0) {
        x->cached = true;
        x->last_used_ms = sched_now_ms();
    } else {
        sched_remove_session(s, x);
    }
    finish(j, 204);
}

/* ---------------------------------------------------------------- score jobs (worker thread) */

/* Makes the scoring context hold n positions: a bigger one (a power of two from 64, at most n_ctx) replaces it,
 * its KV bytes made room for within the budget. Mutex held. */
static bool score_ctx_reserve(scheduler *s, int32_t n) {
    if (s->score_ctx && tr_context_n_ctx(s->score_ctx) >= n) return true;
    int32_t cap = 64;
    while (cap < n) cap *= 2;
    if (cap > s->p.n_ctx) cap = s->p.n_ctx;
    tr_context_free(s->score_ctx);
    s->score_ctx = NULL;
    s->kv_bytes -= s->score_kv_bytes;
    s->score_kv_bytes = 0;
    const int64_t bytes = (int64_t)kv_seq_bytes_for(s->model, cap);
    if (!sched_make_room(s, bytes, NULL)) return false;
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = cap;
    cp.n_threads = s->p.n_threads;
    cp.n_batch = s->score_rows;
    if (tr_context_create(s->model, &cp, &s->score_ctx) != TR_OK) return false;
    s->score_kv_bytes = bytes;
    s->kv_bytes += bytes;
    return true;
}

/* Readies a score job: rows 0 .. n_tokens - 2 predict positions 1 .. n_tokens - 1, and row n_tokens - 1 the token
 * after the sequence (only with next). False when the job finished here (nothing to evaluate, or no room). */
static bool start_score(scheduler *s, job *j) {
    const score_request *r = j->sreq;
    j->started = true;
    j->t_start_ms = sched_now_ms();
    j->sres->queue_ms = j->t_start_ms - j->t_enqueue_ms;
    j->n_feed = r->next ? r->n_tokens : r->n_tokens - 1;
    j->fed = 0;
    if (j->n_feed == 0) { /* a one-token sequence: no position to score */
        finish(j, 200);
        return false;
    }
    if (!score_ctx_reserve(s, j->n_feed)) {
        fail(j, 503, "busy", "", "no KV budget left for scoring");
        return false;
    }
    tr_context_truncate(s->score_ctx, 0);
    return true;
}

/* The score job to run a chunk of now (the oldest; started here), or NULL. Mutex held. */
static job *next_score(scheduler *s) {
    for (job *j = s->queue, *next; j; j = next) {
        next = j->next;
        if (j->kind != JOB_SCORE) continue;
        if (j->started || start_score(s, j)) return j;
        unlink_job(s, j);
    }
    return NULL;
}

/* Evaluates the job's next chunk of rows keeping every row's logits and turns each into its position's result
 * (or, for the row after the sequence, the chosen next token). Worker thread, mutex released. */
static tr_status score_chunk(scheduler *s, job *j, int32_t *n_rows) {
    const score_request *r = j->sreq;
    score_result *res = j->sres;
    const int32_t n_vocab = s->model->info.n_vocab;
    const int32_t m = j->n_feed - j->fed < s->score_rows ? j->n_feed - j->fed : s->score_rows;
    *n_rows = m;
    const tr_status st = tr_context_eval(s->score_ctx, r->tokens + j->fed, m, TR_EVAL_LOGITS_ALL);
    if (st != TR_OK) return st;
    for (int32_t i = 0; i < m; i++) {
        const int32_t row = j->fed + i;
        const float *logits = tr_context_logits(s->score_ctx, i);
        if (row + 1 < r->n_tokens) {
            score_row_fill(logits, n_vocab, r->top_k, &res->rows[row]);
            continue;
        }
        route_result *next = &res->next;
        next->token = sample_token(s->samplers[0], logits, n_vocab, &r->samp, r->n_tokens, &next->logprob, next->top,
                                   r->n_logprobs);
        next->n_top = r->n_logprobs < n_vocab ? r->n_logprobs : n_vocab;
        next->pos = r->n_tokens;
    }
    j->fed += m;
    res->n_evaluated += m;
    return TR_OK;
}

/* ---------------------------------------------------------------- filling a pass (worker thread, mutex held) */

typedef struct pass_fill {
    kv_seq *seqs[MAX_SEQS];
    const int32_t *toks[MAX_SEQS];
    int32_t ntok[MAX_SEQS];
    job *jobs[MAX_SEQS];
    int32_t n_seq, rows, max_seqs;
} pass_fill;

/* Whether a route job of session (or a delete or park of it) queued before j has not finished: j waits for it (one
 * request per session at a time, in arrival order). */
static bool session_queued_before(const scheduler *s, const job *j, const char *session_id) {
    for (const job *q = s->queue; q && q != j; q = q->next)
        if (q->kind != JOB_SCORE && strcmp(q->kind == JOB_ROUTE ? q->req->session : q->delete_id, session_id) == 0)
            return true;
    return false;
}

/* Puts up to max_rows (>= 1) of j's rows into the pass, starting the job first; false when it finished instead
 * (an error: it left the queue). */
static bool admit(scheduler *s, pass_fill *pf, job *j, int32_t max_rows) {
    if (!j->started && !start_job(s, j)) {
        unlink_job(s, j);
        return false;
    }
    int32_t chunk = j->n_feed - j->fed;
    if (chunk > max_rows) chunk = max_rows;
    if (!sched_ensure_capacity(s, j->sess, j->sess->seq->n_past + chunk)) {
        fail(j, 503, "busy", "", "no KV budget left for this session");
        unlink_job(s, j);
        return false;
    }
    if (j->t_start_ms == 0) {
        j->t_start_ms = sched_now_ms();
        j->res->queue_passes = (int32_t)(s->n_passes - j->enqueue_pass);
        metrics_queue_wait(s->metrics, j->res->queue_passes, j->t_start_ms - j->t_enqueue_ms);
    }
    j->chunk = chunk;
    pf->seqs[pf->n_seq] = j->sess->seq;
    pf->toks[pf->n_seq] = j->feed + j->fed;
    pf->ntok[pf->n_seq] = chunk;
    pf->jobs[pf->n_seq++] = j;
    pf->rows += chunk;
    return true;
}

/* The next pass (scheduler_plan.c's rules): deletes and finished lookahead first, then every waiting call in
 * arrival order, then prompt chunks, lowest plan_prompt_key first, within the rows the measured cost allows. */
static void fill_pass(scheduler *s, pass_fill *pf) {
    bool prompts_wait = false;
    for (job *j = s->queue, *next; j; j = next) {
        next = j->next;
        j->runnable = false;
        if (j->kind == JOB_SCORE) continue; /* after the pass (worker_main) */
        if (j->kind == JOB_DELETE || j->kind == JOB_PARK) {
            if (session_queued_before(s, j, j->delete_id)) continue;
            run_delete(s, j);
            if (j->done) unlink_job(s, j);
            continue;
        }
        if (j->answered && !lookahead_wanted(j)) { /* superseded or cancelled since its last pass */
            finish(j, 200);
            unlink_job(s, j);
            continue;
        }
        if (!j->started) {
            const session *x = sched_find_session(s, j->req->session);
            if ((x && x->busy) || session_queued_before(s, j, j->req->session)) continue;
        }
        j->runnable = true;
        prompts_wait |= !plan_is_call(j);
    }
    /* Waiting prompts keep a few rows and a session's slot (with one session a pass: every other pass). */
    const int32_t calls_max = plan_calls_max_rows(s, prompts_wait);
    const int32_t calls_seqs = !prompts_wait ? pf->max_seqs : pf->max_seqs > 1 ? pf->max_seqs - 1
                                                                               : s->last_pass_had_prompt;
    for (job *j = s->queue, *next; j; j = next) {
        next = j->next;
        if (!j->runnable || !plan_is_call(j)) continue;
        int32_t left = plan_rows_left(j);
        if (pf->n_seq >= calls_seqs) break;
        if (pf->rows + left > calls_max) {
            if (pf->rows > 0) break; /* the first of the next pass */
            left = calls_max;        /* more than the calls' share of a pass: in chunks */
        }
        admit(s, pf, j, left);
    }
    /* Sessions of the last pass still to send their next calls, unless it ended long ago. */
    const bool calls_due =
        plan_calls_due(s, sched_now_ms() - s->last_pass_end_ms < s->last_pass_ms + GATHER_MAX_MS);
    const int32_t n_calls = pf->n_seq;
    int32_t budget = prompts_wait ? plan_prompt_rows(s, pf->rows, calls_due) : 0;
    while (pf->n_seq < pf->max_seqs) {
        int32_t max_rows;
        job *best = plan_next_prompt(s, budget, s->p.max_batch_tokens - pf->rows, &max_rows);
        if (!best) break;
        const int32_t before = pf->rows;
        if (admit(s, pf, best, max_rows)) budget -= pf->rows - before; /* else it left the queue */
    }
    if (pf->n_seq == 0) return;
    for (job *j = s->queue; j; j = j->next)
        if (j->runnable && j->chunk == 0 && !plan_is_call(j)) j->passed_over++;
    s->last_pass_had_prompt = pf->n_seq > n_calls;
}

static void *worker_main(void *arg) {
    scheduler *s = arg;
    double last_expiry = sched_now_ms();
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (sched_now_ms() - last_expiry > 1000) {
            sched_expire_idle(s);
            last_expiry = sched_now_ms();
            sched_publish_gauges(s);
        }
        if (!s->queue) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->wake, &s->mu, &ts);
            continue;
        }
        if (s->p.batch && s->last_pass_seqs > 1) {
            double window = GATHER_FRACTION * s->last_pass_ms;
            if (window > GATHER_MAX_MS) window = GATHER_MAX_MS;
            const double deadline = s->last_pass_end_ms + window;
            while (!s->stop && plan_count_returned(s) < s->last_pass_seqs && sched_now_ms() < deadline) {
                const double left_ms = deadline - sched_now_ms();
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                const long ns = ts.tv_nsec + (long)(left_ms * 1e6);
                ts.tv_sec += ns / 1000000000;
                ts.tv_nsec = ns % 1000000000;
                pthread_cond_timedwait(&s->wake, &s->mu, &ts);
            }
            if (s->stop) break;
        }
        pass_fill pf = {.max_seqs = s->p.batch ? MAX_SEQS : 1};
        fill_pass(s, &pf);
        const int32_t n_seq = pf.n_seq, rows = pf.rows;
        job *const *jobs = pf.jobs;
        job *sj = next_score(s);
        if (n_seq == 0 && !sj) {
            sched_publish_gauges(s);
            if (s->queue) { /* only deletes of busy sessions can wait here; they cannot, as busy jobs run */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 1000000;
                if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
                pthread_cond_timedwait(&s->wake, &s->mu, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        double t0 = sched_now_ms();
        const tr_status st = n_seq > 0 ? multi_forward(s->engine, pf.seqs, pf.toks, pf.ntok, n_seq, s->logits) : TR_OK;
        const double dt = sched_now_ms() - t0;
        if (st == TR_OK) choose_all(s, jobs, n_seq); /* the rows that end their job's feed choose now */
        int32_t score_rows = 0;
        t0 = sched_now_ms();
        const tr_status score_st = sj ? score_chunk(s, sj, &score_rows) : TR_OK;
        const double score_dt = sched_now_ms() - t0;
        pthread_mutex_lock(&s->mu);
        if (sj) {
            metrics_pass(s->metrics, 1, score_rows);
            sj->sres->eval_ms += score_dt;
            if (score_st != TR_OK) {
                fail(sj, 500, "internal", "", "the scoring pass failed");
                unlink_job(s, sj);
            } else if (sj->fed == sj->n_feed) {
                finish(sj, 200);
                unlink_job(s, sj);
            }
        }
        if (n_seq > 0) {
            s->n_passes++;
            for (int32_t b = 0; b < n_seq; b++) jobs[b]->sess->last_pass = s->n_passes;
            s->last_pass_seqs = n_seq;
            s->last_pass_ms = dt;
            s->last_pass_end_ms = sched_now_ms();
            plan_observe_pass(s, rows, dt);
            metrics_pass(s->metrics, n_seq, rows);
        }
        for (int32_t b = 0; b < n_seq; b++) {
            job *j = jobs[b];
            const int32_t chunk = j->chunk;
            j->chunk = 0;
            if (st != TR_OK) {
                fail(j, 500, "internal", "", "the forward pass failed");
                unlink_job(s, j);
                continue;
            }
            j->fed += chunk;
            j->res->n_evaluated += chunk;
            j->res->eval_ms += dt;
            if (j->main_done && !j->walking) j->res->lookahead_ms += dt; /* it fed a lookahead token */
            if (j->fed < j->n_feed) continue;
            if (take_choice(s, j, &s->choices[b])) {
                j->res->queue_ms = j->t_start_ms - j->t_enqueue_ms;
                j->res->span_passes = (int32_t)(s->n_passes - j->enqueue_pass);
                finish(j, 200);
                unlink_job(s, j);
            }
        }
        sched_publish_gauges(s);
    }
    /* Shutting down: nothing more runs. */
    for (job *j = s->queue; j; j = j->next) fail(j, 503, "busy", "", "the server is shutting down");
    s->queue = NULL;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---------------------------------------------------------------- public (HTTP threads) */

/* Appends j to the queue (mutex held); false (503 in j->err) while shutting down. */
static bool enqueue_locked(scheduler *s, job *j) {
    if (s->stop) {
        api_error_set(j->err, 503, "busy", "", "the server is shutting down");
        j->status = 503;
        return false;
    }
    j->t_enqueue_ms = sched_now_ms();
    j->enqueue_pass = s->n_passes;
    job **pp = &s->queue;
    while (*pp) pp = &(*pp)->next;
    *pp = j;
    pthread_cond_signal(&s->wake);
    return true;
}

static int submit(scheduler *s, job *j) {
    pthread_cond_init(&j->cv, NULL);
    pthread_mutex_lock(&s->mu);
    if (!enqueue_locked(s, j)) {
        pthread_mutex_unlock(&s->mu);
        pthread_cond_destroy(&j->cv);
        return 503;
    }
    while (!j->done) pthread_cond_wait(&j->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&j->cv);
    return j->status;
}

int scheduler_score(scheduler *s, const score_request *req, score_result *res, api_error *err) {
    memset(&res->next, 0, sizeof res->next);
    res->n_evaluated = 0;
    res->eval_ms = res->queue_ms = 0;
    memset(err, 0, sizeof *err);
    job j = {.kind = JOB_SCORE, .sreq = req, .sres = res, .err = err};
    return submit(s, &j);
}

int scheduler_route(scheduler *s, const route_request *req, route_result *res, api_error *err) {
    memset(res, 0, sizeof *res);
    memset(err, 0, sizeof *err);
    job j = {.kind = JOB_ROUTE, .req = req, .res = res, .err = err};
    return submit(s, &j);
}

/* ---------------------------------------------------------------- streamed route requests (HTTP threads) */

static void stream_free(route_stream *st) {
    pthread_cond_destroy(&st->j.cv);
    route_request_free(&st->req);
    free(st);
}

int scheduler_stream_start(scheduler *s, route_request *req, route_result *answer, api_error *err,
                           route_stream **out) {
    *out = NULL;
    memset(err, 0, sizeof *err);
    route_stream *st = calloc(1, sizeof *st);
    if (!st) {
        route_request_free(req);
        api_error_set(err, 503, "busy", "", "out of memory");
        return 503;
    }
    st->s = s;
    st->req = *req; /* the tokens change hands */
    req->tokens = NULL;
    req->n_tokens = 0;
    st->j = (job){.kind = JOB_ROUTE, .req = &st->req, .res = &st->res, .err = &st->err, .answer = &st->answer};
    pthread_cond_init(&st->j.cv, NULL);
    pthread_mutex_lock(&s->mu);
    if (enqueue_locked(s, &st->j))
        while (!st->j.answered && !st->j.done) pthread_cond_wait(&st->j.cv, &s->mu);
    const int status = st->j.answered ? 200 : st->j.status;
    if (status == 200) *answer = st->answer;
    else *err = st->err;
    pthread_mutex_unlock(&s->mu);
    if (status != 200) { /* finished before its answer: the worker let go of it */
        stream_free(st);
        return status;
    }
    *out = st;
    return 200;
}

stream_event scheduler_stream_next(route_stream *st, int32_t *token, route_result *totals, api_error *err) {
    scheduler *s = st->s;
    pthread_mutex_lock(&s->mu);
    while (!st->j.done && st->n_taken >= st->res.n_lookahead) pthread_cond_wait(&st->j.cv, &s->mu);
    stream_event ev;
    if (st->n_taken < st->res.n_lookahead) {
        *token = st->res.lookahead[st->n_taken++];
        ev = STREAM_LOOKAHEAD;
    } else if (st->j.status == 200) {
        *totals = st->res;
        ev = STREAM_DONE;
    } else {
        *err = st->err;
        ev = STREAM_FAILED;
    }
    pthread_mutex_unlock(&s->mu);
    return ev;
}

void scheduler_stream_close(route_stream *st) {
    if (!st) return;
    scheduler *s = st->s;
    pthread_mutex_lock(&s->mu);
    st->j.cancelled = true;
    pthread_cond_signal(&s->wake);
    while (!st->j.done) pthread_cond_wait(&st->j.cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    stream_free(st);
}

int scheduler_delete(scheduler *s, const char *session_id) {
    api_error err;
    job j = {.kind = JOB_DELETE, .delete_id = session_id, .err = &err};
    return submit(s, &j);
}

int scheduler_park(scheduler *s, const char *session_id) {
    api_error err;
    job j = {.kind = JOB_PARK, .delete_id = session_id, .err = &err};
    return submit(s, &j);
}

tr_status scheduler_create(const tr_model *model, const sched_params *p, server_metrics *metrics, scheduler **out) {
    scheduler *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory");
    s->model = model;
    s->p = *p;
    s->metrics = metrics;
    const size_t row_bytes = (size_t)model->info.n_vocab * sizeof(float);
    s->score_rows = p->max_batch_tokens < SCORE_CHUNK_ROWS ? p->max_batch_tokens : SCORE_CHUNK_ROWS;
    if ((size_t)s->score_rows * row_bytes > SCORE_LOGITS_BYTES)
        s->score_rows = SCORE_LOGITS_BYTES / row_bytes > 0 ? (int32_t)(SCORE_LOGITS_BYTES / row_bytes) : 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    tr_status st = multi_engine_create(model, p->n_threads, p->max_batch_tokens, p->n_ctx, &s->engine);
    if (st == TR_OK && !(s->logits = malloc((size_t)MAX_SEQS * model->info.n_vocab * sizeof(float))))
        st = tr_fail(TR_ERR_NOMEM, "out of memory for logits");
    const int n_choosers = st == TR_OK ? thread_pool_size(multi_engine_pool(s->engine)) : 0;
    if (n_choosers > CHOOSE_THREADS_MAX) st = tr_fail(TR_ERR_ARG, "at most %d threads", CHOOSE_THREADS_MAX);
    for (int i = 0; st == TR_OK && i < n_choosers; i++)
        if (!(s->samplers[i] = token_sampler_create())) st = tr_fail(TR_ERR_NOMEM, "out of memory for samplers");
    if (st == TR_OK && pthread_create(&s->worker, NULL, worker_main, s) != 0)
        st = tr_fail(TR_ERR_NOMEM, "cannot start the server's worker thread");
    if (st != TR_OK) {
        scheduler_free(s);
        return st;
    }
    s->worker_started = true;
    *out = s;
    return TR_OK;
}

void scheduler_shutdown(scheduler *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (s->worker_started) pthread_join(s->worker, NULL);
    s->worker_started = false;
}

void scheduler_free(scheduler *s) {
    if (!s) return;
    scheduler_shutdown(s);
    while (s->sessions) sched_remove_session(s, s->sessions);
    tr_context_free(s->score_ctx);
    multi_engine_free(s->engine);
    free(s->logits);
    for (int i = 0; i < CHOOSE_THREADS_MAX; i++) token_sampler_free(s->samplers[i]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}
