/* fixtures.c — test helpers: shared-data paths, file reads, JSON arrays, relative RMS error, temp paths. */
#include "support/fixtures.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *shared_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", TR_SHARED_DIR, rel);
    return buf;
}

char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (size) *size = (size_t)n;
    }
    return buf;
}

int32_t json_int_array(const char *json_text, const char *key, int32_t **out) {
    cJSON *root = cJSON_Parse(json_text);
    const cJSON *arr = root ? cJSON_GetObjectItemCaseSensitive(root, key) : NULL;
    int32_t n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
    *out = NULL;
    if (n >= 0) {
        *out = malloc((size_t)(n ? n : 1) * sizeof **out);
        for (int32_t i = 0; i < n; i++) (*out)[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    }
    cJSON_Delete(root);
    return n;
}

double rel_rms(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

const char *temp_path(const char *suffix) {
    static char buf[256];
    static int counter;
    snprintf(buf, sizeof buf, "/tmp/tokroute-test-%d-%d%s", (int)getpid(), counter++, suffix);
    return buf;
}

int32_t lookahead_when_complete(tr_llm_backend *llm, int32_t *ids) {
    bool complete = false;
    int32_t n = 0;
    for (int i = 0; i < 10000 && !complete; i++) {
        n = tr_llm_lookahead(llm, ids, &complete);
        if (!complete) usleep(1000);
    }
    return complete ? n : -1;
}
