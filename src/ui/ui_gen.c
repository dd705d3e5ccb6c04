/* ui_gen.c — the device server's generations: a pool of slots (SLM context + LLM backend + router file), a bounded
 * queue of requests waiting for one, and one detached worker thread per generation that runs tr_route_generate and
 * hands what happens to the job's sink (the page's event stream, or an OpenAI reply), which appends to the job's
 * buffer for the connection thread to send. A generation stops at its next token once it is cancelled (the client
 * disconnected, POST /api/cancel, or the server stopping).
 *
 * Slots run in parallel up to max_generations (default 1: on a device, generations running side by side only slow
 * each other down); a request that finds every slot busy waits its turn (first come, first served) while fewer than
 * max_queued wait, and gets 429 beyond, with a Retry-After from the recent generations' mean time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "ui/ui_internal.h"

#define WAIT_POLL_MS 100

/* ---------------------------------------------------------------- output buffer */

void ui_job_append(ui_job *job, const char *data, size_t n) {
    tr_ui *ui = job->ui;
    pthread_mutex_lock(&ui->mu);
    if (job->len + n + 1 > job->cap) {
        size_t cap = job->cap ? job->cap : 4096;
        while (job->len + n + 1 > cap) cap *= 2;
        char *b = realloc(job->buf, cap);
        if (b) job->buf = b, job->cap = cap;
    }
    if (job->len + n + 1 <= job->cap) {
        memcpy(job->buf + job->len, data, n);
        job->len += n;
        job->buf[job->len] = 0;
    }
    pthread_cond_broadcast(&ui->cv);
    pthread_mutex_unlock(&ui->mu);
}

/* ---------------------------------------------------------------- the worker */

static bool cancelled(void *user) { return atomic_load(&((ui_job *)user)->cancel); }

static bool on_token(void *user, const tr_route_token *t) {
    ui_job *job = user;
    if (job->sink->token) job->sink->token(job, t);
    return !atomic_load(&job->cancel);
}

static bool on_text(void *user, const char *text, size_t len, const tr_route_token *t) {
    ui_job *job = user;
    if (job->sink->text) job->sink->text(job, text, len, t);
    return !atomic_load(&job->cancel);
}

/* Frees the job's slot and takes it off the running list (caller holds ui->mu). */
static void unlink_job_locked(ui_job *job) {
    tr_ui *ui = job->ui;
    job->slot->busy = false;
    for (ui_job **p = &ui->jobs; *p; p = &(*p)->next)
        if (*p == job) {
            *p = job->next;
            break;
        }
    ui->active--;
}

static tr_status slot_prepare(tr_ui *ui, ui_slot *slot, const ui_request *r) {
    tr_status st = TR_OK;
    if (!slot->ctx && (st = tr_context_create(ui->p.slm, &ui->p.context, &slot->ctx)) != TR_OK) return st;
    if (r->mode != TR_MODE_SLM && !slot->llm) {
        if (!ui->p.open_backend) return tr_fail(TR_ERR_STATE, "no LLM is configured");
        if ((st = ui->p.open_backend(ui->p.backend_user, &slot->llm)) != TR_OK) return st;
    }
    if (r->mode == TR_MODE_JOINT && r->router_file && !slot->router) {
        st = tr_router_load(ui->router_path, tr_model_get_info(ui->p.slm), &slot->router);
        if (st == TR_OK) st = tr_router_set_slm(slot->router, ui->p.slm); /* token-embedding feature */
        if (st == TR_OK) st = tr_router_set_threads(slot->router, 1);
    }
    /* Slots serve requests of every kind: each generation sets how the LLM chooses (greedy unless asked). */
    if (st == TR_OK && r->mode != TR_MODE_SLM) st = tr_llm_backend_set_sampling(slot->llm, &r->sampling);
    return st;
}

