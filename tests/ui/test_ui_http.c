/* test_ui_http.c — the device's server (tr_ui) against clients that do not behave like libcurl, over raw loopback
 * sockets: 80 connections each holding half a request header lock nobody out (another address's /api/info and a
 * generation are answered at once: the ui runs on serve's connection layer, not a thread per connection); a
 * client that shuts its sending side after its request (shutdown(SHUT_WR)) still gets its whole reply and its
 * event stream; a Host the server does not answer to is a 403 and an --allowed-host name is served; a POST not
 * declared application/json is a 415; a 401 says WWW-Authenticate: Bearer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/fixtures.h"
#include "support/raw_http.h"
#include "support/ui_fixture.h"
#include "tokroute.h"

#define N_HOLDERS 80

static int port_of(const tr_ui *ui) { return (int)tr_ui_port(ui); }

/* METHOD path with a JSON body (NULL: none) from address from, on a fresh connection closed after the reply:
 * the status, the reply in out; half_close shuts the sending side once the request is out. */
static int call(const tr_ui *ui, const char *from, const char *method, const char *path, const char *host,
                const char *extra_headers, const char *body, bool half_close, char *out, size_t cap) {
    const int fd = raw_connect(from, port_of(ui));
    assert_true(fd >= 0);
    char head[1024];
    snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n",
             method, path, host, extra_headers, body ? strlen(body) : 0);
    raw_send_all(fd, head, strlen(head));
    if (body) raw_send_all(fd, body, strlen(body));
    if (half_close) shutdown(fd, SHUT_WR);
    const int status = raw_read_reply(fd, out, cap, 30000);
    close(fd);
    return status;
}

static const char json[] = "Content-Type: application/json\r\n";

static void test_lock_out(void **state) {
    tr_ui_params p = ui_fixture_params();
    /* Beyond twice the per-address limit (+ 8) connections are refused at accept; 40 keeps all 80 accepted. */
    p.max_connections_per_ip = 40;
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    int holders[N_HOLDERS];
    for (int i = 0; i < N_HOLDERS; i++) { /* half a header each, never finished */
        holders[i] = raw_connect(NULL, port_of(ui));
        assert_true(holders[i] >= 0);
        raw_send_all(holders[i], "GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a", 50);
    }
    usleep(300 * 1000); /* all accepted */
    static char out[1 << 16];
    double t0 = raw_now_ms();
    assert_int_equal(call(ui, "127.0.0.2", "GET", "/api/info", "127.0.0.1", "", NULL, false, out, sizeof out), 200);
    const double info_ms = raw_now_ms() - t0;
    t0 = raw_now_ms();
    assert_int_equal(call(ui, "127.0.0.2", "POST", "/v1/completions", "127.0.0.1", json,
                          "{\"prompt\":\"Once\",\"mode\":\"slm\",\"max_tokens\":3}", false, out, sizeof out), 200);
    assert_non_null(strstr(out, "\"completion_tokens\":3"));
    const double gen_ms = raw_now_ms() - t0;
    print_message("with %d half-sent connections: /api/info in %.1f ms, a generation in %.1f ms\n", N_HOLDERS,
                  info_ms, gen_ms);
    assert_true(info_ms < 2000);
    assert_true(gen_ms < 5000);
    /* The holders' own address is over its limit: told to come back (503, Retry-After), never left hanging. */
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "127.0.0.1", "", NULL, false, out, sizeof out), 503);
    assert_non_null(strcasestr(out, "\r\nRetry-After: "));
    for (int i = 0; i < N_HOLDERS; i++) close(holders[i]);
    tr_ui_stop(ui);
}

static void test_half_close(void **state) {
    tr_ui_params p = ui_fixture_params();
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    static char out[1 << 16];
    assert_int_equal(call(ui, NULL, "POST", "/v1/completions", "127.0.0.1", json,
                          "{\"prompt\":\"Once upon a time\",\"mode\":\"slm\",\"max_tokens\":40}", true, out,
                          sizeof out), 200);
    assert_non_null(strstr(out, "\"completion_tokens\":40"));
    assert_int_equal(call(ui, NULL, "POST", "/api/generate", "127.0.0.1", json,
                          "{\"prompt\":\"Once upon a time\",\"mode\":\"small_only\",\"max_tokens\":40}", true, out,
                          sizeof out), 200);
    assert_non_null(strstr(out, "event: done\n"));
    assert_non_null(strstr(out, "\"stop\":\"length\""));
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "127.0.0.1", "", NULL, true, out, sizeof out), 200);
    tr_ui_stop(ui);
}

static void test_host_type_and_key(void **state) {
    tr_ui_params p = ui_fixture_params();
    const char *names[] = {"device.lan"};
    p.allowed_hosts = names;
    p.n_allowed_hosts = 1;
    p.api_key = "k";
    tr_ui *ui;
    assert_int_equal(tr_ui_start(&p, &ui), TR_OK);
    static char out[1 << 16];
    const char *key = "Authorization: Bearer k\r\n";
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "evil.example", key, NULL, false, out, sizeof out), 403);
    assert_non_null(strstr(out, "evil.example"));
    assert_int_equal(call(ui, NULL, "GET", "/", "evil.example", "", NULL, false, out, sizeof out), 403);
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "device.lan:8080", key, NULL, false, out, sizeof out), 200);
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "DEVICE.lan", key, NULL, false, out, sizeof out), 200);
    assert_int_equal(call(ui, NULL, "POST", "/api/cancel", "127.0.0.1", "Content-Type: text/plain\r\nAuthorization: "
                          "Bearer k\r\n", "{\"id\":1}", false, out, sizeof out), 415);
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "127.0.0.1", "", NULL, false, out, sizeof out), 401);
    assert_non_null(strcasestr(out, "\r\nWWW-Authenticate: Bearer\r\n"));
    assert_int_equal(call(ui, NULL, "GET", "/api/info", "127.0.0.1", "Authorization: bearer  k\r\n", NULL, false,
                          out, sizeof out), 200);
    tr_ui_stop(ui);
    const char *bad[] = {"device.lan:80"};
    p.allowed_hosts = bad;
    assert_int_equal(tr_ui_start(&p, &ui), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "device.lan:80"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_out),
        cmocka_unit_test(test_half_close),
        cmocka_unit_test(test_host_type_and_key),
    };
    return cmocka_run_group_tests(tests, ui_fixture_setup, ui_fixture_teardown);
}
