/* ui_gen.c — the web UI's generations: a pool of slots (SLM context + LLM backend + router file) and one detached
 * worker thread per generation that runs tr_route_generate and appends server-sent events to the job's buffer,
 * which the connection thread (ui_server.c) drains. A generation stops at its next token once it is cancelled
 * (the client disconnected, POST /api/cancel, or the server stopping).
 *
 * Events: "start" {id}, "token" {i, id, text, source: slm|llm|fallback, score, tau, slm_ms, llm_ms and, when the
 * LLM overrode the SLM, slm_id and slm_text}, "text" {text} for text held back until the end, "warning" {message}
 * once when the LLM is unavailable (its tokens fall back to the SLM's), "error" {message}, and last "done" with the
 * profiling figures. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "ui/ui_internal.h"

/* ---------------------------------------------------------------- event buffer */

/* Appends one event (caller holds no lock). */
static void emit(ui_job *job, const char *event, cJSON *data) {
    char *json = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (!json) return;
    const size_t need = strlen(event) + strlen(json) + 24;
    tr_ui *ui = job->ui;
    pthread_mutex_lock(&ui->mu);
    if (job->len + need > job->cap) {
        size_t cap = job->cap ? job->cap : 4096;
        while (job->len + need > cap) cap *= 2;
        char *b = realloc(job->buf, cap);
        if (b) job->buf = b, job->cap = cap;
    }
    if (job->len + need <= job->cap)
        job->len += (size_t)snprintf(job->buf + job->len, job->cap - job->len, "event: %s\ndata: %s\n\n", event, json);
    pthread_cond_broadcast(&ui->cv);
    pthread_mutex_unlock(&ui->mu);
    cJSON_free(json);
}

static void emit_error(ui_job *job, const char *message) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "message", message && *message ? message : "generation failed");
    emit(job, "error", d);
}

/* Rounded so the JSON shows 0.4, not 0.40000000596046448. */
static double rounded(double x, double scale) { return (double)(long long)(x * scale + (x < 0 ? -0.5 : 0.5)) / scale; }

/* ---------------------------------------------------------------- per-token callback */

typedef struct gen_sink {
    ui_job *job;
    const tr_vocab *vocab;
    bool warned;   /* the "LLM unavailable" warning went out */
} gen_sink;

static bool cancelled(void *user) { return atomic_load(&((ui_job *)user)->cancel); }

static bool on_token(void *user, const tr_route_token *t) {
    gen_sink *s = user;
    cJSON *d = cJSON_CreateObject();
    if (t->index < 0) { /* text held back until the end (an incomplete character, a possible stop string) */
        cJSON_AddStringToObject(d, "text", t->text ? t->text : "");
        emit(s->job, "text", d);
        return !atomic_load(&s->job->cancel);
    }
    cJSON_AddNumberToObject(d, "i", t->index);
    cJSON_AddNumberToObject(d, "id", t->id);
    cJSON_AddStringToObject(d, "text", t->text ? t->text : "");
    cJSON_AddStringToObject(d, "source", t->llm_unavailable ? "fallback" : t->source == TR_SOURCE_LLM ? "llm" : "slm");
    if (t->score >= 0) cJSON_AddNumberToObject(d, "score", rounded(t->score, 1e4));
    else cJSON_AddNullToObject(d, "score");
    cJSON_AddNumberToObject(d, "tau", rounded(t->tau, 1e4));
    cJSON_AddNumberToObject(d, "slm_ms", rounded(t->slm_ms, 1e3));
    cJSON_AddNumberToObject(d, "llm_ms", rounded(t->llm_ms, 1e3));
    if (t->source == TR_SOURCE_LLM && t->slm_id >= 0) {
        char piece[128];
        int32_t n = tr_token_to_piece(s->vocab, t->slm_id, true, piece, (int32_t)sizeof piece - 1);
        piece[n < 0 ? 0 : n < (int32_t)sizeof piece ? n : (int32_t)sizeof piece - 1] = 0;
        cJSON_AddNumberToObject(d, "slm_id", t->slm_id);
        cJSON_AddStringToObject(d, "slm_text", piece);
    }
    if (t->llm_unavailable && !s->warned) { /* once per generation, before the token it concerns */
        s->warned = true;
        const tr_ui *ui = s->job->ui;
        char msg[512];
        snprintf(msg, sizeof msg, "the LLM (%s) is unavailable: routed tokens use the SLM's own proposal, marked as "
                 "fallbacks", ui->llm_name ? ui->llm_name : "remote");
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "message", msg);
        emit(s->job, "warning", w);
    }
    emit(s->job, "token", d);
    return !atomic_load(&s->job->cancel);
}

