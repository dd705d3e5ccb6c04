/* cmd_ui.c — `tokroute ui`: loads the SLM, opens the LLM backend (cli_backend: --llm, --server, --openai,
 * --llamacpp), starts the device's server (tr_ui_start: the web page and the OpenAI-compatible API) and serves until
 * SIGINT or SIGTERM. Each generation slot gets its own
 * backend from open_backend below (the first is the one opened and checked at start-up); an embedded LLM model is
 * loaded once and shared read-only by all of them. --ready-file writes the base URL once the server listens (tests
 * use it with --port 0). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_backend.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage_head =
    "usage: tokroute ui --slm SLM [--llm LLM | --server URL | --openai URL | --llamacpp URL] [options]\n"
    "  --slm FILE             the small model (on the device)\n";
static const char *usage =
    "usage: tokroute ui --slm SLM [--llm LLM | --server URL | --openai URL | --llamacpp URL] [options]; --help for all\n";
static const char *usage_rest =
    "  --router FILE          trained router file (CITER MLP); without it the page offers the policies\n"
    "  --policy NAME          training-free router of requests that name none: maxprob (default), margin, entropy\n"
    "  --threshold T          τ of requests that give none, the slider's start (default: the router file's, else 0.5)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1)\n"
    "  --port P               port (default 8080; 0 = any free port)\n"
    "  --allowed-host NAME    also answer requests with Host: NAME (repeatable). Others get 403 (DNS rebinding):\n"
    "                         the server answers its --host address and, bound to loopback, the loopback names\n"
    "  --max-connections N    requests on connections beyond N get 503 + Retry-After (default 256)\n"
    "  --max-connections-per-ip N   the same per client address (default 32)\n"
    "  --request-timeout-s S  a connection must send a whole request within S of opening or of its last reply\n"
    "                         (default 10)\n"
    "  --ready-file FILE      write the base URL (http://HOST:PORT, as serve does) to FILE once listening\n"
    "  --chat-template NAME   chat template (chatml, llama2, llama3, gemma, gemma4) for /v1/chat/completions and the page's chat\n"
    "                         toggle (default: the SLM's own, from its GGUF; without one chat requests get 400)\n"
    "  --ui-key KEY           key the API (/v1/, /api/) requires as \"Authorization: Bearer KEY\" (or TOKROUTE_UI_KEY);\n"
    "                         required with a --host other than loopback\n"
    "  --max-tokens N         most tokens a request may ask for (default 1024)\n"
    "  --max-generations N    generations running at once (default 1: the SLM runs one at a time)\n"
    "  --max-queue N          requests waiting for a generation (default 4); more get 429 with Retry-After\n"
    "  -t, --threads N        threads per generation (default: physical cores);  -c, --ctx N  context length\n";

typedef struct ui_opts {
    cli_model_opts mo;
    cli_backend_opts bo;
    const char *router, *host, *ready_file, *chat_template, *ui_key, *policy;
    const char *allowed_hosts[16];
    int32_t n_allowed_hosts;
    long max_connections, max_connections_per_ip, request_timeout_s;
    double tau;
    bool tau_set;
    long port, max_tokens, max_generations, max_queue;
} ui_opts;

static int parse(int argc, char **argv, ui_opts *o) {
    const char *v;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &o->mo);
        if (r == 0) r = cli_backend_option(argc, argv, &i, &o->bo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help"))
            return fputs(usage_head, stdout), fputs(cli_llm_usage, stdout), fputs(cli_backend_usage, stdout), fputs(usage_rest, stdout), fputs(cli_kv_type_usage, stdout), -1;
        if (cli_option(argc, argv, &i, NULL, "--slm", &v)) o->mo.model = v;
        else if (cli_option(argc, argv, &i, NULL, "--router", &v)) o->router = v;
        else if (cli_option(argc, argv, &i, NULL, "--policy", &v)) o->policy = v;
        else if (cli_option(argc, argv, &i, NULL, "--ui-key", &v)) o->ui_key = v;
        else if (cli_option(argc, argv, &i, NULL, "--threshold", &v) || cli_option(argc, argv, &i, NULL, "--tau", &v)) {
            if (!cli_float("--threshold", v, &o->tau)) return 2;
            if (!(o->tau >= 0 && o->tau <= 1)) return cli_usage_error(usage, "--threshold must be in [0, 1]");
            o->tau_set = true;
        } else if (cli_option(argc, argv, &i, NULL, "--host", &v)) o->host = v;
        else if (cli_option(argc, argv, &i, NULL, "--port", &v)) {
            if (!cli_int("--port", v, 0, 65535, &o->port)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--allowed-host", &v)) {
            if (!v || !v[0]) return cli_usage_error(usage, "--allowed-host needs a host name");
            if (o->n_allowed_hosts == (int32_t)(sizeof o->allowed_hosts / sizeof *o->allowed_hosts))
                return cli_usage_error(usage, "at most %d --allowed-host names",
                                       (int)(sizeof o->allowed_hosts / sizeof *o->allowed_hosts));
            o->allowed_hosts[o->n_allowed_hosts++] = v;
        } else if (cli_option(argc, argv, &i, NULL, "--max-connections", &v)) {
            if (!cli_int("--max-connections", v, 1, 1 << 20, &o->max_connections)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--max-connections-per-ip", &v)) {
            if (!cli_int("--max-connections-per-ip", v, 1, 1 << 20, &o->max_connections_per_ip)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--request-timeout-s", &v)) {
            if (!cli_int("--request-timeout-s", v, 1, 3600, &o->request_timeout_s)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--ready-file", &v)) o->ready_file = v;
        else if (cli_option(argc, argv, &i, NULL, "--chat-template", &v)) o->chat_template = v;
        else if (cli_option(argc, argv, &i, NULL, "--max-tokens", &v)) {
            if (!cli_int("--max-tokens", v, 1, 1 << 20, &o->max_tokens)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--max-generations", &v)) {
            if (!cli_int("--max-generations", v, 1, 64, &o->max_generations)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--max-queue", &v)) {
            if (!cli_int("--max-queue", v, 0, 1024, &o->max_queue)) return 2;
        } else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!o->mo.model) return cli_usage_error(usage, "no SLM given (--slm FILE)");
    const char *bad = cli_backend_check(&o->bo);
    if (bad) return cli_usage_error(usage, "%s", bad);
    if (o->router && !cli_backend_given(&o->bo)) return cli_usage_error(usage, "--router needs an LLM");
    if (o->router && o->policy) return cli_usage_error(usage, "give --router or --policy, not both");
    if (o->ui_key && !*o->ui_key) return cli_usage_error(usage, "--ui-key needs a non-empty key");
    return 0;
}

/* ---------------------------------------------------------------- LLM backends, one per slot */

