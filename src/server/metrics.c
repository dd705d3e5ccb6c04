/* metrics.c — counters for GET /metrics, rendered in the Prometheus text format (version 0.0.4): requests by route
 * and status, tokens evaluated, forward passes and their batch sizes, the route jobs' queue wait (in passes and in
 * seconds: a call held behind other sessions' prompts shows in the passes), active sessions, KV bytes, evictions
 * and expirations, request latency histograms per route, and streamed replies by how they ended (completed, failed
 * after their 200, abandoned by a client that went away: neither of the last two shows in the requests' statuses,
 * which were 200 when the stream began). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static const char *const routes[N_ROUTES] = {"route_next", "route_delete", "completions", "chat_completions",
                                             "health", "metrics", "other"};
static const int statuses[N_STATUS] = {200, 204, 400, 401, 404, 409, 413, 500, 503, 0}; /* 0: any other */
static const double lat_bounds_ms[LAT_BUCKETS] = {0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};
static const int batch_bounds[8] = {1, 2, 4, 8, 16, 32, 64, 1 << 30};
static const int wait_pass_bounds[WAIT_BUCKETS] = {0, 1, 2, 4, 8, 16, 32};

void metrics_init(server_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

static int route_index(const char *route) {
    for (int i = 0; i < N_ROUTES - 1; i++)
        if (strcmp(routes[i], route) == 0) return i;
    return N_ROUTES - 1;
}

void metrics_request(server_metrics *m, const char *route, int status, double ms) {
    const int r = route_index(route);
    int si = N_STATUS - 1;
    for (int i = 0; i < N_STATUS - 1; i++)
        if (statuses[i] == status) si = i;
    pthread_mutex_lock(&m->mu);
    m->requests[r][si]++;
    if (r < N_TIMED_ROUTES) {
        int b = 0;
        while (b < LAT_BUCKETS && ms > lat_bounds_ms[b]) b++;
        m->lat_count[r][b]++;
        m->lat_sum[r] += ms;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_stream_end(server_metrics *m, const char *route, stream_end how) {
    const int r = route_index(route);
    if (r >= N_TIMED_ROUTES) return;
    pthread_mutex_lock(&m->mu);
    m->streams[r][how]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_pass(server_metrics *m, int32_t n_seq, int32_t n_rows) {
    pthread_mutex_lock(&m->mu);
    m->passes++;
    m->tokens_evaluated += n_rows;
    m->batch_rows += n_rows;
    m->batch_seqs += n_seq;
    int b = 0;
    while (n_seq > batch_bounds[b]) b++;
    m->batch_hist[b]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_queue_wait(server_metrics *m, int32_t passes, double ms) {
    int p = 0, t = 0;
    while (p < WAIT_BUCKETS && passes > wait_pass_bounds[p]) p++;
    while (t < LAT_BUCKETS && ms > lat_bounds_ms[t]) t++;
    pthread_mutex_lock(&m->mu);
    m->wait_passes_hist[p]++;
    m->wait_passes_sum += passes;
    m->wait_ms_hist[t]++;
    m->wait_ms_sum += ms;
    pthread_mutex_unlock(&m->mu);
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    if (!b->p) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        char *q = realloc(b->p, b->cap * 2 + (size_t)n);
        if (!q) {
            free(b->p);
            b->p = NULL;
            return;
        }
        b->p = q;
        b->cap = b->cap * 2 + (size_t)n;
    }
}

char *metrics_render(server_metrics *m) {
    buf b = {malloc(8192), 0, 8192};
    if (!b.p) return NULL;
    b.p[0] = 0;
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP tokroute_requests_total HTTP requests by route and status.\n# TYPE tokroute_requests_total counter\n");
    for (int r = 0; r < N_ROUTES; r++)
        for (int si = 0; si < N_STATUS; si++)
            if (m->requests[r][si] || (r == 0 && si == 0)) {
                if (statuses[si]) put(&b, "tokroute_requests_total{route=\"%s\",status=\"%d\"} %lld\n", routes[r],
                                      statuses[si], (long long)m->requests[r][si]);
                else put(&b, "tokroute_requests_total{route=\"%s\",status=\"other\"} %lld\n", routes[r],
                         (long long)m->requests[r][si]);
            }
    put(&b, "# HELP tokroute_tokens_evaluated_total Tokens evaluated by the model.\n"
            "# TYPE tokroute_tokens_evaluated_total counter\ntokroute_tokens_evaluated_total %lld\n",
        (long long)m->tokens_evaluated);
    put(&b, "# HELP tokroute_forward_passes_total Forward passes (each may hold several sessions).\n"
            "# TYPE tokroute_forward_passes_total counter\ntokroute_forward_passes_total %lld\n",
        (long long)m->passes);
    put(&b, "# HELP tokroute_batch_sessions Sessions per forward pass.\n# TYPE tokroute_batch_sessions histogram\n");
    long long cum = 0;
    for (int i = 0; i < 8; i++) {
        cum += m->batch_hist[i];
        if (i < 7) put(&b, "tokroute_batch_sessions_bucket{le=\"%d\"} %lld\n", batch_bounds[i], cum);
        else put(&b, "tokroute_batch_sessions_bucket{le=\"+Inf\"} %lld\n", cum);
    }
    put(&b, "tokroute_batch_sessions_sum %lld\ntokroute_batch_sessions_count %lld\n", (long long)m->batch_seqs,
        (long long)m->passes);
    put(&b, "# HELP tokroute_queue_wait_passes Forward passes run while a route request waited for its first.\n"
            "# TYPE tokroute_queue_wait_passes histogram\n");
    cum = 0;
    for (int i = 0; i <= WAIT_BUCKETS; i++) {
        cum += m->wait_passes_hist[i];
        if (i < WAIT_BUCKETS) put(&b, "tokroute_queue_wait_passes_bucket{le=\"%d\"} %lld\n", wait_pass_bounds[i], cum);
        else put(&b, "tokroute_queue_wait_passes_bucket{le=\"+Inf\"} %lld\n", cum);
    }
    put(&b, "tokroute_queue_wait_passes_sum %lld\ntokroute_queue_wait_passes_count %lld\n",
        (long long)m->wait_passes_sum, cum);
    put(&b, "# HELP tokroute_queue_wait_seconds Time a route request waited for its first forward pass.\n"
            "# TYPE tokroute_queue_wait_seconds histogram\n");
    cum = 0;
    for (int i = 0; i <= LAT_BUCKETS; i++) {
        cum += m->wait_ms_hist[i];
        if (i < LAT_BUCKETS)
            put(&b, "tokroute_queue_wait_seconds_bucket{le=\"%g\"} %lld\n", lat_bounds_ms[i] / 1e3, cum);
        else put(&b, "tokroute_queue_wait_seconds_bucket{le=\"+Inf\"} %lld\n", cum);
    }
    put(&b, "tokroute_queue_wait_seconds_sum %g\ntokroute_queue_wait_seconds_count %lld\n", m->wait_ms_sum / 1e3, cum);
    put(&b, "# HELP tokroute_active_sessions Sessions holding a KV cache.\n# TYPE tokroute_active_sessions gauge\n"
            "tokroute_active_sessions %d\n", m->active_sessions);
    put(&b, "# HELP tokroute_kv_bytes Bytes of KV cache held by sessions.\n# TYPE tokroute_kv_bytes gauge\n"
            "tokroute_kv_bytes %lld\n", (long long)m->kv_bytes);
    put(&b, "# HELP tokroute_sessions_created_total Sessions created.\n# TYPE tokroute_sessions_created_total counter\n"
            "tokroute_sessions_created_total %lld\n", (long long)m->sessions_created);
    put(&b, "# HELP tokroute_session_evictions_total Sessions evicted for the KV budget or the session limit.\n"
            "# TYPE tokroute_session_evictions_total counter\ntokroute_session_evictions_total %lld\n",
        (long long)m->evictions);
    put(&b, "# HELP tokroute_session_expirations_total Sessions freed after the idle time.\n"
            "# TYPE tokroute_session_expirations_total counter\ntokroute_session_expirations_total %lld\n",
        (long long)m->expirations);
    put(&b, "# HELP tokroute_streams_total Streamed replies by route and how they ended: completed, failed (an error "
            "event after the 200) or abandoned (the client went away).\n# TYPE tokroute_streams_total counter\n");
    static const char *const ends[3] = {"completed", "failed", "abandoned"};
    static const int streamed[] = {0, 2, 3}; /* route_next, completions, chat_completions */
    for (int k = 0; k < 3; k++)
        for (int o = 0; o < 3; o++)
            put(&b, "tokroute_streams_total{route=\"%s\",outcome=\"%s\"} %lld\n", routes[streamed[k]], ends[o],
                (long long)m->streams[streamed[k]][o]);
    put(&b, "# HELP tokroute_request_duration_seconds Request latency by route.\n"
            "# TYPE tokroute_request_duration_seconds histogram\n");
    for (int r = 0; r < N_TIMED_ROUTES; r++) {
        cum = 0;
        for (int i = 0; i <= LAT_BUCKETS; i++) {
            cum += m->lat_count[r][i];
            if (i < LAT_BUCKETS)
                put(&b, "tokroute_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %lld\n", routes[r],
                    lat_bounds_ms[i] / 1e3, cum);
            else put(&b, "tokroute_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %lld\n", routes[r], cum);
        }
        put(&b, "tokroute_request_duration_seconds_sum{route=\"%s\"} %g\n", routes[r], m->lat_sum[r] / 1e3);
        put(&b, "tokroute_request_duration_seconds_count{route=\"%s\"} %lld\n", routes[r], cum);
    }
    pthread_mutex_unlock(&m->mu);
    return b.p;
}
