/* route_stream.c — POST /v1/route/next with "stream": true (docs/protocol.md, "Streaming the lookahead"). The reply
 * is NDJSON, sent chunked, one object per line: the usual reply object with "lookahead": [] as soon as the answer
 * and the draft walk are known, then {"lookahead": ID} per token as the worker computes it, then
 * {"done": true, ...} — or {"error": ...} as the last line when the request fails after its answer. Errors before
 * the answer are ordinary replies (status and error body), sent by http.c.
 *
 * The producer runs on a worker thread of the HTTP layer (httpd_defer.c), so it may block: it waits in
 * scheduler_stream_next for the scheduler's next event. The request (route_stream) belongs to the stream; its done
 * callback closes it, which stops the lookahead of a client that went away and waits until the scheduler has let go
 * of it before freeing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server/server_internal.h"

typedef struct ndjson_reply {
    tr_server *srv;
    route_stream *stream;
    char *answer_line; /* the first line, made before the response; then NULL */
    int32_t n_lookahead;
    double t0_ms;
    bool streaming;     /* handed to http_send_stream: counted in /metrics when it ends */
    stream_end end;     /* how it ended, once its last line is made (STREAM_END_FAILED until then) */
} ndjson_reply;

/* json (malloc'ed, consumed) with a newline appended. */
static char *as_line(char *json) {
    if (!json) return NULL;
    const size_t n = strlen(json);
    char *line = realloc(json, n + 2);
    if (!line) {
        free(json);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = 0;
    return line;
}

/* root as one line (consumes root). */
static char *line_of(cJSON *root) {
    char *json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return as_line(json);
}

static double ms3(double ms) { return round(ms * 1000) / 1000; }

static char *done_line(const route_result *totals) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddBoolToObject(root, "done", 1);
    cJSON_AddNumberToObject(root, "n_evaluated", totals->n_evaluated);
    cJSON *tm = cJSON_AddObjectToObject(root, "timings");
    cJSON_AddNumberToObject(tm, "eval_ms", ms3(totals->eval_ms));
    cJSON_AddNumberToObject(tm, "queue_ms", ms3(totals->queue_ms));
    cJSON_AddNumberToObject(tm, "queue_passes", totals->queue_passes);
    cJSON_AddNumberToObject(tm, "lookahead_ms", ms3(totals->lookahead_ms));
    return line_of(root);
}

static char *error_line(const api_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", api_error_object(err));
    return line_of(root);
}

/* The next line (http_send_stream's producer): the answer, then each lookahead token as the worker computes it
 * (waiting for it), then done or an error, the last. */
static char *next_line(void *cls, bool *last) {
    ndjson_reply *r = cls;
    if (r->answer_line) {
        char *line = r->answer_line;
        r->answer_line = NULL;
        return line;
    }
    int32_t token = 0;
    route_result totals;
    api_error err = {0};
    switch (scheduler_stream_next(r->stream, &token, &totals, &err)) {
    case STREAM_LOOKAHEAD: {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "lookahead", token);
        r->n_lookahead++;
        return line_of(root);
    }
    case STREAM_DONE:
        *last = true;
        r->end = STREAM_END_COMPLETED;
        server_log(r->srv, "route_next stream done %.2f ms n_evaluated=%d lookahead=%d",
                   server_now_ms() - r->t0_ms, totals.n_evaluated, r->n_lookahead);
        return done_line(&totals);
    case STREAM_FAILED:
        *last = true;
        r->end = STREAM_END_FAILED;
        server_log(r->srv, "route_next stream failed after the answer %.2f ms %s", server_now_ms() - r->t0_ms,
                   err.code);
        return error_line(&err);
    }
    return NULL;
}

/* MHD is done with the response (sent, or the client went away): stop the job and free it. */
static void free_reply(void *cls, bool client_gone) {
    ndjson_reply *r = cls;
    /* Counted once the response is over: a client may still go before the last line reaches it. A stream cut
     * short otherwise (out of memory) failed. */
    if (r->streaming) metrics_stream_end(&r->srv->metrics, "route_next", client_gone ? STREAM_END_ABANDONED : r->end);
    if (client_gone)
        server_log(r->srv, "route_next: client went away during a streamed lookahead after %d tokens (%.2f ms)",
                   r->n_lookahead, server_now_ms() - r->t0_ms);
    scheduler_stream_close(r->stream);
    free(r->answer_line);
    free(r);
}

int route_stream_respond(tr_server *srv, struct MHD_Connection *conn, route_request *req, double t0_ms) {
    char session[sizeof req->session];
    snprintf(session, sizeof session, "%s", req->session);
    const bool with_verify = req->draft.n_branches > 0;
    route_result answer;
    api_error err;
    route_stream *stream = NULL;
    const int status = scheduler_stream_start(srv->sched, req, &answer, &err, &stream);
    if (status != 200) return http_send_error(srv, conn, "route_next", &err, t0_ms);
    /* The request counts once, with its latency to the answer line: that is what the client waits for; the
     * lookahead after it overlaps the client's own work. */
    const double ms = server_now_ms() - t0_ms;
    metrics_request(&srv->metrics, "route_next", 200, ms);
    server_log(srv, "route_next 200 %.2f ms n_evaluated=%d (answer; lookahead streams)", ms, answer.n_evaluated);
    ndjson_reply *r = calloc(1, sizeof *r);
    if (!r) {
        scheduler_stream_close(stream);
        return http_send_json(conn, 500, NULL);
    }
    r->srv = srv;
    r->stream = stream;
    r->t0_ms = t0_ms;
    r->answer_line = as_line(route_result_json(session, with_verify, &answer));
    if (!r->answer_line) {
        free_reply(r, false);
        return http_send_json(conn, 500, NULL);
    }
    r->streaming = true;
    r->end = STREAM_END_FAILED;
    return http_send_stream(conn, "application/x-ndjson", next_line, r, free_reply);
}
