/* test_tokenizer_cli.c — `tokroute tokenize --inp` reproduces every fixture .out file byte for byte, and the
 * command's error and usage contract (exit 2 for usage errors, 1 for runtime errors, "tokroute: " on stderr). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "tokenizer/tok_fixture.h"

/* Runs a shell command; returns its exit status and its stdout (malloc'ed) in *out. */
static int run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("popen %s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; (got = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli_inp_matches_fixtures(void **state) {
    (void)state;
    static const char *const vocabs[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "falcon", "starcoder",
                                         "smollm2"};
    for (size_t k = 0; k < sizeof vocabs / sizeof *vocabs; k++) {
        for (int corpus = 0; corpus < 2; corpus++) {
            char cmd[2048], want_path[1024], *got = NULL;
            snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s/tokenizer/ggml-vocab-%s.gguf' --inp '%s/tokenizer/%s%s%s'",
                     TR_CLI_PATH, TR_SHARED_DIR, vocabs[k], TR_SHARED_DIR, corpus ? "corpus" : "ggml-vocab-",
                     corpus ? "" : vocabs[k], corpus ? ".inp" : ".edge.inp");
            snprintf(want_path, sizeof want_path, "%s/tokenizer/ggml-vocab-%s.%s.out", TR_SHARED_DIR, vocabs[k],
                     corpus ? "corpus" : "edge");
            assert_int_equal(run(cmd, &got), 0);
            size_t wl = 0;
            char *want = fx_read_file(want_path, &wl);
            if (!want) fail_msg("cannot read %s", want_path);
            if (strcmp(got, want) != 0) fail_msg("%s: output differs from %s", vocabs[k], want_path);
            free(want);
            free(got);
        }
    }
}

static void test_cli_contract(void **state) {
    (void)state;
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' tokenize --help", TR_CLI_PATH);
    assert_int_equal(run(cmd, &out), 0);
    assert_non_null(strstr(out, "usage: tokroute tokenize"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize 'text' 2>&1", TR_CLI_PATH);
    assert_int_equal(run(cmd, &out), 2);
    assert_non_null(strstr(out, "tokroute: "));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m /nonexistent.gguf 'text' 2>&1", TR_CLI_PATH);
    assert_int_equal(run(cmd, &out), 1);
    assert_true(strncmp(out, "tokroute: ", 10) == 0);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s/tokenizer/ggml-vocab-llama-spm.gguf' --ids 'Hello world'",
             TR_CLI_PATH, TR_SHARED_DIR);
    assert_int_equal(run(cmd, &out), 0);
    assert_string_equal(out, "1 15043 3186\n");
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s/tokenizer/ggml-vocab-gpt-2.gguf' --json 'Hello, world'",
             TR_CLI_PATH, TR_SHARED_DIR);
    assert_int_equal(run(cmd, &out), 0);
    assert_non_null(strstr(out, "{\"id\":995,\"piece\":\" world\"}"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_inp_matches_fixtures),
        cmocka_unit_test(test_cli_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
