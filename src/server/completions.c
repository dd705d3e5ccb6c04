/* completions.c — POST /v1/completions, the OpenAI-compatible subset: `prompt` (text, or an array of token ids, or
 * a one-element array of either), `max_tokens` (default 16, as OpenAI), `temperature`, `top_p`, `seed`,
 * `logprobs` (0-20 alternatives per token), `stream` (server-sent events ending with `data: [DONE]`); `model`,
 * `n` (only 1), `echo` (only false) and unknown fields are accepted and ignored. The response follows OpenAI's
 * text_completion object and adds `choices[0].token_ids`, the generated ids, so clients never re-tokenize text.
 *
 * A completion runs on a private session ("!cmpl-N", a name no client can send) through the same scheduler as
 * the session protocol, one job per generated token, so completions are batched with routed sessions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server/server_internal.h"

typedef struct cmpl {
    tr_server *srv;
    char id[40];
    int32_t *ids;          /* prompt then generated ids */
    int32_t n_prompt, n_gen, max_tokens;
    int32_t n_logprobs;
    sampling samp;
    bool stream, finished, deleted;
    const char *finish_reason;
    tr_detok_stream *detok;
    /* accumulated text and logprobs (non-streaming) */
    char *text;
    size_t text_len, text_cap;
    cJSON *lp_tokens, *lp_token_logprobs, *lp_top, *lp_offsets;
    double t0_ms;
} cmpl;

static bool append_text(cmpl *c, const char *s, size_t n) {
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = (c->text_len + n + 1) * 2;
        char *p = realloc(c->text, cap);
        if (!p) return false;
        c->text = p;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
    return true;
}

static void cmpl_free(cmpl *c) {
    if (!c) return;
    if (!c->deleted && c->srv->sched) scheduler_delete(c->srv->sched, c->id);
    free(c->ids);
    free(c->text);
    if (c->detok) tr_detok_stream_free(c->detok);
    cJSON_Delete(c->lp_tokens);
    cJSON_Delete(c->lp_token_logprobs);
    cJSON_Delete(c->lp_top);
    cJSON_Delete(c->lp_offsets);
    free(c);
}

static char *piece_of(const tr_vocab *v, int32_t id) {
    char buf[256];
    int32_t n = v ? tr_token_to_piece(v, id, true, buf, (int32_t)sizeof buf - 1) : -1;
    if (n < 0) n = 0;
    if (n > (int32_t)sizeof buf - 1) n = (int32_t)sizeof buf - 1;
    buf[n] = 0;
    return strdup(buf);
}

