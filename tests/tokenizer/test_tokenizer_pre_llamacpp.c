/* test_tokenizer_pre_llamacpp.c — the pre-tokenizers the families added through the architecture interface bring,
 * against llama.cpp itself (scripts/llamacpp.sh's build, de3ff81).
 *
 *   lfm2 (Liquid LFM2): llama.cpp's own byte-level BPE fixture (its source tree's models/ggml-vocab-llama-bpe.gguf)
 *   rewritten to declare tokenizer.ggml.pre = "lfm2"; every text of the shared corpus, of that fixture's .inp and
 *   of the shared edge texts must give the ids llama.cpp gives on the same file (scripts/llamacpp_tokenize_ref.c,
 *   compiled here: llama-tokenize's llama_tokenize call, without BOS, parse_special off and on), and llama-tokenize
 *   itself must print the same ids for a sample text.
 *   gemma4 (Gemma 4's own tokenizer model): llama.cpp's models/ggml-vocab-gemma-4.gguf as it is, the same texts and
 *   its own .inp/.out pair, a llama-tokenize sample, and detokenizing back. */
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

/* llama-tokenize itself must print our ids for `sample` (from a file: no shell quoting in the way). */
static void check_llama_tokenize(const tr_vocab *v, const char *vocab, const char *sample) {
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
    check_llama_tokenize(v, vocab, "Hello world!  It's 2026: LFM2's   tokens\n\n  123456 Ã¼nÃ¯cÃ¶dÃ©");
    tr_vocab_free(v);
}

/* Gemma 4's tokenizer ("gemma4": BPE over SentencePiece-style pieces) on llama.cpp's own fixture: its .inp/.out
 * pair (test-tokenizer-0's ids), the shared corpus and edge texts through llama.cpp's llama_tokenize, llama-tokenize
 * on a sample, and what the file declares. */
static void gemma4_vocab(void **state) {
    (void)state;
    char vocab[768], inp[800], outp[800];
    snprintf(vocab, sizeof vocab, "%s/../../src/models/ggml-vocab-gemma-4.gguf", llama.bin);
    snprintf(inp, sizeof inp, "%s.inp", vocab);
    snprintf(outp, sizeof outp, "%s.out", vocab);
    tr_vocab *v = NULL;
    if (tr_vocab_load(vocab, &v) != TR_OK) fail_msg("%s: %s", vocab, tr_last_error());
    assert_int_equal(tr_vocab_get_kind(v), TR_VOCAB_BPE);
    assert_true(tr_vocab_add_bos(v));
    long total = 0;
    const long ok = fx_check_pair(v, "gemma-4", inp, outp, false, &total);
    fprintf(stderr, "%s: %ld/%ld texts match llama.cpp's .out\n", inp, ok, total);
    assert_true(total > 0 && ok == total);
    const char *texts[] = {TR_SHARED_DIR "/tokenizer/corpus.inp", inp, TR_SHARED_DIR "/tokenizer/ggml-vocab-gpt-2.edge.inp"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int special = 0; special < 2; special++) check_texts(v, vocab, texts[i], special);
    check_llama_tokenize(v, vocab, "Hello world!  It's 2026:\n\n\n  Gemma 4\t\u00fcn\u00efc\u00f6d\u00e9 \xf0\x9f\xa6\x99.cpp");
    /* and back: normal pieces unescape U+2581, <0xNN> pieces give their byte */
    const char *round = "  two spaces, \xf0\x90\x8d\x88 a rare letter\n\nand lines";
    tr_tokenize_params tp = tr_tokenize_default_params();
    tp.add_special = false;
    int32_t ids[128], n = 0;
    assert_int_equal(tr_tokenize(v, round, strlen(round), &tp, ids, 128, &n), TR_OK);
    char *back = NULL;
    assert_int_equal(tr_detokenize(v, ids, n, true, false, &back), TR_OK);
    assert_string_equal(back, round);
    free(back);
    tr_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lfm2_pre),
        cmocka_unit_test(gemma4_vocab),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
