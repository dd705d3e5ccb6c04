/* test_platform.c — the platform layer (src/common/platform.c): random bytes, the affinity mask, whole-file views
 * (a GGUF opened through one), page arenas. Built twice: as test_platform with the Linux calls, and as
 * test_platform_generic with -DTR_PLATFORM_GENERIC, the portable fallbacks musl-free systems and emscripten use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/platform.h"
#include "tokroute.h"

static void random_bytes_differ(void **state) {
    (void)state;
    unsigned char a[64] = {0}, b[64] = {0};
    assert_true(tr_platform_random(a, sizeof a));
    assert_true(tr_platform_random(b, sizeof b));
    assert_memory_not_equal(a, b, sizeof a); /* 2^-512 to fail by chance */
    int zeros = 0;
    for (size_t i = 0; i < sizeof a; i++) zeros += a[i] == 0;
    assert_true(zeros < 16);
}

static void cpus_are_counted(void **state) {
    (void)state;
    const int online = tr_platform_online_cpus();
    assert_true(online >= 1);
    bool *allowed = calloc(4096, sizeof *allowed);
    assert_non_null(allowed);
    const int n = tr_platform_affinity(allowed, 4096);
#if defined(__linux__) && !defined(TR_PLATFORM_GENERIC)
    assert_true(n >= 1); /* Linux always has a mask, and this process runs somewhere */
    int marked = 0;
    for (int i = 0; i < 1024; i++) marked += allowed[i];
    assert_int_equal(marked, n);
#else
    assert_int_equal(n, -1);
#endif
    free(allowed);
    assert_true(tr_physical_cores() >= 1);
}

static char *temp_file(const void *data, size_t n) {
    static char path[] = "/tmp/tr_platform_XXXXXX";
    strcpy(path, "/tmp/tr_platform_XXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

static void file_views_hold_the_bytes(void **state) {
    (void)state;
    enum { N = 100000 };
    unsigned char *data = malloc(N);
    assert_non_null(data);
    for (int i = 0; i < N; i++) data[i] = (unsigned char)(i * 7 + 3);
    const char *path = temp_file(data, N);
    tr_file_view v;
    assert_int_equal(tr_platform_view_file(path, &v), TR_OK);
    assert_int_equal(v.size, N);
    assert_memory_equal(v.base, data, N);
#if defined(__linux__) && !defined(TR_PLATFORM_GENERIC)
    assert_true(v.mapped);
#else
    assert_false(v.mapped);
#endif
    tr_platform_view_close(&v);
    assert_null(v.base);
    remove(path);
    free(data);

    path = temp_file(NULL, 0); /* empty: no bytes, no error (the GGUF reader refuses it by its own rules) */
    assert_int_equal(tr_platform_view_file(path, &v), TR_OK);
    assert_int_equal(v.size, 0);
    tr_platform_view_close(&v);
    remove(path);
}

static void bad_paths_are_named(void **state) {
    (void)state;
    tr_file_view v;
    assert_int_equal(tr_platform_view_file("/nonexistent/tr_platform", &v), TR_ERR_IO);
    assert_non_null(strstr(tr_last_error(), "/nonexistent/tr_platform"));
    assert_int_equal(tr_platform_view_file("/tmp", &v), TR_ERR_IO);
    assert_non_null(strstr(tr_last_error(), "/tmp is not a regular file"));
    assert_null(v.base);
    /* Through the GGUF reader: the same messages, no crash. */
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open("/tmp", &g), TR_ERR_IO);
    assert_null(g);
}

static void arenas_are_zeroed_and_aligned(void **state) {
    (void)state;
    const size_t n = 3 * 4096 + 100;
    unsigned char *p = tr_platform_alloc_pages(n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 4096, 0);
    for (size_t i = 0; i < n; i++) assert_int_equal(p[i], 0);
    memset(p, 0xab, n);
    tr_platform_release_pages(p + n, 0); /* nothing inside: a no-op everywhere */
    assert_int_equal(p[n - 1], 0xab);
    tr_platform_free_pages(p, n);
    tr_platform_free_pages(NULL, 0);
    tr_platform_trim_heap();
}

#if defined(__linux__) && !defined(TR_PLATFORM_GENERIC)
/* The VmFlags of the mapping in /proc/self/smaps that holds address p ("" when not found). */
static void mapping_flags(const void *p, char *flags, size_t cap) {
    flags[0] = '\0';
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    bool inside = false;
    for (int lines = 0; lines < 1000000 && fgets(line, sizeof line, f); lines++) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(flags, cap, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

/* The model's weight arena streams every byte once per decoded token: with 4 KiB pages that is a TLB miss every 4 KiB
 * (a two-level walk in a VM), so the arena asks for transparent huge pages (MADV_HUGEPAGE: VmFlags "hg") wherever the
 * kernel has them (/sys/kernel/mm/transparent_hugepage). */
static void arenas_ask_for_huge_pages(void **state) {
    (void)state;
    const size_t n = 8u << 20;
    unsigned char *p = tr_platform_alloc_pages(n);
    assert_non_null(p);
    char flags[256];
    mapping_flags(p, flags, sizeof flags);
    assert_true(flags[0] != '\0');
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    const bool kernel_has_thp = thp != NULL;
    if (thp) fclose(thp);
    assert_int_equal(strstr(flags, " hg") != NULL, kernel_has_thp);
    tr_platform_free_pages(p, n);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
#if defined(__linux__) && !defined(TR_PLATFORM_GENERIC)
        cmocka_unit_test(arenas_ask_for_huge_pages),
#endif
        cmocka_unit_test(random_bytes_differ),
        cmocka_unit_test(cpus_are_counted),
        cmocka_unit_test(file_views_hold_the_bytes),
        cmocka_unit_test(bad_paths_are_named),
        cmocka_unit_test(arenas_are_zeroed_and_aligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
