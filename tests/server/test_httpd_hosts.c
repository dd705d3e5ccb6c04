/* test_httpd_hosts.c — which Host headers the HTTP layer of serve and ui answers (httpd_host_allowed), for each kind
 * of address it may be bound to, so that a web page on another name resolving to the server (DNS rebinding) is
 * refused: bound to loopback, only the loopback names, the address and --allowed-host names; bound to every
 * address without a key, also IP literals but no other name; with a key off loopback, any Host (the key protects).
 * The servers themselves are tested on 127.0.0.1 only (test_server_hostile, test_ui_http). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/httpd.h"

static const char *const names[] = {"device.lan"};

static void test_loopback(void **state) {
    const httpd_hosts h = {.host = "127.0.0.1", .bound = "127.0.0.1", .loopback = true, .allowed = names,
                           .n_allowed = 1};
    const char *yes[] = {NULL, "127.0.0.1", "127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:8080", "[::1]",
                         "127.0.0.2", "device.lan", "Device.LAN:443"};
    const char *no[] = {"evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.", "localhost:80x",
                        "localhost:", "[::1", "[::1]x", "::1", "10.0.0.1", "device.lan.evil", "", ":8080",
                        "localhost:123456", "local host", "[::1 ]"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) assert_true(httpd_host_allowed(&h, yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) assert_false(httpd_host_allowed(&h, no[i]));
    const httpd_hosts keyed = {.host = "localhost", .bound = "127.0.0.1", .loopback = true, .keyed = true};
    assert_false(httpd_host_allowed(&keyed, "evil.example")); /* on loopback a key changes nothing */
    assert_true(httpd_host_allowed(&keyed, "localhost:9"));
}

static void test_every_address(void **state) {
    httpd_hosts h = {.host = "0.0.0.0", .bound = "0.0.0.0", .any = true, .allowed = names, .n_allowed = 1};
    const char *yes[] = {"192.168.1.20:8080", "10.1.2.3", "[fe80::1]:80", "localhost", "127.0.0.1", "device.lan"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) assert_true(httpd_host_allowed(&h, yes[i]));
    assert_false(httpd_host_allowed(&h, "evil.example"));
    assert_false(httpd_host_allowed(&h, "my-gpu-box:8080")); /* a name needs --allowed-host without a key */
    h.keyed = true;
    assert_true(httpd_host_allowed(&h, "my-gpu-box:8080"));
    assert_false(httpd_host_allowed(&h, "a b")); /* still a well-formed Host */
}

static void test_one_address(void **state) {
    httpd_hosts h = {.host = "192.168.1.20", .bound = "192.168.1.20"};
    assert_true(httpd_host_allowed(&h, "192.168.1.20:8080"));
    assert_false(httpd_host_allowed(&h, "localhost")); /* not bound to loopback */
    assert_false(httpd_host_allowed(&h, "10.0.0.1"));
    assert_false(httpd_host_allowed(&h, "evil.example"));
    h.keyed = true;
    assert_true(httpd_host_allowed(&h, "evil.example"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback),
        cmocka_unit_test(test_every_address),
        cmocka_unit_test(test_one_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
