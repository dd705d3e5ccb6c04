/* test_server_api.c — the public server API: tr_server_start on a free port (port 0) reports the port it bound and
 * answers HTTP there (libcurl), refuses bad parameters with TR_ERR_ARG and a taken port with TR_ERR_NETWORK, reads
 * TLS files or fails with TR_ERR_IO, and stop/free are idempotent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "support/fixtures.h"
#include "tokroute.h"

static tr_model *model;

static int setup(void **state) {
    tr_model_params mp = tr_model_default_params();
    return tr_model_load(shared_path("models/stories260K.gguf"), &mp, &model) == TR_OK ? 0 : -1;
}

static int teardown(void **state) {
    tr_model_free(model);
    return 0;
}

static size_t sink(char *d, size_t sz, size_t n, void *u) {
    strncat((char *)u, d, sz * n < 1000 ? sz * n : 1000);
    return sz * n;
}

static long get(int port, const char *path, char *body) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    body[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    return status;
}

static void test_start_stop(void **state) {
    tr_server_params p = tr_server_default_params();
    assert_string_equal(p.host, "127.0.0.1");
    p.port = 0;
    p.n_threads = 1;
    tr_server *srv = NULL;
    assert_int_equal(tr_server_start(model, &p, &srv), TR_OK);
    const int port = tr_server_port(srv);
    assert_true(port > 0 && port < 65536);
    char body[1100];
    assert_int_equal(get(port, "/health", body), 200);
    assert_non_null(strstr(body, "\"n_vocab\":512"));
    /* The same port again: taken. */
    tr_server *second = NULL;
    p.port = port;
    assert_int_equal(tr_server_start(model, &p, &second), TR_ERR_NETWORK);
    assert_null(second);
    tr_server_stop(srv);
    tr_server_stop(srv);
    assert_int_equal(get(port, "/health", body), 0); /* no longer listening */
    tr_server_free(srv);
    tr_server_free(NULL);
}

static void test_bad_params(void **state) {
    tr_server *srv = NULL;
    tr_server_params p = tr_server_default_params();
    p.port = 0;
    assert_int_equal(tr_server_start(NULL, &p, &srv), TR_ERR_ARG);
    p.port = 70000;
    assert_int_equal(tr_server_start(model, &p, &srv), TR_ERR_ARG);
    p = tr_server_default_params();
    p.port = 0;
    p.host = "localhost:80";
    assert_int_equal(tr_server_start(model, &p, &srv), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "localhost:80"));
    p.host = "127.0.0.1";
    p.max_sessions = 0;
    assert_int_equal(tr_server_start(model, &p, &srv), TR_ERR_ARG);
    p = tr_server_default_params();
    p.port = 0;
    p.tls_cert_path = "cert.pem";
    assert_int_equal(tr_server_start(model, &p, &srv), TR_ERR_ARG); /* a certificate without a key */
    p.tls_key_path = "/nonexistent/key.pem";
    p.tls_cert_path = "/nonexistent/cert.pem";
    assert_int_equal(tr_server_start(model, &p, &srv), TR_ERR_IO);
    assert_null(srv);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_stop),
        cmocka_unit_test(test_bad_params),
    };
    const int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
