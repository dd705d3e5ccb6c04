/* test_server_hostile.c — tr_server against clients that do not play fair, over raw loopback sockets (stories260K,
 * in-process servers): a Content-Length beyond the route's limit is a 413 and a missing key a 401 before any body
 * byte is sent; a body of a million ids is refused without the tree (400 naming the member); connections beyond the
 * per-address limit get 503 with Retry-After while /health still answers; a connection that trickles a header, or
 * says nothing, is closed after request_timeout_s, one that closes mid-request frees its slot within a second; a
 * completion's private session cannot be ended through DELETE (404, and the completion finishes); with two keys
 * neither sees nor ends the other's session; a client that hangs up ends its non-streamed completion early; the
 * metrics key; the Bearer scheme in any case; \u0000 in a text prompt is a 400. And a small load-and-fault run:
 * honest session clients keep every call (and the model's greedy tokens) while others hold idle connections and post
 * oversized bodies. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/server_fixture.h"
#include "support/raw_http.h"
#include "tokroute.h"

/* What every raw request here carries: the Host the server answers to, a JSON body. */
#define JSON_HEAD "Host: 127.0.0.1\r\nContent-Type: application/json\r\n"

static tr_model *model;

static int setup(void **state) { return server_fixture_load(&model); }

static int teardown(void **state) { return server_fixture_free(model, NULL); }

static tr_server *start(tr_server_params p) {
    tr_server *srv = server_fixture_start(model, p);
    assert_non_null(srv);
    return srv;
}

static int connect_to(int port) {
    const int fd = raw_connect(NULL, port);
    assert_true(fd >= 0);
    return fd;
}

/* One request on a fresh connection: the status, the reply in out. */
static int request(int port, const char *method, const char *path, const char *auth, const char *body, char *out,
                   size_t cap) {
    const int fd = connect_to(port);
    char head[512];
    const size_t n_body = body ? strlen(body) : 0;
    snprintf(head, sizeof head, "%s %s HTTP/1.1\r\n" JSON_HEAD "%s%s%sContent-Length: %zu\r\n\r\n", method,
             path, auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "", n_body);
    raw_send_all(fd, head, strlen(head));
    if (body) raw_send_all(fd, body, n_body);
    const int status = raw_read_reply(fd, out, cap, 10000);
    close(fd);
    return status;
}

