/* cmd_ui.c — `tokroute ui`: loads the SLM (and the LLM), starts the web UI (tr_ui_start) and serves until SIGINT or
 * SIGTERM. Each generation slot gets its own LLM backend from open_backend below; an embedded LLM model is loaded
 * once and shared read-only by all of them. --ready-file writes the base URL once the server listens (tests use
 * it with --port 0). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute ui --slm SLM [--llm LLM] [options]\n"
    "  --slm FILE             the small model (on the device)\n"
    "  --llm FILE             the large model, loaded in this process (embedded backend)\n"
    "  --router FILE          trained router file (CITER MLP); without it the page offers the policies\n"
    "  --threshold T          the threshold slider's initial value (default: the router file's, else 0.5)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1)\n"
    "  --port P               port (default 8080; 0 = any free port)\n"
    "  --ready-file FILE      write the base URL (http://HOST:PORT/) to FILE once listening\n"
    "  --simulate-rtt MS      add a network delay to every LLM call\n"
    "  --chat-template NAME   chat template for the page's chat toggle (default: the SLM's own, if known)\n"
    "  --max-tokens N         most tokens a request may ask for (default 1024)\n"
    "  --max-generations N    generations running at once (default 4)\n"
    "  -t, --threads N        threads per generation (default: physical cores);  -c, --ctx N  context length\n";

typedef struct ui_opts {
    cli_model_opts mo;
    const char *llm, *router, *host, *ready_file, *chat_template;
    double tau, rtt_ms;
    bool tau_set;
    long port, max_tokens, max_generations;
} ui_opts;

static int parse(int argc, char **argv, ui_opts *o) {
    const char *v;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &o->mo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), -1;
        if (cli_option(argc, argv, &i, NULL, "--slm", &v)) o->mo.model = v;
        else if (cli_option(argc, argv, &i, NULL, "--llm", &v)) o->llm = v;
        else if (cli_option(argc, argv, &i, NULL, "--router", &v)) o->router = v;
        else if (cli_option(argc, argv, &i, NULL, "--threshold", &v) || cli_option(argc, argv, &i, NULL, "--tau", &v)) {
            if (!cli_float("--threshold", v, &o->tau)) return 2;
            if (!(o->tau >= 0 && o->tau <= 1)) return cli_usage_error(usage, "--threshold must be in [0, 1]");
            o->tau_set = true;
        } else if (cli_option(argc, argv, &i, NULL, "--host", &v)) o->host = v;
        else if (cli_option(argc, argv, &i, NULL, "--port", &v)) {
            if (!cli_int("--port", v, 0, 65535, &o->port)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--ready-file", &v)) o->ready_file = v;
        else if (cli_option(argc, argv, &i, NULL, "--simulate-rtt", &v)) {
            if (!cli_float("--simulate-rtt", v, &o->rtt_ms) || o->rtt_ms < 0) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--chat-template", &v)) o->chat_template = v;
        else if (cli_option(argc, argv, &i, NULL, "--max-tokens", &v)) {
            if (!cli_int("--max-tokens", v, 1, 1 << 20, &o->max_tokens)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--max-generations", &v)) {
            if (!cli_int("--max-generations", v, 1, 64, &o->max_generations)) return 2;
        } else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!o->mo.model) return cli_usage_error(usage, "no SLM given (--slm FILE)");
    if (o->router && !o->llm) return cli_usage_error(usage, "--router needs an LLM (--llm)");
    return 0;
}

/* ---------------------------------------------------------------- LLM backends, one per slot */

typedef struct backend_factory {
    const tr_model *llm;
    tr_context_params cp;
    double rtt_ms;
} backend_factory;

static tr_status open_backend(void *user, tr_llm_backend **out) {
    const backend_factory *f = user;
    tr_sampler_params sp = tr_sampler_default_params();
    sp.temperature = 0;
    tr_status st = tr_llm_backend_embedded(f->llm, &f->cp, &sp, out);
    if (st == TR_OK) tr_llm_backend_set_rtt(*out, f->rtt_ms);
    return st;
}