/* Parses the request into c; false with err filled on bad input. */
static bool parse(tr_server *srv, const char *body, size_t len, cmpl *c, api_error *err) {
    const tr_vocab *vocab = tr_model_vocab(srv->model);
    const int32_t n_vocab = tr_model_get_info(srv->model)->n_vocab, n_ctx = scheduler_n_ctx(srv->sched);
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool ok = false;
    if (!root || !cJSON_IsObject(root)) {
        api_error_set(err, 400, "bad_request", "", "the body is not a JSON object");
        goto done;
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1 &&
        (cJSON_IsString(prompt->child) || cJSON_IsArray(prompt->child)))
        prompt = prompt->child; /* a batch of one prompt */
    if (cJSON_IsString(prompt)) {
        if (!vocab) {
            api_error_set(err, 400, "bad_request", "prompt", "this model has no vocabulary: send token ids");
            goto done;
        }
        const size_t n_text = strlen(prompt->valuestring);
        const int32_t cap = (int32_t)(n_text + 8 < (size_t)n_ctx + 8 ? n_text + 8 : (size_t)n_ctx + 8);
        c->ids = malloc((size_t)(cap + n_ctx) * sizeof *c->ids);
        int32_t n = 0;
        tr_tokenize_params tp = tr_tokenize_default_params();
        if (!c->ids || tr_tokenize(vocab, prompt->valuestring, n_text, &tp, c->ids, cap, &n) != TR_OK) {
            api_error_set(err, 400, "bad_request", "prompt", "the prompt does not fit the context of %d tokens", n_ctx);
            goto done;
        }
        c->n_prompt = n;
    } else if (cJSON_IsArray(prompt)) {
        const int n = cJSON_GetArraySize(prompt);
        if (n > n_ctx) {
            api_error_set(err, 400, "bad_request", "prompt", "the prompt exceeds the context of %d tokens", n_ctx);
            goto done;
        }
        if (!(c->ids = malloc((size_t)(n + n_ctx + 1) * sizeof *c->ids))) {
            api_error_set(err, 503, "busy", "", "out of memory");
            goto done;
        }
        int i = 0;
        for (const cJSON *t = prompt->child; t; t = t->next, i++) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= n_vocab) {
                api_error_set(err, 400, "bad_request", "prompt", "prompt[%d] is not a token id in [0, %d)", i, n_vocab);
                goto done;
            }
            c->ids[i] = (int32_t)t->valuedouble;
        }
        c->n_prompt = n;
    } else {
        api_error_set(err, 400, "bad_request", "prompt", "'prompt' must be a string or an array of token ids");
        goto done;
    }
    if (c->n_prompt == 0) {
        api_error_set(err, 400, "bad_request", "prompt", "the prompt is empty");
        goto done;
    }
    if (c->n_prompt >= n_ctx) {
        api_error_set(err, 400, "bad_request", "prompt", "the prompt fills the context of %d tokens", n_ctx);
        goto done;
    }
    const struct {
        const char *name;
        double lo, hi, def;
    } nums[] = {{"max_tokens", 0, 1 << 20, 16}, {"temperature", 0, 100, 1}, {"top_p", 0, 1, 1},
                {"seed", 0, 9007199254740992.0, 0}, {"logprobs", 0, TOP_LOGPROBS_MAX, 0}, {"n", 1, 1, 1}};
    double val[6];
    for (int k = 0; k < 6; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, nums[k].name);
        val[k] = nums[k].def;
        if (!f || cJSON_IsNull(f)) continue;
        if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < nums[k].lo ||
            f->valuedouble > nums[k].hi || (k != 1 && k != 2 && f->valuedouble != floor(f->valuedouble))) {
            api_error_set(err, 400, "bad_request", nums[k].name, "'%s' must be a number in [%g, %g]%s", nums[k].name,
                          nums[k].lo, nums[k].hi, k != 1 && k != 2 ? " (an integer)" : "");
            goto done;
        }
        val[k] = f->valuedouble;
    }
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsBool(stream) && !cJSON_IsNull(stream)) {
        api_error_set(err, 400, "bad_request", "stream", "'stream' must be true or false");
        goto done;
    }
    const cJSON *echo = cJSON_GetObjectItemCaseSensitive(root, "echo");
    if (cJSON_IsTrue(echo)) {
        api_error_set(err, 400, "bad_request", "echo", "'echo' is not supported");
        goto done;
    }
    c->stream = cJSON_IsTrue(stream);
    c->max_tokens = (int32_t)val[0];
    if (c->max_tokens > n_ctx - c->n_prompt) c->max_tokens = n_ctx - c->n_prompt;
    c->samp.temperature = (float)val[1];
    c->samp.top_p = val[2] > 0 ? (float)val[2] : 1.0f;
    c->samp.seed = (uint64_t)val[3];
    c->n_logprobs = (int32_t)val[4];
    ok = true;
done:
    cJSON_Delete(root);
    return ok;
}

/* One scheduler job: the whole prompt first, then the last generated token. Returns the HTTP status. */
static int step(cmpl *c, route_result *res, api_error *err) {
    route_request req = {0};
    snprintf(req.session, sizeof req.session, "%s", c->id);
    const bool first = c->n_gen == 0;
    req.pos = first ? 0 : c->n_prompt + c->n_gen - 1;
    req.tokens = first ? c->ids : c->ids + c->n_prompt + c->n_gen - 1;
    req.n_tokens = first ? c->n_prompt : 1;
    req.top_logprobs = c->n_logprobs;
    req.n_vocab = tr_model_get_info(c->srv->model)->n_vocab;
    req.samp = c->samp;
    return scheduler_route(c->srv->sched, &req, res, err);
}

/* Adds the token of res; returns the text it completes (may be empty) through text and len. */
static void take(cmpl *c, const route_result *res, const char **text, size_t *len) {
    const tr_vocab *vocab = tr_model_vocab(c->srv->model);
    c->ids[c->n_prompt + c->n_gen++] = res->token;
    *text = "";
    *len = 0;
    const bool eog = vocab && tr_vocab_is_eog(vocab, res->token);
    if (!eog && c->detok) tr_detok_stream_push(c->detok, res->token, text, len);
    if (eog) {
        c->finished = true;
        c->finish_reason = "stop";
    } else if (c->n_gen >= c->max_tokens) {
        c->finished = true;
        c->finish_reason = "length";
    }
}