static void test_judged_before_the_body(void **state) {
    tr_server_params p = tr_server_default_params();
    p.api_key = "k1";
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    char reply[4096];
    /* Headers only: the 413 and the 401 come although not one body byte was sent. */
    const char *cases[][3] = {
        {"POST /v1/completions HTTP/1.1\r\n" JSON_HEAD "Authorization: Bearer k1\r\nContent-Length: 104857600\r\n\r\n",
         "413", "the body exceeds 1048576 bytes"},
        {"POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Authorization: Bearer k1\r\nContent-Length: 200000\r\n\r\n",
         "413", "the body exceeds"}, /* a session-protocol body holds at most the context's ids */
        {"POST /v1/completions HTTP/1.1\r\n" JSON_HEAD "Content-Length: 500000\r\n\r\n", "401",
         "missing or wrong API key"},
        {"POST /v1/completions HTTP/1.1\r\n" JSON_HEAD "Authorization: Bearer k2\r\nContent-Length: 500000\r\n\r\n",
         "401", "missing or wrong API key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int fd = connect_to(port);
        raw_send_all(fd, cases[i][0], strlen(cases[i][0]));
        const double t0 = raw_now_ms();
        assert_int_equal(raw_read_reply(fd, reply, sizeof reply, 5000), atoi(cases[i][1]));
        assert_true(raw_now_ms() - t0 < 4000);
        assert_non_null(strstr(reply, cases[i][2]));
        assert_non_null(strcasestr(reply, "Connection: close"));
        close(fd);
    }
    /* The scheme in any case (RFC 6750). */
    assert_int_equal(request(port, "GET", "/v1/models", "bearer k1", NULL, reply, sizeof reply), 200);
    assert_int_equal(request(port, "GET", "/v1/models", "BEARER   k1", NULL, reply, sizeof reply), 200);
    assert_int_equal(request(port, "GET", "/v1/models", "Basic k1", NULL, reply, sizeof reply), 401);
    tr_server_free(srv);
}

/* A million ids: refused by the survey (no tree is built) and by the context, naming the member. */
static void test_huge_arrays(void **state) {
    tr_server *srv = start(tr_server_default_params());
    const int port = tr_server_port(srv);
    const size_t n = 500000;
    char *body = malloc(n * 2 + 100), reply[4096];
    assert_non_null(body);
    size_t at = (size_t)sprintf(body, "{\"max_tokens\":1,\"prompt\":[");
    for (size_t i = 0; i < n; i++) at += (size_t)sprintf(body + at, "%s1", i ? "," : "");
    strcpy(body + at, "]}");
    double t0 = raw_now_ms();
    assert_int_equal(request(port, "POST", "/v1/completions", NULL, body, reply, sizeof reply), 400);
    assert_non_null(strstr(reply, "\"param\":\"prompt\""));
    assert_non_null(strstr(reply, "JSON values"));
    assert_non_null(strstr(reply, "holds at least")); /* counted in the first part of the body: the rest not kept */
    const double ms = raw_now_ms() - t0;
    /* A long body of few values grows past the first count and its own mapping: judged whole (a text prompt
     * longer than the context). */
    at = (size_t)sprintf(body, "{\"max_tokens\":1,\"prompt\":\"");
    for (size_t i = 0; i < 60000; i++) at += (size_t)sprintf(body + at, "Once upon ");
    strcpy(body + at, "\"}");
    assert_int_equal(request(port, "POST", "/v1/completions", NULL, body, reply, sizeof reply), 400);
    assert_null(strstr(reply, "JSON values"));
    assert_non_null(strstr(reply, "\"param\":\"prompt\""));
    assert_non_null(strstr(reply, "does not fit the context"));
    at = (size_t)sprintf(body, "{\"session\":\"a\",\"pos\":0,\"tokens\":[");
    for (size_t i = 0; i < 600; i++) at += (size_t)sprintf(body + at, "%s1", i ? "," : "");
    strcpy(body + at, "]}");
    assert_int_equal(request(port, "POST", "/v1/route/next", NULL, body, reply, sizeof reply), 400);
    assert_non_null(strstr(reply, "600 tokens exceed the session context of 512"));
    /* Ids among other JSON values of another member: the survey counts them too. */
    at = (size_t)sprintf(body, "{\"session\":\"a\",\"pos\":0,\"tokens\":[1],\"junk\":[");
    for (size_t i = 0; i < 20000; i++) at += (size_t)sprintf(body + at, "%s1", i ? "," : "");
    strcpy(body + at, "]}");
    assert_int_equal(request(port, "POST", "/v1/route/next", NULL, body, reply, sizeof reply), 400);
    assert_non_null(strstr(reply, "\"param\":\"junk\""));
    free(body);
    print_message("a 1 MB prompt of ids refused in %.1f ms\n", ms);
    /* \u0000 in a text prompt would cut it short: refused. */
    assert_int_equal(request(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"Once\\u0000 upon\",\"max_tokens\":1}",
                             reply, sizeof reply), 400);
    assert_non_null(strstr(reply, "\"param\":\"prompt\""));
    /* A raw NUL byte (not JSON; cJSON would end the name there: session "a") is refused too. */
    const char nul[] = "POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Content-Length: 38\r\n\r\n"
                       "{\"session\":\"a\0b\",\"pos\":0,\"tokens\":[1]}";
    const int fd = connect_to(port);
    raw_send_all(fd, nul, sizeof nul - 1);
    assert_int_equal(raw_read_reply(fd, reply, sizeof reply, 5000), 400);
    assert_non_null(strstr(reply, "NUL byte"));
    close(fd);
    tr_server_free(srv);
}

static void test_connection_limits(void **state) {
    tr_server_params p = tr_server_default_params();
    p.max_connections_per_ip = 2;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    char reply[4096];
    const int a = connect_to(port), b = connect_to(port);
    usleep(100 * 1000);
    /* The third connection from this address: a clear 503 with Retry-After, not a reset... */
    int c = connect_to(port);
    const char get[] = "GET /v1/models HTTP/1.1\r\n" JSON_HEAD "\r\n";
    raw_send_all(c, get, sizeof get - 1);
    assert_int_equal(raw_read_reply(c, reply, sizeof reply, 5000), 503);
    assert_non_null(strcasestr(reply, "Retry-After: 1"));
    assert_non_null(strstr(reply, "too many connections from your address"));
    close(c);
    /* ...while /health still answers there, and the first two connections are served. */
    c = connect_to(port);
    const char health[] = "GET /health HTTP/1.1\r\n" JSON_HEAD "\r\n";
    raw_send_all(c, health, sizeof health - 1);
    assert_int_equal(raw_read_reply(c, reply, sizeof reply, 5000), 200);
    close(c);
    raw_send_all(a, get, sizeof get - 1);
    assert_int_equal(raw_read_reply(a, reply, sizeof reply, 5000), 200);
    close(a);
    close(b);
    tr_server_free(srv);
}

/* Waits until the server closes fd (or timeout_ms): the ms it took, or -1. Sends one header byte every 200 ms when
 * trickle is set (slowloris), which libmicrohttpd's idle timeout alone would never end. */
static double closed_after(int fd, bool trickle, int timeout_ms) {
    const double t0 = raw_now_ms();
    const char head[] = "POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (size_t i = 0; raw_now_ms() - t0 < timeout_ms; i++) {
        if (trickle && i < sizeof head - 1) raw_send_all(fd, head + i, 1);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) == 1) {
            char buf[256];
            if (recv(fd, buf, sizeof buf, 0) <= 0) return raw_now_ms() - t0;
        }
    }
    return -1;
}

