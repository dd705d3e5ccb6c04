/* fuzz_dataset.c — libFuzzer target: arbitrary bytes as a dataset file of each format (stories, CommonsenseQA,
 * GSM8K and ARC jsonl, MMLU CSV), the first byte choosing the format and the range. The reader must refuse or
 * accept without reading out of bounds, and what it accepts must hold together: the asked count of examples, every
 * string present, choices within bounds, a multiple-choice target that answers its own question, and the gold
 * answer found again by the checker. The same bytes then go through answer extraction for every format. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eval/dataset.h"

static void check_example(dataset_format fmt, const dataset_example *e) {
    if (!e->question || !e->prompt || !e->target || !e->answer) abort();
    if (e->n_choices < 0 || e->n_choices > DATASET_MAX_CHOICES) abort();
    for (int32_t i = 0; i < e->n_choices; i++)
        if (!e->choices[i]) abort();
    if (fmt == DATASET_TEXT && (e->target[0] == '\0' || e->answer[0] != '\0')) abort();
    if ((fmt == DATASET_CSQA || fmt == DATASET_ARC || fmt == DATASET_MMLU) &&
        (e->n_choices < 2 || !dataset_check_answer(fmt, e, e->target)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const dataset_format fmt = (dataset_format)(data[0] % 5);
    const int64_t first = (data[0] >> 3) & 3;
    const int64_t end = (data[0] & 0x80) ? -1 : first + ((data[0] >> 5) & 3);
    const char *text = (const char *)data + 1;
    size--;
    dataset *d = NULL;
    if (dataset_parse(text, size, "fuzz", fmt, first, end, &d) == TR_OK) {
        if (!d || dataset_get_format(d) != fmt) abort();
        if (end >= 0 && dataset_count(d) != end - first) abort();
        for (int64_t i = 0; i < dataset_count(d); i++) {
            const dataset_example *e = dataset_get(d, i);
            if (!e || e->index != first + i || e->line < 1) abort();
            check_example(fmt, e);
        }
        if (dataset_get(d, dataset_count(d))) abort();
        dataset_free(d);
    } else if (d) {
        abort();
    }
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, text, size);
    s[size] = '\0';
    for (int f = 0; f < 5; f++) {
        char buf[16];
        dataset_extract_answer((dataset_format)f, s, 5, buf, sizeof buf);
        if (strlen(buf) >= sizeof buf) abort();
    }
    free(s);
    return 0;
}
