/* fuzz_json_scan.c — libFuzzer target: arbitrary bytes as a request body read before it is trusted
 * (src/server/json_scan.c). The survey and the id reader must stay inside the text whatever it holds, and agree
 * with cJSON where the text is JSON: the survey counts exactly the nodes of cJSON's tree, the "tokens" member it
 * finds is cJSON's first "tokens" member, and ids the reader accepts are the numbers cJSON reads there (the reader
 * may refuse what cJSON takes, never the reverse). Any crash, sanitizer report or disagreement is a bug. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/json_scan.h"

enum { NV = 512, N_MAX = 64 };

static int64_t count_nodes(const cJSON *x) {
    int64_t n = 0;
    for (; x; x = x->next) n += 1 + count_nodes(x->child);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A copy of exactly size bytes: nothing past it may be read. */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    memcpy(text, data, size);
    json_survey sv;
    json_survey_text(text, size, "tokens", &sv);
    if (sv.n_values < 0 || sv.biggest_values > sv.n_values || sv.want_values > sv.n_values) abort();
    if (sv.want_at && (sv.want_at < text || sv.want_at + sv.want_len > text + size)) abort();
    int32_t ids[N_MAX], n = -1;
    json_ids_status st = JSON_IDS_NOT_ARRAY;
    if (sv.want_at) {
        st = json_read_ids(sv.want_at, sv.want_len, NV, N_MAX, ids, &n);
        if (st == JSON_IDS_OK && (n < 0 || n > N_MAX)) abort();
        for (int32_t i = 0; st == JSON_IDS_OK && i < n; i++)
            if (ids[i] < 0 || ids[i] >= NV) abort();
        int32_t counted = -1;
        if (json_count_elements(sv.want_at, sv.want_len, &counted) == JSON_IDS_OK && st == JSON_IDS_OK && counted != n)
            abort();
    }
    /* Where the whole text is one JSON value, the survey agrees with cJSON. */
    const char *end = NULL;
    cJSON *root = size ? cJSON_ParseWithLengthOpts(text, size, &end, 0) : NULL;
    if (root && end) {
        while (end < text + size && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
        if (end == text + size) {
            if (count_nodes(root) != sv.n_values) abort();
            if (cJSON_IsObject(root) != sv.is_object) abort();
            /* (a name spelled with escapes is another name to the survey, and cJSON cuts a name at a raw NUL:
             * only texts without either compared; the server refuses bodies with a NUL byte) */
            const bool plain = !memchr(text, '\\', size) && !memchr(text, 0, size);
            const cJSON *toks = cJSON_IsObject(root) && plain ? root->child : NULL;
            while (toks && strcmp(toks->string, "tokens") != 0) toks = toks->next;
            if (toks && !sv.want_at) abort();
            if (toks && sv.want_at && count_nodes(toks) - count_nodes(toks->next) != sv.want_values) abort();
            if (toks && sv.want_at && st == JSON_IDS_OK) {
                if (!cJSON_IsArray(toks) || cJSON_GetArraySize(toks) != n) abort();
                int32_t i = 0;
                for (const cJSON *t = toks->child; t; t = t->next, i++)
                    if (!cJSON_IsNumber(t) || t->valuedouble != (double)ids[i]) abort();
            }
        }
    }
    cJSON_Delete(root);
    free(text);
    return 0;
}
