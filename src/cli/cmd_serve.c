/* cmd_serve.c — `tokroute serve`: the LLM behind HTTP (docs/protocol.md). Loads the model, starts tr_server, writes
 * the base URL to --ready-file once listening, and waits for SIGINT/SIGTERM (blocked in every thread and taken
 * with sigwait, so shutdown runs on the main thread, not in a signal handler). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute serve -m MODEL [options]\n"
    "  serves the model over HTTP: POST /v1/route/next (session protocol, docs/protocol.md),\n"
    "  DELETE /v1/route/sessions/ID, POST /v1/completions and /v1/chat/completions, GET /v1/models\n"
    "  (OpenAI-compatible), GET /health, GET /metrics\n"
    "  --host ADDR            address or name to bind (default 127.0.0.1; localhost works)\n"
    "  --port N               port (default 8080; 0 = a free port)\n"
    "  --allowed-host NAME    also answer requests with Host: NAME (repeatable). Others get 403 (DNS rebinding):\n"
    "                         the server answers its --host address, the loopback names when bound to loopback,\n"
    "                         bound to 0.0.0.0 or :: any IP address, bound off loopback with --api-key any name\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' (default: env TOKROUTE_API_KEY); repeatable:\n"
    "                         with several keys each key's sessions are its own (others get 404/409 for them)\n"
    "  --api-key-file FILE    more keys, one per line ('#' comments and blank lines skipped)\n"
    "  --metrics-key KEY      GET /metrics takes only this key (default: any API key)\n"
    "  --max-connections N    requests on connections beyond N get 503 + Retry-After (default 4096)\n"
    "  --max-connections-per-ip N   the same per client address (default 64)\n"
    "  --request-timeout-s S  a connection must send a whole request within S of opening or of its last reply\n"
    "                         (default 10; slow or idle connections are closed)\n"
    "  --chat-template NAME   chatml|llama2|llama3|gemma|gemma4|none: renders /v1/chat/completions' messages\n"
    "                         (default: the model's own; a model without one answers chat requests with 400)\n"
    "  --cors ORIGIN          let browser pages from ORIGIN (e.g. http://localhost:3000; repeatable; * = any)\n"
    "                         call the server: OPTIONS preflights, Access-Control-Allow-Origin (default: none)\n"
    "  -t, --threads N        threads for forward passes (default: physical cores)\n"
    "  -c, --ctx N            longest session in tokens (default: min(training context, 4096))\n"
    "  --max-sessions N       live sessions at most (default 256)\n"
    "  --kv-budget-mib M      KV cache memory for all sessions (default 1024)\n"
    "  --kv-type T            KV cache: f16 (default), q8_0 (about half the memory per session), f32\n"
    "  --session-idle-s S     free sessions idle this long (default 600)\n"
    "  --batch-tokens N       most tokens in one forward pass (default 512)\n"
    "  --max-body-kib K       larger request bodies get 413 (default 1024)\n"
    "  --no-batch             one session per forward pass (for comparison)\n"
    "  --tls-cert F --tls-key F   serve HTTPS with this PEM certificate and key\n"
    "  --log-requests         also log request bodies (token ids, text); default: counts and timings only\n"
    "  --ready-file FILE      write the base URL (e.g. http://127.0.0.1:41234) to FILE once listening\n"
    "  --quiet                no per-request log lines\n";

/* The API keys given (--api-key, --api-key-file), each malloc'ed; cmd_serve frees them. */
typedef struct key_list {
    char **keys;
    int32_t n;
} key_list;

static bool add_key(key_list *kl, const char *key) {
    char **grown = realloc(kl->keys, (size_t)(kl->n + 1) * sizeof *grown);
    if (!grown) return false;
    kl->keys = grown;
    if (!(kl->keys[kl->n] = strdup(key))) return false;
    kl->n++;
    return true;
}

/* The keys of an --api-key-file, appended to kl. False with a message when it cannot be read. */
static bool read_key_file(const char *path, key_list *kl) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tokroute: cannot read the key file %s\n", path);
        return false;
    }
    char line[1024];
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t')) line[--len] = 0;
        const char *k = line + strspn(line, " \t");
        if (!k[0] || k[0] == '#') continue;
        ok = add_key(kl, k);
    }
    fclose(f);
    if (!ok) fprintf(stderr, "tokroute: out of memory reading %s\n", path);
    return ok;
}

static void log_line(void *user, const char *line) {
    const time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02dZ %s\n", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
            tm.tm_min, tm.tm_sec, line);
}

