/* train_fixture.h — writes hand-made collect folders (positions.bin + index.bin, the format of
 * src/train/train_internal.h) for the training tests, position by position through a fill callback. */
#ifndef TR_TEST_TRAIN_FIXTURE_H
#define TR_TEST_TRAIN_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/train_internal.h"

/* Fills one position (example ex, position pos >= 1): the record's ids, probabilities and stats, topk values and
 * the hidden state. The record comes zeroed with rollouts -1. */
typedef void (*toy_fill_fn)(void *user, int32_t ex, int32_t pos, collect_record *r, float *topk, float *hidden);

typedef struct toy_spec {
    uint32_t n_embd, n_vocab, topk, rollouts;
    int32_t n_examples, per_example;
} toy_spec;

static inline void toy_header(const toy_spec *s, collect_header *h) {
    memset(h, 0, sizeof *h);
    h->version = COLLECT_VERSION;
    h->header_bytes = COLLECT_HEADER_BYTES;
    h->record_bytes = collect_record_bytes(s->n_embd, s->topk);
    h->n_embd = s->n_embd;
    h->n_vocab = s->n_vocab;
    h->topk = s->topk;
    h->rollouts = s->rollouts;
    h->max_tokens = (uint32_t)s->per_example + 1;
    h->last = s->n_examples;
    snprintf(h->slm_name, sizeof h->slm_name, "toy");
}

/* Writes the folder (created if missing); returns 0 on success. */
static inline int toy_write(const char *dir, const toy_spec *s, toy_fill_fn fill, void *user) {
    mkdir(dir, 0777);
    char path[4096];
    collect_header h;
    toy_header(s, &h);
    unsigned char header[COLLECT_HEADER_BYTES];
    collect_header_encode(&h, header);
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_DATA_FILE);
    FILE *data = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_INDEX_FILE);
    FILE *index = fopen(path, "wb");
    if (!data || !index) return -1;
    fwrite(header, 1, sizeof header, data);
    fwrite(COLLECT_INDEX_MAGIC, 1, 8, index);
    unsigned char *rec = malloc(h.record_bytes);
    float *topk = calloc(s->topk, sizeof(float)), *hidden = calloc(s->n_embd, sizeof(float));
    uint64_t offset = COLLECT_HEADER_BYTES;
    for (int32_t ex = 0; ex < s->n_examples; ex++) {
        for (int32_t pos = 1; pos <= s->per_example; pos++) {
            collect_record r;
            memset(&r, 0, sizeof r);
            r.example = (uint32_t)ex;
            r.position = (uint32_t)pos;
            r.rollout_slm = r.rollout_llm = -1;
            memset(topk, 0, s->topk * sizeof(float));
            memset(hidden, 0, s->n_embd * sizeof(float));
            fill(user, ex, pos, &r, topk, hidden);
            collect_record_encode(&r, topk, hidden, s->topk, s->n_embd, rec);
            fwrite(rec, 1, h.record_bytes, data);
        }
        unsigned char e[COLLECT_INDEX_ENTRY];
        const uint32_t u[2] = {(uint32_t)ex, (uint32_t)s->per_example};
        for (int k = 0; k < 8; k++) e[k] = (unsigned char)(u[k / 4] >> (8 * (k % 4)));
        for (int k = 0; k < 8; k++) e[8 + k] = (unsigned char)(offset >> (8 * k));
        fwrite(e, 1, sizeof e, index);
        offset += (uint64_t)s->per_example * h.record_bytes;
    }
    free(rec);
    free(topk);
    free(hidden);
    return fclose(data) | fclose(index);
}

/* Removes a folder toy_write (or collect) wrote: its files, then the folder. */
static inline void toy_remove(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_DATA_FILE);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_INDEX_FILE);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_TOKENS_FILE);
    unlink(path);
    rmdir(dir);
}

#endif /* TR_TEST_TRAIN_FIXTURE_H */
