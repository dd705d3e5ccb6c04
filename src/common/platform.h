/* platform.h — the few operating-system services the device side uses that are not the same everywhere: random
 * bytes, the CPUs this process may run on, read-only file mappings, page-aligned arenas and giving their pages
 * back, trimming the heap. Each has the Linux call (unchanged behaviour and speed there) and a portable fallback
 * (musl, other POSIX systems, emscripten); defining TR_PLATFORM_GENERIC compiles the fallbacks on Linux too, so
 * scripts/check-portable.sh proves them. Nothing else on the device side includes a Linux-only header. */
#ifndef TR_COMMON_PLATFORM_H
#define TR_COMMON_PLATFORM_H

#include "tokroute.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fills buf with n bytes from the system's cryptographic random source; false when it cannot. */
bool tr_platform_random(void *buf, size_t n);

/* The CPUs this process may run on (its affinity mask: taskset, container cpusets): allowed[i] for CPU i < cap;
 * returns how many the mask allows (CPUs numbered beyond what it can describe count as allowed), or -1 where the
 * system has no mask to read (then every CPU counts as allowed). */
int tr_platform_affinity(bool *allowed, int cap);

/* Processors online (at least 1). */
int tr_platform_online_cpus(void);

/* A whole file readable in memory: mapped where the system maps files, read into the heap otherwise. */
typedef struct tr_file_view {
    const void *base;
    uint64_t size;
    bool mapped; /* false: base is a heap copy */
} tr_file_view;

/* Opens path (a regular file) into view; TR_ERR_IO (naming path) when it cannot, TR_ERR_NOMEM. An empty file gives
 * base NULL, size 0. */
tr_status tr_platform_view_file(const char *path, tr_file_view *view);
void tr_platform_view_close(tr_file_view *view);

/* n bytes of zeroed, page-aligned memory for an arena that tr_platform_release_pages may shrink later; NULL when
 * out of memory. Freed with tr_platform_free_pages(p, n). On Linux the arena asks for transparent huge pages
 * (MADV_HUGEPAGE): the model's repacked weights live in it and decode streams all of them every token. */
void *tr_platform_alloc_pages(size_t n);
void tr_platform_free_pages(void *p, size_t n);

/* The pages fully inside [p, p + n) of a file view or arena are not needed any more: they leave the process's
 * resident memory where the system allows it (a later read maps the file again); a no-op elsewhere. */
void tr_platform_release_pages(const void *p, size_t n);

/* Returns freed heap memory to the system where the allocator can (glibc's malloc_trim); a no-op elsewhere. */
void tr_platform_trim_heap(void);

#endif
