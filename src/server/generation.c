/* generation.c — what /v1/completions (completions.c) and /v1/chat/completions (chat_completions.c) share: one
 * continuation of a tokenized prompt, generated on a private session ("!" + the reply's id, a name no client can
 * send) through the same scheduler as the session protocol, one job per token, so OpenAI requests are batched
 * with routed sessions. Also here: the random reply id, the options both take once the shared OpenAI layer
 * (src/common/openai_request.c) has read them, the end-of-generation and stop-string rules, server-sent events,
 * and the one line a client that went away mid-stream leaves in the log.
 *
 * The end-of-generation token (EOS, or a template's end of turn such as <|im_end|>) ends a generation with "stop"
 * and is not part of it: not in its text, ids, log-probabilities or completion_tokens. A stop string ends it with
 * "stop" too and is never sent, not even in part (src/route/stop_text.c holds back text that could begin one); the
 * tokens that made it stay in token_ids and completion_tokens, as vLLM counts them. Without a seed each request
 * draws a fresh one; with one, the draw at a position depends only on (seed, position).
 *
 * A finished generation's private session is parked as a cached prefix (scheduler_park), and a new one starts
 * from the cached prefix it shares most with (reuse_prefix): usage.prompt_tokens_details.cached_tokens says how
 * many prompt tokens were not evaluated again, as OpenAI reports its prompt cache. A cached prefix belongs to the
 * API key that made it (access_key_of; a server without keys is one owner): another key's request never starts
 * from it, so neither cached_tokens nor the timing tells that key how much of someone else's text it guessed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/openai_api.h"
#include "server/server_internal.h"

bool generation_init(generation *g, tr_server *srv, const char *route, const char *id_prefix, int32_t owner,
                     api_error *err) {
    memset(g, 0, sizeof *g);
    g->srv = srv;
    g->owner = owner;
    g->route = route;
    g->t0_ms = server_now_ms();
    char prefix[24];
    snprintf(prefix, sizeof prefix, "!%s-", id_prefix);
    if (!oai_random_id(prefix, g->id, sizeof g->id)) { /* unique across restarts: 96 random bits */
        api_error_set(err, 503, "busy", "", "no random bytes for the completion id");
        return false;
    }
    return true;
}

void api_error_from_oai(api_error *err, const oai_error *e) {
    api_error_set(err, e->status, e->code, e->param, "%s", e->message);
}

bool generation_alloc_ids(generation *g, int32_t n_prompt_max, api_error *err) {
    const int32_t n_ctx = scheduler_n_ctx(g->srv->sched);
    free(g->ids);
    if (!(g->ids = malloc((size_t)(n_prompt_max + n_ctx + 1) * sizeof *g->ids))) {
        api_error_set(err, 503, "busy", "", "out of memory");
        return false;
    }
    return true;
}

void generation_release(generation *g) {
    if (g->session_used && g->srv->sched) scheduler_park(g->srv->sched, g->id); /* its KV: a cached prefix */
    g->session_used = false;
    free(g->ids);
    g->ids = NULL;
    if (g->detok) tr_detok_stream_free(g->detok);
    g->detok = NULL;
    stop_text_free(&g->stop_text);
    oai_stop_free(g->stop, g->n_stop);
    g->n_stop = 0;
    free(g->bias);
    g->bias = NULL;
    free(g->tail);
    g->tail = NULL;
}

bool generation_apply(generation *g, oai_request *r, const generation_limits *lim, api_error *err) {
    const int32_t n_ctx = scheduler_n_ctx(g->srv->sched);
    memcpy(g->stop, r->stop, sizeof g->stop);
    g->n_stop = r->n_stop;
    r->n_stop = 0;
    stop_text_init(&g->stop_text, (const char *const *)g->stop, g->n_stop);
    g->bias = r->bias;
    g->n_bias = r->n_bias;
    r->bias = NULL;
    r->n_bias = 0;
    g->samp.bias = g->bias;
    g->samp.n_bias = g->n_bias;
    g->stream = r->stream;
    g->include_usage = r->include_usage;
    const bool asked = r->max_tokens >= 0;
    const int64_t max_tokens = asked ? r->max_tokens : lim->default_max_tokens;
    if (max_tokens != 0 && g->n_prompt >= n_ctx) {
        api_error_set(err, 400, "bad_request", lim->prompt_field,
                      "the prompt fills the context of %d tokens: nothing can be generated%s", n_ctx,
                      lim->may_score ? " (max_tokens 0 scores it)" : "");
        return false;
    }
    const int32_t room = n_ctx - g->n_prompt;
    if (asked && max_tokens > room) { /* asked for: refused, as OpenAI and vLLM do; a default is cut to what fits */
        api_error_set(err, 400, "bad_request", r->max_tokens_field,
                      "the prompt's %d tokens + %s %lld exceed the context of %d tokens (at most %d can be "
                      "generated)", g->n_prompt, r->max_tokens_field, (long long)max_tokens, n_ctx, room);
        return false;
    }
    g->max_tokens = max_tokens < 0 || max_tokens > room ? room : (int32_t)max_tokens;
    g->samp.temperature = r->temperature;
    g->samp.top_p = r->top_p;
    g->samp.top_k = r->top_k;
    g->samp.seed = r->seed; /* given, or a fresh draw: the replies report it */
    const tr_vocab *vocab = tr_model_vocab(g->srv->model);
    if (vocab && !g->detok && tr_detok_stream_create(vocab, false, &g->detok) != TR_OK) g->detok = NULL;
    return true;
}

