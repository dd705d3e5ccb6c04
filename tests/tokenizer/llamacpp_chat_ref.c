/* llamacpp_chat_ref.c — llama.cpp's own chat prompt rendering, for test_tokenizer_vocabs_llamacpp.c: compiled at test
 * time against the llama.cpp build of scripts/llamacpp.sh (not part of the tokroute build, not a test by itself).
 *
 *   llamacpp_chat_ref VOCAB.gguf ADD_ASSISTANT(0|1) ROLE CONTENT [ROLE CONTENT]...
 * loads the file's vocabulary only, takes its tokenizer.chat_template (llama_model_chat_template) and writes what
 * llama_chat_apply_template renders for the messages (llama.cpp detects the format from the template's markers, as
 * llm_chat_detect_template) to stdout, byte for byte. */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 3 || (argc - 3) % 2 != 0)
        return fprintf(stderr, "usage: llamacpp_chat_ref VOCAB.gguf ADD_ASSISTANT [ROLE CONTENT]...\n"), 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const char *tmpl = llama_model_chat_template(model, NULL);
    if (!tmpl) return fprintf(stderr, "%s has no chat template\n", argv[1]), 1;
    const int n = (argc - 3) / 2;
    struct llama_chat_message *msgs = calloc((size_t)n + 1, sizeof *msgs);
    for (int i = 0; i < n; i++) msgs[i] = (struct llama_chat_message){argv[3 + 2 * i], argv[4 + 2 * i]};
    int32_t len = llama_chat_apply_template(tmpl, msgs, (size_t)n, atoi(argv[2]) != 0, NULL, 0);
    if (len < 0) return fprintf(stderr, "llama_chat_apply_template: template not supported\n"), 1;
    char *buf = malloc((size_t)len + 1);
    llama_chat_apply_template(tmpl, msgs, (size_t)n, atoi(argv[2]) != 0, buf, len + 1);
    fwrite(buf, 1, (size_t)len, stdout);
    free(buf);
    free(msgs);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
