/* test_http_params.c — the checks both HTTP clients (libcurl's and the browser's) make on a remote backend's
 * parameters before creating a client (http_params_check, http_common.c): each refusal names what is wrong, and
 * http_client_create refuses the same parameters without creating anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "transport/http.h"

static void refused(const tr_remote_params *p, const char *words) {
    assert_int_equal(http_params_check(p), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), words));
    http_client *c = (http_client *)p; /* any non-NULL value: create must reset it */
    assert_int_equal(http_client_create(p, &c), TR_ERR_ARG);
    assert_null(c);
}

static void test_bad_parameters_are_refused(void **state) {
    (void)state;
    tr_remote_params p = tr_remote_default_params();
    p.url = "http://127.0.0.1:1";
    assert_int_equal(http_params_check(&p), TR_OK);
    p.url = "https://example.invalid";
    assert_int_equal(http_params_check(&p), TR_OK);

    assert_int_equal(http_params_check(NULL), TR_ERR_ARG);
    p.url = "";
    refused(&p, "no URL");
    p.url = "ftp://127.0.0.1/";
    refused(&p, "must start with http:// or https://");
    p.url = "http://127.0.0.1:1";
    p.timeout_ms = 0;
    refused(&p, "timeout_ms");
    p = tr_remote_default_params();
    p.url = "http://127.0.0.1:1";
    p.retries = 101;
    refused(&p, "retries in 0..100");
    p.retries = 0;
    p.api_key = "key\r\nX-Injected: 1";
    refused(&p, "line break");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bad_parameters_are_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
