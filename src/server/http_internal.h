/* http_internal.h — who may call tr_server and what they may touch (access.c). The connections, their limits and
 * deadlines, the Host and Content-Type verdicts and the worker threads are the HTTP layer both servers share
 * (httpd.h). */
#ifndef TR_SERVER_HTTP_INTERNAL_H
#define TR_SERVER_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "server/httpd.h"
#include "server/server_internal.h"

/* ---------------------------------------------------------------- access.c */

typedef struct access_ctl access_ctl;
/* Copies the keys of p (api_key, api_keys, metrics_key). */
tr_status access_create(const tr_server_params *p, access_ctl **out);
void access_free(access_ctl *a);
int32_t access_n_keys(const access_ctl *a);
/* The key an Authorization header presents ("Bearer KEY", the scheme in any case, RFC 6750): its index (0 when no
 * key is configured), or -1 for none or a wrong one. Constant time in the keys' contents. */
int32_t access_key_of(const access_ctl *a, const char *authorization);
/* GET /metrics: with a metrics key only that key, otherwise what access_key_of accepts. */
bool access_metrics_allowed(const access_ctl *a, const char *authorization);
/* The scheduler's name of a client's session: the id itself with one key or none; with several, "~OWNER~id", so
 * a session is found only by requests with the key that created it. */
void access_session_name(const access_ctl *a, int32_t owner, const char *id, char *out, size_t cap);
/* The id a client knows from a scheduler name (the owner left out). */
const char *access_client_id(const char *name);
/* request.c: 1-64 characters of [A-Za-z0-9_.-], the only session ids a client may name. */
bool session_id_valid(const char *s);

#endif /* TR_SERVER_HTTP_INTERNAL_H */