static void test_request_deadline(void **state) {
    tr_server_params p = tr_server_default_params();
    p.request_timeout_s = 1;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    int fd = connect_to(port);
    const double silent = closed_after(fd, false, 5000);
    close(fd);
    fd = connect_to(port);
    const double slow = closed_after(fd, true, 5000);
    close(fd);
    print_message("silent connection closed after %.0f ms, trickling one after %.0f ms\n", silent, slow);
    assert_true(silent >= 900 && silent < 3000);
    assert_true(slow >= 900 && slow < 3000);
    /* A keep-alive connection gets its full time again after each reply. */
    fd = connect_to(port);
    const char health[] = "GET /health HTTP/1.1\r\n" JSON_HEAD "\r\n";
    char reply[2048];
    for (int i = 0; i < 4; i++) {
        usleep(600 * 1000);
        raw_send_all(fd, health, sizeof health - 1);
        assert_int_equal(raw_read_reply(fd, reply, sizeof reply, 3000), 200);
    }
    close(fd);
    tr_server_free(srv);
}

/* A client that sends part of a request and closes frees its connection slot at once, not after request_timeout_s
 * (libmicrohttpd alone keeps such a connection until its timeout): with the per-address limit full of them, the
 * address is served again within about a second. A request sent whole and followed at once by FIN is answered. */
