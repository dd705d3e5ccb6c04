/* llamacpp_tokenize_ref.c — llama.cpp's token ids for every text of a tokenizer fixture, in one process: what
 * llama-tokenize --ids --no-bos prints, text by text (the same llama_tokenize call), without loading the vocabulary
 * once per text. Compiled by scripts/vocab_fixtures.sh against the llama.cpp build of scripts/llamacpp.sh.
 *
 *   llamacpp_tokenize_ref VOCAB.gguf IN.inp OUT.out PARSE_SPECIAL(0|1)
 * IN.inp holds texts each followed by "\n__ggml_vocab_test__\n"; OUT.out gets one line per text, each id preceded by
 * a space (the format of ../shared/tokenizer). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) buf = (free(buf), NULL);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: llamacpp_tokenize_ref VOCAB.gguf IN.inp OUT.out PARSE_SPECIAL\n"), 2;
    const bool parse_special = atoi(argv[4]) != 0;
    size_t len = 0;
    char *text = read_all(argv[2], &len);
    if (!text) return fprintf(stderr, "cannot read %s\n", argv[2]), 1;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    FILE *out = fopen(argv[3], "w");
    if (!out) return fprintf(stderr, "cannot write %s\n", argv[3]), 1;

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sl = sizeof sep - 1;
    for (size_t off = 0; off < len;) {
        const char *m = memmem(text + off, len - off, sep, sl);
        const size_t end = m ? (size_t)(m - text) : len, n = end - off;
        int32_t cap = (int32_t)n + 16;
        llama_token *ids = malloc((size_t)cap * sizeof *ids);
        int32_t k = llama_tokenize(vocab, text + off, (int32_t)n, ids, cap, false, parse_special);
        if (k < 0) { /* -k tokens did not fit */
            ids = realloc(ids, (size_t)-k * sizeof *ids);
            k = llama_tokenize(vocab, text + off, (int32_t)n, ids, -k, false, parse_special);
        }
        if (k < 0) return fprintf(stderr, "llama_tokenize failed (%d)\n", k), 1;
        for (int32_t i = 0; i < k; i++) fprintf(out, " %d", ids[i]);
        fputc('\n', out);
        free(ids);
        off = m ? end + sl : len;
    }
    if (fclose(out) != 0) return 1;
    llama_model_free(model);
    llama_backend_free();
    free(text);
    return 0;
}
