/* thread_pool.c — persistent worker threads for the matrix products, and tr_physical_cores (the default thread
 * count: physical cores in the affinity mask, capped by the cgroup v2 CPU quota).
 *
 * The model runs ~170 products per decoded token, so a dispatch must cost a few microseconds: the caller bumps an
 * atomic generation counter and workers that are spinning pick it up at once. Two models may alternate in one
 * process, so an idle worker spins only briefly (SPIN_NS) and then sleeps on a condition variable; the caller
 * takes the mutex to wake sleepers only when some are asleep.
 *
 * A run is nth shares (fn's ith = 0..nth-1) that the caller and the workers claim from an atomic counter, the caller
 * first: a share is computed the same way whichever thread claims it, so results do not depend on who ran what. The
 * caller waits only for shares a worker has claimed: a worker descheduled by a neighbour on a shared machine before
 * it picked the run up does not hold the step (the caller runs its share too), where a fixed share per thread made
 * every hand-off wait for every worker to be scheduled again. */
#include "kernels/kernels.h"

#include "common/error.h"
#include "common/platform.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_NS 50000 /* how long an idle worker polls before sleeping */

typedef struct worker {
    thread_pool *tp;
    int ith;
    pthread_t thread;
} worker;

struct thread_pool {
    int n_threads;
    worker *workers; /* n_threads - 1 of them; the caller is thread 0 */
    pool_task fn;
    void *arg;
    atomic_uint generation; /* bumped once per run and once at shutdown */
    atomic_int next_share;  /* the next unclaimed share of the current run (>= n_threads: none left) */
    atomic_int n_done;      /* shares workers have finished in the current run */
    atomic_int n_sleeping;
    atomic_bool stop;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns the next generation after `seen`: spins first, then sleeps. */
static unsigned wait_generation(thread_pool *tp, unsigned seen) {
    unsigned g;
    uint64_t start = now_ns();
    for (int i = 0;; i++) {
        g = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if ((i & 255) == 255 && now_ns() - start > SPIN_NS) break;
    }
    pthread_mutex_lock(&tp->mutex);
    /* Announce the sleep before the last check: the caller bumps the generation, then reads n_sleeping (both
     * sequentially consistent), so either we see the new generation here or it sees us and broadcasts. */
    atomic_fetch_add(&tp->n_sleeping, 1);
    while ((g = atomic_load(&tp->generation)) == seen) pthread_cond_wait(&tp->wake, &tp->mutex);
    atomic_fetch_sub(&tp->n_sleeping, 1);
    pthread_mutex_unlock(&tp->mutex);
    return g;
}

/* Claims the next share of the current run: its index, or -1 when all are taken. */
static int claim_share(thread_pool *tp) {
    int s = atomic_load_explicit(&tp->next_share, memory_order_relaxed);
    while (s < tp->n_threads)
        if (atomic_compare_exchange_weak_explicit(&tp->next_share, &s, s + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return s;
    return -1;
}

static void *worker_main(void *p) {
    worker *w = p;
    thread_pool *tp = w->tp;
    unsigned seen = 0;
    for (;;) {
        seen = wait_generation(tp, seen);
        if (atomic_load(&tp->stop)) break;
        /* The shares left, if any, of the run now open (a worker late for one run may find the next one here: it
         * reads fn and arg only after claiming, and a claimed share keeps its run open until it is done). */
        int s;
        while ((s = claim_share(tp)) >= 0) {
            tp->fn(tp->arg, s, tp->n_threads);
            atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_release);
        }
    }
    return NULL;
}

thread_pool *thread_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    thread_pool *tp = calloc(1, sizeof *tp);
    if (!tp) {
        tr_fail(TR_ERR_NOMEM, "thread pool: out of memory");
        return NULL;
    }
    tp->n_threads = 1;
    atomic_init(&tp->next_share, n_threads); /* no run open */
    pthread_mutex_init(&tp->mutex, NULL);
    pthread_cond_init(&tp->wake, NULL);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) {
            thread_pool_free(tp);
            tr_fail(TR_ERR_NOMEM, "thread pool: out of memory");
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker *w = &tp->workers[i - 1];
        w->tp = tp;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            thread_pool_free(tp);
            tr_fail(TR_ERR_NOMEM, "thread pool: cannot start thread %d of %d", i, n_threads);
            return NULL;
        }
        tp->n_threads = i + 1; /* threads started so far, so free joins exactly these */
    }
    return tp;
}

static void wake_sleepers(thread_pool *tp) {
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mutex);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mutex);
    }
}

