/* bridge.c — the page's entry points into the device core (exported to JavaScript; web/worker.js calls them from
 * the Web Worker the decoding runs in), on the public C API only: load an SLM GGUF (and optionally a router file)
 * from the worker's file system, point at an LLM (tokroute serve's session protocol or any OpenAI-compatible
 * server, through http_fetch.c), and generate with the parameters of `tokroute generate` — mode, τ, policy, routed
 * share target and cap, max tokens, sampling (temperature, top-k, top-p, seed) — calling back to JavaScript once per
 * token.
 *
 * Decisions a reader could not guess: the threaded build (-pthread) hides the round trip as `tokroute generate`
 * does for a remote LLM (speculation, drafts, lookahead: the backend's helper pthread is a Web Worker that blocks in
 * the synchronous request while this thread keeps decoding); the one-thread build runs the synchronous loop, since
 * its only thread is the one a synchronous request blocks (docs/web.md). Both give the tokens of `tokroute generate
 * --server`, which the hiding loop keeps equal to the synchronous one's. Stop is a flag in the module's memory
 * (tb_stop_flag): in the threaded build that memory is a SharedArrayBuffer the page writes while this worker is
 * inside tb_generate. Every state lives in one static session: a page has one SLM, one router and one LLM at a time. */
#include <emscripten.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokroute.h"

static struct {
    tr_model *slm;
    tr_context *ctx;
    tr_router *router;         /* the loaded router file, or NULL (then a policy is made per generation) */
    tr_llm_backend *llm;
    bool llm_is_server;        /* tokroute serve's session protocol: its lookahead is exact (else OpenAI-compatible) */
    char message[1024];        /* the last error or warning, for tb_message */
} S;

/* Per token: index, id, its text, whether routed (LLM token), whether routed but fell back to the SLM's (the LLM
 * did not answer), the router's score (-1 unscored), the τ used, SLM and LLM milliseconds. */
EM_JS(void, js_on_token, (int index, int id, const char *text, int len, int routed, int fallback, double score,
                          double tau, double slm_ms, double llm_ms), {
    self.tokrouteOnToken({index : index, id : id, text : UTF8ToString(text, len), routed : !!routed,
                          fallback : !!fallback, score : score, tau : tau, slm_ms : slm_ms, llm_ms : llm_ms});
});

/* Remote backends name the status of a refused key ("HTTP 401"/"HTTP 403", TR_ERR_ARG) in their message. */
static bool key_refused(void) { return strstr(tr_last_error(), "HTTP 401") || strstr(tr_last_error(), "HTTP 403"); }

static int fail(tr_status st, const char *what) {
    snprintf(S.message, sizeof S.message, "%s: %s", what, tr_last_error());
    return st == TR_OK ? (int)TR_ERR_STATE : (int)st;
}

EMSCRIPTEN_KEEPALIVE const char *tb_message(void) { return S.message; }
EMSCRIPTEN_KEEPALIVE const char *tb_isa(void) { return tr_kernels_isa(); }

static void free_llm(void) {
    tr_llm_backend_free(S.llm);
    S.llm = NULL;
}

EMSCRIPTEN_KEEPALIVE void tb_unload(void) {
    free_llm();
    tr_router_free(S.router);
    tr_context_free(S.ctx);
    tr_model_free(S.slm);
    memset(&S, 0, sizeof S);
}

/* Loads the SLM at path (and the router file at router_path unless it is ""); 0 or a tr_status, tb_message says
 * what. A file that is not a GGUF, or too large for the wasm32 heap, fails here with the library's message. */
EMSCRIPTEN_KEEPALIVE int tb_load(const char *path, const char *router_path, int n_threads, int n_ctx) {
    tb_unload();
    tr_model_params mp = tr_model_default_params();
    tr_status st = tr_model_load(path, &mp, &S.slm);
    if (st != TR_OK) return fail(st, "the model");
    if (!tr_model_vocab(S.slm)) {
        tb_unload();
        snprintf(S.message, sizeof S.message, "the model has no tokenizer vocabulary: a text prompt cannot be encoded");
        return TR_ERR_FORMAT;
    }
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx;
    if ((st = tr_context_create(S.slm, &cp, &S.ctx)) != TR_OK) {
        const int rc = fail(st, "the model's context");
        tr_model_free(S.slm), S.slm = NULL;
        return rc;
    }
    if (router_path && *router_path) {
        st = tr_router_load(router_path, tr_model_get_info(S.slm), &S.router);
        if (st == TR_OK) st = tr_router_set_slm(S.router, S.slm);
        if (st == TR_OK) st = tr_router_set_threads(S.router, tr_context_n_threads(S.ctx));
        if (st != TR_OK) {
            const int rc = fail(st, "the router file");
            tb_unload();
            return rc;
        }
    }
    S.message[0] = '\0';
    return 0;
}

EMSCRIPTEN_KEEPALIVE int tb_n_threads(void) { return S.ctx ? tr_context_n_threads(S.ctx) : 0; }
/* The loaded router file's own τ (what a generation with tau < 0 uses), or -1 without one. */
EMSCRIPTEN_KEEPALIVE double tb_router_tau(void) { return S.router ? tr_router_default_tau(S.router) : -1.0; }

