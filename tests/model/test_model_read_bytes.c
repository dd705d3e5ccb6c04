/* test_model_read_bytes.c — tr_model_info.token_read_bytes, the weight bytes one decoded token reads (decode's
 * bandwidth figure in `tokroute bench` and bench/compare-llamacpp.sh): every tensor of the file whole, except the
 * row-lookup tables, of which a token reads one row — token_embd when the file has its own output matrix, gemma4's
 * per-layer token embeddings. Checked by hand on `tokroute synth` files: llama "tiny" (untied: token_embd is a
 * lookup), gemma4-tiny (tied: token_embd is the output matrix, read whole; per_layer_token_embd a lookup of
 * 6 × 64 values a row), and gemma4-tiny rewritten with an output.weight (both tables lookups). Q8_0: a row of n
 * values is n / 32 blocks of 34 bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "support/fixtures.h"
#include "support/gguf_builder.h"
#include "tokroute.h"

static uint64_t q8_row(uint64_t n) { return n / 32 * 34; }

static const char *synth(const char *shape) {
    static char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    tr_synth_params sp = tr_synth_default_params();
    sp.shape = shape;
    sp.type = TR_TYPE_Q8_0;
    if (tr_synth_write(&sp, path) != TR_OK) fail_msg("synth %s: %s", shape, tr_last_error());
    return path;
}

/* The bytes of all the file's tensors, and of the one named `name` (0 if absent). */
static uint64_t file_tensor_bytes(const char *path, const char *name, uint64_t *named) {
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    uint64_t total = 0;
    *named = 0;
    for (int64_t i = 0; i < tr_gguf_n_tensors(g); i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
        total += t->n_bytes;
        if (strcmp(t->name, name) == 0) *named = t->n_bytes;
    }
    tr_gguf_close(g);
    return total;
}

static tr_model_info load_info(const char *path) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *m = NULL;
    if (tr_model_load(path, &mp, &m) != TR_OK) fail_msg("%s: %s", path, tr_last_error());
    const tr_model_info in = *tr_model_get_info(m);
    tr_model_free(m);
    return in;
}

static void test_llama_untied(void **state) {
    (void)state;
    const char *path = synth("tiny"); /* n_embd 64, vocabulary 512, its own output matrix */
    uint64_t embd;
    const uint64_t total = file_tensor_bytes(path, "token_embd.weight", &embd);
    const tr_model_info in = load_info(path);
    assert_false(in.tied_output);
    assert_int_equal(embd, 512 * q8_row(64));
    assert_int_equal(in.weight_bytes, total);
    assert_int_equal(in.token_read_bytes, total - 512 * q8_row(64) + q8_row(64));
    remove(path);
}

static void test_gemma4_tied(void **state) {
    (void)state;
    const char *path = synth("gemma4-tiny"); /* 6 layers, per-layer inputs of 64, vocabulary 512, tied */
    uint64_t pl;
    const uint64_t total = file_tensor_bytes(path, "per_layer_token_embd.weight", &pl);
    const tr_model_info in = load_info(path);
    assert_true(in.tied_output);
    assert_int_equal(pl, 512 * q8_row(6 * 64));
    assert_int_equal(in.weight_bytes, total);
    assert_int_equal(in.token_read_bytes, total - 512 * q8_row(6 * 64) + q8_row(6 * 64));
    remove(path);
}

/* gemma4-tiny's token_embd copied as its own output.weight. */
static tr_status add_output(tr_gguf_writer *w, void *user) {
    const tr_gguf *g = user;
    const tr_gguf_tensor *t = tr_gguf_tensor_at(g, tr_gguf_find_tensor(g, "token_embd.weight"));
    return tr_gguf_writer_add_tensor(w, "output.weight", t->type, t->n_dims, t->ne, t->data, NULL);
}

static void test_gemma4_untied(void **state) {
    (void)state;
    const char *base = synth("gemma4-tiny");
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(base, &g), TR_OK);
    const rewrite_hooks hooks = {.extra = add_output, .user = g};
    assert_int_equal(gguf_rewrite(g, path, &hooks), TR_OK);
    tr_gguf_close(g);
    uint64_t embd;
    const uint64_t total = file_tensor_bytes(path, "token_embd.weight", &embd);
    const tr_model_info in = load_info(path);
    assert_false(in.tied_output);
    assert_int_equal(embd, 512 * q8_row(256));
    assert_int_equal(in.weight_bytes, total);
    assert_int_equal(in.token_read_bytes,
                     total - 512 * q8_row(256) + q8_row(256) - 512 * q8_row(6 * 64) + q8_row(6 * 64));
    remove(base);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_untied),
        cmocka_unit_test(test_gemma4_tied),
        cmocka_unit_test(test_gemma4_untied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
