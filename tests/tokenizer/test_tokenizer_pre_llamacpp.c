/* test_tokenizer_pre_llamacpp.c — the pre-tokenizers the families added through the architecture interface bring,
 * against llama.cpp itself (scripts/llamacpp.sh's build, de3ff81).
 *
 *   lfm2 (Liquid LFM2): llama.cpp's own byte-level BPE fixture (its source tree's models/ggml-vocab-llama-bpe.gguf)
 *   rewritten to declare tokenizer.ggml.pre = "lfm2"; every text of the shared corpus, of that fixture's .inp and
 *   of the shared edge texts must give the ids llama.cpp gives on the same file (scripts/llamacpp_tokenize_ref.c,
 *   compiled here: llama-tokenize's llama_tokenize call, without BOS, parse_special off and on), and llama-tokenize
 *   itself must print the same ids for a sample text.
 *   gemma4 (Gemma 4's own tokenizer model): llama.cpp's models/ggml-vocab-gemma-4.gguf as it is, the same texts and
 *   its own .inp/.out pair, a llama-tokenize sample, and detokenizing back; its chat template against llama.cpp's
 *   Jinja engine (tests/tokenizer/llamacpp_jinja_ref.cpp, compiled here against libllama-common). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/gguf_builder.h"
#include "support/llamacpp_ref.h"
#include "tokenizer/tok_fixture.h"
#include "tokroute.h"

static llamacpp_ref llama;
static char jinja_exe[256]; /* tests/tokenizer/llamacpp_jinja_ref.cpp, compiled into the work folder */

static int setup(void **state) {
    (void)state;
    if (llamacpp_ref_setup(&llama, "pre", "llama-tokenize", "scripts/llamacpp_tokenize_ref.c") != 0) return -1;
    char cmd[2048];
    const char *bin = llama.bin;
    snprintf(jinja_exe, sizeof jinja_exe, "%s/llamacpp_jinja_ref", llama.work);
    snprintf(cmd, sizeof cmd,
             "c++ -std=c++17 -O0 -o %s %s/tests/tokenizer/llamacpp_jinja_ref.cpp -I%s/../../src/include "
             "-I%s/../../src/ggml/include -I%s/../../src/common -I%s/../../src/vendor -L%s -lllama-common -lllama "
             "-Wl,-rpath,%s",
             jinja_exe, TR_SOURCE_DIR, bin, bin, bin, bin, bin, bin);
    return run_command(cmd) == 0 ? 0 : -1;
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

/* llama.cpp's Jinja rendering of messages (role, content pairs) with the Jinja file `tmpl` or (NULL) the vocabulary
 * file's own template; malloc'ed. */
static char *jinja_render(const char *gguf, const char *tmpl, const tr_chat_message *m, size_t n, bool add_assistant) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char **argv = calloc(n * 2 + 5, sizeof *argv);
        argv[0] = jinja_exe;
        argv[1] = (char *)gguf;
        argv[2] = tmpl ? (char *)tmpl : "-";
        argv[3] = add_assistant ? "1" : "0";
        for (size_t i = 0; i < n; i++) argv[4 + 2 * i] = (char *)m[i].role, argv[5 + 2 * i] = (char *)m[i].content;
        dup2(fd[1], 1);
        close(fd[0]);
        execv(jinja_exe, argv);
        _exit(127);
    }
    close(fd[1]);
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    for (ssize_t r; (r = read(fd[0], out + len, cap - len - 1)) > 0;)
        if ((len += (size_t)r) + 1 == cap) out = realloc(out, cap *= 2);
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    out[len] = '\0';
    return out;
}

/* Gemma 4's chat template as llama.cpp's Jinja engine renders it: detected from the fixture, and the same prompt
 * and tokens for conversations with a system turn, thoughts in a model turn, with and without the model's next turn
 * opened — with the fixture's own (older) template and with google-gemma-4-31B-it.jinja from llama.cpp's
 * models/templates, which also continues a model turn that follows an assistant message (the fixture's opens a new
 * one: that conversation is checked against the current template only). */
static void gemma4_chat(void **state) {
    (void)state;
    char vocab[768], official[768];
    snprintf(vocab, sizeof vocab, "%s/../../src/models/ggml-vocab-gemma-4.gguf", llama.bin);
    snprintf(official, sizeof official, "%s/../../src/models/templates/google-gemma-4-31B-it.jinja", llama.bin);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(vocab, &g), TR_OK);
    assert_int_equal(tr_chat_template_detect(g), TR_CHAT_GEMMA4);
    tr_gguf_close(g);
    tr_vocab *v = NULL;
    assert_int_equal(tr_vocab_load(vocab, &v), TR_OK);
    const tr_chat_message a[] = {{"system", "  Be brief.\n"},
                                 {"user", "Hi there "},
                                 {"assistant", "<|channel>thought\nhmm<channel|>Hello! How can I help?"},
                                 {"user", "What is 2+2? Say <turn|> if you dare."}};
    const tr_chat_message b[] = {{"user", "One line\n\nand another"}, {"assistant", " Fine. "}};
    const tr_chat_message c[] = {{"user", "Tell me"}, {"assistant", "Part one."}, {"assistant", " part two "}};
    const struct {
        const tr_chat_message *m;
        size_t n;
        bool marker;   /* a message writes "<turn|>": ours keeps it text, not a control token */
        bool current;  /* checked against the current template only */
    } convs[] = {{a, 4, true, false}, {a + 1, 3, true, false}, {b, 1, false, false}, {b, 2, false, false},
                 {c, 3, false, true}};
    int checked = 0;
    for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++)
        for (int t = 0; t < 2; t++)
            for (int add = 0; add < 2; add++) {
                if (convs[k].current && t == 0) continue;
                char *ref = jinja_render(vocab, t ? official : NULL, convs[k].m, convs[k].n, add), *ours = NULL;
                assert_int_equal(tr_chat_apply(TR_CHAT_GEMMA4, convs[k].m, convs[k].n, add, &ours), TR_OK);
                if (strcmp(ref, ours) != 0)
                    fail_msg("conversation %zu (%s template, assistant %d):\n%s\n--- ours:\n%s", k,
                             t ? "current" : "fixture's", add, ref, ours);
                /* and as tokens: the template's markers special, BOS first */
                tr_tokenize_params tp = {.add_special = true, .parse_special = true};
                int32_t want[512], got[512], nw = 0, ng = 0;
                assert_int_equal(tr_tokenize(v, ref, strlen(ref), &tp, want, 512, &nw), TR_OK);
                assert_int_equal(
                    tr_chat_tokenize(v, TR_CHAT_GEMMA4, convs[k].m, convs[k].n, add, true, got, 512, &ng), TR_OK);
                if (convs[k].marker) {
                    assert_true(ng > nw); /* "<", "turn", "|>" instead of the one control token */
                } else {
                    assert_int_equal(ng, nw);
                    assert_memory_equal(got, want, (size_t)nw * sizeof *got);
                }
                assert_int_equal(got[0], 2); /* <bos> */
                checked++;
                free(ref);
                free(ours);
            }
    fprintf(stderr, "gemma4 chat: %d renderings as llama.cpp's\n", checked);
    tr_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lfm2_pre),
        cmocka_unit_test(gemma4_vocab),
        cmocka_unit_test(gemma4_chat),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