static void run_generation(ui_job *job, tr_router *router) {
    tr_ui *ui = job->ui;
    ui_slot *slot = job->slot;
    const ui_request *r = &job->req;
    /* A remote LLM that reports its context (tokroute serve's -c, /health) would refuse calls past it: the
     * generation ends there instead, said up front in a warning. */
    const int32_t llm_ctx = slot->llm && r->mode != TR_MODE_SLM ? tr_llm_backend_n_ctx(slot->llm) : 0;
    int32_t n_predict = r->max_tokens;
    if (llm_ctx > 0 && r->n_prompt >= llm_ctx) {
        tr_status st = tr_fail(TR_ERR_RANGE, "the prompt (%d tokens) does not fit the LLM server's context of %d tokens",
                               (int)r->n_prompt, (int)llm_ctx);
        job->sink->error(job, st, tr_last_error());
        return;
    }
    if (llm_ctx > 0 && r->n_prompt + n_predict > llm_ctx) {
        n_predict = llm_ctx - r->n_prompt;
        char msg[160];
        snprintf(msg, sizeof msg, "the LLM server's context is %d tokens: at most %d tokens after this prompt",
                 (int)llm_ctx, (int)n_predict);
        if (job->sink->warning) job->sink->warning(job, msg);
    }
    tr_route_params rp = tr_route_default_params();
    rp.mode = r->mode;
    rp.tau = r->tau;
    rp.n_predict = n_predict;
    rp.sampling = r->sampling;
    rp.stop = (const char *const *)r->stop;
    rp.n_stop = r->n_stop;
    rp.on_token = on_token;
    rp.on_text = on_text;
    rp.user = job;
    rp.abort_fn = cancelled; /* also interrupts a long prefill or a blocking LLM call */
    rp.abort_user = job;
    rp.on_llm_failure = ui->p.on_llm_failure;
    rp.speculate_depth = ui->p.speculate_depth;
    rp.lookahead = ui->p.lookahead;
    rp.draft_tokens = ui->p.draft_tokens;
    rp.draft_span = ui->p.draft_span;
    rp.draft_width = ui->p.draft_width;
    rp.draft_fixed = ui->p.draft_fixed;
    rp.target_routed = r->target_routed;
    rp.max_routed = r->max_routed;
    tr_llm_stats llm0 = {0}, llm = {0};
    if (slot->llm) llm0 = tr_llm_backend_stats(slot->llm);
    tr_route_stats stats;
    memset(&stats, 0, sizeof stats);
    tr_status st = tr_route_generate(slot->ctx, router, slot->llm, r->prompt, r->n_prompt, &rp, NULL, 0, &stats);
    if (slot->llm) {
        llm = tr_llm_backend_stats(slot->llm);
        llm.calls -= llm0.calls;
        llm.failures -= llm0.failures;
        llm.short_circuited -= llm0.short_circuited;
    }
    if (st != TR_OK && stats.aborted) st = TR_OK; /* cancelled: a normal end, reported as such */
    if (st != TR_OK) {
        job->sink->error(job, st, tr_last_error());
        /* A failed generation may leave the context mid-way; the next one starts clean. */
        tr_context_clear(slot->ctx);
        return;
    }
    const char *stop = atomic_load(&job->cancel) ? "cancelled"
                       : stats.stopped_by_eog    ? "eog"
                       : stats.stopped_by_string ? "string"
                                                 : "length";
    job->sink->done(job, &stats, &llm, stop);
    pthread_mutex_lock(&ui->mu);
    ui->mean_gen_ms = ui->mean_gen_ms > 0 ? 0.7 * ui->mean_gen_ms + 0.3 * stats.total_ms : stats.total_ms;
    pthread_mutex_unlock(&ui->mu);
}

static void *worker(void *arg) {
    ui_job *job = arg;
    tr_ui *ui = job->ui;
    const ui_request *r = &job->req;
    tr_router *policy_router = NULL;
    tr_status st = slot_prepare(ui, job->slot, r);
    if (st == TR_OK && r->mode == TR_MODE_JOINT && !r->router_file) st = tr_router_create(r->policy, &policy_router);
    if (st != TR_OK) job->sink->error(job, st, tr_last_error());
    else run_generation(job, r->router_file ? job->slot->router : policy_router);
    tr_router_free(policy_router);
    pthread_mutex_lock(&ui->mu);
    job->finished = true;
    unlink_job_locked(job);
    ui_job_release_locked(job);
    pthread_cond_broadcast(&ui->cv);
    pthread_mutex_unlock(&ui->mu);
    return NULL;
}

/* ---------------------------------------------------------------- jobs and the queue */

void ui_request_free(ui_request *req) {
    free(req->prompt);
    req->prompt = NULL;
    for (int32_t i = 0; i < req->n_stop; i++) free(req->stop[i]);
    req->n_stop = 0;
}

void ui_job_release_locked(ui_job *job) {
    if (--job->refs > 0) return;
    ui_request_free(&job->req);
    if (job->sink->free) job->sink->free(job->state);
    free(job->buf);
    free(job);
}

void ui_job_release(ui_job *job) {
    tr_ui *ui = job->ui;
    pthread_mutex_lock(&ui->mu);
    ui_job_release_locked(job);
    pthread_cond_broadcast(&ui->cv);
    pthread_mutex_unlock(&ui->mu);
}

static ui_slot *free_slot_locked(tr_ui *ui) {
    for (int32_t i = 0; i < ui->p.max_generations; i++)
        if (!ui->slots[i].busy) return &ui->slots[i];
    return NULL;
}

static void timed_wait_locked(tr_ui *ui, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&ui->cv, &ui->mu, &ts);
}

