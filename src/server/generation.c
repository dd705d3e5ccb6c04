/* generation.c — what /v1/completions (completions.c) and /v1/chat/completions (chat_completions.c) share: one
 * continuation of a tokenized prompt, generated on a private session ("!" + the reply's id, a name no client can
 * send) through the same scheduler as the session protocol, one job per token, so OpenAI requests are batched
 * with routed sessions. Also here: the random reply id, the options both routes take (max_tokens, temperature,
 * top_p, seed, n, stream, stream_options), the end-of-generation rule, server-sent events, and the one line a
 * client that went away mid-stream leaves in the log.
 *
 * The end-of-generation token (EOS, or a template's end of turn such as <|im_end|>) ends a generation with "stop"
 * and is not part of it: not in its text, ids, log-probabilities or completion_tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>

#include "server/server_internal.h"

bool generation_init(generation *g, tr_server *srv, const char *route, const char *id_prefix, api_error *err) {
    memset(g, 0, sizeof *g);
    g->srv = srv;
    g->route = route;
    g->t0_ms = server_now_ms();
    /* Ids unique across restarts: 96 random bits. */
    unsigned char rnd[12];
    size_t got = 0;
    while (got < sizeof rnd) {
        const ssize_t n = getrandom(rnd + got, sizeof rnd - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < sizeof rnd) {
        api_error_set(err, 503, "busy", "", "no random bytes for the completion id");
        return false;
    }
    int at = snprintf(g->id, sizeof g->id, "!%s-", id_prefix);
    for (size_t i = 0; i < sizeof rnd && at > 0 && (size_t)at < sizeof g->id; i++)
        at += snprintf(g->id + at, sizeof g->id - (size_t)at, "%02x", rnd[i]);
    return true;
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
    if (g->session_used && g->srv->sched) scheduler_delete(g->srv->sched, g->id);
    g->session_used = false;
    free(g->ids);
    g->ids = NULL;
    if (g->detok) tr_detok_stream_free(g->detok);
    g->detok = NULL;
}

/* A number field in [lo, hi] (an integer unless fractional): false with err filled when present and not so. */
static bool number_field(const cJSON *root, const char *name, double lo, double hi, bool fractional, double *val,
                         api_error *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < lo || f->valuedouble > hi ||
        (!fractional && f->valuedouble != floor(f->valuedouble))) {
        api_error_set(err, 400, "bad_request", name, "'%s' must be a number in [%g, %g]%s", name, lo, hi,
                      fractional ? "" : " (an integer)");
        return false;
    }
    *val = f->valuedouble;
    return true;
}