static cJSON *logprobs_json(cmpl *c, const route_result *res, const char *text_before_end, size_t offset) {
    const tr_vocab *vocab = tr_model_vocab(c->srv->model);
    cJSON *lp = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(lp, "top_logprobs"), *off = cJSON_AddArrayToObject(lp, "text_offset");
    char *p = piece_of(vocab, res->token);
    cJSON_AddItemToArray(toks, cJSON_CreateString(p ? p : ""));
    free(p);
    cJSON_AddItemToArray(tlp, cJSON_CreateNumber(res->logprob));
    cJSON *alt = cJSON_CreateObject();
    for (int32_t i = 0; i < res->n_top; i++) {
        char *q = piece_of(vocab, res->top[i].id);
        if (q && !cJSON_GetObjectItemCaseSensitive(alt, q)) cJSON_AddNumberToObject(alt, q, res->top[i].logprob);
        free(q);
    }
    cJSON_AddItemToArray(top, alt);
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    (void)text_before_end;
    return lp;
}

static cJSON *response_head(cmpl *c) {
    cJSON *root = cJSON_CreateObject();
    const tr_model_info *mi = tr_model_get_info(c->srv->model);
    cJSON_AddStringToObject(root, "id", c->id + 1);
    cJSON_AddStringToObject(root, "object", "text_completion");
    cJSON_AddNumberToObject(root, "created", (double)time(NULL));
    cJSON_AddStringToObject(root, "model", mi->name && mi->name[0] ? mi->name : mi->arch_name);
    return root;
}

static void add_usage(cmpl *c, cJSON *root) {
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", c->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", c->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", c->n_prompt + c->n_gen);
}

/* ---------------------------------------------------------------- non-streaming */

static int run_whole(cmpl *c, struct MHD_Connection *conn) {
    route_result res;
    api_error err = {0};
    if (c->n_logprobs > 0) {
        c->lp_tokens = cJSON_CreateArray();
        c->lp_token_logprobs = cJSON_CreateArray();
        c->lp_top = cJSON_CreateArray();
        c->lp_offsets = cJSON_CreateArray();
    }
    if (c->max_tokens == 0) c->finished = true, c->finish_reason = "length";
    while (!c->finished) {
        const int status = step(c, &res, &err);
        if (status != 200) return http_send_error(c->srv, conn, "completions", &err, c->t0_ms);
        const size_t offset = c->text_len;
        const char *t;
        size_t n;
        take(c, &res, &t, &n);
        if (!append_text(c, t, n)) return http_send_json(conn, 500, NULL);
        if (c->n_logprobs > 0) {
            cJSON *lp = logprobs_json(c, &res, NULL, offset);
            cJSON_AddItemToArray(c->lp_tokens, cJSON_DetachItemFromArray(cJSON_GetObjectItem(lp, "tokens"), 0));
            cJSON_AddItemToArray(c->lp_token_logprobs,
                                 cJSON_DetachItemFromArray(cJSON_GetObjectItem(lp, "token_logprobs"), 0));
            cJSON_AddItemToArray(c->lp_top, cJSON_DetachItemFromArray(cJSON_GetObjectItem(lp, "top_logprobs"), 0));
            cJSON_AddItemToArray(c->lp_offsets, cJSON_DetachItemFromArray(cJSON_GetObjectItem(lp, "text_offset"), 0));
            cJSON_Delete(lp);
        }
    }
    if (c->detok) {
        const char *t;
        size_t n;
        if (tr_detok_stream_flush(c->detok, &t, &n) == TR_OK) append_text(c, t, n);
    }
    cJSON *root = response_head(c), *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddStringToObject(ch, "text", c->text ? c->text : "");
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->n_logprobs > 0) {
        cJSON *lp = cJSON_AddObjectToObject(ch, "logprobs");
        cJSON_AddItemToObject(lp, "tokens", c->lp_tokens);
        cJSON_AddItemToObject(lp, "token_logprobs", c->lp_token_logprobs);
        cJSON_AddItemToObject(lp, "top_logprobs", c->lp_top);
        cJSON_AddItemToObject(lp, "text_offset", c->lp_offsets);
        c->lp_tokens = c->lp_token_logprobs = c->lp_top = c->lp_offsets = NULL;
    } else {
        cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", c->finish_reason);
    cJSON *ids = cJSON_AddArrayToObject(ch, "token_ids");
    for (int32_t i = 0; i < c->n_gen; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->ids[c->n_prompt + i]));
    add_usage(c, root);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    const double ms = server_now_ms() - c->t0_ms;
    metrics_request(&c->srv->metrics, "completions", 200, ms);
    server_log(c->srv, "completions 200 %.2f ms prompt=%d generated=%d", ms, c->n_prompt, c->n_gen);
    return http_send_json(conn, 200, out);
}

