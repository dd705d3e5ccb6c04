/* server.c — the tokroute session protocol (docs/protocol.md) as a backend. The server keeps this session's KV
 * cache; the client remembers which tokens it has sent (held) and, per call, sends only what follows the longest
 * common prefix of held and the new sequence, with pos = that prefix's length. So a routed token costs one small
 * request whatever the context length.
 *
 * Resync: a 409 carries the server's own pos (0 after a restart or an eviction); the client resends from there, at
 * most a few times per call, all within the call's deadline. The session id is random, so two clients (or two runs)
 * never share a cache; the session is deleted when the backend is freed.
 *
 * Lookahead: the server evaluates the answer and all but the last lookahead token in the session, so afterwards it
 * holds sequence + answer + lookahead[0..k-1); held records that, and the next call's pos (the common prefix) tells
 * the server how much of it the client kept. A draft tree (tr_llm_draft) goes along as "draft"; the server walks
 * it and answers "verify", and then holds the branches it walked too (the lookahead follows the last answer).
 *
 * Streaming: with lookahead the request says "stream": true and the reply comes as NDJSON lines, read as they
 * arrive (http_request_lines; session_reply.c reads them): the answer line is handed on at once
 * (tr_llm_call_answered), then each lookahead token (tr_llm_call_push_lookahead). When the caller wants no more (a
 * newer request waits: the backend's interrupt wakes the transfer), the call leaves the stream at once: the HTTP
 * client reads the rest in the background and sends the newer request on its second connection, where the server
 * sees it and stops the old stream after the pass in flight (no handshake, no wait for stale lookahead). held
 * counts the lookahead the server produced: all of it after done; after a left stream, what it surely produced by
 * the last line received. A stream that breaks after its answer costs only the lookahead: the call succeeds, and
 * held falls back to the request's tokens, which the server surely holds (it truncates anything beyond).
 *
 * Scoring (tr_llm_score) goes through tokroute serve's POST /v1/completions with vLLM's prompt_logprobs, the same
 * request and reply the --openai backend sends to vLLM (remote.c), outside the session: one forward pass over the
 * sequence, batched on the server with other requests. tr_llm_backend_set_sampling changes how later calls draw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/platform.h"
#include "transport/remote.h"
#include "transport/session_reply.h"

#define MAX_RESYNCS 3

typedef struct session_backend {
    http_client *http;
    char id[40];
    int32_t *held;         /* tokens the server holds for this session, as far as we know */
    int32_t n_held, cap;
    bool created;
    int32_t top_logprobs;
    int32_t n_vocab;       /* from /health; -1 before asking */
    int32_t n_ctx;         /* from /health: the server's -c (0: unknown); -1 before asking */
    tr_sampler_params sampling;
} session_backend;

static void random_id(char *out, size_t cap) {
    uint64_t r[2] = {0, 0};
    if (!tr_platform_random(r, sizeof r)) { /* none: time, address and pid still make a collision unlikely */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r[0] = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)out;
        r[1] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull;
    }
    snprintf(out, cap, "tr-%016llx%08llx", (unsigned long long)r[0], (unsigned long long)(r[1] & 0xffffffffu));
}

static int32_t session_n_vocab(void *impl) {
    session_backend *b = impl;
    if (b->n_vocab < 0) b->n_vocab = remote_query_n_vocab(b->http);
    return b->n_vocab;
}

static int32_t session_n_ctx(void *impl) {
    session_backend *b = impl;
    if (b->n_ctx >= 0) return b->n_ctx;
    http_response resp = {0};
    int64_t n = 0;
    if (http_request(b->http, "GET", "/health", NULL, http_deadline(b->http), NULL, NULL, &resp) != TR_OK) return 0;
    if (resp.status == 200) {
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        if (!j || !json_int(j, "n_ctx", 1, INT32_MAX, &n)) n = 0;
        cJSON_Delete(j);
    }
    b->n_ctx = (int32_t)n; /* asked once: a server without the field stays unknown */
    return b->n_ctx;
}