/* ---------------------------------------------------------------- the worker */

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
    if (r->mode == TR_MODE_JOINT && ui->router_path && !slot->router) {
        st = tr_router_load(ui->router_path, tr_model_get_info(ui->p.slm), &slot->router);
        if (st == TR_OK) st = tr_router_set_slm(slot->router, ui->p.slm); /* token-embedding feature */
        if (st == TR_OK) st = tr_router_set_threads(slot->router, 1);
    }
    return st;
}

/* llm: this generation's share of the backend's statistics (requests sent, failed, refused by the breaker). */
static cJSON *summary(const ui_job *job, const tr_route_stats *s, const tr_llm_stats *llm, const char *stop) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "id", (double)job->id);
    cJSON_AddStringToObject(d, "mode", tr_route_mode_name(job->req.mode));
    cJSON_AddNumberToObject(d, "tau", rounded(job->req.tau, 1e4));
    cJSON_AddNumberToObject(d, "n_prompt", s->n_prompt);
    cJSON_AddNumberToObject(d, "n_tokens", s->n_tokens);
    cJSON_AddNumberToObject(d, "n_routed", s->n_routed);
    cJSON_AddNumberToObject(d, "routed_pct", s->n_tokens ? rounded(100.0 * s->n_routed / s->n_tokens, 100) : 0);
    cJSON_AddNumberToObject(d, "target_routed", job->ui->p.target_routed);
    cJSON_AddNumberToObject(d, "tau_last", rounded(s->tau_last, 1e4));
    cJSON_AddNumberToObject(d, "ttft_ms", rounded(s->ttft_ms, 1e3));
    cJSON_AddNumberToObject(d, "mean_tbt_ms", rounded(s->mean_tbt_ms, 1e3));
    cJSON_AddNumberToObject(d, "slm_ms", rounded(s->slm_ms, 1e3));
    cJSON_AddNumberToObject(d, "router_ms", rounded(s->router_ms, 1e3));
    cJSON_AddNumberToObject(d, "llm_ms", rounded(s->llm_ms, 1e3));
    cJSON_AddNumberToObject(d, "total_ms", rounded(s->total_ms, 1e3));
    cJSON_AddNumberToObject(d, "n_fallback", s->n_fallback);
    /* Requests sent to the LLM, of them failed; and routed tokens the loop waited at, which can outnumber the
     * requests: while the circuit breaker is open a routed token is refused at once without one (llm_refused). */
    cJSON_AddNumberToObject(d, "llm_calls", (double)llm->calls);
    cJSON_AddNumberToObject(d, "llm_failed", (double)llm->failures);
    cJSON_AddNumberToObject(d, "llm_refused", (double)llm->short_circuited);
    /* Hiding the round trip: routed tokens waited for, routed tokens answered without a call (of them by a draft
     * walk), time spent waiting. */
    cJSON_AddNumberToObject(d, "llm_blocking", (double)s->llm_blocking);
    cJSON_AddNumberToObject(d, "lookahead_hits", (double)s->n_lookahead_hits);
    cJSON_AddNumberToObject(d, "draft_hits", (double)s->n_draft_hits);
    cJSON_AddNumberToObject(d, "llm_wait_ms", rounded(s->llm_wait_ms, 1e3));
    /* Counted by the network backends; the embedded backend sends nothing and reports 0. */
    cJSON_AddNumberToObject(d, "bytes_sent", (double)s->llm_bytes_sent);
    cJSON_AddNumberToObject(d, "bytes_received", (double)s->llm_bytes_received);
    cJSON_AddStringToObject(d, "stop", stop);
    return d;
}

