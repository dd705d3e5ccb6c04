/* example_generate.c — one model, no routing: load it, evaluate the prompt, then pick the most likely next token
 * until N tokens or an end-of-generation token, streaming the text. The same text as
 * `tokroute generate -m MODEL -p PROMPT -n N` (greedy). Every call's status is checked.
 * usage: example_generate MODEL.gguf [PROMPT [N]] (default: "Once upon a time", 64 tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokroute.h"

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s MODEL.gguf [PROMPT [N]]\n", argv[0]);
        return 2;
    }
    const char *text = argc > 2 ? argv[2] : "Once upon a time";
    int n_predict = argc > 3 ? atoi(argv[3]) : 64;
    tr_model_params mp = tr_model_default_params();
    tr_context_params cp = tr_context_default_params();
    tr_tokenize_params tp = tr_tokenize_default_params();
    tr_model *model = NULL;
    tr_context *ctx = NULL;
    tr_detok_stream *detok = NULL;
    int32_t prompt[256], n_prompt = 0;
    tr_status st = tr_model_load(argv[1], &mp, &model);
    if (st == TR_OK) st = tr_context_create(model, &cp, &ctx);
    if (st == TR_OK) st = tr_tokenize(tr_model_vocab(model), text, strlen(text), &tp, prompt, 256, &n_prompt);
    if (st == TR_OK) st = tr_detok_stream_create(tr_model_vocab(model), false, &detok);
    if (st == TR_OK) st = tr_context_eval(ctx, prompt, n_prompt, TR_EVAL_LOGITS_LAST);

    const tr_model_info *info = model ? tr_model_get_info(model) : NULL;
    const char *piece;
    size_t len;
    for (int i = 0; st == TR_OK && i < n_predict; i++) {
        int32_t next = tr_argmax(tr_context_logits(ctx, -1), info->n_vocab);
        if (tr_vocab_is_eog(tr_model_vocab(model), next)) break;
        st = tr_detok_stream_push(detok, next, &piece, &len);
        if (st == TR_OK) fwrite(piece, 1, len, stdout);
        if (st == TR_OK && i + 1 < n_predict) st = tr_context_eval(ctx, &next, 1, TR_EVAL_LOGITS_LAST);
    }
    if (st == TR_OK) st = tr_detok_stream_flush(detok, &piece, &len);
    if (st == TR_OK) fwrite(piece, 1, len, stdout), putchar('\n');
    else fprintf(stderr, "tokroute: %s\n", tr_last_error());

    tr_detok_stream_free(detok);
    tr_context_free(ctx);
    tr_model_free(model);
    return st == TR_OK ? 0 : 1;
}
