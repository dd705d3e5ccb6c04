/* test_tokenizer_fixtures.c — every .edge and .corpus pair in ../shared/tokenizer must match llama.cpp's ids
 * exactly (no BOS/EOS, special-token text as plain text), and for the byte-level vocabularies detokenizing the
 * ids of each corpus text must give back the text byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokroute.h"
#include "tokenizer/tok_fixture.h"

static const char *const vocab_names[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "falcon", "starcoder",
                                          "smollm2"};

static void test_fixtures(void **state) {
    (void)state;
    bool all = true;
    for (size_t k = 0; k < sizeof vocab_names / sizeof *vocab_names; k++) {
        char gguf[512], inp[512], out[512];
        snprintf(gguf, sizeof gguf, "%s/tokenizer/ggml-vocab-%s.gguf", TR_SHARED_DIR, vocab_names[k]);
        tr_vocab *v = NULL;
        if (tr_vocab_load(gguf, &v) != TR_OK) fail_msg("load %s: %s", gguf, tr_last_error());
        long te, tc;
        snprintf(inp, sizeof inp, "%s/tokenizer/ggml-vocab-%s.edge.inp", TR_SHARED_DIR, vocab_names[k]);
        snprintf(out, sizeof out, "%s/tokenizer/ggml-vocab-%s.edge.out", TR_SHARED_DIR, vocab_names[k]);
        long oe = fx_check_pair(v, vocab_names[k], inp, out, false, &te);
        snprintf(inp, sizeof inp, "%s/tokenizer/corpus.inp", TR_SHARED_DIR);
        snprintf(out, sizeof out, "%s/tokenizer/ggml-vocab-%s.corpus.out", TR_SHARED_DIR, vocab_names[k]);
        long oc = fx_check_pair(v, vocab_names[k], inp, out, false, &tc);
        printf("%-15s edge %ld/%ld  corpus %ld/%ld\n", vocab_names[k], oe, te, oc, tc);
        all &= oe == te && oc == tc && te > 0 && tc > 0;
        tr_vocab_free(v);
    }
    assert_true(all);
}

/* Byte-level BPE loses nothing: detokenize(tokenize(text)) == text for every corpus text. */
static void test_round_trip_bpe(void **state) {
    (void)state;
    char inp[512];
    snprintf(inp, sizeof inp, "%s/tokenizer/corpus.inp", TR_SHARED_DIR);
    fx_text *texts = NULL;
    long nt = fx_read_inp(inp, &texts);
    if (nt <= 0) fail_msg("cannot read %s", inp);
    for (size_t k = 0; k < sizeof vocab_names / sizeof *vocab_names; k++) {
        char gguf[512];
        snprintf(gguf, sizeof gguf, "%s/tokenizer/ggml-vocab-%s.gguf", TR_SHARED_DIR, vocab_names[k]);
        tr_vocab *v = NULL;
        if (tr_vocab_load(gguf, &v) != TR_OK) fail_msg("load %s: %s", gguf, tr_last_error());
        if (tr_vocab_get_kind(v) != TR_VOCAB_BPE) {
            tr_vocab_free(v);
            continue;
        }
        tr_tokenize_params p = {.add_special = false, .parse_special = false};
        long same = 0;
        for (long i = 0; i < nt; i++) {
            int32_t cap = (int32_t)texts[i].len + 16, n = 0;
            int32_t *ids = malloc((size_t)cap * sizeof *ids);
            assert_int_equal(tr_tokenize(v, texts[i].s, texts[i].len, &p, ids, cap, &n), TR_OK);
            char *back = NULL;
            assert_int_equal(tr_detokenize(v, ids, n, false, false, &back), TR_OK);
            same += strlen(back) == texts[i].len && memcmp(back, texts[i].s, texts[i].len) == 0;
            free(back);
            free(ids);
        }
        printf("%-15s round trip %ld/%ld\n", vocab_names[k], same, nt);
        assert_int_equal(same, nt);
        tr_vocab_free(v);
    }
    fx_free_texts(texts, nt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_round_trip_bpe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