static bool same_vocab(const tr_model *a, const tr_model *b) {
    const tr_vocab *va = tr_model_vocab(a), *vb = tr_model_vocab(b);
    if (!va || !vb) return tr_model_get_info(a)->n_vocab == tr_model_get_info(b)->n_vocab;
    if (tr_vocab_n_tokens(va) != tr_vocab_n_tokens(vb)) return false;
    for (int32_t i = 0; i < tr_vocab_n_tokens(va); i++)
        if (strcmp(tr_vocab_token_text(va, i), tr_vocab_token_text(vb, i)) != 0) return false;
    return true;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---------------------------------------------------------------- run */

static int serve(const ui_opts *o, tr_model *slm, tr_model *llm) {
    tr_ui_params up = tr_ui_default_params();
    up.slm = slm;
    up.slm_name = base_name(o->mo.model);
    up.host = o->host ? o->host : "127.0.0.1";
    up.port = (int32_t)o->port;
    up.context.n_threads = o->mo.n_threads;
    up.context.n_ctx = o->mo.n_ctx;
    if (o->max_tokens) up.max_tokens = (int32_t)o->max_tokens;
    if (o->max_generations) up.max_generations = (int32_t)o->max_generations;
    if (o->tau_set) up.default_tau = (float)o->tau;
    up.router_path = o->router;
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
    backend_factory factory = {llm, tr_context_default_params(), o->rtt_ms};
    factory.cp.n_threads = o->mo.n_threads;
    factory.cp.n_ctx = o->mo.n_ctx;
    if (llm) {
        up.open_backend = open_backend;
        up.backend_user = &factory;
        up.llm_name = base_name(o->llm);
    }
    /* SIGINT/SIGTERM are blocked before the server's threads start (they inherit the mask), then awaited here. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    tr_ui *ui;
    if ((st = tr_ui_start(&up, &ui)) != TR_OK) return cli_fail(st);
    const bool v6 = strchr(up.host, ':') != NULL;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s%s:%d/", v6 ? "[" : "", up.host, v6 ? "]" : "", (int)tr_ui_port(ui));
    fprintf(stderr, "tokroute ui: %s (SLM %s, LLM %s) — Ctrl+C stops\n", url, up.slm_name,
            llm ? up.llm_name : "none");
    int rc = 0;
    if (o->ready_file) {
        FILE *f = fopen(o->ready_file, "w");
        if (!f || fprintf(f, "%s\n", url) < 0 || fclose(f) != 0) {
            fprintf(stderr, "tokroute: cannot write %s\n", o->ready_file);
            rc = 1;
        }
    }
    int sig = 0;
    if (rc == 0) sigwait(&sigs, &sig);
    tr_ui_stop(ui);
    if (rc == 0) fprintf(stderr, "tokroute ui: stopped\n");
    return rc;
}

int cmd_ui(int argc, char **argv) {
    ui_opts o = {.port = 8080};
    int rc = parse(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;
    tr_model_params mp = tr_model_default_params();
    tr_model *slm = NULL, *llm = NULL;
    tr_status st = tr_model_load(o.mo.model, &mp, &slm);
    if (st != TR_OK) return cli_fail(st);
    if (!tr_model_vocab(slm)) rc = (fprintf(stderr, "tokroute: the SLM has no vocabulary\n"), 1);
    if (rc == 0 && o.llm) {
        if ((st = tr_model_load(o.llm, &mp, &llm)) != TR_OK) rc = cli_fail(st);
        else if (!same_vocab(slm, llm)) rc = (fprintf(stderr, "tokroute: the SLM and the LLM do not share a tokenizer\n"), 1);
    }
    if (rc == 0) rc = serve(&o, slm, llm);
    tr_model_free(llm);
    tr_model_free(slm);
    return rc;
}
