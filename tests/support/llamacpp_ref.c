/* llamacpp_ref.c — llama.cpp as a test's reference: its build, a work folder, a program compiled against it. */
#include "support/llamacpp_ref.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"
#include "tokroute.h"

int run_command(const char *cmd) {
    const int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

int llamacpp_ref_setup(llamacpp_ref *ref, const char *name, const char *target, const char *program) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/scripts/llamacpp.sh %s", TR_SOURCE_DIR, target);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    const bool found = fgets(ref->bin, sizeof ref->bin, p) != NULL;
    if (pclose(p) != 0 || !found) return -1;
    ref->bin[strcspn(ref->bin, "\n")] = '\0';
    snprintf(ref->work, sizeof ref->work, "/tmp/tokroute-%s-XXXXXX", name);
    if (!mkdtemp(ref->work)) return -1;
    const char *base = strrchr(program, '/');
    snprintf(ref->exe, sizeof ref->exe, "%s/%.*s", ref->work, (int)strcspn(base ? base + 1 : program, "."),
             base ? base + 1 : program);
    /* headers from the source tree next to the build: <cache>/llama.cpp-<v>/{src,build/bin} */
    const char *bin = ref->bin;
    snprintf(cmd, sizeof cmd,
             "cc -O1 -o %s %s/%s -I%s/../../src/include -I%s/../../src/ggml/include -L%s -lllama -lm -Wl,-rpath,%s",
             ref->exe, TR_SOURCE_DIR, program, bin, bin, bin, bin);
    return run_command(cmd) == 0 ? 0 : -1;
}

int llamacpp_ref_teardown(const llamacpp_ref *ref) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ref->work);
    return run_command(cmd) == 0 ? 0 : -1;
}

float *read_f32_dump(const char *path, size_t expect) {
    size_t size = 0;
    float *p = (float *)read_file(path, &size);
    assert_non_null(p);
    assert_int_equal(size, expect * sizeof(float));
    return p;
}

void read_greedy_dump(const char *prefix, int n, int32_t *token, int32_t *runner_up, double *gap) {
    char path[512];
    snprintf(path, sizeof path, "%s.greedy", prefix);
    char *text = read_file(path, NULL);
    assert_non_null(text);
    char *p = text;
    for (int i = 0; i < n; i++) {
        token[i] = (int32_t)strtol(p, &p, 10);
        runner_up[i] = (int32_t)strtol(p, &p, 10);
        gap[i] = strtod(p, &p);
    }
    free(text);
}

int reference_clear_argmax(const float *ref, size_t n_vocab) {
    const int32_t top = tr_argmax(ref, (int32_t)n_vocab);
    float second = -INFINITY;
    for (size_t j = 0; j < n_vocab; j++)
        if ((int32_t)j != top && ref[j] > second) second = ref[j];
    return ref[top] - second > 0.01f * fabsf(ref[top]) ? top : -1;
}
