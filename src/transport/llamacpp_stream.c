/* llamacpp_stream.c — reading llama.cpp's streamed /completion reply for the answer and its lookahead (see
 * llamacpp_stream.h). An event is "data: {json}"; blank lines and comments (":") separate them. */
#include "transport/llamacpp_stream.h"

#include <math.h>
#include <string.h>

#include "common/error.h"
#include "transport/remote.h"

static bool reading_on(const llamacpp_stream *s) {
    return !s->no_answer && !s->broken && (s->done || s->wanted || s->n_lookahead >= s->call->lookahead);
}

/* The token of a token event: "tokens": [id] and its position "tokens_predicted"; false when absent or malformed. */
static bool event_token(const cJSON *j, int32_t *id, int32_t *position) {
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    const cJSON *t = cJSON_GetArrayItem(tokens, 0);
    int64_t pos;
    if (!cJSON_IsArray(tokens) || cJSON_GetArraySize(tokens) != 1 || !cJSON_IsNumber(t) ||
        !(t->valuedouble >= 0 && t->valuedouble <= INT32_MAX) || t->valuedouble != floor(t->valuedouble) ||
        !json_int(j, "tokens_predicted", 1, INT32_MAX, &pos))
        return false;
    *id = (int32_t)t->valuedouble;
    *position = (int32_t)pos;
    return true;
}

/* Prompt tokens evaluated for this request (timings.prompt_n, sent with every event: timings_per_token). */
static void take_prompt_n(const cJSON *j, tr_llm_call *call) {
    int64_t n;
    if (json_int(cJSON_GetObjectItemCaseSensitive(j, "timings"), "prompt_n", 0, INT32_MAX, &n)) call->n_evaluated = n;
}

static void take_answer(llamacpp_stream *s, const cJSON *j, int32_t id, int32_t position) {
    tr_llm_call *call = s->call;
    if (position != 1) { /* the answer was held back (it ends inside a UTF-8 character) */
        s->no_answer = true;
        return;
    }
    call->id = id;
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "completion_probabilities"), 0), "logprob");
    if (cJSON_IsNumber(lp)) call->logprob = (float)lp->valuedouble;
    take_prompt_n(j, call);
    s->position = 1;
    s->answered = s->wanted = true;
    tr_llm_call_answered(call);
}

bool llamacpp_stream_line(void *user, const char *line, size_t len) {
    llamacpp_stream *s = user;
    tr_llm_call *call = s->call;
    if (len == 0 || line[0] == ':') return reading_on(s); /* event separator or comment */
    if (s->no_answer || s->broken) return false;
    cJSON *j = len > 6 && strncmp(line, "data: ", 6) == 0 && !s->done ? cJSON_ParseWithLength(line + 6, len - 6) : NULL;
    int32_t id, position;
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(j, "stop");
    if (j && cJSON_IsTrue(stop)) { /* the final event: the stream's accounting */
        s->done = true;
        if (s->answered) {
            take_prompt_n(j, call);
            int64_t predicted;
            /* Every generated token but the last was evaluated to produce the next. */
            if (json_int(cJSON_GetObjectItemCaseSensitive(j, "timings"), "predicted_n", 1, INT32_MAX, &predicted))
                call->n_evaluated += predicted - 1;
        } else {
            s->no_answer = true;
        }
    } else if (j && cJSON_IsFalse(stop) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "tokens")) == 0) {
        /* a start or progress event: no token */
    } else if (j && cJSON_IsFalse(stop) && event_token(j, &id, &position)) {
        if (!s->answered) {
            take_answer(s, j, id, position);
        } else if (position == s->position + 1 && s->n_lookahead < call->lookahead) {
            s->position = position;
            s->n_lookahead++;
            if (s->wanted) s->wanted = tr_llm_call_push_lookahead(call, id);
        } else {
            s->broken = true; /* a held-back token, or more than asked: the lookahead ends here */
        }
    } else if (s->answered) {
        s->broken = true;
    } else {
        s->no_answer = true; /* an error event, or no token where the answer belongs */
    }
    cJSON_Delete(j);
    return reading_on(s);
}

bool llamacpp_stream_wanted(void *user) {
    const llamacpp_stream *s = user;
    return reading_on(s) && (s->done || s->n_lookahead >= s->call->lookahead || tr_llm_call_wanted(s->call));
}
