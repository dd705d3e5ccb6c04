/* fuzz_train_data.c — libFuzzer target: arbitrary bytes as a folder written by `tokroute collect` (positions.bin
 * and index.bin; the first two bytes give the split). Loading must refuse or accept without reading out of bounds,
 * and what it accepts must hold together: counts that sum up, and every position scorable by a policy router (the
 * scoring path reads each record's stored logit features); the table-only reader must decide and count the same. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokroute.h"

static char dir[64];

static int write_file(const char *name, const uint8_t *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz-train-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    if (size < 2) return 0;
    size_t split = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 1);
    const uint8_t *rest = data + 2;
    const size_t n_rest = size - 2;
    if (split > n_rest) split = n_rest;
    if (write_file("positions.bin", rest, split) != 0 || write_file("index.bin", rest + split, n_rest - split) != 0)
        abort();
    tr_train_data *d = NULL, *lean = NULL;
    const tr_status st = tr_train_data_open(dir, &d);
    /* The table-only reader (train-router --ngram-data) decides the same and counts the same. */
    if (tr_train_data_open_table_only(dir, &lean) != st) abort();
    if (st != TR_OK) return 0;
    const tr_train_data_info info = tr_train_data_get_info(d), lean_info = tr_train_data_get_info(lean);
    if (lean_info.n_positions != info.n_positions || lean_info.n_examples != info.n_examples ||
        lean_info.slm_correct != info.slm_correct || lean_info.llm_correct != info.llm_correct)
        abort();
    tr_train_data_free(lean);
    if (info.n_positions < 0 || info.n_examples < 0 || info.slm_correct > info.n_positions ||
        info.llm_correct > info.n_positions || info.both_wrong > info.n_positions || info.n_embd <= 0)
        abort();
    if (info.n_positions > 0 && info.n_positions < (1 << 20)) {
        float *scores = malloc(sizeof *scores * (size_t)info.n_positions);
        tr_router *router = NULL;
        if (!scores || tr_router_create(TR_POLICY_MAXPROB, &router) != TR_OK) abort();
        if (tr_train_data_scores(d, router, scores) == TR_OK)
            for (int64_t i = 0; i < info.n_positions; i++)
                if (!(scores[i] >= 0.0f && scores[i] <= 1.0f)) abort();
        tr_router_free(router);
        free(scores);
    }
    tr_train_data_free(d);
    return 0;
}
