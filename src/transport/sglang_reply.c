/* sglang_reply.c — reads SGLang's /generate replies: {"text", "output_ids", "meta_info"} (tokenizer_manager.py,
 * _handle_batch_output). Log-probabilities come as [logprob, token_id, text] triples, text null unless
 * return_text_in_logprobs (tokenizer_manager.py, detokenize_logprob_tokens); a top list is one list of triples per
 * position, null where there is none (detokenize_top_logprobs_tokens). With logprob_start_len 0,
 * meta_info.input_token_logprobs has one triple per input token, the first with logprob null since nothing
 * predicts it ("add None at start": scheduler_output_processor_mixin.py, _process_input_token_logprobs), and
 * input_top_logprobs likewise; output_top_logprobs[i] is the distribution the i-th generated token was drawn from.
 * SGLang serializes with orjson, which writes NaN and infinities as null: a null log-probability anywhere but
 * input position 0 is refused rather than guessed at. */
#include "transport/sglang_reply.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "transport/remote.h"

/* A token id: an integral number in [0, INT32_MAX]. */
static bool read_id(const cJSON *v, int64_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    const double d = v->valuedouble;
    if (!(d >= 0 && d <= INT32_MAX) || d != floor(d)) return false;
    *id = (int64_t)d;
    return true;
}

/* One [logprob, token_id, text] triple. *lp is NAN when the logprob is null; false for any other shape or a
 * log-probability that is not a finite number (as a float: what it is stored as). */
static bool read_triple(const cJSON *e, double *lp, int64_t *id) {
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) < 2) return false;
    const cJSON *v = cJSON_GetArrayItem(e, 0);
    if (cJSON_IsNull(v)) *lp = NAN;
    else if (cJSON_IsNumber(v) && fabs(v->valuedouble) <= FLT_MAX) *lp = v->valuedouble; /* NaN fails too */
    else return false;
    return read_id(cJSON_GetArrayItem(e, 1), id);
}

/* Work done: SGLang reports the prompt's length and how much of it its radix cache already held. */
static int64_t evaluated(const cJSON *meta, int64_t fallback) {
    int64_t n = 0, cached = 0;
    if (!json_int(meta, "prompt_tokens", 0, INT32_MAX, &n)) return fallback;
    if (!json_int(meta, "cached_tokens", 0, n, &cached)) cached = 0;
    return n - cached;
}

static cJSON *parse_object(const char *body, size_t len, tr_status *st) {
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) *st = tr_fail(TR_ERR_FORMAT, "/generate: the reply is not JSON");
    else if (!cJSON_IsObject(j)) *st = tr_fail(TR_ERR_FORMAT, "/generate: the reply is not a JSON object");
    else return j;
    cJSON_Delete(j);
    return NULL;
}

tr_status sglang_parse_next(const char *body, size_t len, tr_llm_call *call) {
    tr_status st = TR_OK;
    cJSON *j = parse_object(body, len, &st);
    if (!j) return st;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "meta_info");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "output_ids");
    const cJSON *out_lps = cJSON_GetObjectItemCaseSensitive(meta, "output_token_logprobs");
    const cJSON *out0 = cJSON_IsArray(out_lps) ? cJSON_GetArrayItem(out_lps, 0) : NULL;
    int64_t id = -1, id_lp = -1;
    double lp = NAN;
    const bool has_ids = cJSON_IsArray(ids) && cJSON_GetArraySize(ids) > 0, has_lp = out0 != NULL;
    if (has_ids && !read_id(cJSON_GetArrayItem(ids, 0), &id)) {
        st = tr_fail(TR_ERR_FORMAT, "/generate: output_ids[0] is not a token id");
    } else if (has_lp && !read_triple(out0, &lp, &id_lp)) {
        st = tr_fail(TR_ERR_FORMAT, "/generate: meta_info.output_token_logprobs[0] is not a [logprob, token_id, "
                                    "text] entry");
    } else if (!has_ids && !has_lp) {
        /* An aborted request says why in finish_reason.message. */
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(meta, "finish_reason");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(fr, "message");
        st = tr_fail(TR_ERR_FORMAT, "/generate: the reply names no generated token (output_ids, "
                     "meta_info.output_token_logprobs)%s%s", cJSON_IsString(msg) ? ": " : "",
                     cJSON_IsString(msg) ? msg->valuestring : "");
    } else if (has_ids && has_lp && id != id_lp) {
        st = tr_fail(TR_ERR_FORMAT, "/generate: output_ids[0] is %lld but output_token_logprobs[0] names %lld",
                     (long long)id, (long long)id_lp);
    } else {
        call->id = (int32_t)(has_ids ? id : id_lp);
        if (isfinite(lp)) call->logprob = (float)lp;
        call->n_evaluated = evaluated(meta, 0);
    }
    cJSON_Delete(j);
    return st;
}