/* Takes a slot for a new job, waiting in line when none is free (caller holds ui->mu). NULL: *status says why. */
static ui_slot *acquire_slot_locked(tr_ui *ui, ui_gone_fn gone, void *gone_user, int *status, int *retry_after_s) {
    if (ui->stopping) return NULL;
    ui_slot *slot = ui->waiting ? NULL : free_slot_locked(ui);
    if (slot) return slot;
    if (ui->n_waiting >= ui->p.max_queued) {
        /* The generations ahead: the running ones (about half done on average) and the queue. */
        const double ms = (ui->mean_gen_ms > 0 ? ui->mean_gen_ms : 1000) * (ui->n_waiting + 0.5) / ui->p.max_generations;
        *retry_after_s = ms < 1000 ? 1 : ms > 600000 ? 600 : (int)(ms / 1000 + 0.999);
        *status = 429;
        tr_fail(TR_ERR_STATE, "the device is busy: %d generation(s) running and %d waiting (the most: %d); retry "
                "after %d s", (int)ui->active, (int)ui->n_waiting, (int)ui->p.max_queued, *retry_after_s);
        return NULL;
    }
    ui_waiter me = {0}, **tail = &ui->waiting;
    while (*tail) tail = &(*tail)->next;
    *tail = &me;
    ui->n_waiting++;
    bool gave_up = false;
    while (!ui->stopping && !(ui->waiting == &me && (slot = free_slot_locked(ui)))) {
        timed_wait_locked(ui, WAIT_POLL_MS);
        if (gone && gone(gone_user)) {
            gave_up = true;
            break;
        }
    }
    for (ui_waiter **p = &ui->waiting; *p; p = &(*p)->next)
        if (*p == &me) {
            *p = me.next;
            break;
        }
    ui->n_waiting--;
    pthread_cond_broadcast(&ui->cv); /* the next in line may go */
    if (gave_up) {
        *status = 0;
        tr_fail(TR_ERR_STATE, "the client went away while waiting");
        return NULL;
    }
    return ui->stopping ? NULL : slot;
}

ui_job *ui_job_start(tr_ui *ui, ui_request *req, const ui_sink *sink, void *state, ui_gone_fn gone, void *gone_user,
                     int *http_status, int *retry_after_s) {
    *retry_after_s = 0;
    ui_job *job = calloc(1, sizeof *job);
    if (!job) {
        ui_request_free(req);
        if (sink->free) sink->free(state);
        *http_status = 500;
        tr_fail(TR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    job->ui = ui;
    job->req = *req;
    job->sink = sink;
    job->state = state;
    job->refs = 2;
    atomic_init(&job->cancel, false);
    pthread_mutex_lock(&ui->mu);
    *http_status = 503;
    job->slot = acquire_slot_locked(ui, gone, gone_user, http_status, retry_after_s);
    if (!job->slot) {
        if (*http_status == 503) tr_fail(TR_ERR_STATE, "the server is stopping");
        job->refs = 1;
        ui_job_release_locked(job);
        pthread_mutex_unlock(&ui->mu);
        return NULL;
    }
    job->slot->busy = true;
    job->id = ++ui->next_id;
    job->next = ui->jobs;
    ui->jobs = job;
    ui->active++;
    pthread_mutex_unlock(&ui->mu);
    if (sink->start) sink->start(job);

    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int rc = pthread_create(&thread, &attr, worker, job);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&ui->mu);
        unlink_job_locked(job);
        job->refs = 1; /* only the caller's */
        ui_job_release_locked(job);
        pthread_cond_broadcast(&ui->cv);
        pthread_mutex_unlock(&ui->mu);
        *http_status = 500;
        tr_fail(TR_ERR_NOMEM, "cannot start a generation thread");
        return NULL;
    }
    return job;
}

bool ui_job_wait(ui_job *job, ui_gone_fn gone, void *gone_user) {
    tr_ui *ui = job->ui;
    bool stayed = true;
    pthread_mutex_lock(&ui->mu);
    while (!job->finished) {
        timed_wait_locked(ui, WAIT_POLL_MS);
        if (stayed && gone && !job->finished && gone(gone_user)) {
            stayed = false;
            atomic_store(&job->cancel, true);
        }
    }
    pthread_mutex_unlock(&ui->mu);
    return stayed;
}

bool ui_job_cancel(tr_ui *ui, uint64_t id) {
    bool found = false;
    pthread_mutex_lock(&ui->mu);
    for (ui_job *j = ui->jobs; j; j = j->next)
        if (j->id == id) atomic_store(&j->cancel, true), found = true;
    pthread_mutex_unlock(&ui->mu);
    return found;
}

void ui_slots_free(tr_ui *ui) {
    if (!ui->slots) return;
    for (int32_t i = 0; i < ui->p.max_generations; i++) {
        tr_context_free(ui->slots[i].ctx);
        tr_llm_backend_free(ui->slots[i].llm);
        tr_router_free(ui->slots[i].router);
    }
    free(ui->slots);
    ui->slots = NULL;
}
