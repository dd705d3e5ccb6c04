/* cors.c — browser clients of tokroute serve (`--cors ORIGIN`, tr_server_params.cors_origins): the OPTIONS
 * preflight and the Access-Control-Allow-Origin header on replies to an allowed origin. Without origins configured
 * nothing here runs: no CORS header is ever sent and OPTIONS is an ordinary 405 (http.c).
 *
 * A preflight needs no API key (browsers never send one with it); the request it announces does. The allowed
 * request headers are Authorization and Content-Type plus whatever the browser asks for (the official SDKs add their
 * own X-Stainless-* headers), kept to header-name characters. "*" allows any origin and answers "*" (an explicit
 * Authorization header is not a credential in CORS terms, so "*" covers it); a listed origin is echoed with
 * Vary: Origin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "common/error.h"
#include "server/httpd.h"
#include "server/server_internal.h"

#define CORS_MAX_AGE_S "86400"

tr_status cors_init(tr_server *srv, const char *const *origins, int32_t n) {
    if (n < 0 || (n > 0 && !origins)) return tr_fail(TR_ERR_ARG, "cors_origins: %d origins and no list", n);
    if (n == 0) return TR_OK;
    if (!(srv->cors_origins = calloc((size_t)n, sizeof *srv->cors_origins)))
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        const char *o = origins[i];
        if (!o || !o[0] || strlen(o) > 255) return tr_fail(TR_ERR_ARG, "CORS origin %d is empty or too long", i);
        for (const char *p = o; *p; p++)
            if ((unsigned char)*p <= ' ' || *p == ',' || (unsigned char)*p >= 0x7f)
                return tr_fail(TR_ERR_ARG, "CORS origin '%s' is not one origin (e.g. http://localhost:3000, or *)", o);
        if (strcmp(o, "*") != 0 && !strstr(o, "://"))
            return tr_fail(TR_ERR_ARG, "CORS origin '%s' needs its scheme (e.g. http://localhost:3000), or *", o);
        if (!(srv->cors_origins[i] = strdup(o))) return tr_fail(TR_ERR_NOMEM, "out of memory");
        srv->n_cors_origins = i + 1;
    }
    return TR_OK;
}

void cors_free(tr_server *srv) {
    for (int32_t i = 0; i < srv->n_cors_origins; i++) free(srv->cors_origins[i]);
    free(srv->cors_origins);
    srv->cors_origins = NULL;
    srv->n_cors_origins = 0;
}

/* What Access-Control-Allow-Origin says to this request: "*", its own Origin, or NULL (no CORS header). */
static const char *allowed_origin(const tr_server *srv, struct MHD_Connection *conn) {
    if (!srv || srv->n_cors_origins == 0) return NULL;
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!origin) return NULL;
    for (int32_t i = 0; i < srv->n_cors_origins; i++) {
        if (strcmp(srv->cors_origins[i], "*") == 0) return "*";
        if (strcmp(srv->cors_origins[i], origin) == 0) return origin;
    }
    return NULL;
}

void cors_add_headers(const tr_server *srv, struct MHD_Connection *conn, struct MHD_Response *r) {
    const char *origin = allowed_origin(srv, conn);
    if (!origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    if (strcmp(origin, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
}

/* "Authorization, Content-Type" and the headers the browser asks for, kept to header-name characters. */
static void allowed_headers(struct MHD_Connection *conn, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "Authorization, Content-Type");
    const char *asked = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    if (!asked || !asked[0] || n + 2 >= cap) return;
    out[n++] = ',';
    out[n++] = ' ';
    for (const char *p = asked; *p && n + 1 < cap; p++) {
        const char ch = *p;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '_' || ch == ',' || ch == ' ')
            out[n++] = ch;
    }
    out[n] = 0;
}

int cors_preflight(tr_server *srv, struct MHD_Connection *conn, const char *route, const char *allow, double t0_ms) {
    api_error err = {0};
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (origin && !allowed_origin(srv, conn)) {
        api_error_set(&err, 403, "cors_origin", "", "origin %.120s may not call this server (tokroute serve --cors)",
                      origin);
        return http_send_error(srv, conn, route, &err, t0_ms);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    char methods[64], headers[600];
    snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
    MHD_add_response_header(r, "Allow", methods);
    if (origin) { /* a preflight; without Origin, a plain OPTIONS: the methods alone */
        allowed_headers(conn, headers, sizeof headers);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", headers);
        MHD_add_response_header(r, "Access-Control-Max-Age", CORS_MAX_AGE_S);
    }
    const double ms = server_now_ms() - t0_ms;
    metrics_request(&srv->metrics, route, 204, ms);
    server_log(srv, "%s OPTIONS 204 %.2f ms%s", route, ms, origin ? " (CORS preflight)" : "");
    const int ret = httpd_queue_response(conn, 204, r);
    MHD_destroy_response(r);
    return ret;
}
