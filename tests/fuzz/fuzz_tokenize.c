/* fuzz_tokenize.c — libFuzzer target: arbitrary bytes (invalid UTF-8 included) through the SentencePiece vocab
 * of the demo models and the GPT-2, Llama-3-style and SmolLM2 byte-level vocabularies: tokenize with and without
 * special-token parsing, detokenize the ids, stream them through the UTF-8-safe detokenizer. With GPT-2's
 * vocabulary (a token for every byte) valid UTF-8 must round-trip exactly. Vocabularies come from TOKROUTE_SHARED (default ../shared). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokroute.h"

static tr_vocab *vocabs[4];
static int n_vocabs;

static void load(const char *shared, const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", shared, rel);
    if (tr_vocab_load(path, &vocabs[n_vocabs]) == TR_OK) n_vocabs++;
    else fprintf(stderr, "fuzz_tokenize: %s\n", tr_last_error());
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *shared = getenv("TOKROUTE_SHARED") ? getenv("TOKROUTE_SHARED") : "../shared";
    load(shared, "models/stories260K.gguf");
    load(shared, "tokenizer/ggml-vocab-gpt-2.gguf");
    load(shared, "tokenizer/ggml-vocab-smollm2.gguf");
    load(shared, "tokenizer/ggml-vocab-llama-spm.gguf");
    if (n_vocabs != 4) abort(); /* a fuzz run without its vocabularies would test nothing */
    return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (size_t k = 1; k < len; k++) cp = cp << 6 | (s[i + k] & 0x3F);
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    static int32_t ids[4096 * 4 + 16];
    for (int v = 0; v < n_vocabs; v++) {
        for (int special = 0; special < 2; special++) {
            tr_tokenize_params tp = tr_tokenize_default_params();
            tp.parse_special = special;
            tp.add_special = false;
            int32_t n = 0;
            if (tr_tokenize(vocabs[v], (const char *)data, size, &tp, ids, (int32_t)(sizeof ids / sizeof ids[0]), &n) != TR_OK)
                continue;
            char *text = NULL;
            if (tr_detokenize(vocabs[v], ids, n, false, special, &text) == TR_OK) {
                /* GPT-2's vocabulary has a token for each of the 256 bytes, so valid UTF-8 without special tokens
                 * must come back unchanged. (Others, like SmolLM2's, lack some control bytes, which llama.cpp
                 * drops too.) */
                if (!special && v == 1 && valid_utf8(data, size) &&
                    (strlen(text) != size || memcmp(text, data, size) != 0) && memchr(data, 0, size) == NULL)
                    abort();
                free(text);
            }
            tr_detok_stream *ds = NULL;
            if (tr_detok_stream_create(vocabs[v], false, &ds) == TR_OK) {
                const char *piece;
                size_t len;
                for (int32_t i = 0; i < n; i++) tr_detok_stream_push(ds, ids[i], &piece, &len);
                tr_detok_stream_flush(ds, &piece, &len);
                tr_detok_stream_free(ds);
            }
        }
    }
    return 0;
}