/* The first call hands out the backend cli_backend_open made (and checked) at start-up; later calls open the same
 * kind again, restricted to the ids the start-up check found shared. Calls come from the UI's worker threads (one
 * per slot, slots in parallel), so `first` is taken under the factory's own lock. */
typedef struct backend_factory {
    const cli_backend_opts *bo;
    const tr_model *llm;      /* embedded: the loaded model */
    tr_context_params cp;
    int32_t n_shared;
    pthread_mutex_t mu;
    tr_llm_backend *first;
} backend_factory;

static tr_status open_backend(void *user, tr_llm_backend **out) {
    backend_factory *f = user;
    pthread_mutex_lock(&f->mu);
    *out = f->first;
    f->first = NULL;
    pthread_mutex_unlock(&f->mu);
    if (*out) return TR_OK;
    tr_sampler_params sp = tr_sampler_default_params();
    sp.temperature = 0;
    tr_remote_params rp = f->bo->remote;
    tr_status st;
    if (f->llm) st = tr_llm_backend_embedded(f->llm, &f->cp, &sp, out);
    else if (f->bo->server) rp.url = f->bo->server, st = tr_llm_backend_server(&rp, out);
    else if (f->bo->openai) rp.url = f->bo->openai, st = tr_llm_backend_openai(&rp, out);
    else rp.url = f->bo->llamacpp, st = tr_llm_backend_llamacpp(&rp, out);
    if (st != TR_OK) return st;
    tr_llm_backend_set_allowed(*out, f->n_shared);
    tr_llm_backend_set_rtt(*out, f->bo->rtt_ms);
    return TR_OK;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---------------------------------------------------------------- run */

static int serve(const ui_opts *o, tr_model *slm, backend_factory *factory) {
    tr_ui_params up = tr_ui_default_params();
    up.slm = slm;
    up.slm_name = base_name(o->mo.model);
    up.host = o->host ? o->host : "127.0.0.1";
    up.allowed_hosts = o->n_allowed_hosts > 0 ? o->allowed_hosts : NULL;
    up.n_allowed_hosts = o->n_allowed_hosts;
    if (o->max_connections) up.max_connections = (int32_t)o->max_connections;
    if (o->max_connections_per_ip) up.max_connections_per_ip = (int32_t)o->max_connections_per_ip;
    if (o->request_timeout_s) up.request_timeout_s = (int32_t)o->request_timeout_s;
    up.port = (int32_t)o->port;
    up.context.n_threads = o->mo.n_threads;
    up.context.n_ctx = o->mo.n_ctx;
    if (o->max_tokens) up.max_tokens = (int32_t)o->max_tokens;
    if (o->max_generations) up.max_generations = (int32_t)o->max_generations;
    if (o->max_queue >= 0) up.max_queued = (int32_t)o->max_queue;
    up.api_key = o->ui_key;
    if (o->policy && (tr_policy_from_name(o->policy, &up.policy) != TR_OK || up.policy == TR_POLICY_MLP)) {
        fprintf(stderr, "tokroute: unknown --policy '%s' (maxprob, margin or entropy; a trained router: --router)\n",
                o->policy);
        return 2;
    }
    if (o->tau_set) up.default_tau = (float)o->tau;
    up.router_path = o->router;
    up.on_llm_failure = o->bo.on_failure;
    tr_route_params hiding = tr_route_default_params();
    cli_backend_hiding(&o->bo, &hiding);
    up.speculate_depth = hiding.speculate_depth;
    up.lookahead = hiding.lookahead;
    up.draft_tokens = hiding.draft_tokens;
    up.draft_span = hiding.draft_span;
    up.draft_width = hiding.draft_width;
    up.draft_fixed = hiding.draft_fixed;
    up.target_routed = hiding.target_routed;
    up.max_routed = hiding.max_routed;
    tr_status st = TR_OK;
    if (o->chat_template) {
        if ((st = tr_chat_template_from_name(o->chat_template, &up.chat_template)) != TR_OK) return cli_fail(st);
    } else {
        tr_gguf *gguf;
        if (tr_gguf_open(o->mo.model, &gguf) == TR_OK) {
            up.chat_template = tr_chat_template_detect(gguf);
            tr_gguf_close(gguf);
        }
    }
    if (cli_backend_given(&o->bo)) {
        up.open_backend = open_backend;
        up.backend_user = factory;
        up.llm_name = o->bo.llm        ? base_name(o->bo.llm)
                      : o->bo.server   ? o->bo.server
                      : o->bo.openai   ? o->bo.openai
                                       : o->bo.llamacpp;
    }
    /* SIGINT/SIGTERM are blocked before the server's threads start (they inherit the mask), then awaited here. */
    sigset_t sigs;
    cli_block_shutdown_signals(&sigs);
    tr_ui *ui;
    if ((st = tr_ui_start(&up, &ui)) != TR_OK) return cli_fail(st);
    const bool v6 = strchr(up.host, ':') != NULL;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s%s:%d", v6 ? "[" : "", up.host, v6 ? "]" : "", (int)tr_ui_port(ui));
    fprintf(stderr, "tokroute ui: %s/ (SLM %s, LLM %s; OpenAI API at %s/v1%s) — Ctrl+C stops\n", url, up.slm_name,
            up.llm_name ? up.llm_name : "none", url, up.api_key ? ", key required" : "");
    int rc = 0;
    if (o->ready_file) {
        if (!cli_write_ready(o->ready_file, url)) {
            fprintf(stderr, "tokroute: cannot write %s\n", o->ready_file);
            rc = 1;
        }
    }
    int sig = 0;
    if (rc == 0) sigwait(&sigs, &sig);
    tr_ui_stop(ui);
    if (rc == 0) fprintf(stderr, "tokroute ui: stopped\n");
    if (o->ready_file) remove(o->ready_file);
    return rc;
}

int cmd_ui(int argc, char **argv) {
    ui_opts o = {.port = 8080, .max_queue = -1};
    cli_backend_init(&o.bo);
    const char *env_key = getenv("TOKROUTE_UI_KEY");
    if (env_key && *env_key) o.ui_key = env_key;
    int rc = parse(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;
    tr_model_params mp = tr_model_default_params();
    mp.kv_type = o.mo.kv_type;
    tr_model *slm = NULL, *llm = NULL;
    tr_status st = tr_model_load(o.mo.model, &mp, &slm);
    if (st != TR_OK) return cli_fail(st);
    cli_warn_ctx(slm, o.mo.n_ctx);
    backend_factory factory = {.bo = &o.bo, .cp = tr_context_default_params()};
    pthread_mutex_init(&factory.mu, NULL);
    factory.cp.n_threads = o.mo.n_threads;
    factory.cp.n_ctx = o.mo.n_ctx;
    factory.cp.kv_type = o.mo.kv_type;
    const tr_vocab *sv = tr_model_vocab(slm);
    if (!sv) rc = (fprintf(stderr, "tokroute: the SLM has no vocabulary\n"), 1);
    if (rc == 0 && cli_backend_given(&o.bo)) {
        tr_sampler_params sp = tr_sampler_default_params();
        sp.temperature = 0;
        if (!cli_backend_open(&o.bo, slm, &factory.cp, &sp, &llm, &factory.first)) rc = 1;
    }
    if (rc == 0 && factory.first) {
        /* The ids both models share, as cli_backend_open found them, for the backends opened later. */
        tr_vocab_match match;
        factory.llm = llm;
        if (llm && tr_model_vocab(llm)) st = tr_vocab_compatible(sv, tr_model_vocab(llm), &match, &factory.n_shared);
        else st = tr_vocab_compatible_size(sv, 0, &match, &factory.n_shared);
        if (st != TR_OK) rc = cli_fail(st);
    }
    if (rc == 0) rc = serve(&o, slm, &factory);
    tr_llm_backend_free(factory.first); /* when no slot took it */
    pthread_mutex_destroy(&factory.mu);
    tr_model_free(llm);
    tr_model_free(slm);
    return rc;
}