static int serve(int argc, char **argv, key_list *kl) {
    cli_model_opts mo = {0};
    tr_server_params sp = tr_server_default_params();
    const char *ready = NULL, *chat_template = NULL, *v;
    const char *cors[16], *allowed_hosts[16];
    int32_t n_cors = 0, n_allowed_hosts = 0;

    bool quiet = false;
    long x;
    sp.api_key = getenv("TOKROUTE_API_KEY");
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &mo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_flag(argc, argv, &i, NULL, "--no-batch")) sp.batch = false;
        else if (cli_flag(argc, argv, &i, NULL, "--log-requests")) sp.log_requests = true;
        else if (cli_flag(argc, argv, &i, NULL, "--quiet")) quiet = true;
        else if (cli_option(argc, argv, &i, NULL, "--host", &v)) {
            if (!v) return cli_usage_error(usage, "--host needs a value");
            sp.host = v;
        } else if (cli_option(argc, argv, &i, NULL, "--port", &v)) {
            if (!cli_int("--port", v, 0, 65535, &x)) return 2;
            sp.port = (int)x;
        } else if (cli_option(argc, argv, &i, NULL, "--api-key", &v)) {
            if (!v || !v[0]) return cli_usage_error(usage, "--api-key needs a value");
            if (!add_key(kl, v)) return cli_usage_error(usage, "out of memory");
        } else if (cli_option(argc, argv, &i, NULL, "--api-key-file", &v)) {
            if (!v) return cli_usage_error(usage, "--api-key-file needs a file");
            if (!read_key_file(v, kl)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--metrics-key", &v)) {
            if (!v || !v[0]) return cli_usage_error(usage, "--metrics-key needs a value");
            sp.metrics_key = v;
        } else if (cli_option(argc, argv, &i, NULL, "--max-connections", &v)) {
            if (!cli_int("--max-connections", v, 1, 1 << 20, &x)) return 2;
            sp.max_connections = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--max-connections-per-ip", &v)) {
            if (!cli_int("--max-connections-per-ip", v, 1, 1 << 20, &x)) return 2;
            sp.max_connections_per_ip = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--request-timeout-s", &v)) {
            if (!cli_int("--request-timeout-s", v, 1, 3600, &x)) return 2;
            sp.request_timeout_s = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--chat-template", &v)) {
            if (!v) return cli_usage_error(usage, "--chat-template needs a name (chatml, llama2, llama3, gemma, gemma4, none)");
            chat_template = v;
        } else if (cli_option(argc, argv, &i, NULL, "--cors", &v)) {
            if (!v || !v[0]) return cli_usage_error(usage, "--cors needs an origin (e.g. http://localhost:3000, or *)");
            if (n_cors == (int32_t)(sizeof cors / sizeof *cors))
                return cli_usage_error(usage, "at most %d --cors origins", (int)(sizeof cors / sizeof *cors));
            cors[n_cors++] = v;
        } else if (cli_option(argc, argv, &i, NULL, "--allowed-host", &v)) {
            if (!v || !v[0]) return cli_usage_error(usage, "--allowed-host needs a host name");
            if (n_allowed_hosts == (int32_t)(sizeof allowed_hosts / sizeof *allowed_hosts))
                return cli_usage_error(usage, "at most %d --allowed-host names",
                                       (int)(sizeof allowed_hosts / sizeof *allowed_hosts));
            allowed_hosts[n_allowed_hosts++] = v;
        } else if (cli_option(argc, argv, &i, NULL, "--max-sessions", &v)) {
            if (!cli_int("--max-sessions", v, 1, 1 << 20, &x)) return 2;
            sp.max_sessions = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--kv-budget-mib", &v)) {
            if (!cli_int("--kv-budget-mib", v, 1, 1 << 24, &x)) return 2;
            sp.kv_budget_bytes = (int64_t)x << 20;
        } else if (cli_option(argc, argv, &i, NULL, "--session-idle-s", &v)) {
            if (!cli_int("--session-idle-s", v, 1, 1 << 30, &x)) return 2;
            sp.session_idle_s = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--batch-tokens", &v)) {
            if (!cli_int("--batch-tokens", v, 1, 1 << 16, &x)) return 2;
            sp.max_batch_tokens = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--max-body-kib", &v)) {
            if (!cli_int("--max-body-kib", v, 1, 1 << 20, &x)) return 2;
            sp.max_body_bytes = (size_t)x << 10;
        } else if (cli_option(argc, argv, &i, NULL, "--tls-cert", &v)) {
            if (!v) return cli_usage_error(usage, "--tls-cert needs a file");
            sp.tls_cert_path = v;
        } else if (cli_option(argc, argv, &i, NULL, "--tls-key", &v)) {
            if (!v) return cli_usage_error(usage, "--tls-key needs a file");
            sp.tls_key_path = v;
        } else if (cli_option(argc, argv, &i, NULL, "--ready-file", &v)) {
            if (!v) return cli_usage_error(usage, "--ready-file needs a file");
            ready = v;
        } else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!mo.model) return cli_usage_error(usage, "need -m MODEL");
    if (!sp.tls_cert_path != !sp.tls_key_path) return cli_usage_error(usage, "--tls-cert and --tls-key go together");
    sp.n_threads = mo.n_threads;
    sp.n_ctx = mo.n_ctx;
    sp.cors_origins = n_cors > 0 ? cors : NULL;
    sp.n_cors_origins = n_cors;
    sp.allowed_hosts = n_allowed_hosts > 0 ? allowed_hosts : NULL;
    sp.n_allowed_hosts = n_allowed_hosts;
    if (kl->n > 0) { /* keys given here replace TOKROUTE_API_KEY */
        sp.api_key = NULL;
        sp.api_keys = (const char *const *)kl->keys;
        sp.n_api_keys = kl->n;
    }
    if (!quiet) sp.log = log_line;
    tr_status st = TR_OK;
    if (chat_template && (st = tr_chat_template_from_name(chat_template, &sp.chat_template)) != TR_OK)
        return cli_fail(st);
    if (!chat_template) { /* the model's own, when its GGUF names one we know */
        tr_gguf *gguf = NULL;
        if (tr_gguf_open(mo.model, &gguf) == TR_OK) {
            sp.chat_template = tr_chat_template_detect(gguf);
            tr_gguf_close(gguf);
        }
    }

    /* Block the shutdown signals before any thread starts, so all inherit the mask and sigwait gets them. */
    sigset_t set;
    cli_block_shutdown_signals(&set);

    tr_model_params mp = tr_model_default_params();
    mp.kv_type = mo.kv_type; /* sessions' caches, and the budget counts them at their size */
    tr_model *model = NULL;
    st = tr_model_load(mo.model, &mp, &model);
    if (st != TR_OK) return cli_fail(st);
    cli_warn_ctx(model, mo.n_ctx);
    tr_server *srv = NULL;
    if ((st = tr_server_start(model, &sp, &srv)) != TR_OK) {
        tr_model_free(model);
        return cli_fail(st);
    }
    char url[300];
    const char *host = sp.host ? sp.host : "127.0.0.1";
    snprintf(url, sizeof url, strchr(host, ':') ? "%s://[%s]:%d" : "%s://%s:%d", sp.tls_cert_path ? "https" : "http",
             host, tr_server_port(srv));
    char keys_said[48];
    if (sp.n_api_keys > 1) snprintf(keys_said, sizeof keys_said, "%d API keys, each owning its sessions", sp.n_api_keys);
    else snprintf(keys_said, sizeof keys_said, "%s", sp.n_api_keys == 1 || (sp.api_key && sp.api_key[0])
                                                         ? "API key required" : "no API key");
    fprintf(stderr, "tokroute: serving %s on %s (%s, batching %s, chat template %s%s)\n", mo.model, url, keys_said,
            sp.batch ? "on" : "off", tr_chat_template_name(sp.chat_template), n_cors > 0 ? ", CORS on" : "");
    int rc = 0;
    if (ready && !cli_write_ready(ready, url)) {
        fprintf(stderr, "tokroute: cannot write the ready file %s\n", ready);
        rc = 1;
    } else {
        int sig = 0;
        sigwait(&set, &sig);
        fprintf(stderr, "tokroute: %s, shutting down\n", sig == SIGINT ? "interrupted" : "terminated");
    }
    tr_server_free(srv);
    tr_model_free(model);
    if (ready) remove(ready);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    /* Many connections are the point of a server: the descriptor limit as high as this process may set it. */
    struct rlimit fds;
    if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
        fds.rlim_cur = fds.rlim_max;
        setrlimit(RLIMIT_NOFILE, &fds);
    }
    key_list kl = {0};
    const int rc = serve(argc, argv, &kl);
    for (int32_t i = 0; i < kl.n; i++) free(kl.keys[i]);
    free(kl.keys);
    return rc;
}
