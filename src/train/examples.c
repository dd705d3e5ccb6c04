/* examples.c — where collect's examples come from: dataset format names, and plain-text files split into stories.
 *
 * A text file holds examples separated by lines that are exactly "<|endoftext|>" (TinyStories' layout; a trailing
 * "\r" is tolerated). Each example is the text between two separators with surrounding whitespace trimmed; empty
 * ones are skipped, so example i is the i-th non-empty story. The question-answering formats are parsed by the
 * evaluation's dataset module.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "train/train_internal.h"

static const char *const format_names[] = {
    [TR_DATA_TEXT] = "text", [TR_DATA_LLM_SAMPLE] = "llm-sample", [TR_DATA_CSQA] = "csqa",
    [TR_DATA_GSM8K] = "gsm8k", [TR_DATA_ARC] = "arc",               [TR_DATA_MMLU] = "mmlu",
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
    return tr_fail(TR_ERR_ARG, "unknown data format '%s' (known: text, llm-sample, csqa, gsm8k, arc, mmlu)", name);
}

uint64_t fnv1a64(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static tr_status add_example(text_examples *ex, size_t *cap, size_t b, size_t e) {
    while (b < e && is_space(ex->text[b])) b++;
    while (e > b && is_space(ex->text[e - 1])) e--;
    if (b == e) return TR_OK;
    if ((size_t)ex->n == *cap) {
        const size_t n = *cap ? *cap * 2 : 256;
        size_t *nb = realloc(ex->begin, n * sizeof *nb);
        if (nb) ex->begin = nb;
        size_t *ne = realloc(ex->end, n * sizeof *ne);
        if (ne) ex->end = ne;
        if (!nb || !ne) return tr_fail(TR_ERR_NOMEM, "out of memory");
        *cap = n;
    }
    if (ex->n == INT32_MAX) return tr_fail(TR_ERR_RANGE, "too many examples");
    ex->begin[ex->n] = b;
    ex->end[ex->n] = e;
    ex->n++;
    return TR_OK;
}

tr_status text_examples_load(const char *path, text_examples *ex) {
    memset(ex, 0, sizeof *ex);
    FILE *f = fopen(path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    tr_status st = TR_OK;
    if (fseek(f, 0, SEEK_END) != 0) st = tr_fail(TR_ERR_IO, "cannot read %s", path);
    const long size = st == TR_OK ? ftell(f) : -1;
    if (st == TR_OK && (size < 0 || fseek(f, 0, SEEK_SET) != 0)) st = tr_fail(TR_ERR_IO, "cannot read %s", path);
    if (st == TR_OK && !(ex->text = malloc((size_t)size + 1))) st = tr_fail(TR_ERR_NOMEM, "out of memory for %s", path);
    if (st == TR_OK && fread(ex->text, 1, (size_t)size, f) != (size_t)size)
        st = tr_fail(TR_ERR_IO, "cannot read %s", path);
    fclose(f);
    if (st != TR_OK) {
        text_examples_free(ex);
        return st;
    }
    ex->size = (size_t)size;
    ex->text[size] = '\0';
    static const char sep[] = "<|endoftext|>";
    const size_t sep_len = sizeof sep - 1;
    size_t cap = 0, start = 0, line = 0;
    while (st == TR_OK && line <= ex->size) {
        const char *nl = memchr(ex->text + line, '\n', ex->size - line);
        const size_t line_end = nl ? (size_t)(nl - ex->text) : ex->size;
        size_t len = line_end - line;
        if (len > 0 && ex->text[line + len - 1] == '\r') len--;
        if (len == sep_len && memcmp(ex->text + line, sep, sep_len) == 0) {
            st = add_example(ex, &cap, start, line);
            start = line_end + (nl ? 1 : 0);
        }
        if (!nl) break;
        line = line_end + 1;
    }
    if (st == TR_OK) st = add_example(ex, &cap, start, ex->size);
    if (st != TR_OK) text_examples_free(ex);
    return st;
}

void text_examples_free(text_examples *ex) {
    free(ex->text);
    free(ex->begin);
    free(ex->end);
    memset(ex, 0, sizeof *ex);
}
