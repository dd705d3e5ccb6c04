/* scheduler_sessions.c — the scheduler's session table: lookup by id, the cached prefix sharing the most tokens,
 * creation and growth of a session's KV cache within kv_budget_bytes by evicting least-recently-used idle sessions
 * (cached prefixes first), idle expiry, and the gauges /metrics reads. Called by the worker thread with the
 * scheduler's mutex held (scheduler.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/scheduler_internal.h"

double sched_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void sched_publish_gauges(scheduler *s) {
    pthread_mutex_lock(&s->metrics->mu);
    s->metrics->active_sessions = s->n_sessions;
    s->metrics->kv_bytes = s->kv_bytes;
    pthread_mutex_unlock(&s->metrics->mu);
}

session *sched_find_session(scheduler *s, const char *id) {
    for (session *x = s->sessions; x; x = x->next)
        if (!x->cached && strcmp(x->id, id) == 0) return x;
    return NULL;
}

/* owner's cached prefix (one another API key made is never considered) sharing the most tokens with tokens[0..n), at
 * most n - 1 of them (the last token is evaluated for its logits); NULL when none shares any. One that would keep
 * less than half of what it holds is left for a request that shares more (a long conversation is not cut down to its
 * first tokens for a small gain). *common: how many it shares. */
session *sched_find_prefix(scheduler *s, int32_t owner, const int32_t *tokens, int32_t n, int32_t *common) {
    session *best = NULL;
    *common = 0;
    for (session *x = s->sessions; x; x = x->next) {
        if (!x->cached || x->owner != owner) continue; /* another key's text: never reused, never measured */
        const int32_t max = x->seq->n_past < n - 1 ? x->seq->n_past : n - 1;
        int32_t k = 0;
        while (k < max && x->seq->tokens[k] == tokens[k]) k++;
        if (k > *common && 2 * k >= x->seq->n_past) {
            *common = k;
            best = x;
        }
    }
    return best;
}

void sched_remove_session(scheduler *s, session *victim) {
    for (session **pp = &s->sessions; *pp; pp = &(*pp)->next)
        if (*pp == victim) {
            *pp = victim->next;
            break;
        }
    s->kv_bytes -= (int64_t)kv_seq_bytes(victim->seq);
    s->n_sessions--;
    kv_seq_free(victim->seq);
    free(victim);
}

/* Evicts the least recently used idle session other than keep, a cached prefix before a client's session (whose
 * eviction costs its client a resend); false when there is none. */
bool sched_evict_lru(scheduler *s, const session *keep) {
    session *lru = NULL;
    for (session *x = s->sessions; x; x = x->next)
        if (!x->busy && x != keep &&
            (!lru || (x->cached && !lru->cached) ||
             (x->cached == lru->cached && x->last_used_ms < lru->last_used_ms)))
            lru = x;
    if (!lru) return false;
    sched_remove_session(s, lru);
    pthread_mutex_lock(&s->metrics->mu);
    s->metrics->evictions++;
    pthread_mutex_unlock(&s->metrics->mu);
    return true;
}

void sched_expire_idle(scheduler *s) {
    const double cutoff = sched_now_ms() - s->p.session_idle_s * 1e3;
    for (session *x = s->sessions, *next; x; x = next) {
        next = x->next;
        if (!x->busy && x->last_used_ms < cutoff) {
            sched_remove_session(s, x);
            pthread_mutex_lock(&s->metrics->mu);
            s->metrics->expirations++;
            pthread_mutex_unlock(&s->metrics->mu);
        }
    }
}

/* Makes room for extra bytes of KV within the budget by evicting idle sessions. */
bool sched_make_room(scheduler *s, int64_t extra, const session *keep) {
    while (s->kv_bytes + extra > s->p.kv_budget_bytes)
        if (!sched_evict_lru(s, keep)) return false;
    return true;
}

bool sched_ensure_capacity(scheduler *s, session *x, int32_t n_positions) {
    if (n_positions <= x->seq->kv.n_ctx) return true;
    const int32_t cap = kv_seq_capacity_for(x->seq, n_positions);
    if (cap == 0) return false;
    const int64_t extra = (int64_t)kv_seq_bytes_for(s->model, cap) - (int64_t)kv_seq_bytes(x->seq);
    if (!sched_make_room(s, extra, x) || kv_seq_reserve(x->seq, n_positions) != TR_OK) return false;
    s->kv_bytes += extra;
    return true;
}

session *sched_create_session(scheduler *s, const char *id) {
    if (s->n_sessions >= s->p.max_sessions && !sched_evict_lru(s, NULL)) return NULL;
    const int32_t initial = s->p.n_ctx < 64 ? s->p.n_ctx : 64;
    if (!sched_make_room(s, (int64_t)kv_seq_bytes_for(s->model, initial), NULL)) return NULL;
    session *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    if (kv_seq_create(s->model, initial, s->p.n_ctx, &x->seq) != TR_OK) {
        free(x);
        return NULL;
    }
    snprintf(x->id, sizeof x->id, "%s", id);
    x->last_used_ms = sched_now_ms();
    x->next = s->sessions;
    s->sessions = x;
    s->n_sessions++;
    s->kv_bytes += (int64_t)kv_seq_bytes(x->seq);
    pthread_mutex_lock(&s->metrics->mu);
    s->metrics->sessions_created++;
    pthread_mutex_unlock(&s->metrics->mu);
    return x;
}