int generation_step(generation *g, route_result *res, api_error *err) {
    if (defer_client_gone()) { /* a non-streamed request's client hung up (a stream's sees it in http_defer.c) */
        api_error_set(err, 499, "client_gone", "", "the client went away");
        return 499;
    }
    route_request req = {0};
    snprintf(req.session, sizeof req.session, "%s", g->id);
    req.pos = g->n_held;
    req.tokens = g->ids + g->n_held;
    req.n_tokens = g->n_prompt + g->n_gen - g->n_held;
    req.top_logprobs = g->n_logprobs;
    req.n_vocab = tr_model_get_info(g->srv->model)->n_vocab;
    req.samp = g->samp;
    req.reuse_prefix = g->n_held == 0;
    req.owner = g->owner;
    g->session_used = true;
    const int status = scheduler_route(g->srv->sched, &req, res, err);
    if (status != 200) return status;
    if (g->n_held == 0) g->n_cached = res->n_reused;
    g->n_held = g->n_prompt + g->n_gen;
    return status;
}

bool generation_take(generation *g, const route_result *res, const char **text, size_t *len) {
    const tr_vocab *vocab = tr_model_vocab(g->srv->model);
    *text = "";
    *len = 0;
    if (vocab && tr_vocab_is_eog(vocab, res->token)) {
        g->finished = true;
        g->finish_reason = "stop";
        return false;
    }
    g->ids[g->n_prompt + g->n_gen++] = res->token;
    if (g->detok) tr_detok_stream_push(g->detok, res->token, text, len);
    if (g->n_stop > 0) {
        if (!stop_text_push(&g->stop_text, *text, *len)) g->stop_text.out_len = 0; /* out of memory: held back */
        *text = g->stop_text.out ? g->stop_text.out : "";
        *len = g->stop_text.out_len;
        if (g->stop_text.stopped) {
            g->finished = true;
            g->finish_reason = "stop";
            return true;
        }
    }
    if (g->n_gen >= g->max_tokens) {
        g->finished = true;
        g->finish_reason = "length";
    }
    return true;
}

/* Appends n bytes to g->tail (false: out of memory). */
static bool tail_add(generation *g, const char *s, size_t n) {
    char *t = realloc(g->tail, g->tail_len + n + 1);
    if (!t) return false;
    memcpy(t + g->tail_len, s, n);
    g->tail = t;
    g->tail_len += n;
    t[g->tail_len] = 0;
    return true;
}

void generation_flush(generation *g, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (g->detok && tr_detok_stream_flush(g->detok, text, len) != TR_OK) *text = "", *len = 0;
    if (g->n_stop == 0) return;
    /* The detokenizer's held-back bytes go through the stop strings too, then whatever they still hold back. */
    g->tail_len = 0;
    const bool ok = stop_text_push(&g->stop_text, *text, *len) && tail_add(g, g->stop_text.out, g->stop_text.out_len);
    if (ok && !g->stop_text.stopped && stop_text_flush(&g->stop_text))
        tail_add(g, g->stop_text.out, g->stop_text.out_len);
    if (g->stop_text.stopped) g->finish_reason = "stop";
    *text = g->tail ? g->tail : "";
    *len = g->tail_len;
}

void generation_add_usage(const generation *g, cJSON *root) {
    cJSON *u = oai_add_usage(root, g->n_prompt, g->n_gen);
    cJSON *details = u ? cJSON_AddObjectToObject(u, "prompt_tokens_details") : NULL; /* OpenAI's */
    if (details) cJSON_AddNumberToObject(details, "cached_tokens", g->n_cached);
}

void generation_done(const generation *g, const char *how) {
    const double ms = server_now_ms() - g->t0_ms;
    metrics_request(&g->srv->metrics, g->route, 200, ms);
    server_log(g->srv, "%s 200%s %.2f ms prompt=%d cached=%d generated=%d", g->route, how, ms, g->n_prompt,
               g->n_cached, g->n_gen);
}

void generation_stream_failed(generation *g, const api_error *err) {
    g->stream_failed = true;
    server_log(g->srv, "%s stream failed after %d tokens (%.2f ms): %d %s", g->route, g->n_gen,
               server_now_ms() - g->t0_ms, err->status, err->code);
}

void generation_stream_closed(const generation *g, bool client_gone) {
    /* Counted here, once the response is over, not where its last event is made: a client may still go before
     * that event reaches it. */
    const bool completed = g->finished && !g->stream_failed; /* else an error event, or cut short (out of memory) */
    metrics_stream_end(&g->srv->metrics, g->route,
                       client_gone ? STREAM_END_ABANDONED : completed ? STREAM_END_COMPLETED : STREAM_END_FAILED);
    if (client_gone)
        server_log(g->srv, "%s: client went away during completion %s after %d of at most %d tokens (%.2f ms)",
                   g->route, g->id + 1, g->n_gen, g->max_tokens, server_now_ms() - g->t0_ms);
}

char *sse_event(cJSON *root) { return root ? oai_sse_data(root) : NULL; }

char *sse_error_event(const api_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", api_error_object(err));
    return sse_event(root);
}

char *token_piece(const tr_server *srv, int32_t id, size_t *len) {
    const tr_vocab *v = tr_model_vocab(srv->model);
    char buf[256];
    int32_t n = v ? tr_token_to_piece(v, id, true, buf, (int32_t)sizeof buf - 1) : -1;
    if (n < 0) n = 0;
    if (n > (int32_t)sizeof buf - 1) n = (int32_t)sizeof buf - 1;
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return strdup(buf);
}
