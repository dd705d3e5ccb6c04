/* http_call.h — a test server on a free loopback port, and one HTTP request to it (libcurl), the whole reply body
 * kept. */
#ifndef TR_TEST_HTTP_CALL_H
#define TR_TEST_HTTP_CALL_H

#include <stddef.h>

#include "tokroute.h"

struct cJSON;

/* Loads the shared folder's model_rel and serves it on 127.0.0.1 with p (port and threads: a free port, 1 thread).
 * 0 on success, with *model, *srv and *port set. */
int http_test_serve(const char *model_rel, tr_server_params p, tr_model **model, tr_server **srv, int *port);

/* METHOD path on 127.0.0.1:port with body (NULL: none) as JSON: the status (0: no reply) and, when body_out is not
 * NULL, the reply's body (malloc'ed, NUL-terminated; free it). */
long http_call(int port, const char *method, const char *path, const char *body, char **body_out);
/* POST path with body: the reply parsed (cJSON_Delete it; NULL when it is not JSON), *status its status. */
struct cJSON *http_post_json(int port, const char *path, const char *body, long *status);

#endif