/* Whether generation hides the round trip (the threaded build) or runs the synchronous loop. */
#ifdef __EMSCRIPTEN_PTHREADS__
static const bool hides_round_trip = true;
#else
static const bool hides_round_trip = false;
#endif
EMSCRIPTEN_KEEPALIVE int tb_hides_round_trip(void) { return hides_round_trip; }

/* Points at the LLM: protocol "server" (tokroute serve) or "openai"; url "" drops it. Returns 0 when the server
 * answered with a vocabulary that fits the SLM's (or did not report its size); 1 (a warning in tb_message) when it
 * did not answer — routed tokens then fall back to the SLM's, flagged, as natively; a tr_status for a refused key
 * or a vocabulary that does not fit. A server whose /health needs no key (tokroute serve's) refuses a wrong key
 * only at the first routed token: tb_generate then fails saying so, as `tokroute generate` stops. */
EMSCRIPTEN_KEEPALIVE int tb_set_llm(const char *url, const char *key, const char *protocol, int timeout_ms) {
    free_llm();
    S.message[0] = '\0';
    if (!url || !*url) return 0;
    if (!S.slm) return snprintf(S.message, sizeof S.message, "load a model first"), TR_ERR_STATE;
    tr_remote_params rp = tr_remote_default_params();
    rp.url = url;
    rp.api_key = key && *key ? key : NULL;
    if (timeout_ms > 0) rp.timeout_ms = timeout_ms;
    S.llm_is_server = strcmp(protocol, "openai") != 0;
    tr_status st = S.llm_is_server ? tr_llm_backend_server(&rp, &S.llm) : tr_llm_backend_openai(&rp, &S.llm);
    if (st != TR_OK) return fail(st, "the LLM");
    const int32_t n_llm = tr_llm_backend_n_vocab(S.llm);
    if (n_llm == 0 && *tr_last_error()) {
        if (key_refused()) {
            const int rc = fail(TR_ERR_ARG, "the LLM refused the API key (wrong or missing)");
            free_llm();
            return rc;
        }
        snprintf(S.message, sizeof S.message, "the LLM does not answer (%s): routed tokens fall back to the SLM's",
                 tr_last_error());
        return 1;
    }
    tr_vocab_match match;
    int32_t n_shared = 0;
    if ((st = tr_vocab_compatible_size(tr_model_vocab(S.slm), n_llm, &match, &n_shared)) != TR_OK) {
        const int rc = fail(st, "the LLM's vocabulary");
        free_llm();
        return rc;
    }
    tr_llm_backend_set_allowed(S.llm, n_shared);
    return 0;
}

static bool on_token(void *user, const tr_route_token *t) {
    (void)user;
    js_on_token(t->index, t->id, t->text ? t->text : "", (int)t->text_len, t->source == TR_SOURCE_LLM,
                t->llm_unavailable, t->score, t->tau, t->slm_ms, t->llm_ms);
    return true;
}

/* Non-zero asks the generation in progress to stop: polled between tokens, prefill chunks and LLM attempts (also
 * from the backend's helper thread). tb_generate clears it when it starts. */
static _Atomic int32_t stop_requested;
EMSCRIPTEN_KEEPALIVE void tb_stop(void) { atomic_store(&stop_requested, 1); }
/* Its address in the module's memory, for the page to set with Atomics.store while this worker is busy. */
EMSCRIPTEN_KEEPALIVE int32_t *tb_stop_flag(void) { return (int32_t *)&stop_requested; }
static bool should_stop(void *user) {
    (void)user;
    return atomic_load(&stop_requested) != 0;
}

/* Tokenizes prompt (BOS as the vocabulary asks, as `tokroute generate -p`) into a malloc'ed array. */
static tr_status tokenize(const char *prompt, int32_t **ids, int32_t *n) {
    const tr_vocab *v = tr_model_vocab(S.slm);
    tr_tokenize_params tp = tr_tokenize_default_params();
    int32_t cap = (int32_t)strlen(prompt) + 8;
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) return TR_ERR_NOMEM;
    tr_status st = tr_tokenize(v, prompt, strlen(prompt), &tp, *ids, cap, n);
    if (st == TR_ERR_RANGE && *n > cap) {
        int32_t *b = realloc(*ids, (size_t)*n * sizeof **ids);
        if (!b) return TR_ERR_NOMEM;
        *ids = b;
        cap = *n;
        st = tr_tokenize(v, prompt, strlen(prompt), &tp, *ids, cap, n);
    }
    return st;
}

/* Generates after prompt. mode "joint"/"slm"/"llm"; tau < 0: the router file's (a policy's 0.5); policy "" with a
 * router file loaded uses it, else maxprob/margin/entropy; target_routed, max_routed 0 = off; sampling as `tokroute
 * generate --temp --top-k --top-p --seed` (temperature 0: greedy; top_k < 0 / top_p <= 0: the library's defaults),
 * for the SLM and, from seed + 1, for the LLM. Tokens go to self.tokrouteOnToken; the summary, as JSON, to
 * tb_message on success (return 0, also when stopped); a tr_status and its message otherwise. */