static void test_closed_peers(void **state) {
    tr_server_params p = tr_server_default_params();
    p.request_timeout_s = 60;
    p.max_connections_per_ip = 8;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    const char *parts[] = {"POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Content-Length: 1000\r\n\r\n{\"session\"",
                           "POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Content-Length: 1000\r\n\r\n"};
    for (int i = 0; i < 8; i++) { /* FIN right behind the bytes: what libmicrohttpd keeps (a later FIN it sees) */
        const int fd = connect_to(port);
        raw_send_all(fd, parts[i % 2], strlen(parts[i % 2]));
        close(fd);
    }
    usleep(300 * 1000); /* all eight accepted and counted */
    char reply[2048];
    const char get[] = "GET /v1/models HTTP/1.1\r\n" JSON_HEAD "Connection: close\r\n\r\n";
    const double t0 = raw_now_ms();
    int status = 0;
    while (raw_now_ms() - t0 < 10000) {
        const int fd = connect_to(port);
        raw_send_all(fd, get, sizeof get - 1);
        shutdown(fd, SHUT_WR); /* whole, then FIN: still answered */
        status = raw_read_reply(fd, reply, sizeof reply, 5000);
        close(fd);
        if (status == 200) break;
        assert_int_equal(status, 503); /* until the slots are freed */
        usleep(100 * 1000);
    }
    assert_int_equal(status, 200);
    print_message("slots of clients that closed mid-request freed after %.0f ms\n", raw_now_ms() - t0);
    assert_true(raw_now_ms() - t0 < 3000);
    tr_server_free(srv);
}

/* The id a streamed completion's first event names ("cmpl-…"). */
static void test_private_sessions(void **state) {
    tr_server *srv = start(tr_server_default_params());
    const int port = tr_server_port(srv);
    const int fd = connect_to(port);
    const char body[] = "{\"prompt\":[1],\"max_tokens\":200,\"stream\":true,\"temperature\":0}";
    char head[256], reply[65536];
    snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\n" JSON_HEAD "Content-Length: %zu\r\n\r\n%s",
             sizeof body - 1, body);
    raw_send_all(fd, head, strlen(head));
    /* The first event names the completion; its private session is "!" + that id. */
    char first[4096] = "";
    size_t len = 0;
    while (!strstr(first, "\"id\":\"cmpl-") && len + 1 < sizeof first) {
        const ssize_t k = recv(fd, first + len, sizeof first - 1 - len, 0);
        assert_true(k > 0);
        len += (size_t)k;
        first[len] = 0;
    }
    char id[64] = "!", path[128], out[2048];
    sscanf(strstr(first, "\"id\":\"") + 6, "%40[^\"]", id + 1);
    const char *names[] = {id, "%21", "!cmpl-0", "cmpl-x%2F..", "a%20b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "/v1/route/sessions/%s", i == 1 ? "%21" : names[i]);
        if (i == 1) strncat(path, id + 1, sizeof path - strlen(path) - 1);
        assert_int_equal(request(port, "DELETE", path, NULL, NULL, out, sizeof out), 404);
    }
    /* The completion goes on to its end. */
    memcpy(reply, first, len + 1);
    while (!strstr(reply, "data: [DONE]") && len + 1 < sizeof reply) {
        const ssize_t k = recv(fd, reply + len, sizeof reply - 1 - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
        reply[len] = 0;
    }
    assert_non_null(strstr(reply, "data: [DONE]"));
    assert_null(strstr(reply, "\"error\""));
    close(fd);
    tr_server_free(srv);
}

