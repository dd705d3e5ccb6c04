/* cli_common.c — argument parsing, timing and progress helpers for the subcommands. */
#include "cli/cli_common.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool name_matches(const char *arg, const char *short_name, const char *long_name, const char **inline_value) {
    *inline_value = NULL;
    if (short_name && strcmp(arg, short_name) == 0) return true;
    if (!long_name) return false;
    size_t n = strlen(long_name);
    if (strncmp(arg, long_name, n) != 0) return false;
    if (arg[n] == '\0') return true;
    if (arg[n] == '=') {
        *inline_value = arg + n + 1;
        return true;
    }
    return false;
}

bool cli_flag(int argc, char **argv, int *i, const char *short_name, const char *long_name) {
    const char *inl;
    (void)argc;
    return name_matches(argv[*i], short_name, long_name, &inl) && !inl;
}

bool cli_option(int argc, char **argv, int *i, const char *short_name, const char *long_name, const char **value) {
    const char *inl;
    if (!name_matches(argv[*i], short_name, long_name, &inl)) return false;
    if (inl) {
        *value = inl;
    } else if (*i + 1 < argc) {
        *value = argv[++*i];
    } else {
        *value = NULL;
    }
    return true;
}

bool cli_int(const char *name, const char *text, long lo, long hi, long *out) {
    if (!text) {
        fprintf(stderr, "tokroute: %s needs a value\n", name);
        return false;
    }
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "tokroute: bad value for %s: '%s' (expected an integer in %ld..%ld)\n", name, text, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *name, const char *text, double *out) {
    if (!text) {
        fprintf(stderr, "tokroute: %s needs a value\n", name);
        return false;
    }
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end) {
        fprintf(stderr, "tokroute: bad value for %s: '%s' (expected a number)\n", name, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_token_list(const char *text, int32_t **ids, int32_t *n) {
    *ids = NULL;
    *n = 0;
    if (!text || !*text) {
        fprintf(stderr, "tokroute: --tokens needs a comma-separated list of ids\n");
        return false;
    }
    size_t cap = 1;
    for (const char *p = text; *p; p++) cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "tokroute: bad token list '%s' (expected ids like 1,2,3)\n", text);
            free(v);
            return false;
        }
        v[(*n)++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    *ids = v;
    return true;
}

int cli_usage_error(const char *usage, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tokroute: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fputs(usage, stderr);
    return 2;
}

int cli_fail(tr_status st) {
    const char *msg = tr_last_error();
    fprintf(stderr, "tokroute: %s\n", msg && *msg ? msg : tr_status_name(st));
    return 1;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

long cli_peak_rss_kib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

void cli_progress(void *user, double fraction) {
    (void)user;
    if (!isatty(STDERR_FILENO)) return;
    int width = 40, filled = (int)(fraction * width + 0.5);
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %3.0f%%", fraction * 100.0);
    if (fraction >= 1.0) fputc('\n', stderr);
    fflush(stderr);
}

const char cli_kv_type_usage[] =
    "  --kv-type T            KV cache: f16 (default), q8_0 (about half the memory), f32\n";

int cli_kv_type_option(int argc, char **argv, int *i, tr_kv_type *out) {
    const char *v;
    if (!cli_option(argc, argv, i, NULL, "--kv-type", &v)) return 0;
    const tr_kv_type types[] = {TR_KV_F16, TR_KV_Q8_0, TR_KV_F32};
    for (size_t k = 0; v && k < sizeof types / sizeof types[0]; k++)
        if (strcmp(v, tr_kv_type_name(types[k])) == 0) {
            *out = types[k];
            return 1;
        }
    if (!v) fprintf(stderr, "tokroute: --kv-type needs a value (f16, q8_0 or f32)\n");
    else fprintf(stderr, "tokroute: bad value for --kv-type: '%s' (expected f16, q8_0 or f32)\n", v);
    return -1;
}

int cli_model_option(int argc, char **argv, int *i, cli_model_opts *o) {
    const char *v;
    long x;
    const int kv = cli_kv_type_option(argc, argv, i, &o->kv_type);
    if (kv != 0) return kv;
    if (cli_option(argc, argv, i, "-m", "--model", &v)) {
        if (!v) return fprintf(stderr, "tokroute: --model needs a path\n"), -1;
        o->model = v;
        return 1;
    }
    if (cli_option(argc, argv, i, "-t", "--threads", &v)) {
        if (!cli_int("--threads", v, 0, 512, &x)) return -1;
        o->n_threads = (int32_t)x;
        return 1;
    }
    if (cli_option(argc, argv, i, "-c", "--ctx", &v)) {
        if (!cli_int("--ctx", v, 0, 1 << 24, &x)) return -1;
        o->n_ctx = (int32_t)x;
        return 1;
    }
    return 0;
}

void cli_warn_ctx(const tr_model *model, int32_t n_ctx) {
    const int32_t trained = tr_model_get_info(model)->n_ctx_train;
    if (trained > 0 && n_ctx > trained)
        fprintf(stderr, "tokroute: warning: -c %d is beyond the %d tokens the model was trained on; text past %d "
                "tokens degrades\n", n_ctx, trained, trained);
}

bool cli_load_model(const cli_model_opts *o, tr_model **model, tr_context **ctx) {
    *model = NULL;
    *ctx = NULL;
    if (!o->model) {
        fprintf(stderr, "tokroute: no model given (-m MODEL.gguf)\n");
        return false;
    }
    tr_model_params mp = tr_model_default_params();
    mp.kv_type = o->kv_type;
    tr_status st = tr_model_load(o->model, &mp, model);
    if (st != TR_OK) return cli_fail(st), false;
    cli_warn_ctx(*model, o->n_ctx);
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = o->n_threads;
    cp.n_ctx = o->n_ctx;
    if ((st = tr_context_create(*model, &cp, ctx)) != TR_OK) {
        cli_fail(st);
        tr_model_free(*model);
        *model = NULL;
        return false;
    }
    return true;
}

bool cli_tokenize_prompt(const tr_model *model, const char *text, bool no_bos, bool parse_special, int32_t **ids,
                         int32_t *n) {
    const tr_vocab *vocab = tr_model_vocab(model);
    *ids = NULL;
    *n = 0;
    if (!vocab) {
        fprintf(stderr, "tokroute: the model has no vocabulary; give the prompt as --tokens 1,2,3\n");
        return false;
    }
    tr_tokenize_params tp = tr_tokenize_default_params();
    tp.parse_special = parse_special;
    int32_t cap = (int32_t)strlen(text) + 8, count = 0;
    int32_t *buf = malloc((size_t)cap * sizeof *buf);
    if (!buf) return false;
    tr_status st = tr_tokenize(vocab, text, strlen(text), &tp, buf, cap, &count);
    if (st == TR_ERR_RANGE && count > cap) { /* the exact count is known now: retry once with room for it */
        int32_t *bigger = realloc(buf, (size_t)count * sizeof *buf);
        if (!bigger) {
            free(buf);
            return false;
        }
        buf = bigger;
        cap = count;
        st = tr_tokenize(vocab, text, strlen(text), &tp, buf, cap, &count);
    }
    if (st != TR_OK) {
        free(buf);
        return cli_fail(st), false;
    }
    /* Drop a BOS the vocabulary added when asked not to add it. */
    if (no_bos && count > 0 && buf[0] == tr_vocab_bos(vocab)) memmove(buf, buf + 1, (size_t)--count * sizeof *buf);
    *ids = buf;
    *n = count;
    return true;
}

bool cli_make_parents(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return fprintf(stderr, "tokroute: path too long\n"), false;
    for (char *p = buf + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "tokroute: cannot create %s: %s\n", buf, strerror(errno));
            return false;
        }
        *p = '/';
    }
    return true;
}

bool cli_write_ready(const char *path, const char *url) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return false;
    FILE *f = fopen(tmp, "w");
    if (!f) return false;
    const bool ok = fprintf(f, "%s\n", url) > 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) return remove(tmp), false;
    return true;
}

void cli_block_shutdown_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}