bool generation_parse_options(generation *g, const cJSON *root, const generation_limits *lim, api_error *err) {
    const int32_t n_ctx = scheduler_n_ctx(g->srv->sched);
    double temperature = 1, top_p = 1, seed = 0, n = 1;
    if (!number_field(root, "temperature", 0, 2, true, &temperature, err) ||
        !number_field(root, "top_p", 0, 1, true, &top_p, err) ||
        !number_field(root, "seed", 0, 9007199254740992.0, false, &seed, err) ||
        !number_field(root, "n", 1, 1 << 20, false, &n, err))
        return false;
    if (n != 1) {
        api_error_set(err, 400, "bad_request", "n", "'n' must be 1: one choice per request (send %g requests)", n);
        return false;
    }
    /* The limit on generated tokens: the first of the names given (chat: max_completion_tokens, then the older
     * max_tokens). */
    const char *limit_field = NULL;
    double max_tokens = lim->default_max_tokens;
    for (int k = 0; k < 2 && !limit_field; k++) {
        const char *name = lim->max_tokens_fields[k];
        const cJSON *f = name ? cJSON_GetObjectItemCaseSensitive(root, name) : NULL;
        if (!f || cJSON_IsNull(f)) continue;
        if (!number_field(root, name, lim->min_max_tokens, 1 << 20, false, &max_tokens, err)) return false;
        limit_field = name;
    }
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsBool(stream) && !cJSON_IsNull(stream)) {
        api_error_set(err, 400, "bad_request", "stream", "'stream' must be true or false");
        return false;
    }
    g->stream = cJSON_IsTrue(stream);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
        if (!g->stream) { /* OpenAI's and vLLM's rule */
            api_error_set(err, 400, "bad_request", "stream_options",
                          "'stream_options' is only allowed with \"stream\": true");
            return false;
        }
        if (!cJSON_IsObject(so) || (iu && !cJSON_IsBool(iu) && !cJSON_IsNull(iu))) {
            api_error_set(err, 400, "bad_request", "stream_options",
                          "'stream_options' must be an object {\"include_usage\": true or false}");
            return false;
        }
        g->include_usage = cJSON_IsTrue(iu);
    }
    if (max_tokens != 0 && g->n_prompt >= n_ctx) {
        api_error_set(err, 400, "bad_request", lim->prompt_field,
                      "the prompt fills the context of %d tokens: nothing can be generated%s", n_ctx,
                      lim->min_max_tokens == 0 ? " (max_tokens 0 scores it)" : "");
        return false;
    }
    g->max_tokens = max_tokens < 0 ? n_ctx - g->n_prompt : (int32_t)max_tokens;
    if (g->max_tokens > n_ctx - g->n_prompt) {
        if (limit_field) { /* asked for: refused, as OpenAI and vLLM do; a default is cut to what fits */
            api_error_set(err, 400, "bad_request", limit_field,
                          "the prompt's %d tokens + %s %d exceed the context of %d tokens (at most %d can be "
                          "generated)", g->n_prompt, limit_field, g->max_tokens, n_ctx, n_ctx - g->n_prompt);
            return false;
        }
        g->max_tokens = n_ctx - g->n_prompt;
    }
    g->samp.temperature = (float)temperature;
    g->samp.top_p = top_p > 0 ? (float)top_p : 1.0f;
    g->samp.seed = (uint64_t)seed;
    const tr_vocab *vocab = tr_model_vocab(g->srv->model);
    if (vocab && !g->detok && tr_detok_stream_create(vocab, false, &g->detok) != TR_OK) g->detok = NULL;
    return true;
}

int generation_step(generation *g, route_result *res, api_error *err) {
    route_request req = {0};
    snprintf(req.session, sizeof req.session, "%s", g->id);
    req.pos = g->n_held;
    req.tokens = g->ids + g->n_held;
    req.n_tokens = g->n_prompt + g->n_gen - g->n_held;
    req.top_logprobs = g->n_logprobs;
    req.n_vocab = tr_model_get_info(g->srv->model)->n_vocab;
    req.samp = g->samp;
    g->session_used = true;
    const int status = scheduler_route(g->srv->sched, &req, res, err);
    if (status == 200) g->n_held = g->n_prompt + g->n_gen;
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
    if (g->n_gen >= g->max_tokens) {
        g->finished = true;
        g->finish_reason = "length";
    }
    return true;
}

void generation_flush(generation *g, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (g->detok && tr_detok_stream_flush(g->detok, text, len) != TR_OK) *text = "", *len = 0;
}

void generation_add_usage(const generation *g, cJSON *root) {
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", g->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", g->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", g->n_prompt + g->n_gen);
}

void generation_done(const generation *g, const char *how) {
    const double ms = server_now_ms() - g->t0_ms;
    metrics_request(&g->srv->metrics, g->route, 200, ms);
    server_log(g->srv, "%s 200%s %.2f ms prompt=%d generated=%d", g->route, how, ms, g->n_prompt, g->n_gen);
}

void generation_client_gone(const generation *g) {
    server_log(g->srv, "%s: client went away during completion %s after %d of at most %d tokens (%.2f ms)",
               g->route, g->id + 1, g->n_gen, g->max_tokens, server_now_ms() - g->t0_ms);
}

char *sse_event(cJSON *root) {
    char *json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) return NULL;
    const size_t n = strlen(json) + 9;
    char *out = malloc(n);
    if (out) snprintf(out, n, "data: %s\n\n", json);
    free(json);
    return out;
}

char *sse_error_event(const api_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", api_error_object(err));
    return sse_event(root);
}

/* vLLM and OpenAI write -inf as -9999.0 (JSON has no infinity). */
double finite_logprob(float lp) { return lp > -9999.0f ? (double)lp : -9999.0; }

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