static void test_owners(void **state) {
    tr_server_params p = tr_server_default_params();
    const char *keys[] = {"key-b"};
    p.api_key = "key-a";
    p.api_keys = keys;
    p.n_api_keys = 1;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    char out[4096];
    const char *a = "Bearer key-a", *b = "Bearer key-b";
    assert_int_equal(request(port, "POST", "/v1/route/next", a, "{\"session\":\"s\",\"pos\":0,\"tokens\":[1,403,407]}",
                             out, sizeof out), 200);
    assert_non_null(strstr(out, "\"session\":\"s\",")); /* the client's own id, not the server's name for it */
    /* Key B naming the same id reaches no session of A's: unknown (409 holding 0), and DELETE finds nothing. */
    assert_int_equal(request(port, "POST", "/v1/route/next", b, "{\"session\":\"s\",\"pos\":3,\"tokens\":[261]}", out,
                             sizeof out), 409);
    assert_non_null(strstr(out, "\"pos\":0"));
    assert_int_equal(request(port, "DELETE", "/v1/route/sessions/s", b, NULL, out, sizeof out), 404);
    /* A's session is intact; B's own "s" is another session. */
    assert_int_equal(request(port, "POST", "/v1/route/next", a, "{\"session\":\"s\",\"pos\":3,\"tokens\":[261]}", out,
                             sizeof out), 200);
    assert_int_equal(request(port, "POST", "/v1/route/next", b, "{\"session\":\"s\",\"pos\":0,\"tokens\":[1]}", out,
                             sizeof out), 200);
    assert_int_equal(request(port, "DELETE", "/v1/route/sessions/s", a, NULL, out, sizeof out), 204);
    assert_int_equal(request(port, "DELETE", "/v1/route/sessions/s", a, NULL, out, sizeof out), 404);
    assert_int_equal(request(port, "DELETE", "/v1/route/sessions/s", b, NULL, out, sizeof out), 204);
    tr_server_free(srv);
}

/* tokroute_tokens_evaluated_total from /metrics. */
static long tokens_evaluated(int port, const char *auth) {
    char out[16384];
    assert_int_equal(request(port, "GET", "/metrics", auth, NULL, out, sizeof out), 200);
    const char *at = strstr(out, "\ntokroute_tokens_evaluated_total ");
    assert_non_null(at);
    return strtol(at + 33, NULL, 10);
}

static void test_hang_up_ends_completion(void **state) {
    tr_server_params p = tr_server_default_params();
    p.n_ctx = 512;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    const long before = tokens_evaluated(port, NULL);
    /* A non-streamed completion of 500 tokens whose client hangs up at once. */
    const int fd = connect_to(port);
    const char body[] = "{\"prompt\":[1],\"max_tokens\":500,\"temperature\":0}";
    char head[256];
    snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\n" JSON_HEAD "Content-Length: %zu\r\n\r\n%s",
             sizeof body - 1, body);
    raw_send_all(fd, head, strlen(head));
    usleep(20 * 1000); /* generating by now */
    raw_reset(fd); /* a hang-up: a reset (a FIN alone could be a half-close, see test_half_close) */
    usleep(1500 * 1000); /* far longer than 500 tokens take */
    const long spent = tokens_evaluated(port, NULL) - before;
    print_message("the abandoned completion evaluated %ld tokens of 501\n", spent);
    assert_true(spent < 300);
    /* The same completion with its client waiting runs to the end. */
    char out[65536];
    assert_int_equal(request(port, "POST", "/v1/completions", NULL, body, out, sizeof out), 200);
    assert_true(tokens_evaluated(port, NULL) - before - spent >= 400);
    tr_server_free(srv);
}

/* A client that shuts its sending side after its request (shutdown(SHUT_WR)) still reads: it gets its whole reply,
 * a completion of 200 tokens that runs while its FIN is there, and the session protocol's answer; nothing is
 * cancelled (the server evaluates every token). */
