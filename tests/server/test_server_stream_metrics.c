/* test_server_stream_metrics.c — GET /metrics counts streamed replies by how they ended, per route:
 * tokroute_streams_total{route, outcome} with outcome completed, failed (an error event after the 200: the
 * request failed mid-stream) or abandoned (the client went away). Before, a stream's 200 was all /metrics knew:
 * a failed or abandoned one looked like a success. An in-process server (stories260K, a single session so a new one
 * evicts a completion's private session between two of its tokens, which makes its next token fail). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/http_call.h"
#include "support/server_fixture.h"
#include "tokroute.h"

static tr_model *model;
static tr_server *srv;
static int port;

static int setup(void **state) {
    (void)state;
    tr_server_params p = tr_server_default_params();
    p.n_ctx = 512;
    p.max_sessions = 1;
    return server_fixture_serve(p, &model, &srv, &port);
}

static int teardown(void **state) {
    (void)state;
    return server_fixture_free(model, srv);
}

/* tokroute_streams_total for route and outcome, from /metrics. */
static long streams(const char *route, const char *outcome) {
    static http_reply r;
    assert_int_equal(http_fetch(NULL, port, "GET", "/metrics", NULL, NULL, &r), 200);
    char key[128];
    snprintf(key, sizeof key, "\ntokroute_streams_total{route=\"%s\",outcome=\"%s\"} ", route, outcome);
    const char *at = strstr(r.body, key);
    if (!at) fail_msg("no %s in /metrics", key + 1);
    return strtol(at + strlen(key), NULL, 10);
}

/* Waits (at most 10 s) until the counter reaches want. */
static void await_streams(const char *route, const char *outcome, long want) {
    long got = 0;
    for (int i = 0; i < 200 && (got = streams(route, outcome)) < want; i++) usleep(50 * 1000);
    if (got != want) fail_msg("%s %s streams: %ld, expected %ld", route, outcome, got, want);
}

/* A streamed completion of up to 500 tokens (the end-of-sequence token banned) on a raw connection, read until its
 * first event has arrived; returns the socket. */
static int start_long_stream(void) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const struct timeval limit = {.tv_sec = 20}; /* a stream that never ends fails the test instead of hanging it */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    static const char body[] = "{\"prompt\":[1],\"max_tokens\":500,\"temperature\":0,\"stream\":true,"
                               "\"logit_bias\":{\"2\":-100}}";
    char req[512];
    const int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           "application/json\r\nContent-Length: %zu\r\n\r\n%s", sizeof body - 1, body);
    assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    char got[4096];
    size_t len = 0;
    while (len < sizeof got - 1) {
        const ssize_t k = recv(fd, got + len, sizeof got - 1 - len, 0);
        assert_true(k > 0);
        len += (size_t)k;
        got[len] = 0;
        if (strstr(got, "data: ")) break;
    }
    assert_non_null(strstr(got, "HTTP/1.1 200"));
    return fd;
}

static void test_completed(void **state) {
    (void)state;
    const long before = streams("completions", "completed");
    char *body = NULL;
    assert_int_equal(http_call(port, "POST", "/v1/completions", "{\"prompt\":[1],\"max_tokens\":4,\"stream\":true}",
                               &body), 200);
    assert_non_null(strstr(body, "data: [DONE]"));
    free(body);
    await_streams("completions", "completed", before + 1);
    assert_int_equal(streams("completions", "failed"), 0);
    assert_int_equal(streams("completions", "abandoned"), 0);
}

/* The client hangs up after the first token: the stream is abandoned, not completed. */
static void test_abandoned(void **state) {
    (void)state;
    const long completed = streams("completions", "completed");
    close(start_long_stream());
    await_streams("completions", "abandoned", 1);
    assert_int_equal(streams("completions", "completed"), completed);
}

/* A new session evicts the completion's private session (one session at most) between two of its tokens: the next
 * token fails (409), an error event ends the stream, counted as failed. */
static void test_failed(void **state) {
    (void)state;
    const int fd = start_long_stream();
    for (int i = 0; i < 50 && streams("completions", "failed") == 0; i++) {
        char route[128];
        snprintf(route, sizeof route, "{\"session\":\"evictor-%d\",\"pos\":0,\"tokens\":[1]}", i);
        http_call(port, "POST", "/v1/route/next", route, NULL); /* 503 when the completion's session was busy */
        usleep(10 * 1000);
    }
    /* The stream's end (the last chunk; the connection stays open): an error event and no [DONE]. */
    static char rest[1 << 20];
    size_t len = 0;
    rest[0] = 0;
    for (ssize_t k; !strstr(rest, "\r\n0\r\n\r\n") && len < sizeof rest - 1 &&
                    (k = recv(fd, rest + len, sizeof rest - 1 - len, 0)) > 0;) {
        len += (size_t)k;
        rest[len] = 0;
    }
    close(fd);
    assert_non_null(strstr(rest, "data: {\"error\":"));
    assert_null(strstr(rest, "data: [DONE]"));
    await_streams("completions", "failed", 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completed),
        cmocka_unit_test(test_abandoned),
        cmocka_unit_test(test_failed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
