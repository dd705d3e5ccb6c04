/* http_call.h — one HTTP request to a test server on 127.0.0.1 (libcurl), the whole reply body kept. */
#ifndef TR_TEST_HTTP_CALL_H
#define TR_TEST_HTTP_CALL_H

#include <stddef.h>

struct cJSON;

/* METHOD path on 127.0.0.1:port with body (NULL: none) as JSON: the status (0: no reply) and, when body_out is not
 * NULL, the reply's body (malloc'ed, NUL-terminated; free it). */
long http_call(int port, const char *method, const char *path, const char *body, char **body_out);
/* POST path with body: the reply parsed (cJSON_Delete it; NULL when it is not JSON), *status its status. */
struct cJSON *http_post_json(int port, const char *path, const char *body, long *status);

#endif