static void test_half_close(void **state) {
    tr_server_params p = tr_server_default_params();
    p.n_ctx = 512;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    const long before = tokens_evaluated(port, NULL);
    const char *bodies[] = {"{\"prompt\":[1],\"max_tokens\":200,\"temperature\":0}",
                            "{\"session\":\"half\",\"pos\":0,\"tokens\":[1,403,407]}"};
    const char *paths[] = {"/v1/completions", "/v1/route/next"};
    for (int i = 0; i < 2; i++) {
        const int fd = connect_to(port);
        char head[512];
        snprintf(head, sizeof head, "POST %s HTTP/1.1\r\n" JSON_HEAD ""
                 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", paths[i], strlen(bodies[i]), bodies[i]);
        raw_send_all(fd, head, strlen(head));
        shutdown(fd, SHUT_WR);
        static char out[65536];
        assert_int_equal(raw_read_reply(fd, out, sizeof out, 10000), 200);
        close(fd);
        assert_non_null(strstr(out, i == 0 ? "\"finish_reason\":\"length\"" : "\"token\":"));
    }
    assert_true(tokens_evaluated(port, NULL) - before >= 200);
    tr_server_free(srv);
}

/* One raw request on a fresh connection: the status, the reply in out. */
static int raw_request(int port, const char *text, char *out, size_t cap) {
    const int fd = connect_to(port);
    raw_send_all(fd, text, strlen(text));
    const int status = raw_read_reply(fd, out, cap, 10000);
    close(fd);
    return status;
}

/* What a web page on another site can send is refused: a Host this server is not (DNS rebinding) is a 403 naming
 * it, on every route; a POST body not declared application/json (a "simple" cross-site request, no preflight) is a
 * 415. The loopback names and --allowed-host names are answered; a 401 says Bearer (WWW-Authenticate). */
static void test_host_and_content_type(void **state) {
    tr_server_params p = tr_server_default_params();
    const char *names[] = {"tokroute.lan"};
    p.allowed_hosts = names;
    p.n_allowed_hosts = 1;
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    char req[512], out[4096];
    const char *refused[] = {"evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost:80x", "[::1"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        snprintf(req, sizeof req, "POST /v1/route/next HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 "Content-Length: 40\r\n\r\n{\"session\":\"s\",\"pos\":0,\"tokens\":[1]}    ", refused[i]);
        assert_int_equal(raw_request(port, req, out, sizeof out), 403);
        assert_non_null(strstr(out, "\"code\":\"forbidden_host\""));
        snprintf(req, sizeof req, "GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", refused[i]);
        assert_int_equal(raw_request(port, req, out, sizeof out), 403);
    }
    assert_non_null(strstr(out, "Host: [::1"));
    char answered[4][64];
    snprintf(answered[0], sizeof answered[0], "127.0.0.1:%d", port);
    snprintf(answered[1], sizeof answered[1], "LocalHost:%d", port);
    snprintf(answered[2], sizeof answered[2], "[::1]:%d", port);
    snprintf(answered[3], sizeof answered[3], "tokroute.lan:%d", port);
    for (int i = 0; i < 4; i++) {
        snprintf(req, sizeof req, "GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", answered[i]);
        assert_int_equal(raw_request(port, req, out, sizeof out), 200);
    }
    const char *types[] = {NULL, "text/plain", "application/x-www-form-urlencoded", "application/jsonp"};
    for (int i = 0; i < 4; i++) {
        snprintf(req, sizeof req, "POST /v1/route/next HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%sContent-Length: 40\r\n"
                 "\r\n{\"session\":\"s\",\"pos\":0,\"tokens\":[1]}    ", types[i] ? "Content-Type: " : "",
                 types[i] ? types[i] : "", types[i] ? "\r\n" : "");
        assert_int_equal(raw_request(port, req, out, sizeof out), 415);
        assert_non_null(strstr(out, "application/json"));
    }
    snprintf(req, sizeof req, "POST /v1/route/next HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: Application/JSON; "
             "charset=utf-8\r\nContent-Length: 40\r\n\r\n{\"session\":\"s\",\"pos\":0,\"tokens\":[1]}    ");
    assert_int_equal(raw_request(port, req, out, sizeof out), 200);
    tr_server_free(srv);

    p = tr_server_default_params();
    p.api_key = "k1";
    srv = start(p);
    assert_int_equal(raw_request(tr_server_port(srv), "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", out,
                                 sizeof out), 401);
    assert_non_null(strcasestr(out, "\r\nWWW-Authenticate: Bearer\r\n"));
    tr_server_free(srv);
}

/* A port in use is said in words through the library's message (not libmicrohttpd's log line). */
static void test_busy_port(void **state) {
    tr_server *a = start(tr_server_default_params());
    tr_server_params p = tr_server_default_params();
    p.port = tr_server_port(a);
    p.n_threads = 1;
    tr_server *b = NULL;
    assert_int_equal(tr_server_start(model, &p, &b), TR_ERR_NETWORK);
    char expected[64];
    snprintf(expected, sizeof expected, "port %d on 127.0.0.1 is in use", p.port);
    assert_non_null(strstr(tr_last_error(), expected));
    tr_server_free(a);
}

static void test_metrics_key(void **state) {
    tr_server_params p = tr_server_default_params();
    p.api_key = "api";
    p.metrics_key = "scrape";
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    char out[16384];
    assert_int_equal(request(port, "GET", "/metrics", "Bearer api", NULL, out, sizeof out), 401);
    assert_non_null(strstr(out, "metrics key"));
    assert_int_equal(request(port, "GET", "/metrics", NULL, NULL, out, sizeof out), 401);
    assert_int_equal(request(port, "GET", "/metrics", "Bearer scrape", NULL, out, sizeof out), 200);
    assert_non_null(strstr(out, "tokroute_requests_total"));
    assert_int_equal(request(port, "GET", "/v1/models", "Bearer scrape", NULL, out, sizeof out), 401);
    assert_int_equal(request(port, "GET", "/v1/models", "Bearer api", NULL, out, sizeof out), 200);
    tr_server_free(srv);
}

/* ---------------------------------------------------------------- load and faults */

typedef struct honest {
    int port, index, ok, calls;
    int32_t seq[80];
} honest;

static int32_t greedy_after(const int32_t *tokens, int32_t n) { return server_fixture_greedy(model, tokens, n); }

/* A device: one keep-alive connection, one token per call at the server's pos. */
static void *honest_main(void *arg) {
    honest *h = arg;
    int fd = connect_to(h->port);
    int32_t n = 2;
    h->seq[0] = 1;
    h->seq[1] = 2 + h->index * 37;
    for (int k = 0; k < h->calls; k++, h->ok++) {
        char body[256], req[512], out[4096];
        const int32_t from = k == 0 ? 0 : n - 1;
        int at = snprintf(body, sizeof body, "{\"session\":\"honest-%d\",\"pos\":%d,\"tokens\":[", h->index, from);
        for (int32_t i = from; i < n; i++) at += snprintf(body + at, sizeof body - (size_t)at, "%s%d", i > from ? "," : "", h->seq[i]);
        snprintf(body + at, sizeof body - (size_t)at, "]}");
        snprintf(req, sizeof req, "POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Content-Length: %zu\r\n\r\n%s",
                 strlen(body), body);
        raw_send_all(fd, req, strlen(req));
        if (raw_read_reply(fd, out, sizeof out, 10000) != 200) break;
        const char *tok = strstr(out, "\"token\":");
        if (!tok) break;
        h->seq[n++] = (int32_t)strtol(tok + 8, NULL, 10);
    }
    close(fd);
    return NULL;
}

static atomic_int attacking;

typedef struct poster {
    int port, posts, wrong, busy;
} poster;

/* An attacker's request got the status expected, or a 503 with Retry-After (its address's connections, which
 * honest clients here share, at the limit: the half-sent ones of the loop count until the server sees them closed). */
static bool refused(int status, int expected, const char *reply, int *busy) {
    if (status == 503 && strcasestr(reply, "Retry-After")) return ++*busy, true;
    return status == expected;
}

/* Posts a 600 kB prompt of ids (read, then refused), announces a session-protocol body far beyond its limit
 * (refused on its headers) and leaves half a body behind, until the honest clients are done. */
static void *poster_main(void *arg) {
    poster *ps = arg;
    const size_t n = 300000;
    char *body = malloc(n * 2 + 64), reply[2048];
    size_t at = (size_t)sprintf(body, "{\"prompt\":[");
    for (size_t i = 0; i < n; i++) at += (size_t)sprintf(body + at, "%s1", i ? "," : "");
    strcpy(body + at, "]}");
    const char big[] = "POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Content-Length: 600000\r\n\r\n";
    const char half[] = "POST /v1/route/next HTTP/1.1\r\n" JSON_HEAD "Content-Length: 1000\r\n\r\n{\"session\"";
    while (attacking) {
        ps->wrong += !refused(request(ps->port, "POST", "/v1/completions", NULL, body, reply, sizeof reply), 400,
                              reply, &ps->busy);
        int fd = connect_to(ps->port);
        raw_send_all(fd, big, sizeof big - 1);
        ps->wrong += !refused(raw_read_reply(fd, reply, sizeof reply, 5000), 413, reply, &ps->busy);
        close(fd);
        fd = connect_to(ps->port);
        raw_send_all(fd, half, sizeof half - 1);
        close(fd);
        ps->posts++;
    }
    free(body);
    return NULL;
}

static void test_load_and_faults(void **state) {
    tr_server_params p = tr_server_default_params();
    p.request_timeout_s = 2;
    p.max_connections_per_ip = 1000; /* every client here is 127.0.0.1 */
    tr_server *srv = start(p);
    const int port = tr_server_port(srv);
    enum { N_IDLE = 300, N_HONEST = 4, N_POSTERS = 2 };
    int idle[N_IDLE];
    for (int i = 0; i < N_IDLE; i++) idle[i] = connect_to(port);
    attacking = 1;
    pthread_t posters[N_POSTERS], devices[N_HONEST];
    poster ps[N_POSTERS];
    for (int i = 0; i < N_POSTERS; i++) {
        ps[i] = (poster){.port = port};
        pthread_create(&posters[i], NULL, poster_main, &ps[i]);
    }
    honest h[N_HONEST];
    for (int i = 0; i < N_HONEST; i++) {
        h[i] = (honest){.port = port, .index = i, .calls = 60};
        pthread_create(&devices[i], NULL, honest_main, &h[i]);
    }
    char out[2048];
    int health_ok = 0;
    for (int i = 0; i < 5; i++) {
        health_ok += request(port, "GET", "/health", NULL, NULL, out, sizeof out) == 200;
        usleep(100 * 1000);
    }
    for (int i = 0; i < N_HONEST; i++) pthread_join(devices[i], NULL);
    attacking = 0;
    for (int i = 0; i < N_POSTERS; i++) pthread_join(posters[i], NULL);
    for (int i = 0; i < N_IDLE; i++) close(idle[i]);
    assert_int_equal(health_ok, 5);
    for (int i = 0; i < N_POSTERS; i++) {
        assert_true(ps[i].posts > 0);
        assert_int_equal(ps[i].wrong, 0);
        assert_true(ps[i].busy < ps[i].posts); /* most answered by what they sent, not by the limit */
    }
    for (int i = 0; i < N_HONEST; i++) {
        assert_int_equal(h[i].ok, h[i].calls);
        for (int32_t k = 2; k < h[i].calls + 2; k++) assert_int_equal(h[i].seq[k], greedy_after(h[i].seq, k));
    }
    tr_server_free(srv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_judged_before_the_body), cmocka_unit_test(test_huge_arrays),
        cmocka_unit_test(test_connection_limits),      cmocka_unit_test(test_request_deadline),
        cmocka_unit_test(test_closed_peers),
        cmocka_unit_test(test_private_sessions),       cmocka_unit_test(test_owners),
        cmocka_unit_test(test_hang_up_ends_completion), cmocka_unit_test(test_half_close),
        cmocka_unit_test(test_host_and_content_type), cmocka_unit_test(test_busy_port),
        cmocka_unit_test(test_metrics_key),
        cmocka_unit_test(test_load_and_faults),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
