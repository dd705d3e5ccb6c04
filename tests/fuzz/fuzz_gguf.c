/* fuzz_gguf.c — libFuzzer target: arbitrary bytes as a GGUF file. Everything that reads a GGUF runs on it: the
 * reader and every accessor, the vocabulary loader, and, when the bytes parse, the model loader (with a short
 * evaluation when it loads) and the router-file loader. Any crash or sanitizer report is a bug. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tokroute.h"

static void touch_metadata(const tr_gguf *g) {
    char buf[256];
    for (int64_t i = 0; i < tr_gguf_n_kv(g); i++) {
        tr_gguf_kv_format(g, i, buf, sizeof buf);
        const char *key = tr_gguf_kv_key(g, i);
        int64_t v;
        double f;
        bool b;
        size_t len;
        tr_gguf_get_int(g, key, &v);
        tr_gguf_get_float(g, key, &f);
        tr_gguf_get_bool(g, key, &b);
        tr_gguf_get_str(g, key, &len);
        const uint64_t n = tr_gguf_kv_array_len(g, i);
        for (uint64_t j = 0; j < n && j < 64; j++) {
            tr_gguf_arr_int(g, i, j, &v);
            tr_gguf_arr_float(g, i, j, &f);
            tr_gguf_arr_str(g, i, j, &len);
        }
        tr_gguf_arr_int(g, i, n, &v); /* one past the end */
    }
    for (int64_t i = 0; i < tr_gguf_n_tensors(g); i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
        volatile uint8_t sink = 0;
        if (t->n_bytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->n_bytes - 1];
        (void)sink;
    }
}

static void try_model(const char *path) {
    tr_model_params mp = tr_model_default_params();
    tr_model *m = NULL;
    if (tr_model_load(path, &mp, &m) == TR_OK) {
        tr_context_params cp = tr_context_default_params();
        cp.n_ctx = 8;
        cp.n_threads = 1;
        tr_context *ctx = NULL;
        if (tr_context_create(m, &cp, &ctx) == TR_OK) {
            const int32_t ids[2] = {0, tr_model_get_info(m)->n_vocab - 1};
            tr_context_eval(ctx, ids, 2, TR_EVAL_LOGITS_ALL);
            tr_context_free(ctx);
        }
        tr_model_free(m);
    }
    tr_router *r = NULL;
    if (tr_router_load(path, NULL, &r) == TR_OK) {
        float hidden[64] = {0}, logits[64] = {0}, score;
        tr_router_score(r, hidden, 64, logits, 64, &score);
        tr_router_free(r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_gguf *g = NULL;
    if (tr_gguf_open_memory(data, size, &g) != TR_OK) return 0;
    touch_metadata(g);
    tr_vocab *v = NULL;
    if (tr_vocab_from_gguf(g, &v) == TR_OK) tr_vocab_free(v);
    tr_gguf_close(g);
    /* The model and router loaders take paths. */
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/tokroute-fuzz-%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const bool ok = fwrite(data, 1, size, f) == size;
    fclose(f);
    if (ok) try_model(path);
    unlink(path);
    return 0;
}
