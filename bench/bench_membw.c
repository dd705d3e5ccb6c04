/* bench_membw.c — the machine's memory-read bandwidth, the ceiling of a decode step (which streams every weight
 * once per token): T threads each stream their slice of a buffer much larger than the caches, summing 64-bit words
 * with independent accumulators so loads, not additions, are the limit. The best of R passes is reported, per
 * thread count from 1 to T, and as a last line "membw_gbps <best>" for scripts.
 *
 *   bench_membw [--mb SIZE_MIB] [--threads T] [--reps R] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint64_t v4u64 __attribute__((vector_size(32)));

typedef struct slice {
    const v4u64 *p;
    size_t n; /* vectors */
    pthread_barrier_t *start;
    double seconds;
    uint64_t sink;
} slice;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *stream(void *arg) {
    slice *s = arg;
    pthread_barrier_wait(s->start);
    const double t0 = now_s();
    v4u64 a = {0}, b = {0}, c = {0}, d = {0};
    size_t i = 0;
    for (; i + 4 <= s->n; i += 4) {
        a += s->p[i];
        b += s->p[i + 1];
        c += s->p[i + 2];
        d += s->p[i + 3];
    }
    for (; i < s->n; i++) a += s->p[i];
    s->seconds = now_s() - t0;
    const v4u64 t = a + b + c + d;
    s->sink = t[0] + t[1] + t[2] + t[3];
    return NULL;
}

/* One pass of `threads` threads over the buffer; GB/s over the slowest thread's time. */
static double pass(const v4u64 *buf, size_t n, int threads) {
    pthread_t tid[64];
    slice sl[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    const size_t per = n / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        sl[t] = (slice){buf + per * (size_t)t, per, &start, 0, 0};
        if (t > 0) pthread_create(&tid[t], NULL, stream, &sl[t]);
    }
    stream(&sl[0]);
    double slowest = sl[0].seconds;
    uint64_t sink = sl[0].sink;
    for (int t = 1; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (sl[t].seconds > slowest) slowest = sl[t].seconds;
        sink += sl[t].sink;
    }
    pthread_barrier_destroy(&start);
    if (sink == 42) fprintf(stderr, " "); /* keeps the sums alive */
    return (double)(per * (size_t)threads * sizeof(v4u64)) / slowest * 1e-9;
}

int main(int argc, char **argv) {
    long mb = 1024;
    int threads = 2, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--mb SIZE_MIB] [--threads T] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (mb < 16 || threads < 1 || threads > 64 || reps < 1) {
        fprintf(stderr, "bench_membw: need --mb >= 16, 1 <= --threads <= 64, --reps >= 1\n");
        return 2;
    }
    const size_t bytes = (size_t)mb << 20, n = bytes / sizeof(v4u64);
    v4u64 *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "bench_membw: cannot allocate %ld MiB\n", mb);
        return 1;
    }
    memset(buf, 1, bytes); /* touch every page so the timed passes read memory, not the zero page */
    double best_all = 0;
    for (int t = 1; t <= threads; t++) {
        double best = 0;
        for (int r = 0; r < reps; r++) {
            const double g = pass(buf, n, t);
            if (g > best) best = g;
        }
        printf("read bandwidth, %d thread%s: %6.1f GB/s  (%ld MiB buffer, best of %d)\n", t, t > 1 ? "s" : "", best, mb,
               reps);
        if (best > best_all) best_all = best;
    }
    printf("membw_gbps %.2f\n", best_all);
    free(buf);
    return 0;
}
