/* platform.c — the operating-system services of platform.h: the Linux calls (getrandom, sched_getaffinity, mmap,
 * madvise, malloc_trim) when built for Linux, and the portable fallbacks (ISO C and plain POSIX: /dev/urandom,
 * sysconf, reading a file into the heap, aligned_alloc) everywhere else (musl builds use the Linux calls too: musl
 * has them all but malloc_trim) or when TR_PLATFORM_GENERIC is defined. */
#include "common/platform.h"

#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__linux__) && !defined(TR_PLATFORM_GENERIC)
#define TR_PLATFORM_LINUX 1
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#endif

/* ---------------------------------------------------------------- random bytes */

bool tr_platform_random(void *buf, size_t n) {
    unsigned char *out = buf;
    size_t got = 0;
#if defined(TR_PLATFORM_LINUX)
    while (got < n) {
        const ssize_t r = getrandom(out + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
#else
    /* Emscripten's /dev/urandom is the browser's crypto.getRandomValues (node's crypto under node). */
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f) return false;
    got = fread(out, 1, n, f);
    fclose(f);
    return got == n;
#endif
}

/* ---------------------------------------------------------------- CPUs */

int tr_platform_affinity(bool *allowed, int cap) {
#if defined(TR_PLATFORM_LINUX)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int i = 0; i < cap; i++) allowed[i] = i >= CPU_SETSIZE || CPU_ISSET(i, &set); /* beyond the mask: allowed */
    return CPU_COUNT(&set);
#else
    (void)allowed;
    (void)cap;
    return -1;
#endif
}

int tr_platform_online_cpus(void) {
#if defined(_SC_NPROCESSORS_ONLN)
    const long online = sysconf(_SC_NPROCESSORS_ONLN); /* emscripten: navigator.hardwareConcurrency with threads */
    return online > 0 ? (online > 4096 ? 4096 : (int)online) : 1;
#else
    return 1;
#endif
}

/* ---------------------------------------------------------------- files and pages */

#if !defined(TR_PLATFORM_LINUX)
static tr_status read_whole(const char *path, FILE *f, tr_file_view *view) {
    if (view->size == 0) return TR_OK;
    if (view->size > SIZE_MAX) return tr_fail(TR_ERR_NOMEM, "%s is too large for this address space", path);
    void *data = malloc((size_t)view->size);
    if (!data) return tr_fail(TR_ERR_NOMEM, "out of memory reading %s (%llu bytes)", path,
                              (unsigned long long)view->size);
    if (fread(data, 1, (size_t)view->size, f) != (size_t)view->size) {
        free(data);
        return tr_fail(TR_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    view->base = data;
    return TR_OK;
}
#endif

tr_status tr_platform_view_file(const char *path, tr_file_view *view) {
    *view = (tr_file_view){0};
#if defined(TR_PLATFORM_LINUX)
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tr_fail(TR_ERR_IO, "%s is not a regular file", path);
    }
    view->size = (uint64_t)sb.st_size;
    if (view->size > 0) {
        void *map = mmap(NULL, (size_t)view->size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            const int err = errno;
            close(fd);
            return tr_fail(TR_ERR_IO, "cannot map %s: %s", path, strerror(err));
        }
        view->base = map;
        view->mapped = true;
    }
    close(fd);
    return TR_OK;
#else
    FILE *f = fopen(path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return tr_fail(TR_ERR_IO, "%s is not a regular file", path);
    }
    view->size = (uint64_t)sb.st_size;
    const tr_status st = read_whole(path, f, view);
    fclose(f);
    if (st != TR_OK) view->size = 0;
    return st;
#endif
}

void tr_platform_view_close(tr_file_view *view) {
    if (!view) return;
#if defined(TR_PLATFORM_LINUX)
    if (view->mapped && view->size > 0) munmap((void *)view->base, (size_t)view->size);
#else
    free((void *)view->base);
#endif
    *view = (tr_file_view){0};
}

void *tr_platform_alloc_pages(size_t n) {
    if (n == 0) return NULL;
#if defined(TR_PLATFORM_LINUX)
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#if defined(MADV_HUGEPAGE)
    /* A hint (refused where the kernel has no THP): 2 MiB pages spare decode a TLB miss every 4 KiB of weights, a
     * two-level page walk in a VM (lfm2-1.2b Q4_0 decode on this Zen 4 VM, busy: +30-45%). */
    madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
#else
    const size_t align = 4096, rounded = (n + align - 1) / align * align;
    if (rounded < n) return NULL;
    void *p = aligned_alloc(align, rounded);
    if (p) memset(p, 0, rounded);
    return p;
#endif
}

void tr_platform_free_pages(void *p, size_t n) {
    if (!p) return;
#if defined(TR_PLATFORM_LINUX)
    munmap(p, n);
#else
    (void)n;
    free(p);
#endif
}

void tr_platform_release_pages(const void *p, size_t n) {
#if defined(TR_PLATFORM_LINUX)
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, e = a + n;
    const uintptr_t lo = (a + page - 1) / page * page, hi = e / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
    (void)p;
    (void)n;
#endif
}

void tr_platform_trim_heap(void) {
#if defined(TR_PLATFORM_LINUX) && defined(__GLIBC__)
    malloc_trim(0);
#endif
}