static char *build_request(const session_backend *b, const tr_llm_call *call, int32_t pos) {
    cJSON *req = cJSON_CreateObject();
    bool ok = req && cJSON_AddStringToObject(req, "session", b->id) && cJSON_AddNumberToObject(req, "pos", pos) &&
              json_add_ids(req, "tokens", call->tokens + pos, call->n_tokens - pos) &&
              cJSON_AddNumberToObject(req, "top_logprobs", b->top_logprobs);
    if (ok && call->n_allowed > 0) ok = cJSON_AddNumberToObject(req, "n_vocab", call->n_allowed) != NULL;
    if (ok && call->lookahead > 0) /* the answer must not wait for the lookahead: it streams after it */
        ok = cJSON_AddNumberToObject(req, "lookahead", call->lookahead) && cJSON_AddTrueToObject(req, "stream");
    if (ok && call->draft) {
        const tr_llm_draft *d = call->draft;
        cJSON *arr = cJSON_AddArrayToObject(req, "draft");
        ok = arr != NULL;
        for (int32_t i = 0; ok && i < d->n_branches; i++) {
            cJSON *br = cJSON_CreateObject();
            ok = br && cJSON_AddItemToArray(arr, br) && cJSON_AddNumberToObject(br, "parent", d->parent[i]) &&
                 json_add_ids(br, "tokens", d->tokens + d->start[i], d->start[i + 1] - d->start[i]);
        }
    }
    if (ok && b->sampling.temperature > 0)
        ok = cJSON_AddNumberToObject(req, "temperature", b->sampling.temperature) &&
             cJSON_AddNumberToObject(req, "top_k", b->sampling.top_k) &&
             cJSON_AddNumberToObject(req, "top_p", b->sampling.top_p) &&
             cJSON_AddNumberToObject(req, "seed", (double)(b->sampling.seed & 0x1fffffffffffffull));
    char *s = ok ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    return s;
}

/* The pos a 409 reports: top level, or inside "error". */
static bool conflict_pos(const http_response *resp, int64_t *pos) {
    cJSON *j = cJSON_ParseWithLength(resp->body, resp->len);
    bool ok = j && (json_int(j, "pos", 0, INT32_MAX, pos) ||
                    json_int(cJSON_GetObjectItemCaseSensitive(j, "error"), "pos", 0, INT32_MAX, pos));
    cJSON_Delete(j);
    return ok;
}

/* A 400 whose error names the lookahead field (pos + tokens + lookahead beyond the server's context). */
static bool lookahead_refused(const http_response *resp) {
    cJSON *j = cJSON_ParseWithLength(resp->body, resp->len);
    const cJSON *field = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "field");
    const bool refused = cJSON_IsString(field) && strcmp(field->valuestring, "lookahead") == 0;
    cJSON_Delete(j);
    return refused;
}

/* held = tokens[0..n) + extra[0..n_extra). */
static tr_status remember(session_backend *b, const int32_t *tokens, int32_t n, const int32_t *extra, int32_t n_extra) {
    const int32_t total = n + n_extra;
    if (total > b->cap) {
        int32_t cap = b->cap ? b->cap : 256;
        while (cap < total) cap *= 2;
        int32_t *h = realloc(b->held, (size_t)cap * sizeof *h);
        if (!h) return tr_fail(TR_ERR_NOMEM, "out of memory");
        b->held = h;
        b->cap = cap;
    }
    memcpy(b->held, tokens, (size_t)n * sizeof *tokens);
    if (n_extra > 0) memcpy(b->held + n, extra, (size_t)n_extra * sizeof *extra);
    b->n_held = total;
    return TR_OK;
}

static tr_status remember_reply(session_backend *b, const tr_llm_call *call, held_tail *t, const int32_t *lookahead,
                                int32_t n_produced) {
    if (n_produced > 0) {
        t->ids[t->n++] = t->last_answer;
        for (int32_t i = 0; i + 1 < n_produced; i++) t->ids[t->n++] = lookahead[i];
    }
    return remember(b, call->tokens, call->n_tokens, t->ids, t->n);
}

/* The end of a streamed reply whose answer was handed on: the call has succeeded, whatever came after. */
static tr_status finish_stream(session_backend *b, tr_llm_call *call, reply_stream *rs, tr_status transfer,
                               bool left) {
    if (transfer == TR_OK && left && !rs->done && !rs->broken && rs->tail.in_step) {
        /* Left early: the server surely evaluated the answer and la[0..n-1) (it may be finishing one more pass,
         * which this call's accounting misses) and holds them. */
        call->n_evaluated += rs->n_lookahead;
        return remember_reply(b, call, &rs->tail, rs->lookahead, rs->n_lookahead);
    }
    if (transfer != TR_OK || !rs->done || rs->broken) {
        tr_clear_error();
        return remember(b, call->tokens, call->n_tokens, NULL, 0);
    }
    return remember_reply(b, call, &rs->tail, rs->lookahead, rs->tail.in_step ? rs->n_lookahead : 0);
}

/* ---------------------------------------------------------------- the call */