EMSCRIPTEN_KEEPALIVE int tb_generate(const char *prompt, const char *mode, double tau, const char *policy,
                                     double target_routed, double max_routed, int n_predict, double seed,
                                     double temperature, int top_k, double top_p) {
    S.message[0] = '\0';
    atomic_store(&stop_requested, 0);
    if (!S.slm) return snprintf(S.message, sizeof S.message, "load a model first"), TR_ERR_STATE;
    tr_route_params rp = tr_route_default_params();
    tr_status st = tr_route_mode_from_name(mode, &rp.mode);
    if (st != TR_OK) return fail(st, "mode");
    if (rp.mode != TR_MODE_SLM && !S.llm)
        return snprintf(S.message, sizeof S.message, "mode %s needs an LLM: give its URL", mode), TR_ERR_ARG;
    tr_router *router = NULL;
    if (rp.mode == TR_MODE_JOINT) {
        if (policy && *policy) {
            tr_policy p;
            if ((st = tr_policy_from_name(policy, &p)) != TR_OK || p == TR_POLICY_MLP)
                return snprintf(S.message, sizeof S.message, "unknown policy '%s' (maxprob, margin or entropy)", policy),
                       TR_ERR_ARG;
            if ((st = tr_router_create(p, &router)) != TR_OK) return fail(st, "policy");
        } else if (!S.router && (st = tr_router_create(TR_POLICY_MAXPROB, &router)) != TR_OK) {
            return fail(st, "policy");
        }
    }
    tr_router *use = router ? router : S.router;
    rp.tau = tau >= 0 ? (float)tau : use ? tr_router_default_tau(use) : 0.5f;
    rp.n_predict = n_predict;
    rp.sampling.temperature = (float)temperature;
    if (top_k >= 0) rp.sampling.top_k = top_k;
    if (top_p > 0) rp.sampling.top_p = (float)top_p;
    rp.sampling.seed = (uint64_t)seed;
    if (hides_round_trip && S.llm) tr_route_params_hide_round_trip(&rp, S.llm_is_server);
    rp.target_routed = target_routed;
    rp.max_routed = max_routed;
    rp.on_token = on_token;
    rp.abort_fn = should_stop;
    if (S.llm) { /* the LLM samples as the SLM does, from the next seed, as `tokroute generate` asks it */
        tr_sampler_params sp = rp.sampling;
        sp.seed += 1;
        if ((st = tr_llm_backend_set_sampling(S.llm, &sp)) != TR_OK) {
            if (router) tr_router_free(router);
            return fail(st, "the LLM's sampling");
        }
    }
    int32_t *ids = NULL, n = 0;
    if ((st = tokenize(prompt, &ids, &n)) != TR_OK || n == 0) {
        free(ids);
        if (router) tr_router_free(router);
        return st != TR_OK ? fail(st, "the prompt") : (snprintf(S.message, sizeof S.message, "the prompt is empty"), TR_ERR_ARG);
    }
    tr_route_stats s;
    st = tr_route_generate(S.ctx, use, S.llm, ids, n, &rp, NULL, 0, &s);
    free(ids);
    if (router) tr_router_free(router);
    const bool stopped = s.aborted || atomic_load(&stop_requested);
    if (st != TR_OK && !(st == TR_ERR_STATE && stopped))
        return fail(st, key_refused() ? "the LLM refused the API key (wrong or missing)" : "generation");
    snprintf(S.message, sizeof S.message,
             "{\"n_prompt\":%d,\"n_tokens\":%d,\"n_routed\":%d,\"n_fallback\":%d,\"n_decided\":%d,"
             "\"tau\":%.9g,\"tau_mean\":%g,\"tau_last\":%g,\"ttft_ms\":%.3f,\"mean_tbt_ms\":%.3f,"
             "\"slm_ms\":%.3f,\"llm_ms\":%.3f,\"total_ms\":%.3f,\"stopped\":%s,\"threads\":%d,"
             "\"speculate_depth\":%d,\"lookahead\":%d,\"draft\":%d,\"llm_calls\":%lld,\"llm_blocking\":%lld,"
             "\"llm_wait_ms\":%.3f,\"lookahead_hits\":%d,\"draft_hits\":%d,\"spec_kept\":%d,"
             "\"spec_discarded\":%d,\"seed\":%.0f}",
             s.n_prompt, s.n_tokens, s.n_routed, s.n_fallback, s.n_route_decisions, rp.tau, s.tau_mean, s.tau_last,
             s.ttft_ms, s.mean_tbt_ms, s.slm_ms, s.llm_ms, s.total_ms, stopped ? "true" : "false",
             tr_context_n_threads(S.ctx), rp.speculate_depth, rp.lookahead, rp.draft_tokens, (long long)s.llm_calls,
             (long long)s.llm_blocking, s.llm_wait_ms, s.n_lookahead_hits, s.n_draft_hits, s.n_spec_kept,
             s.n_spec_discarded, seed);
    return 0;
}