/* ---------------------------------------------------------------- streaming (server-sent events) */

static char *sse(cJSON *root) {
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return NULL;
    const size_t n = strlen(json) + 9;
    char *out = malloc(n);
    if (out) snprintf(out, n, "data: %s\n\n", json);
    free(json);
    return out;
}

/* The next event (http_send_stream's producer): one per generated token, then the final one with usage, then
 * [DONE], the last. */
static char *next_event(void *cls, bool *last) {
    cmpl *c = cls;
    if (c->finished) {
        *last = true;
        const double ms = server_now_ms() - c->t0_ms;
        metrics_request(&c->srv->metrics, "completions", 200, ms);
        server_log(c->srv, "completions 200 (stream) %.2f ms prompt=%d generated=%d", ms, c->n_prompt, c->n_gen);
        return strdup("data: [DONE]\n\n");
    }
    route_result res;
    api_error err = {0};
    cJSON *root = response_head(c), *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    if (c->max_tokens == 0) {
        c->finished = true;
        c->finish_reason = "length";
        cJSON_AddStringToObject(ch, "text", "");
    } else {
        const int status = step(c, &res, &err);
        if (status != 200) {
            cJSON_Delete(root);
            root = cJSON_CreateObject();
            cJSON *e = cJSON_AddObjectToObject(root, "error");
            cJSON_AddStringToObject(e, "code", err.code);
            cJSON_AddStringToObject(e, "message", err.message);
            c->finished = true;
            *last = true; /* the error event ends the stream */
            return sse(root);
        }
        const size_t offset = c->text_len;
        const char *t;
        size_t n;
        take(c, &res, &t, &n);
        append_text(c, t, n);
        char *piece = malloc(n + 1);
        if (piece) {
            memcpy(piece, t, n);
            piece[n] = 0;
        }
        if (c->finished && c->detok) {
            const char *ft;
            size_t fn;
            if (tr_detok_stream_flush(c->detok, &ft, &fn) == TR_OK && fn > 0 && piece) {
                char *p2 = realloc(piece, n + fn + 1);
                if (p2) {
                    memcpy(p2 + n, ft, fn);
                    p2[n + fn] = 0;
                    piece = p2;
                }
            }
        }
        cJSON_AddStringToObject(ch, "text", piece ? piece : "");
        free(piece);
        if (c->n_logprobs > 0) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(c, &res, NULL, offset));
        cJSON *ids = cJSON_AddArrayToObject(ch, "token_ids");
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(res.token));
    }
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->n_logprobs == 0) cJSON_AddNullToObject(ch, "logprobs");
    if (c->finished) {
        cJSON_AddStringToObject(ch, "finish_reason", c->finish_reason);
        add_usage(c, root);
    } else {
        cJSON_AddNullToObject(ch, "finish_reason");
    }
    return sse(root);
}

static void stream_free(void *cls) { cmpl_free(cls); }

int completions_handle(tr_server *srv, struct MHD_Connection *conn, const char *body, size_t len) {
    const double t0 = server_now_ms();
    api_error err = {0};
    cmpl *c = calloc(1, sizeof *c);
    if (!c) return http_send_json(conn, 500, NULL);
    c->srv = srv;
    c->t0_ms = t0;
    snprintf(c->id, sizeof c->id, "!cmpl-%ld", (long)atomic_fetch_add(&srv->cmpl_counter, 1));
    if (srv->params.log_requests) server_log(srv, "completions body: %.*s", (int)(len < 900 ? len : 900), body);
    if (!parse(srv, body, len, c, &err)) {
        c->deleted = true;
        cmpl_free(c);
        return http_send_error(srv, conn, "completions", &err, t0);
    }
    const tr_vocab *vocab = tr_model_vocab(srv->model);
    if (vocab && tr_detok_stream_create(vocab, false, &c->detok) != TR_OK) c->detok = NULL;
    if (!c->stream) {
        const int ret = run_whole(c, conn);
        cmpl_free(c);
        return ret;
    }
    return http_send_stream(conn, "text/event-stream", next_event, c, stream_free);
}
