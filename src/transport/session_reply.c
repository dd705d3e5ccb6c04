/* session_reply.c — reading the session protocol's /v1/route/next replies (see session_reply.h): the whole reply,
 * the draft walk's share of what the server then holds, and a streamed reply line by line. */
#include "transport/session_reply.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "transport/remote.h"

tr_status session_parse_reply(const char *body, size_t len, tr_llm_call *call) {
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

void session_walk_tail(tr_llm_call *call, held_tail *t) {
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

/* Whether to read the stream on: to its end once all the lookahead asked for came (the done line follows at once,
 * with the server's accounting) or done came, else while the caller takes lookahead; never after a break. */
static bool reading_on(const reply_stream *rs) {
    return !rs->broken && (rs->done || rs->wanted || rs->n_lookahead >= rs->call->lookahead);
}

static void take_answer_line(reply_stream *rs, const char *line, size_t len) {
    tr_llm_call *call = rs->call;
    const int64_t evaluated_before = call->n_evaluated;
    const tr_status st = session_parse_reply(line, len, call);
    if (st != TR_OK) {
        rs->refused = true;
        rs->refused_status = st;
        snprintf(rs->refused_message, sizeof rs->refused_message, "%s", tr_last_error());
        return;
    }
    call->n_lookahead = 0; /* it comes in lines */
    rs->answer_evaluated = call->n_evaluated - evaluated_before;
    session_walk_tail(call, &rs->tail);
    rs->wanted = rs->tail.in_step;
    rs->answered = true;
    tr_llm_call_answered(call);
}

/* After the answer: {"lookahead": ID} lines, then {"done": true, ...}; anything else (an error line, more
 * lookahead than asked, a line after done) breaks the stream. Returns whether to read on: not once the caller
 * wants no more lookahead, nor after a break. */
bool session_reply_line(void *user, const char *line, size_t len) {
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

bool session_reply_wanted(void *user) {
    const reply_stream *rs = user;
    return reading_on(rs) && (rs->n_lookahead >= rs->call->lookahead || tr_llm_call_wanted(rs->call));
}
