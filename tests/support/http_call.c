/* http_call.c — one HTTP request to a test server (see http_call.h). */
#include "support/http_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "support/fixtures.h"

int http_test_serve(const char *model_rel, tr_server_params p, tr_model **model, tr_server **srv, int *port) {
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path(model_rel), &mp, model) != TR_OK) return -1;
    p.port = 0;
    p.n_threads = 1;
    if (tr_server_start(*model, &p, srv) != TR_OK) return -1;
    *port = tr_server_port(*srv);
    return 0;
}

typedef struct body_buf {
    char *s;
    size_t len;
} body_buf;

static size_t collect(char *d, size_t sz, size_t n, void *u) {
    body_buf *b = u;
    const size_t k = sz * n;
    char *p = realloc(b->s, b->len + k + 1);
    if (!p) return 0;
    memcpy(p + b->len, d, k);
    b->s = p;
    b->len += k;
    p[b->len] = 0;
    return k;
}

long http_call(int port, const char *method, const char *path, const char *body, char **body_out) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    body_buf b = {calloc(1, 1), 0};
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (body_out) *body_out = b.s;
    else free(b.s);
    return status;
}

cJSON *http_post_json(int port, const char *path, const char *body, long *status) {
    char *out = NULL;
    *status = http_call(port, "POST", path, body, &out);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    free(out);
    return j;
}
