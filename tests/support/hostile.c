/* hostile.c — hostile model files for the load tests (hostile.h). */
#include "support/hostile.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "support/fixtures.h"
#include "support/gguf_builder.h"

static bool skip_kv(const char *key, void *user) {
    const hostile_change *c = user;
    return c->drop_key && strcmp(key, c->drop_key) == 0;
}

static bool skip_tensor(const char *name, void *user) {
    const hostile_change *c = user;
    return c->drop_tensor && strcmp(name, c->drop_tensor) == 0;
}

const char *hostile_rewrite(const char *base, const hostile_change *c) {
    static char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(base, &g), TR_OK);
    const rewrite_hooks hooks = {skip_kv, skip_tensor, c->extra, (void *)c};
    assert_int_equal(gguf_rewrite(g, path, &hooks), TR_OK);
    tr_gguf_close(g);
    return path;
}

tr_model *hostile_load(const char *path, tr_status *st) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    *st = tr_model_load(path, &mp, &m);
    return m;
}

void hostile_expect_fail(const char *base, const hostile_change *c, tr_status status, const char *needle) {
    const char *path = hostile_rewrite(base, c);
    tr_status st;
    tr_model *m = hostile_load(path, &st);
    const char *msg = tr_last_error();
    fprintf(stderr, "  %s\n", msg);
    assert_null(m);
    assert_int_equal(st, status);
    assert_non_null(strstr(msg, needle));
    assert_non_null(strstr(msg, path));
    remove(path);
}