void thread_pool_free(thread_pool *tp) {
    if (!tp) return;
    atomic_store(&tp->stop, true);
    atomic_fetch_add(&tp->generation, 1);
    pthread_mutex_lock(&tp->mutex);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mutex);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i - 1].thread, NULL);
    pthread_cond_destroy(&tp->wake);
    pthread_mutex_destroy(&tp->mutex);
    free(tp->workers);
    free(tp);
}

int thread_pool_size(const thread_pool *tp) { return tp ? tp->n_threads : 1; }

void thread_pool_run(thread_pool *tp, pool_task fn, void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->n_done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->next_share, 1, memory_order_release); /* share 0 is the caller's; publishes fn/arg */
    atomic_fetch_add(&tp->generation, 1); /* seq_cst: orders against n_sleeping */
    wake_sleepers(tp);
    fn(arg, 0, tp->n_threads);
    int own = 1; /* shares the caller ran: the workers claimed the rest */
    for (int s; (s = claim_share(tp)) >= 0; own++) fn(arg, s, tp->n_threads);
    const int others = tp->n_threads - own;
    for (int i = 0; atomic_load_explicit(&tp->n_done, memory_order_acquire) < others; i++) {
        /* A worker may have been descheduled (the machine is shared): stop hogging the core after a while. */
        if (i < 100000) cpu_relax();
        else sched_yield();
    }
}

/* ---------------------------------------------------------------- cores */

static int read_int_file(const char *path, int *out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fscanf(f, "%d", out) == 1;
    fclose(f);
    return ok;
}

int cgroup_cpu_limit(const char *text) {
    if (!text) return 0;
    while (*text == ' ' || *text == '\t') text++;
    if (strncmp(text, "max", 3) == 0) return 0; /* no quota */
    char *end;
    errno = 0;
    const long long quota = strtoll(text, &end, 10);
    if (errno || end == text || quota <= 0 || (*end != ' ' && *end != '\t')) return 0;
    const char *p = end;
    const long long period = strtoll(p, &end, 10);
    if (errno || end == p || period <= 0) return 0;
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (*end != '\0') return 0;
    const long long cpus = quota / period + (quota % period != 0); /* a partial CPU still runs a thread */
    return cpus > 4096 ? 4096 : (int)cpus;
}

/* The cgroup v2 quota of this process's cgroup as mounted in its namespace (containers see their own at the root
 * of /sys/fs/cgroup); 0 when there is none or it cannot be read. */
static int cgroup_limit_here(void) {
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f) return 0;
    char buf[64];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return cgroup_cpu_limit(buf);
}

/* Physical cores = distinct (package, core_id) pairs in sysfs topology among the CPUs this process may run on
 * (its affinity mask: taskset, container cpusets); SMT siblings share a pair. Capped by the cgroup's CPU quota,
 * since threads beyond it only wait for their turn. */
int tr_physical_cores(void) {
    enum { MAX_CPUS = 4096 };
    bool *allowed = malloc(MAX_CPUS * sizeof *allowed);
    const int n_allowed = allowed ? tr_platform_affinity(allowed, MAX_CPUS) : -1;
    const bool have_mask = n_allowed >= 0;
    int (*pairs)[2] = malloc(sizeof(int[MAX_CPUS][2]));
    int n_pairs = 0;
    DIR *dir = pairs ? opendir("/sys/devices/system/cpu") : NULL;
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL && n_pairs < MAX_CPUS) {
            int cpu;
            char tail;
            if (sscanf(e->d_name, "cpu%d%c", &cpu, &tail) != 1) continue;
            if (have_mask && cpu >= 0 && cpu < MAX_CPUS && !allowed[cpu]) continue;
            char path[256];
            int pkg = 0, core = 0;
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
            if (!read_int_file(path, &core)) continue;
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
            read_int_file(path, &pkg);
            int seen = 0;
            for (int i = 0; i < n_pairs && !seen; i++) seen = pairs[i][0] == pkg && pairs[i][1] == core;
            if (!seen) {
                pairs[n_pairs][0] = pkg;
                pairs[n_pairs][1] = core;
                n_pairs++;
            }
        }
        closedir(dir);
    }
    free(pairs);
    free(allowed);
    int cores = n_pairs;
    if (cores == 0) {
        cores = tr_platform_online_cpus();
        if (have_mask && n_allowed > 0 && n_allowed < cores) cores = n_allowed;
    }
    const int quota = cgroup_limit_here();
    if (quota > 0 && quota < cores) cores = quota;
    return cores > 0 ? cores : 1;
}
