/* test_tokenizer_pre_llamacpp.c — the pre-tokenizers the families added through the architecture interface bring,
 * against llama.cpp itself (scripts/llamacpp.sh's build, de3ff81).
 *
 *   lfm2 (Liquid LFM2): llama.cpp's own byte-level BPE fixture (its source tree's models/ggml-vocab-llama-bpe.gguf)
 *   rewritten to declare tokenizer.ggml.pre = "lfm2"; every text of the shared corpus, of that fixture's .inp and
 *   of the shared edge texts must give the ids llama.cpp gives on the same file (scripts/llamacpp_tokenize_ref.c,
 *   compiled here: llama-tokenize's llama_tokenize call, without BOS, parse_special off and on), and llama-tokenize
 *   itself must print the same ids for a sample text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/gguf_builder.h"
#include "support/llamacpp_ref.h"
#include "tokenizer/tok_fixture.h"
#include "tokroute.h"

static llamacpp_ref llama;

static int setup(void **state) {
    (void)state;
    return llamacpp_ref_setup(&llama, "pre", "llama-tokenize", "scripts/llamacpp_tokenize_ref.c");
}

static int teardown(void **state) {
    (void)state;
    return llamacpp_ref_teardown(&llama);
}

static bool keep_all(const char *name, void *user) {
    (void)name, (void)user;
    return false;
}

static tr_status set_pre(tr_gguf_writer *w, void *user) {
    return tr_gguf_writer_set_str(w, "tokenizer.ggml.pre", (const char *)user);
}

/* A copy of llama.cpp's fixture `vocab` declaring pre-tokenizer `pre`, in the work folder; its path. */
static const char *with_pre(const char *vocab, const char *pre) {
    static char out[512];
    char src[768];
    snprintf(src, sizeof src, "%s/../../src/models/%s", llama.bin, vocab);
    snprintf(out, sizeof out, "%s/%s.gguf", llama.work, pre);
    tr_gguf *g = NULL;
    if (tr_gguf_open(src, &g) != TR_OK) fail_msg("%s: %s", src, tr_last_error());
    const rewrite_hooks hooks = {keep_all, keep_all, set_pre, (void *)pre};
    assert_int_equal(gguf_rewrite(g, out, &hooks), TR_OK);
    tr_gguf_close(g);
    return out;
}

/* llama.cpp's ids for the texts of `inp` on `vocab`, then ours: every text must match. */
static void check_texts(const tr_vocab *v, const char *vocab, const char *inp, bool parse_special) {
    char out[600], cmd[2048];
    snprintf(out, sizeof out, "%s/ref-%d.out", llama.work, (int)parse_special);
    snprintf(cmd, sizeof cmd, "%s %s %s %s %d", llama.exe, vocab, inp, out, (int)parse_special);
    assert_int_equal(run_command(cmd), 0);
    long total = 0;
    const long ok = fx_check_pair(v, inp, inp, out, parse_special, &total);
    fprintf(stderr, "%s (special %d): %ld/%ld texts match llama.cpp\n", inp, (int)parse_special, ok, total);
    assert_true(total > 0 && ok == total);
}

static void lfm2_pre(void **state) {
    (void)state;
    const char *vocab = with_pre("ggml-vocab-llama-bpe.gguf", "lfm2");
    tr_vocab *v = NULL;
    if (tr_vocab_load(vocab, &v) != TR_OK) fail_msg("%s: %s", vocab, tr_last_error());
    char inp[768];
    snprintf(inp, sizeof inp, "%s/../../src/models/ggml-vocab-llama-bpe.gguf.inp", llama.bin);
    const char *texts[] = {TR_SHARED_DIR "/tokenizer/corpus.inp", inp, TR_SHARED_DIR "/tokenizer/ggml-vocab-gpt-2.edge.inp"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int special = 0; special < 2; special++) check_texts(v, vocab, texts[i], special);
    /* llama-tokenize itself, on one text (from a file: no shell quoting in the way) */
    static const char sample[] = "Hello world!  It's 2026: LFM2's   tokens\n\n  123456 ünïcödé";
    char cmd[2048], line[4096] = "", sample_path[600];
    snprintf(sample_path, sizeof sample_path, "%s/sample.txt", llama.work);
    FILE *f = fopen(sample_path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(sample, 1, strlen(sample), f), strlen(sample));
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "%s/llama-tokenize -m %s -f %s --ids --no-bos --log-disable 2>/dev/null", llama.bin,
             vocab, sample_path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    const bool got_line = fgets(line, sizeof line, p) != NULL;
    assert_int_equal(pclose(p), 0);
    assert_true(got_line);
    tr_tokenize_params tp = tr_tokenize_default_params();
    tp.add_special = false;
    int32_t ids[128], n = 0;
    assert_int_equal(tr_tokenize(v, sample, strlen(sample), &tp, ids, 128, &n), TR_OK);
    char ours[4096] = "[";
    for (int32_t i = 0; i < n; i++)
        snprintf(ours + strlen(ours), sizeof ours - strlen(ours), "%s%d", i ? ", " : "", ids[i]);
    strcat(ours, "]");
    line[strcspn(line, "\n")] = '\0';
    fprintf(stderr, "llama-tokenize: %s\nours:           %s\n", line, ours);
    assert_string_equal(line, ours);
    tr_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lfm2_pre),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
