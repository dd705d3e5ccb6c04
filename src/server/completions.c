/* completions.c — POST /v1/completions (placeholder until the OpenAI subset lands). */
#include <microhttpd.h>

#include "server/server_internal.h"

int completions_handle(tr_server *srv, struct MHD_Connection *conn, const char *body, size_t len) {
    api_error err = {0};
    api_error_set(&err, 501, "not_implemented", "", "completions are not implemented yet");
    return http_send_error(srv, conn, "completions", &err, server_now_ms());
}
