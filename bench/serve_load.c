/* serve_load.c — load generator for `tokroute serve` (used by tests/e2e/serve.sh and for the README's numbers):
 * N threads, one session each, each making M routed calls of one token on one keep-alive connection (libcurl),
 * as a device does: the first call sends a prompt, every later call sends the server's last token at the
 * server's pos; every 50th call rolls back 3 tokens to exercise truncation. Bounded by --deadline-s.
 *
 * With --check MODEL the served tokens are verified afterwards against the model evaluated locally
 * (tr_context_eval): every served token must be the greedy choice at its position.
 *
 * Prints one JSON line: calls, errors, wall seconds, routed tokens/s, latency percentiles (ms).
 *
 * With --resend-prefix every call sends the whole sequence from pos 0 instead (what a stateless client does): the
 * cost of not keeping the session, for the README's round-trip comparison.
 *
 * usage: serve_load --url URL [--sessions 32] [--calls 200] [--prompt-len 8] [--deadline-s 120]
 *                   [--api-key KEY] [--cacert FILE] [--check MODEL] [--no-rollback] [--resend-prefix]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "tokroute.h"

typedef struct opts {
    const char *url, *api_key, *cacert, *check;
    int sessions, calls, prompt_len, n_vocab, run_id;
    double deadline_s;
    bool rollback, resend;
} opts;

typedef struct worker {
    const opts *o;
    int index;
    int32_t *seq;          /* tokens the server holds, in order */
    int32_t len;
    int32_t *served_at;    /* served_at[p] = 1 when seq[p] was served by the server as the greedy next token */
    int errors, calls;
    double *lat_ms;
    char err_msg[256];
} worker;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    buf *b = u;
    char *p = realloc(b->p, b->n + sz * nm + 1);
    if (!p) return 0;
    memcpy(p + b->n, d, sz * nm);
    b->p = p;
    b->n += sz * nm;
    p[b->n] = 0;
    return sz * nm;
}

static void *run(void *arg) {
    worker *w = arg;
    const opts *o = w->o;
    CURL *c = curl_easy_init();
    char url[512], auth[600], body[65536];
    snprintf(url, sizeof url, "%s/v1/route/next", o->url);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (o->cacert) curl_easy_setopt(c, CURLOPT_CAINFO, o->cacert);
    const double deadline = now_s() + o->deadline_s;
    for (int p = 0; p < o->prompt_len; p++)
        w->seq[w->len++] = p == 0 ? 1 : 2 + (w->index * 131 + p * 17) % (o->n_vocab - 2);
    int32_t sent_from = 0; /* the first call sends the whole prompt */
    for (int k = 0; k < o->calls && now_s() < deadline; k++) {
        if (o->rollback && k > 0 && k % 50 == 0 && w->len > o->prompt_len + 3) {
            w->len -= 3; /* roll back: resend the token at the new end */
            sent_from = w->len - 1;
        }
        int off = snprintf(body, sizeof body, "{\"session\":\"load-%d-%d\",\"pos\":%d,\"tokens\":[", o->run_id,
                           w->index, sent_from);
        for (int32_t i = sent_from; i < w->len && off < (int)sizeof body - 64; i++)
            off += snprintf(body + off, sizeof body - off, "%s%d", i > sent_from ? "," : "", w->seq[i]);
        snprintf(body + off, sizeof body - off, "]}");
        buf b = {0};
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        const double t0 = now_s();
        CURLcode rc = curl_easy_perform(c);
        w->lat_ms[w->calls++] = (now_s() - t0) * 1e3;
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        cJSON *j = b.p ? cJSON_Parse(b.p) : NULL;
        const cJSON *tok = j ? cJSON_GetObjectItem(j, "token") : NULL, *pos = j ? cJSON_GetObjectItem(j, "pos") : NULL;
        if (rc != CURLE_OK || status != 200 || !cJSON_IsNumber(tok) || !cJSON_IsNumber(pos) ||
            pos->valueint != w->len) {
            if (!w->errors)
                snprintf(w->err_msg, sizeof w->err_msg, "session %d call %d: curl %d, HTTP %ld: %.150s", w->index, k,
                         (int)rc, status, b.p ? b.p : curl_easy_strerror(rc));
            w->errors++;
            cJSON_Delete(j);
            free(b.p);
            break;
        }
        w->served_at[w->len] = 1;
        w->seq[w->len++] = tok->valueint;
        sent_from = o->resend ? 0 : w->len - 1;
        cJSON_Delete(j);
        free(b.p);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Every served token must be the local model's greedy choice after the tokens before it. */
static int check(const opts *o, worker *w, int n) {
    tr_model *m = NULL;
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(o->check, &mp, &m) != TR_OK) {
        fprintf(stderr, "serve_load: %s\n", tr_last_error());
        return -1;
    }
    const int32_t nv = tr_model_get_info(m)->n_vocab;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].len < 2) continue;
        tr_context_params cp = tr_context_default_params();
        cp.n_ctx = w[i].len;
        cp.n_threads = 1;
        tr_context *ctx = NULL;
        if (tr_context_create(m, &cp, &ctx) != TR_OK || tr_context_eval(ctx, w[i].seq, w[i].len - 1,
                                                                          TR_EVAL_LOGITS_ALL) != TR_OK) {
            bad++;
            tr_context_free(ctx);
            continue;
        }
        for (int32_t p = 1; p < w[i].len; p++)
            if (w[i].served_at[p] && tr_argmax(tr_context_logits(ctx, p - 1), nv) != w[i].seq[p]) {
                if (!bad) fprintf(stderr, "serve_load: session %d position %d: served %d, local greedy %d\n", i, p,
                                  w[i].seq[p], tr_argmax(tr_context_logits(ctx, p - 1), nv));
                bad++;
            }
        tr_context_free(ctx);
    }
    tr_model_free(m);
    return bad;
}

