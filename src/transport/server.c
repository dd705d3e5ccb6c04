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
 * arrive (http_request_lines): the answer line is handed on at once (tr_llm_call_answered), then each lookahead
 * token (tr_llm_call_push_lookahead). When the caller wants no more (a newer request waits: the backend's
 * interrupt wakes the transfer), the call leaves the stream at once: the HTTP client reads the rest in the
 * background and sends the newer request on its second connection, where the server sees it and stops the old
 * stream after the pass in flight (no handshake, no wait for stale lookahead). held counts the lookahead the server
 * produced: all of it after done; after a left stream, what it surely produced by the last line received. A stream
 * that breaks after its answer costs only the lookahead: the call succeeds, and held falls back to the request's
 * tokens, which the server surely holds (it truncates anything beyond). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "transport/remote.h"

#define MAX_RESYNCS 3

typedef struct session_backend {
    http_client *http;
    char id[40];
    int32_t *held;         /* tokens the server holds for this session, as far as we know */
    int32_t n_held, cap;
    bool created;
    int32_t top_logprobs;
    int32_t n_vocab;       /* from /health; -1 before asking */
    tr_sampler_params sampling;
} session_backend;

static void random_id(char *out, size_t cap) {
    uint64_t r[2] = {0, 0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && read(fd, r, sizeof r) == (ssize_t)sizeof r;
    if (fd >= 0) close(fd);
    if (!ok) { /* no urandom: time, address and pid still make a collision unlikely */
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

/* A reply object (the whole reply, or a streamed answer line): token, pos, logprob, n_evaluated, lookahead,
 * lookahead_ms, verify. */
static tr_status parse_reply(const char *body, size_t len, tr_llm_call *call) {
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) return tr_fail(TR_ERR_FORMAT, "/v1/route/next: the reply is not JSON");
    int64_t id, pos, n_eval = 0;
    tr_status st = TR_OK;
    if (!json_int(j, "token", 0, INT32_MAX, &id)) st = tr_fail(TR_ERR_FORMAT, "/v1/route/next: no valid \"token\"");
    else if (!json_int(j, "pos", 0, INT32_MAX, &pos) || pos != call->n_tokens)
        st = tr_fail(TR_ERR_FORMAT, "/v1/route/next: the server holds %lld tokens, expected %d",
                     json_int(j, "pos", 0, INT32_MAX, &pos) ? (long long)pos : -1LL, call->n_tokens);
    if (st == TR_OK) {
        call->id = (int32_t)id;
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(j, "logprob");
        if (cJSON_IsNumber(lp)) call->logprob = (float)lp->valuedouble;
        if (json_int(j, "n_evaluated", 0, INT32_MAX, &n_eval)) call->n_evaluated += n_eval;
        /* Lookahead is a hint: a malformed entry ends it there, it never fails the call. */
        const cJSON *la = cJSON_GetObjectItemCaseSensitive(j, "lookahead");
        const int n_la = cJSON_IsArray(la) ? cJSON_GetArraySize(la) : 0;
        for (int i = 0; i < n_la && call->n_lookahead < call->lookahead; i++) {
            const cJSON *x = cJSON_GetArrayItem(la, i);
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > INT32_MAX ||
                x->valuedouble != (double)(int32_t)x->valuedouble)
                break;
            call->lookahead_ids[call->n_lookahead++] = (int32_t)x->valuedouble;
        }
        const cJSON *tm = cJSON_GetObjectItemCaseSensitive(j, "timings");
        const cJSON *la_ms = cJSON_GetObjectItemCaseSensitive(tm, "lookahead_ms");
        if (cJSON_IsNumber(la_ms) && la_ms->valuedouble > 0 && la_ms->valuedouble < 1e9)
            call->lookahead_ms = la_ms->valuedouble;
        /* The draft walk: malformed entries end it (backend.c then checks it against the draft). */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "verify");
        const int n_v = call->draft && cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
        for (int i = 0; i < n_v && call->n_verify < TR_DRAFT_BRANCHES_MAX; i++) {
            const cJSON *x = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > INT32_MAX ||
                x->valuedouble != (double)(int32_t)x->valuedouble)
                break;
            call->verify_ids[call->n_verify++] = (int32_t)x->valuedouble;
        }
    }
    cJSON_Delete(j);
    return st;
}

/* What a reply leaves on the server after the request's tokens: the draft branches it walked, then (with k > 0
 * lookahead tokens produced) the last answer and lookahead[0..k-1). */
typedef struct held_tail {
    int32_t ids[TR_DRAFT_TOKENS_MAX + TR_LOOKAHEAD_MAX + 1];
    int32_t n;
    int32_t last_answer;  /* the lookahead follows it */
    bool in_step;         /* the server's walk follows the draft; else its lookahead is not trusted */
} held_tail;

/* The walk part of the tail. Cuts call->n_verify to the branches the draft really continues with; a server that
 * claims more is out of step (its lookahead then follows an answer we do not take). */
static void walk_tail(tr_llm_call *call, held_tail *t) {
    t->n = 0;
    t->last_answer = call->id;
    t->in_step = true;
    if (!call->draft || call->n_verify <= 0) return;
    int32_t answers[TR_DRAFT_BRANCHES_MAX + 1], path[TR_DRAFT_BRANCHES_MAX + 1];
    answers[0] = call->id;
    memcpy(answers + 1, call->verify_ids, (size_t)call->n_verify * sizeof *answers);
    const int32_t n_path = draft_walk(call->draft, answers, call->n_verify, path);
    const tr_llm_draft *d = call->draft;
    for (int32_t i = 0; i < n_path; i++)
        for (int32_t k = d->start[path[i]]; k < d->start[path[i] + 1]; k++) t->ids[t->n++] = d->tokens[k];
    if (n_path > 0) t->last_answer = call->verify_ids[n_path - 1];
    t->in_step = n_path == call->n_verify;
    call->n_verify = n_path;
}

