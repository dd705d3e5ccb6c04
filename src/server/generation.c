/* generation.c — what /v1/completions (completions.c) and /v1/chat/completions (chat_completions.c) share: one
 * continuation of a tokenized prompt, generated on a private session ("!" + the reply's id, a name no client can
 * send) through the same scheduler as the session protocol, one job per token, so OpenAI requests are batched
 * with routed sessions. Also here: the random reply id, the fields both routes check (unknown ones and OpenAI's
 * unimplemented ones refused by name), the options both take (max_tokens, temperature, top_p, top_k, seed, n,
 * stream, stream_options, stop, logit_bias), the end-of-generation and stop-string rules, server-sent events, and
 * the one line a client that went away mid-stream leaves in the log.
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
#include <sys/random.h>

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

bool generation_check_fields(const cJSON *root, const char *const *accepted, const char *const *unsupported,
                             const char *what, api_error *err) {
    const char *name = oai_unknown_field(root, accepted);
    if (!name) return true;
    for (const char *const *u = unsupported; *u; u++)
        if (strcmp(name, *u) == 0) {
            api_error_set(err, 400, "unsupported_field", name, "'%s' is not supported by tokroute serve's %s", name,
                          what);
            return false;
        }
    char list[400] = "";
    for (const char *const *a = accepted; *a; a++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", a == accepted ? "" : ", ", *a);
    api_error_set(err, 400, "unknown_field", name, "unknown field '%.60s' (%s take %s)", name, what, list);
    return false;
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

/* logit_bias: {"token id": bias in [-100, 100], ...} (OpenAI's and vLLM's), ids in the vocabulary, each once. */
static bool parse_logit_bias(generation *g, const cJSON *root, api_error *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!f || cJSON_IsNull(f)) return true;
    const int32_t n_vocab = tr_model_get_info(g->srv->model)->n_vocab;
    const int n = cJSON_GetArraySize(f);
    if (!cJSON_IsObject(f) || n > n_vocab) {
        api_error_set(err, 400, "bad_request", "logit_bias",
                      "'logit_bias' must be an object {\"token id\": bias in [-100, 100]} (at most one entry per id)");
        return false;
    }
    if (n == 0) return true;
    if (!(g->bias = malloc((size_t)n * sizeof *g->bias))) {
        api_error_set(err, 503, "busy", "", "out of memory");
        return false;
    }
    for (const cJSON *e = f->child; e; e = e->next) {
        char *end = NULL;
        const long id = e->string && e->string[0] >= '0' && e->string[0] <= '9' ? strtol(e->string, &end, 10) : -1;
        if (id < 0 || *end || id >= n_vocab) {
            api_error_set(err, 400, "bad_request", "logit_bias", "logit_bias: '%.40s' is not a token id in [0, %d)",
                          e->string ? e->string : "", n_vocab);
            return false;
        }
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100) {
            api_error_set(err, 400, "bad_request", "logit_bias", "logit_bias[\"%ld\"] must be a number in [-100, 100]",
                          id);
            return false;
        }
        for (int32_t i = 0; i < g->n_bias; i++)
            if (g->bias[i].id == id) {
                api_error_set(err, 400, "bad_request", "logit_bias", "logit_bias names token %ld twice", id);
                return false;
            }
        g->bias[g->n_bias++] = (logit_bias){(int32_t)id, (float)e->valuedouble};
    }
    g->samp.bias = g->bias;
    g->samp.n_bias = g->n_bias;
    return true;
}

/* 64 random bits for a request that names no seed. */
static bool fresh_seed(uint64_t *seed) {
    size_t got = 0;
    while (got < sizeof *seed) {
        const ssize_t n = getrandom((char *)seed + got, sizeof *seed - got, 0);
        if (n <= 0) return false;
        got += (size_t)n;
    }
    return true;
}

bool generation_parse_options(generation *g, const cJSON *root, const generation_limits *lim, api_error *err) {
    const int32_t n_ctx = scheduler_n_ctx(g->srv->sched);
    double temperature = 1, top_p = 1, top_k = 0, seed = -1, n = 1;
    if (!number_field(root, "temperature", 0, 2, true, &temperature, err) ||
        !number_field(root, "top_p", 0, 1, true, &top_p, err) ||
        !number_field(root, "top_k", -1, 1 << 30, false, &top_k, err) ||
        !number_field(root, "seed", 0, 9007199254740992.0, false, &seed, err) ||
        !number_field(root, "n", 1, 1 << 20, false, &n, err))
        return false;
    /* OpenAI's penalties at 0 and an empty suffix are what this server does; anything else is refused by name. */
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int k = 0; k < 2; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, penalties[k]);
        if (f && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 0)) {
            api_error_set(err, 400, "unsupported_field", penalties[k],
                          "'%s' is not supported by tokroute serve (only 0, no penalty)", penalties[k]);
            return false;
        }
    }
    oai_error oe;
    if (!oai_stop_parse(cJSON_GetObjectItemCaseSensitive(root, "stop"), GENERATION_STOP_MAX, g->stop, &g->n_stop,
                        &oe)) {
        api_error_set(err, oe.status, oe.status == 400 ? "bad_request" : "busy", "stop", "%s", oe.message);
        return false;
    }
    stop_text_init(&g->stop_text, (const char *const *)g->stop, g->n_stop);
    if (!parse_logit_bias(g, root, err)) return false;
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
    g->samp.top_k = top_k > 0 ? (int32_t)top_k : 0;
    if (seed >= 0) g->samp.seed = (uint64_t)seed;
    else if (!fresh_seed(&g->samp.seed)) {
        api_error_set(err, 503, "busy", "", "no random bytes for a seed");
        return false;
    }
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

void generation_client_gone(const generation *g) {
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
