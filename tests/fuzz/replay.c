/* replay.c — runs a libFuzzer target without libFuzzer: each argument is an input file, or a directory whose
 * files are inputs, passed once to LLVMFuzzerTestOneInput. CTest replays every target that has seeds under
 * tests/fuzz/seeds/ this way in the ordinary (and the sanitizer) build, so the seeds stay valid inputs and the
 * targets keep compiling; scripts/fuzz.sh does the open-ended fuzzing. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = b;
        }
        const size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int failures = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such input %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            failures += run_file(argv[i]);
            n++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            failures += run_file(path);
            n++;
        }
        closedir(d);
    }
    printf("replayed %d inputs\n", n);
    return failures || n == 0 ? 1 : 0; /* no inputs at all: the seeds went missing */
}