static tr_status remember_reply(session_backend *b, const tr_llm_call *call, held_tail *t, const int32_t *lookahead,
                                int32_t n_produced) {
    if (n_produced > 0) {
        t->ids[t->n++] = t->last_answer;
        for (int32_t i = 0; i + 1 < n_produced; i++) t->ids[t->n++] = lookahead[i];
    }
    return remember(b, call->tokens, call->n_tokens, t->ids, t->n);
}

/* ---------------------------------------------------------------- a streamed reply, line by line */

typedef struct reply_stream {
    tr_llm_call *call;
    bool answered;        /* the answer line was taken and handed on (tr_llm_call_answered) */
    bool refused;         /* the first line was no usable answer: the call fails with refused_status */
    tr_status refused_status;
    char refused_message[256];
    bool wanted;          /* the caller still takes lookahead tokens */
    bool done;            /* the done line came */
    bool broken;          /* a line that does not belong: what the server holds beyond the answer is unknown */
    held_tail tail;
    int32_t lookahead[TR_LOOKAHEAD_MAX];
    int32_t n_lookahead;  /* lookahead lines received: what the server produced */
    int64_t answer_evaluated;
} reply_stream;

/* Whether to read the stream on: to its end once all the lookahead asked for came (the done line follows at once,
 * with the server's accounting) or done came, else while the caller takes lookahead; never after a break. */
static bool reading_on(const reply_stream *rs) {
    return !rs->broken && (rs->done || rs->wanted || rs->n_lookahead >= rs->call->lookahead);
}

static void take_answer_line(reply_stream *rs, const char *line, size_t len) {
    tr_llm_call *call = rs->call;
    const int64_t evaluated_before = call->n_evaluated;
    const tr_status st = parse_reply(line, len, call);
    if (st != TR_OK) {
        rs->refused = true;
        rs->refused_status = st;
        snprintf(rs->refused_message, sizeof rs->refused_message, "%s", tr_last_error());
        return;
    }
    call->n_lookahead = 0; /* it comes in lines */
    rs->answer_evaluated = call->n_evaluated - evaluated_before;
    walk_tail(call, &rs->tail);
    rs->wanted = rs->tail.in_step;
    rs->answered = true;
    tr_llm_call_answered(call);
}

/* After the answer: {"lookahead": ID} lines, then {"done": true, ...}; anything else (an error line, more
 * lookahead than asked, a line after done) breaks the stream. Returns whether to read on: not once the caller
 * wants no more lookahead, nor after a break. */
static bool on_reply_line(void *user, const char *line, size_t len) {
    reply_stream *rs = user;
    tr_llm_call *call = rs->call;
    if (rs->refused || rs->broken) return !rs->broken;
    if (!rs->answered) {
        take_answer_line(rs, line, len);
        return !rs->answered || reading_on(rs);
    }
    cJSON *j = rs->done ? NULL : cJSON_ParseWithLength(line, len);
    int64_t id, total;
    if (j && json_int(j, "lookahead", 0, INT32_MAX, &id) && rs->n_lookahead < call->lookahead) {
        rs->lookahead[rs->n_lookahead++] = (int32_t)id;
        if (rs->wanted) rs->wanted = tr_llm_call_push_lookahead(call, (int32_t)id);
    } else if (j && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "done"))) {
        rs->done = true;
        if (json_int(j, "n_evaluated", rs->answer_evaluated, INT32_MAX, &total))
            call->n_evaluated += total - rs->answer_evaluated; /* done counts the whole request */
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "timings"),
                                                           "lookahead_ms");
        if (cJSON_IsNumber(ms) && ms->valuedouble > 0 && ms->valuedouble < 1e9) call->lookahead_ms = ms->valuedouble;
    } else {
        rs->broken = true;
    }
    cJSON_Delete(j);
    return reading_on(rs);
}

static bool reply_wanted(void *user) {
    const reply_stream *rs = user;
    return reading_on(rs) && (rs->n_lookahead >= rs->call->lookahead || tr_llm_call_wanted(rs->call));
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
        tr_status st = call->lookahead > 0
                           ? http_request_lines(b->http, "POST", "/v1/route/next", body, deadline, call->abort_fn,
                                                call->abort_user, on_reply_line, reply_wanted, &rs, &resp)
                           : http_request(b->http, "POST", "/v1/route/next", body, deadline, call->abort_fn,
                                          call->abort_user, &resp);
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
            st = parse_reply(resp.body, resp.len, call);
            if (st != TR_OK) return st;
            held_tail tail;
            walk_tail(call, &tail);
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

static const backend_ops session_ops = {.name = "server",
                                        .next_token = session_next,
                                        .n_vocab = session_n_vocab,
                                        .free = session_free,
                                        .interrupt = session_interrupt};

tr_status tr_llm_backend_server(const tr_remote_params *p, tr_llm_backend **out) {
    if (!p || !out) return tr_fail(TR_ERR_ARG, "remote backend: NULL argument");
    *out = NULL;
    if (p->top_logprobs < 0 || p->top_logprobs > 20) return tr_fail(TR_ERR_ARG, "top_logprobs must be in 0..20");
    session_backend *b = calloc(1, sizeof *b);
    if (!b) return tr_fail(TR_ERR_NOMEM, "out of memory");
    b->top_logprobs = p->top_logprobs;
    b->n_vocab = -1;
    b->sampling = p->sampling;
    random_id(b->id, sizeof b->id);
    tr_status st = http_client_create(p, &b->http);
    if (st != TR_OK) {
        session_free(b);
        return st;
    }
    return backend_create(&session_ops, b, out);
}
