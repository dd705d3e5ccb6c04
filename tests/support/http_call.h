/* http_call.h — a test server on a free loopback port, and one HTTP request to it (libcurl): the whole reply body
 * kept (malloc'ed), or the reply with its headers in fixed buffers. */
#ifndef TR_TEST_HTTP_CALL_H
#define TR_TEST_HTTP_CALL_H

#include <stddef.h>

#include "tokroute.h"

struct cJSON;


/* METHOD path on 127.0.0.1:port with body (NULL: none) as JSON: the status (0: no reply) and, when body_out is not
 * NULL, the reply's body (malloc'ed, NUL-terminated; free it). */
long http_call(int port, const char *method, const char *path, const char *body, char **body_out);
/* POST path with body: the reply parsed (cJSON_Delete it; NULL when it is not JSON), *status its status. */
struct cJSON *http_post_json(int port, const char *path, const char *body, long *status);

/* A reply in fixed buffers (no free): status (0: no reply), the header block and the body, both NUL-terminated; a
 * body past 64 KiB fails the transfer (status 0). */
typedef struct http_reply {
    long status;
    char headers[4096];
    char body[1 << 16];
    size_t len, hlen;
} http_reply;

/* METHOD path on 127.0.0.1:port with body (NULL: none) and extra request headers (a NULL-terminated list, may be
 * NULL), within 20 s, on curl handle `curl` (a CURL *; NULL: a fresh one, while a kept handle reuses its
 * connection): the status, and the reply in r. */
long http_fetch(void *curl, int port, const char *method, const char *path, const char *body,
                const char *const *headers, http_reply *r);
/* The value of a reply's header `name` (any case; a static buffer), or NULL when absent. */
const char *http_reply_header(const http_reply *r, const char *name);

#endif
