/* examples.c — names of collect's data formats and the fingerprint of a data file. The examples themselves are
 * read and tokenized by the evaluation's dataset module (src/eval/dataset.h), so collect and eval see the same
 * prompts and targets. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "train/train_internal.h"

static const char *const format_names[] = {
    [TR_DATA_TEXT] = "text", [TR_DATA_LLM_SAMPLE] = "llm-sample", [TR_DATA_CSQA] = "csqa",
    [TR_DATA_GSM8K] = "gsm8k", [TR_DATA_ARC] = "arc",               [TR_DATA_MMLU] = "mmlu",
    [TR_DATA_TEXT_CONTINUE] = "text-continue",
};
#define N_FORMATS (int)(sizeof format_names / sizeof format_names[0])

const char *tr_data_format_name(tr_data_format f) {
    return (int)f >= 0 && (int)f < N_FORMATS ? format_names[f] : "unknown";
}

tr_status tr_data_format_from_name(const char *name, tr_data_format *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "tr_data_format_from_name: NULL argument");
    for (int i = 0; i < N_FORMATS; i++) {
        if (strcasecmp(name, format_names[i]) == 0) {
            *out = (tr_data_format)i;
            return TR_OK;
        }
    }
    return tr_fail(TR_ERR_ARG, "unknown data format '%s' (known: text, llm-sample, csqa, gsm8k, arc, mmlu, text-continue)", name);
}

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

tr_status file_hash(const char *path, uint64_t *hash) {
    FILE *f = fopen(path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    uint64_t h = FNV1A64_INIT;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a64(buf, n, h);
    const bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) return tr_fail(TR_ERR_IO, "cannot read %s", path);
    *hash = h;
    return TR_OK;
}