static int health_vocab(const opts *o) {
    CURL *c = curl_easy_init();
    char url[512], auth[600];
    snprintf(url, sizeof url, "%s/health", o->url);
    struct curl_slist *h = NULL;
    if (o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        h = curl_slist_append(h, auth);
    }
    buf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    if (o->cacert) curl_easy_setopt(c, CURLOPT_CAINFO, o->cacert);
    int nv = -1;
    if (curl_easy_perform(c) == CURLE_OK && b.p) {
        cJSON *j = cJSON_Parse(b.p);
        const cJSON *v = j ? cJSON_GetObjectItem(j, "n_vocab") : NULL;
        if (cJSON_IsNumber(v)) nv = v->valueint;
        cJSON_Delete(j);
    }
    free(b.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return nv;
}

int main(int argc, char **argv) {
    opts o = {.sessions = 32, .calls = 200, .prompt_len = 8, .deadline_s = 120, .rollback = true};
    o.run_id = (int)(time(NULL) % 100000);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-rollback")) {
            o.rollback = false;
            continue;
        }
        if (!strcmp(a, "--resend-prefix")) { /* every call sends the whole sequence from pos 0 (no session reuse) */
            o.resend = true;
            o.rollback = false;
            continue;
        }
        if (!v) return fprintf(stderr, "serve_load: %s needs a value\n", a), 2;
        i++;
        if (!strcmp(a, "--url")) o.url = v;
        else if (!strcmp(a, "--sessions")) o.sessions = atoi(v);
        else if (!strcmp(a, "--calls")) o.calls = atoi(v);
        else if (!strcmp(a, "--prompt-len")) o.prompt_len = atoi(v);
        else if (!strcmp(a, "--deadline-s")) o.deadline_s = atof(v);
        else if (!strcmp(a, "--api-key")) o.api_key = v;
        else if (!strcmp(a, "--cacert")) o.cacert = v;
        else if (!strcmp(a, "--check")) o.check = v;
        else if (!strcmp(a, "--run-id")) o.run_id = atoi(v);
        else return fprintf(stderr, "serve_load: unknown option %s\n", a), 2;
    }
    if (!o.url || o.sessions < 1 || o.sessions > 4096 || o.calls < 0 || o.prompt_len < 1 || o.prompt_len > 8000)
        return fprintf(stderr, "usage: serve_load --url URL [--sessions N] [--calls M] [--prompt-len L] "
                               "[--deadline-s S] [--api-key K] [--cacert F] [--check MODEL] [--no-rollback]\n"), 2;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if ((o.n_vocab = health_vocab(&o)) < 3) return fprintf(stderr, "serve_load: GET %s/health failed\n", o.url), 1;
    worker *w = calloc((size_t)o.sessions, sizeof *w);
    pthread_t *th = calloc((size_t)o.sessions, sizeof *th);
    const int cap = o.prompt_len + o.calls + 2;
    for (int i = 0; i < o.sessions; i++) {
        w[i].o = &o;
        w[i].index = i;
        w[i].seq = calloc((size_t)cap, sizeof(int32_t));
        w[i].served_at = calloc((size_t)cap, sizeof(int32_t));
        w[i].lat_ms = calloc((size_t)o.calls + 1, sizeof(double));
    }
    const double t0 = now_s();
    for (int i = 0; i < o.sessions; i++) pthread_create(&th[i], NULL, run, &w[i]);
    for (int i = 0; i < o.sessions; i++) pthread_join(th[i], NULL);
    const double wall = now_s() - t0;
    long calls = 0, errors = 0;
    for (int i = 0; i < o.sessions; i++) calls += w[i].calls, errors += w[i].errors;
    /* Latency of the single-token calls (the first call of each session carries the prompt). */
    double *lat = calloc((size_t)calls + 1, sizeof *lat);
    long n_lat = 0;
    for (int i = 0; i < o.sessions; i++)
        for (int k = 1; k < w[i].calls; k++) lat[n_lat++] = w[i].lat_ms[k];
    qsort(lat, (size_t)n_lat, sizeof *lat, cmp_d);
    double sum_lat = 0;
    for (long i = 0; i < n_lat; i++) sum_lat += lat[i];
    for (int i = 0; i < o.sessions; i++)
        if (w[i].errors) fprintf(stderr, "serve_load: %s\n", w[i].err_msg);
    const int bad = o.check ? check(&o, w, o.sessions) : 0;
    printf("{\"sessions\":%d,\"calls\":%ld,\"errors\":%ld,\"wall_s\":%.3f,\"tokens_per_s\":%.1f,"
           "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"check_mismatches\":%d}\n",
           o.sessions, calls, errors, wall, calls / wall, n_lat ? lat[n_lat / 2] : 0,
           n_lat ? lat[n_lat * 9 / 10] : 0, n_lat ? lat[n_lat * 99 / 100] : 0,
           n_lat ? sum_lat / n_lat : 0, bad);
    for (int i = 0; i < o.sessions; i++) free(w[i].seq), free(w[i].served_at), free(w[i].lat_ms);
    free(w);
    free(th);
    free(lat);
    curl_global_cleanup();
    return errors || bad ? 1 : 0;
}
