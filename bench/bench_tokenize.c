/* bench_tokenize.c — tokenizer speed: MB/s tokenizing ../shared/tokenizer/corpus.inp on one thread, per vocabulary.
 * usage: bench_tokenize [SHARED_DIR] [SECONDS]  (defaults: ../shared, 1 second per vocabulary)
 * Each text of the corpus is tokenized separately (no BOS, special text as plain text), the whole corpus repeated
 * until the time is spent; vocabulary loading is not timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokroute.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "../shared";
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    static const char *const vocabs[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "falcon", "starcoder",
                                         "smollm2"};
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/corpus.inp", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenize: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *corpus = malloc((size_t)size + 1);
    if (!corpus || fread(corpus, 1, (size_t)size, f) != (size_t)size) return 1;
    fclose(f);
    corpus[size] = '\0';

    /* texts are separated by "\n__ggml_vocab_test__\n" */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t n_texts = 0, text_bytes = 0, offs[1024], lens[1024];
    for (size_t off = 0; off < (size_t)size && n_texts < 1024;) {
        char *m = strstr(corpus + off, sep);
        size_t end = m ? (size_t)(m - corpus) : (size_t)size;
        offs[n_texts] = off;
        lens[n_texts++] = end - off;
        text_bytes += end - off;
        off = m ? end + sizeof sep - 1 : (size_t)size;
    }
    int32_t *ids = malloc((size_t)size * sizeof *ids + 64);
    tr_tokenize_params p = {.add_special = false, .parse_special = false};
    printf("corpus: %zu texts, %zu bytes; one thread\n", n_texts, text_bytes);
    for (size_t k = 0; k < sizeof vocabs / sizeof *vocabs; k++) {
        snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-%s.gguf", dir, vocabs[k]);
        tr_vocab *v = NULL;
        if (tr_vocab_load(path, &v) != TR_OK) {
            fprintf(stderr, "bench_tokenize: %s\n", tr_last_error());
            return 1;
        }
        double t0 = now_s(), t;
        size_t bytes = 0, tokens = 0;
        do {
            for (size_t i = 0; i < n_texts; i++) {
                int32_t n = 0;
                if (tr_tokenize(v, corpus + offs[i], lens[i], &p, ids, (int32_t)size + 16, &n) != TR_OK) {
                    fprintf(stderr, "bench_tokenize: %s\n", tr_last_error());
                    return 1;
                }
                bytes += lens[i];
                tokens += (size_t)n;
            }
            t = now_s() - t0;
        } while (t < seconds);
        printf("%-15s %7.2f MB/s  %9.0f tokens/s\n", vocabs[k], (double)bytes / t / 1e6, (double)tokens / t);
        tr_vocab_free(v);
    }
    free(ids);
    free(corpus);
    return 0;
}