static tr_status session_next(void *impl, tr_llm_call *call) {
    session_backend *b = impl;
    /* The server's lookahead is greedy: a sampled LLM's next draws would differ from it, so none is asked for. */
    if (b->sampling.temperature > 0) call->lookahead = 0;
    int32_t pos = 0;
    while (pos < b->n_held && pos < call->n_tokens && b->held[pos] == call->tokens[pos]) pos++;
    /* Always send at least the last token, so the server evaluates the position whose next token we want. */
    if (pos == call->n_tokens) pos--;
    const double deadline = http_deadline(b->http);
    for (int resync = 0;; resync++) {
        char *body = build_request(b, call, pos);
        if (!body) return tr_fail(TR_ERR_NOMEM, "out of memory");
        http_response resp;
        reply_stream rs = {.call = call};
        /* Left streams are drained: the server stops one when the newer request arrives, and the connection stays. */
        const http_lines lines = {.on_line = session_reply_line, .wanted = session_reply_wanted, .user = &rs};
        tr_status st = http_request_lines(b->http, "POST", "/v1/route/next", body, deadline, call->abort_fn,
                                          call->abort_user, call->lookahead > 0 ? &lines : NULL, &resp);
        call->bytes_sent += (int64_t)strlen(body);
        free(body);
        call->bytes_received += (int64_t)resp.len;
        if (rs.answered) {
            b->created = true;
            return finish_stream(b, call, &rs, st, resp.left);
        }
        /* After a failure, held stays what the server acknowledged last: if it lost the session a 409 says so,
         * and if it processed the lost request it holds more and truncates to our pos. */
        if (st != TR_OK) return st;
        b->created = true;
        if (resp.status == 200 && resp.streamed) {
            if (rs.refused) return tr_fail(rs.refused_status, "%s", rs.refused_message);
            return tr_fail(TR_ERR_FORMAT, "/v1/route/next: the streamed reply ended before its answer");
        }
        if (resp.status == 200) { /* the whole reply at once (no lookahead, or a server that does not stream) */
            st = session_parse_reply(resp.body, resp.len, call);
            if (st != TR_OK) return st;
            held_tail tail;
            session_walk_tail(call, &tail);
            if (!tail.in_step) call->n_lookahead = 0; /* the server is out of step: trust none */
            return remember_reply(b, call, &tail, call->lookahead_ids, call->n_lookahead);
        }
        int64_t server_pos;
        if (resp.status == 400 && call->lookahead > 0 && lookahead_refused(&resp)) {
            /* Near the end of the server's context: lookahead is a hint, ask again without it. */
            call->lookahead = 0;
            continue;
        }
        if (resp.status != 409) return http_status_error("/v1/route/next", &resp);
        if (!conflict_pos(&resp, &server_pos))
            return tr_fail(TR_ERR_FORMAT, "/v1/route/next: a 409 reply without the server's pos");
        if (resync == MAX_RESYNCS)
            return tr_fail(TR_ERR_NETWORK, "/v1/route/next: still out of sync after %d resends", MAX_RESYNCS);
        /* Resend from what the server holds (a 409 reports less than we sent; anything else: from scratch). */
        pos = server_pos < pos ? (int32_t)server_pos : 0;
    }
}

static void session_free(void *impl) {
    session_backend *b = impl;
    if (!b) return;
    if (b->created && b->http) {
        char path[96];
        snprintf(path, sizeof path, "/v1/route/sessions/%s", b->id);
        http_response resp;
        /* Best effort and short: a dead server must not hold up the caller's exit. */
        const double deadline = http_now_ms() + 1000.0;
        http_request(b->http, "DELETE", path, NULL, deadline, NULL, NULL, &resp);
        tr_clear_error();
    }
    http_client_free(b->http);
    free(b->held);
    free(b);
}

/* From the caller's thread: a streamed reply being waited on should check whether it is still wanted. */
static void session_interrupt(void *impl) {
    session_backend *b = impl;
    http_client_wake(b->http);
}

static tr_status session_score(void *impl, tr_llm_score_call *call) {
    session_backend *b = impl;
    return remote_score_vllm(b->http, NULL, call);
}

static tr_status session_set_sampling(void *impl, const tr_sampler_params *sampling) {
    session_backend *b = impl;
    const tr_status st = remote_check_sampling(sampling);
    if (st == TR_OK) b->sampling = *sampling;
    return st;
}

static const backend_ops session_ops = {.name = "server",
                                        .next_token = session_next,
                                        .n_vocab = session_n_vocab,
                                        .n_ctx = session_n_ctx,
                                        .free = session_free,
                                        .interrupt = session_interrupt,
                                        .score = session_score,
                                        .set_sampling = session_set_sampling};

tr_status tr_llm_backend_server(const tr_remote_params *p, tr_llm_backend **out) {
    if (!p || !out) return tr_fail(TR_ERR_ARG, "remote backend: NULL argument");
    *out = NULL;
    if (p->top_logprobs < 0 || p->top_logprobs > 20) return tr_fail(TR_ERR_ARG, "top_logprobs must be in 0..20");
    session_backend *b = calloc(1, sizeof *b);
    if (!b) return tr_fail(TR_ERR_NOMEM, "out of memory");
    b->top_logprobs = p->top_logprobs;
    b->n_vocab = -1;
    b->n_ctx = -1;
    b->sampling = p->sampling;
    random_id(b->id, sizeof b->id);
    tr_status st = http_client_create(p, &b->http);
    if (st != TR_OK) {
        session_free(b);
        return st;
    }
    return backend_create(&session_ops, b, out);
}