static void *worker(void *arg) {
    ui_job *job = arg;
    tr_ui *ui = job->ui;
    ui_slot *slot = job->slot;
    const ui_request *r = &job->req;
    tr_router *policy_router = NULL;
    tr_status st = slot_prepare(ui, slot, r);
    if (st == TR_OK && r->mode == TR_MODE_JOINT && !slot->router) st = tr_router_create(r->policy, &policy_router);
    /* A remote LLM that reports its context (tokroute serve's -c, /health) would refuse calls past it: the
     * generation ends there instead, said up front in a warning event. */
    const int32_t llm_ctx = st == TR_OK && slot->llm && r->mode != TR_MODE_SLM ? tr_llm_backend_n_ctx(slot->llm) : 0;
    int32_t n_predict = r->max_tokens;
    if (llm_ctx > 0 && r->n_prompt >= llm_ctx)
        st = tr_fail(TR_ERR_RANGE, "the prompt (%d tokens) does not fit the LLM server's context of %d tokens",
                     (int)r->n_prompt, (int)llm_ctx);
    if (st != TR_OK) {
        emit_error(job, tr_last_error());
    } else {
        if (llm_ctx > 0 && r->n_prompt + n_predict > llm_ctx) {
            n_predict = llm_ctx - r->n_prompt;
            char msg[160];
            snprintf(msg, sizeof msg, "the LLM server's context is %d tokens: at most %d tokens after this prompt",
                     (int)llm_ctx, (int)n_predict);
            cJSON *w = cJSON_CreateObject();
            cJSON_AddStringToObject(w, "message", msg);
            emit(job, "warning", w);
        }
        gen_sink sink = {job, tr_model_vocab(ui->p.slm), false};
        tr_route_params rp = tr_route_default_params();
        rp.mode = r->mode;
        rp.tau = r->tau;
        rp.n_predict = n_predict;
        rp.on_token = on_token;
        rp.user = &sink;
        rp.abort_fn = cancelled; /* also interrupts a long prefill or a blocking LLM call */
        rp.abort_user = job;
        rp.on_llm_failure = ui->p.on_llm_failure;
        rp.speculate_depth = ui->p.speculate_depth;
        rp.lookahead = ui->p.lookahead;
        rp.draft_tokens = ui->p.draft_tokens;
        rp.draft_span = ui->p.draft_span;
        rp.draft_width = ui->p.draft_width;
        rp.draft_fixed = ui->p.draft_fixed;
        rp.target_routed = ui->p.target_routed;
        rp.max_routed = ui->p.max_routed;
        tr_llm_stats llm0 = {0}, llm = {0};
        if (slot->llm) llm0 = tr_llm_backend_stats(slot->llm);
        tr_route_stats stats;
        memset(&stats, 0, sizeof stats);
        st = tr_route_generate(slot->ctx, slot->router ? slot->router : policy_router, slot->llm, r->prompt,
                               r->n_prompt, &rp, NULL, 0, &stats);
        if (slot->llm) {
            llm = tr_llm_backend_stats(slot->llm);
            llm.calls -= llm0.calls;
            llm.failures -= llm0.failures;
            llm.short_circuited -= llm0.short_circuited;
        }
        if (st != TR_OK && stats.aborted) st = TR_OK; /* cancelled: a normal end, reported as such */
        if (st != TR_OK) {
            emit_error(job, tr_last_error());
            /* A failed generation may leave the context mid-way; the next one starts clean. */
            tr_context_clear(slot->ctx);
        } else {
            const char *stop = atomic_load(&job->cancel) ? "cancelled"
                               : stats.stopped_by_eog    ? "eog"
                               : stats.stopped_by_string ? "string"
                                                         : "length";
            emit(job, "done", summary(job, &stats, &llm, stop));
        }
    }
    tr_router_free(policy_router);
    pthread_mutex_lock(&ui->mu);
    job->finished = true;
    unlink_job_locked(job);
    ui_job_release_locked(job);
    pthread_cond_broadcast(&ui->cv);
    pthread_mutex_unlock(&ui->mu);
    return NULL;
}

/* ---------------------------------------------------------------- jobs */

void ui_job_release_locked(ui_job *job) {
    if (--job->refs > 0) return;
    free(job->req.prompt);
    free(job->buf);
    free(job);
}

ui_job *ui_job_start(tr_ui *ui, ui_request *req, int *http_status) {
    ui_job *job = calloc(1, sizeof *job);
    if (!job) {
        free(req->prompt);
        *http_status = 500;
        tr_fail(TR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    job->ui = ui;
    job->req = *req;
    job->refs = 2;
    atomic_init(&job->cancel, false);
    pthread_mutex_lock(&ui->mu);
    for (int32_t i = 0; i < ui->p.max_generations && !job->slot; i++)
        if (!ui->slots[i].busy) job->slot = &ui->slots[i];
    if (!job->slot || ui->stopping) {
        pthread_mutex_unlock(&ui->mu);
        free(job->req.prompt);
        free(job);
        *http_status = 503;
        tr_fail(TR_ERR_STATE, "the server is busy: %d generations are running; try again when one ends",
                (int)ui->p.max_generations);
        return NULL;
    }
    job->slot->busy = true;
    job->id = ++ui->next_id;
    job->next = ui->jobs;
    ui->jobs = job;
    ui->active++;
    pthread_mutex_unlock(&ui->mu);

    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "id", (double)job->id);
    cJSON_AddNumberToObject(d, "n_prompt", req->n_prompt);
    emit(job, "start", d);

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
        pthread_mutex_unlock(&ui->mu);
        *http_status = 500;
        tr_fail(TR_ERR_NOMEM, "cannot start a generation thread");
        return NULL;
    }
    return job;
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
