/* llamacpp_ref.c — reference outputs from llama.cpp itself, for test_model_quants_llamacpp.c: compiled at test time
 * against the llama.cpp build of scripts/llamacpp.sh (not part of the tokroute build, not a test by itself).
 *
 *   llamacpp_ref MODEL TOKENS(1,2,3) N_GREEDY OUT_PREFIX
 * evaluates the tokens in one batch with every position's output and writes OUT_PREFIX.logits.f32
 * ([n][n_vocab]), OUT_PREFIX.hidden.f32 ([n][n_embd], the final norm's output, which llama.cpp returns as the
 * embedding when pooling is off) and OUT_PREFIX.greedy (N_GREEDY argmax tokens decoded one at a time, one line
 * each: "token runner-up gap", the gap between their logits relative to the top one); hidden states from a
 * context with embeddings on, logits from one with them off. 2 threads, F16 KV cache, flash attention off (the conformance goldens' settings); with LLAMACPP_REF_KV_Q8_0 set, a q8_0 K and V cache with flash attention. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* One greedy step's line: the argmax, the runner-up and their logit gap relative to the largest logit's size. */
static int greedy_line(FILE *g, const float *v, int n) {
    const int best = argmax(v, n);
    int second = best == 0 ? 1 : 0;
    for (int i = 0; i < n; i++)
        if (i != best && v[i] > v[second]) second = i;
    fprintf(g, "%d %d %.6g\n", best, second, (double)((v[best] - v[second]) / fabsf(v[best])));
    return best;
}

static int write_f32(const char *prefix, const char *ext, const float *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s.%s", prefix, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, sizeof(float), n, f) != n) return fprintf(stderr, "cannot write %s\n", path), 1;
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    if (argc != 5) return fprintf(stderr, "usage: llamacpp_ref MODEL TOKENS N_GREEDY OUT_PREFIX\n"), 2;
    llama_token tokens[512];
    int n = 0;
    for (char *p = argv[2]; *p && n < 512;) {
        tokens[n++] = (llama_token)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    const int n_greedy = atoi(argv[3]);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = cp.n_ubatch = 256;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_NONE;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (getenv("LLAMACPP_REF_KV_Q8_0")) { /* test_model_kv_q8.c: a q8_0 cache needs flash attention */
        cp.type_k = cp.type_v = GGML_TYPE_Q8_0;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    }
    /* hidden states from a context with embeddings on, logits and greedy tokens from one without (lfm2's graph
     * computes no logits when embeddings are asked for) */
    struct llama_context *ctx_h = llama_init_from_model(model, cp);
    cp.embeddings = false;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx || !ctx_h) return fprintf(stderr, "cannot create a context\n"), 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model)), n_embd = llama_model_n_embd(model);

    struct llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0 || llama_decode(ctx_h, batch) != 0)
        return fprintf(stderr, "llama_decode failed\n"), 1;
    float *logits = malloc(sizeof(float) * (size_t)n * n_vocab), *hidden = malloc(sizeof(float) * (size_t)n * n_embd);
    for (int i = 0; i < n; i++) {
        const float *l = llama_get_logits_ith(ctx, i), *h = llama_get_embeddings_ith(ctx_h, i);
        if (!l || !h) return fprintf(stderr, "no output at position %d\n", i), 1;
        memcpy(logits + (size_t)i * n_vocab, l, sizeof(float) * n_vocab);
        memcpy(hidden + (size_t)i * n_embd, h, sizeof(float) * n_embd);
    }
    if (write_f32(argv[4], "logits.f32", logits, (size_t)n * n_vocab) ||
        write_f32(argv[4], "hidden.f32", hidden, (size_t)n * n_embd))
        return 1;

    char path[1024];
    snprintf(path, sizeof path, "%s.greedy", argv[4]);
    FILE *g = fopen(path, "w");
    if (!g) return fprintf(stderr, "cannot write %s\n", path), 1;
    llama_token id = greedy_line(g, logits + (size_t)(n - 1) * n_vocab, n_vocab);
    for (int k = 1; k < n_greedy; k++) {
        struct llama_batch one = llama_batch_get_one(&id, 1);
        if (llama_decode(ctx, one) != 0) return fprintf(stderr, "llama_decode failed\n"), 1;
        id = greedy_line(g, llama_get_logits_ith(ctx, -1), n_vocab);
    }
    fclose(g);
    llama_batch_free(batch);
    free(logits);
    free(hidden);
    llama_free(ctx);
    llama_free(ctx_h);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
