/* http_call.c — a test server, and one HTTP request to it (see http_call.h). */
#include "support/http_call.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>


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

static size_t collect_fixed(char *d, size_t sz, size_t n, void *u) {
    http_reply *r = u;
    const size_t k = sz * n;
    if (r->len + k >= sizeof r->body) return 0;
    memcpy(r->body + r->len, d, k);
    r->len += k;
    r->body[r->len] = 0;
    return k;
}

static size_t collect_header(char *d, size_t sz, size_t n, void *u) {
    http_reply *r = u;
    const size_t k = sz * n;
    if (r->hlen + k < sizeof r->headers) {
        memcpy(r->headers + r->hlen, d, k);
        r->hlen += k;
        r->headers[r->hlen] = 0;
    }
    return k;
}

long http_fetch(void *curl, int port, const char *method, const char *path, const char *body,
                const char *const *headers, http_reply *r) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    memset(r, 0, sizeof *r);
    CURL *c = curl ? curl : curl_easy_init();
    struct curl_slist *h = NULL;
    bool typed = false;
    for (int i = 0; headers && headers[i]; i++) {
        h = curl_slist_append(h, headers[i]);
        typed = typed || strncasecmp(headers[i], "Content-Type:", 13) == 0;
    }
    if (body && !typed) h = curl_slist_append(h, "Content-Type: application/json"); /* the servers take only JSON */
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect_fixed);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL); /* a kept handle must not point at the list freed here */
    curl_slist_free_all(h);
    if (!curl) curl_easy_cleanup(c);
    return r->status;
}

const char *http_reply_header(const http_reply *r, const char *name) {
    static char value[512];
    const size_t n = strlen(name);
    for (const char *line = r->headers; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncasecmp(line, name, n) != 0 || line[n] != ':') continue;
        const char *a = line + n + 1, *b;
        while (*a == ' ') a++;
        b = a;
        while (*b && *b != '\r' && *b != '\n') b++;
        snprintf(value, sizeof value, "%.*s", (int)(b - a), a);
        return value;
    }
    return NULL;
}
