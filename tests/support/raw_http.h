/* raw_http.h — HTTP over a bare loopback socket, for tests of what a server does with clients that do not behave
 * like libcurl: requests sent in pieces or left half-sent, a sending side shut after the request, a reset. */
#ifndef TR_TEST_RAW_HTTP_H
#define TR_TEST_RAW_HTTP_H

#include <stddef.h>

double raw_now_ms(void);
/* A TCP connection to 127.0.0.1:port from source address from (NULL: any; another 127.x address is another
 * client address to the server's per-address limits). -1 on failure. */
int raw_connect(const char *from, int port);
/* Sends all of s (stops quietly when the server closed early, as it may on purpose). */
void raw_send_all(int fd, const char *s, size_t n);
/* Reads what arrives until the peer closes, the reply is whole (Content-Length), or timeout_ms pass. Returns the
 * status (0: none) with the reply text in out (NUL-terminated). */
int raw_read_reply(int fd, char *out, size_t cap, int timeout_ms);
/* Closes with a reset (SO_LINGER 0), as a client that hangs up without reading does. */
void raw_reset(int fd);

#endif /* TR_TEST_RAW_HTTP_H */
