/* raw_http.c — HTTP over a bare loopback socket (raw_http.h). */
#include "support/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double raw_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int raw_connect(const char *from, int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (from) {
        struct sockaddr_in src = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, from, &src.sin_addr) != 1 || bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void raw_send_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        const ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

int raw_read_reply(int fd, char *out, size_t cap, int timeout_ms) {
    size_t len = 0;
    const double until = raw_now_ms() + timeout_ms;
    out[0] = 0;
    while (len + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        const int left = (int)(until - raw_now_ms());
        if (left <= 0 || poll(&p, 1, left) != 1) break;
        const ssize_t k = recv(fd, out + len, cap - 1 - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
        out[len] = 0;
        const char *end = strstr(out, "\r\n\r\n"), *cl = strcasestr(out, "\r\nContent-Length:");
        if (end && cl && cl < end && len >= (size_t)(end + 4 - out) + strtoul(cl + 17, NULL, 10)) break;
    }
    int status = 0;
    sscanf(out, "HTTP/1.%*d %d", &status);
    return status;
}

void raw_reset(int fd) {
    const struct linger reset = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(fd);
}
