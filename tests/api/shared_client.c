/* shared_client.c — a program linked only against libtokroute.so (not the static archive): it must find every
 * public function it calls there, and the library must behave as the static one does: version macros agree with
 * tr_version(), a model loads, a prompt tokenizes and greedy decoding reproduces the reference tokens of the
 * stories260K model. Run by CTest with the ../shared folder as its argument; exits non-zero on any mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokroute.h"

static int failures = 0;
#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                    tr_last_error());                                            \
            failures++;                                                          \
        }                                                                        \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: api_shared_client SHARED_DIR\n");
        return 2;
    }
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TR_VERSION_MAJOR, TR_VERSION_MINOR, TR_VERSION_PATCH);
    CHECK(strcmp(TR_VERSION, want) == 0);
    CHECK(strcmp(tr_version(), TR_VERSION) == 0);
    CHECK(strcmp(tr_status_name(TR_OK), "ok") == 0);

    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", argv[1]);
    tr_model_params mp = tr_model_default_params();
    tr_model *model = NULL;
    CHECK(tr_model_load("/nonexistent/model.gguf", &mp, &model) == TR_ERR_IO);
    CHECK(strstr(tr_last_error(), "/nonexistent/model.gguf") != NULL);
    if (tr_model_load(path, &mp, &model) != TR_OK) {
        fprintf(stderr, "FAIL: cannot load %s: %s\n", path, tr_last_error());
        return 1;
    }
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    CHECK(tr_context_create(model, &cp, &ctx) == TR_OK);
    int32_t ids[64], n = 0;
    tr_tokenize_params tp = tr_tokenize_default_params();
    CHECK(tr_tokenize(tr_model_vocab(model), "Once upon a time", 16, &tp, ids, 64, &n) == TR_OK);
    CHECK(n > 1 && ids[0] == tr_vocab_bos(tr_model_vocab(model)));
    /* greedy continuation: the same text `tokroute generate` prints for this prompt (tests/e2e/route.sh) */
    const int32_t n_prompt = n;
    CHECK(ctx && tr_context_eval(ctx, ids, n, TR_EVAL_LOGITS_LAST) == TR_OK);
    while (ctx && n < n_prompt + 12 && failures == 0) {
        ids[n] = tr_argmax(tr_context_logits(ctx, -1), tr_model_get_info(model)->n_vocab);
        CHECK(tr_context_eval(ctx, &ids[n], 1, TR_EVAL_LOGITS_LAST) == TR_OK);
        n++;
    }
    char *text = NULL;
    CHECK(tr_detokenize(tr_model_vocab(model), ids + n_prompt, n - n_prompt, false, false, &text) == TR_OK);
    CHECK(text && strncmp(text, ", there was a little girl named Lily.", 37) == 0);
    if (text) printf("%s\n", text);
    free(text);
    tr_context_free(ctx);
    tr_model_free(model);
    return failures ? 1 : 0;
}
