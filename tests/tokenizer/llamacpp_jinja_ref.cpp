/* llamacpp_jinja_ref.cpp — a chat prompt as llama.cpp's own Jinja engine renders it from a file's
 * tokenizer.chat_template (common_chat_templates_apply, libllama-common), for test_tokenizer_pre_llamacpp.c: compiled
 * at test time against the llama.cpp build of scripts/llamacpp.sh (not part of the tokroute build, not a test by
 * itself). Templates with no built-in renderer in libllama (Gemma 4's) are checked this way.
 *
 *   llamacpp_jinja_ref VOCAB.gguf TEMPLATE|- ADD_ASSISTANT ROLE CONTENT [ROLE CONTENT ...]
 * prints the prompt (no BOS; thinking off) on stdout, rendered with the Jinja file TEMPLATE or (-) the vocabulary
 * file's own. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "chat.h"
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2 != 0) {
        fprintf(stderr, "usage: %s VOCAB.gguf TEMPLATE|- ADD_ASSISTANT ROLE CONTENT [ROLE CONTENT ...]\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    std::stringstream tmpl;
    if (strcmp(argv[2], "-") != 0) {
        std::ifstream f(argv[2]);
        if (!f) return 1;
        tmpl << f.rdbuf();
    }
    auto tmpls = common_chat_templates_init(model, tmpl.str());
    common_chat_templates_inputs in;
    in.add_generation_prompt = atoi(argv[3]) != 0;
    in.enable_thinking = false;
    for (int i = 4; i + 1 < argc; i += 2) {
        common_chat_msg m;
        m.role = argv[i];
        m.content = argv[i + 1];
        in.messages.push_back(m);
    }
    const common_chat_params p = common_chat_templates_apply(tmpls.get(), in);
    fwrite(p.prompt.data(), 1, p.prompt.size(), stdout);
    llama_model_free(model);
    return 0;
}