/* One position's top list into o: its triples in order, ids >= n_allowed (when set) dropped, at most k kept. */
static tr_status read_top(const cJSON *list, const char *field, int32_t p, int32_t k, int32_t n_allowed,
                          tr_llm_position *o) {
    if (!cJSON_IsArray(list))
        return tr_fail(TR_ERR_FORMAT, "/generate: %s has no list for position %d", field, p);
    const cJSON *e;
    int32_t dropped = 0;
    cJSON_ArrayForEach(e, list) {
        double lp;
        int64_t id;
        if (!read_triple(e, &lp, &id) || isnan(lp))
            return tr_fail(TR_ERR_FORMAT, "/generate: %s, position %d: an entry is not [logprob, token_id, text] "
                           "with a finite log-probability", field, p);
        if (n_allowed > 0 && id >= n_allowed) {
            dropped++;
            continue;
        }
        if (o->n_top == k) break;
        o->top_ids[o->n_top] = (int32_t)id;
        o->top_logprobs[o->n_top++] = (float)lp;
    }
    /* SGLang cannot restrict its top list to the allowed ids: say so rather than report a short list. */
    if (dropped > 0 && o->n_top < (k < n_allowed ? k : n_allowed))
        return tr_fail(TR_ERR_RANGE, "/generate: position %d: %d of the alternatives given are ids >= %d (outside "
                       "the allowed range), leaving %d of the %d wanted", p, dropped, n_allowed, o->n_top, k);
    return TR_OK;
}

tr_status sglang_parse_score(const char *body, size_t len, tr_llm_score_call *call) {
    tr_status st = TR_OK;
    cJSON *j = parse_object(body, len, &st);
    if (!j) return st;
    const int32_t n = call->n_tokens, in_end = call->end < n ? call->end : n;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "meta_info");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(meta, "input_token_logprobs");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(meta, "input_top_logprobs");
    if (call->first < in_end) {
        if (!cJSON_IsArray(tokens) || cJSON_GetArraySize(tokens) != n)
            st = tr_fail(TR_ERR_FORMAT, "/generate: meta_info.input_token_logprobs has %d entries, expected one per "
                         "input token (%d; was logprob_start_len 0 honoured?)", cJSON_GetArraySize(tokens), n);
        else if (!cJSON_IsArray(tops) || cJSON_GetArraySize(tops) != n)
            st = tr_fail(TR_ERR_FORMAT, "/generate: meta_info.input_top_logprobs has %d entries, expected %d",
                         cJSON_GetArraySize(tops), n);
    }
    /* Walking both arrays once (cJSON_GetArrayItem is linear in the index); their sizes are checked above. */
    const cJSON *e = st == TR_OK && call->first < in_end ? tokens->child : NULL, *t = e ? tops->child : NULL;
    for (int32_t p = 0; e && st == TR_OK && p < in_end; p++, e = e->next, t = t->next) {
        if (p < call->first) continue;
        double lp;
        int64_t id;
        tr_llm_position *o = &call->out[p - call->first];
        if (!read_triple(e, &lp, &id))
            st = tr_fail(TR_ERR_FORMAT, "/generate: input_token_logprobs[%d] is not [logprob, token_id, text] with "
                         "a finite log-probability", p);
        else if (id != call->tokens[p])
            st = tr_fail(TR_ERR_FORMAT, "/generate: input_token_logprobs[%d] is token %lld, the request's is %d "
                         "(a misaligned reply)", p, (long long)id, call->tokens[p]);
        else if (isnan(lp))
            st = tr_fail(TR_ERR_FORMAT, "/generate: input_token_logprobs[%d] has no log-probability", p);
        else {
            o->logprob = (float)lp;
            st = read_top(t, "input_top_logprobs", p, call->top_k, call->n_allowed, o);
        }
    }
    if (st == TR_OK && call->end == n + 1) {
        const cJSON *out_tops = cJSON_GetObjectItemCaseSensitive(meta, "output_top_logprobs");
        const cJSON *top0 = cJSON_IsArray(out_tops) ? cJSON_GetArrayItem(out_tops, 0) : NULL;
        st = read_top(top0, "output_top_logprobs", n, call->top_k, call->n_allowed, &call->out[n - call->first]);
    }
    if (st == TR_OK) call->n_evaluated = evaluated(meta, n);
    cJSON_Delete(j);
    return st;
}
