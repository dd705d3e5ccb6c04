/* matmul.c — the matrix product entry point: picks the instruction set once, quantizes the activations into the
 * caller's scratch (as llama.cpp does: Q8_0, Q8_1 or Q8_K by weight type), then splits the output across the thread
 * pool.
 *
 * Work is cut into chunks of whole weight rows (a multiple of 16, so a chunk never splits an interleaved group of
 * repack.c) that threads claim from an atomic counter, so a thread slowed by a neighbour on a shared machine simply
 * claims fewer. matmul_multi numbers the chunks of several matrices in one sequence, so Q/K/V or gate/up cost one
 * hand-off to the threads instead of one each. Decode instead gives each thread one contiguous share of the rows,
 * which it claims piece by piece from the front while threads that run out take halves from the back of the
 * largest share left (see claim_decode). Within a chunk, tokens go in blocks of
 * TOKEN_BLOCK so a block of activations stays in L2 while the chunk's rows stream past it; the kernels reuse each
 * unpacked weight block across several tokens. */
#include "kernels/kernels.h"

#include "common/error.h"
#include "kernels/matmul_impl.h"
#include "kernels/types.h"

#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_BLOCK 64

/* ---------------------------------------------------------------- instruction set choice */

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_NEON, ISA_SIMD128, ISA_COUNT };
static const char *const ISA_NAMES[ISA_COUNT] = {"scalar", "avx2", "avx512", "neon", "simd128"};

static mm_isa isa_tables[ISA_COUNT];
static bool isa_available[ISA_COUNT];
static _Atomic(const mm_isa *) active_isa;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static char forced_error[160]; /* set when TOKROUTE_KERNELS names a set that cannot run here */

static int isa_by_name(const char *name) {
    for (int i = 0; i < ISA_COUNT; i++)
        if (name && strcmp(name, ISA_NAMES[i]) == 0) return i;
    return -1;
}

#if defined(__x86_64__)
/* F16C from CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c"). */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static void isa_init(void) {
    mm_isa_scalar(&isa_tables[ISA_SCALAR]);
    isa_available[ISA_SCALAR] = true;
    int best = ISA_SCALAR;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
        isa_tables[ISA_AVX2] = isa_tables[ISA_SCALAR];
        mm_isa_avx2(&isa_tables[ISA_AVX2]);
        mm_isa_avx2_x16(&isa_tables[ISA_AVX2]);
        mm_isa_avx2_iq4(&isa_tables[ISA_AVX2]);
        mm_isa_avx2_k23(&isa_tables[ISA_AVX2]);
        isa_available[ISA_AVX2] = true;
        best = ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vnni")) {
            isa_tables[ISA_AVX512] = isa_tables[ISA_AVX2];
            mm_isa_avx512(&isa_tables[ISA_AVX512]); /* replaces every quantized type's entry, X16 tile included */
            mm_isa_avx512_x16(&isa_tables[ISA_AVX512]);
            mm_isa_avx512_iq4(&isa_tables[ISA_AVX512]);
            mm_isa_avx512_k23(&isa_tables[ISA_AVX512]);
            isa_available[ISA_AVX512] = true;
            best = ISA_AVX512;
        }
    }
#elif defined(__aarch64__)
    isa_tables[ISA_NEON] = isa_tables[ISA_SCALAR];
    mm_isa_neon(&isa_tables[ISA_NEON]);
    mm_isa_neon_x16(&isa_tables[ISA_NEON]);
    mm_isa_neon_k23(&isa_tables[ISA_NEON]);
    mm_isa_neon_iq4(&isa_tables[ISA_NEON]);
    isa_available[ISA_NEON] = true;
    best = ISA_NEON;
#elif defined(__wasm_simd128__) /* chosen at build time: a wasm engine without SIMD128 refuses the whole module */
    isa_tables[ISA_SIMD128] = isa_tables[ISA_SCALAR];
    mm_isa_simd128(&isa_tables[ISA_SIMD128]);
    isa_available[ISA_SIMD128] = true;
    best = ISA_SIMD128;
#endif
    /* TOKROUTE_KERNELS chooses among the sets this CPU can run; naming one it cannot run (or an unknown name) is
     * an error reported by kernels_check, never a silent fallback that would make a test or benchmark of that
     * set measure another one. */
    const char *env = getenv("TOKROUTE_KERNELS");
    if (env && *env) {
        const int forced = isa_by_name(env);
        if (forced < 0)
            snprintf(forced_error, sizeof forced_error,
                     "TOKROUTE_KERNELS=%.40s is not an instruction set (scalar, avx2, avx512, neon, simd128)", env);
        else if (!isa_available[forced])
            snprintf(forced_error, sizeof forced_error,
                     "TOKROUTE_KERNELS=%s: this CPU cannot run the %s kernels", env, env);
        else
            best = forced;
    }
    /* TOKROUTE_PREFETCH (matmul_x16_avx512.c: l1 or l2) is checked the same way: a misspelt level would otherwise
     * measure the vendor's default while the benchmark says it measured the other. */
    const char *prefetch = getenv("TOKROUTE_PREFETCH");
    if (prefetch && *prefetch && strcmp(prefetch, "l1") != 0 && strcmp(prefetch, "l2") != 0 && !forced_error[0])
        snprintf(forced_error, sizeof forced_error, "TOKROUTE_PREFETCH=%.40s is not a prefetch level (l1, l2)",
                 prefetch);
    atomic_store(&active_isa, &isa_tables[best]);
}

static const mm_isa *current_isa(void) {
    pthread_once(&isa_once, isa_init);
    return atomic_load(&active_isa);
}

const char *kernels_isa(void) { return current_isa()->name; }

tr_status kernels_check(void) {
    pthread_once(&isa_once, isa_init);
    if (forced_error[0]) return tr_fail(TR_ERR_UNSUPPORTED, "%s", forced_error);
    return TR_OK;
}

bool kernels_have_x16(tr_type type) {
    return (int)type >= 0 && type < TR_TYPE_COUNT && current_isa()->k[type].tile_x16 != NULL;
}

bool kernels_isa_available(const char *name) {
    pthread_once(&isa_once, isa_init);
    const int i = isa_by_name(name);
    return i >= 0 && isa_available[i];
}

tr_status kernels_force_isa(const char *name) {
    pthread_once(&isa_once, isa_init);
    const int i = isa_by_name(name);
    if (i < 0 || !isa_available[i])
        return tr_fail(TR_ERR_UNSUPPORTED, "instruction set '%s' is not available here", name ? name : "(null)");
    forced_error[0] = '\0'; /* an explicit choice replaces the environment's */
    atomic_store(&active_isa, &isa_tables[i]);
    return TR_OK;
}

/* ---------------------------------------------------------------- scratch */

void matmul_scratch_free(matmul_scratch *s) {
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

static tr_status scratch_reserve(matmul_scratch *s, size_t bytes) {
    if (s->cap >= bytes) return TR_OK;
    void *p = realloc(s->buf, bytes);
    if (!p) return tr_fail(TR_ERR_NOMEM, "matmul scratch: cannot allocate %zu bytes", bytes);
    s->buf = p;
    s->cap = bytes;
    return TR_OK;
}

/* ---------------------------------------------------------------- the product */

#define MATMUL_INLINE_MACS 32768.0

/* One matrix of a (multi-)product: its arguments, kernels and where its chunks start in the shared numbering. */
typedef struct mm_part {
    mm_args a;
    const mm_kernel *k;
    tr_type type;
    int64_t rows, x16_rows, chunk_rows, first_chunk;
    int64_t first_group, step_groups; /* decode: the part's first 16-row group in the parts' concatenation; claim */
    size_t w_row_bytes;
    const float *X;      /* F32 activations (when the activations need quantizing: source of a) */
    bool quantize;       /* this part owns the quantized copy of X it reads */
} mm_part;

/* A thread's share of a decode product: groups [lo, hi) of the parts' concatenation, packed lo | hi << 32 so the
 * owner (taking from lo) and a thief (taking from hi) change it with one compare-and-swap. One cache line each. */
typedef struct mm_share {
    _Alignas(64) atomic_ullong range;
} mm_share;

#define SHARE_MAX_THREADS 64

typedef struct mm_job {
    mm_part parts[MATMUL_MULTI_MAX];
    int n_parts;
    int64_t n, n_chunks;
    atomic_llong next_chunk;
    bool shared_out; /* decode: shares[] instead of chunks */
    int64_t n_groups;
    mm_share shares[SHARE_MAX_THREADS];
    uint8_t *row_bufs; /* per thread, for tile_x16_unpacked (NULL when no part needs it) */
    size_t row_buf_bytes;
} mm_job;

static void quant_task(void *arg, int ith, int nth) {
    mm_job *job = arg;
    for (int p = 0; p < job->n_parts; p++) {
        const mm_part *pt = &job->parts[p];
        if (!pt->quantize) continue;
        for (int64_t i = ith; i < job->n; i += nth)
            pt->k->quant(pt->X + i * pt->a.cols, (uint8_t *)pt->a.x + (size_t)i * pt->a.x_stride, pt->a.cols);
    }
}

/* X16 rows on a set without an X16 kernel for the type (a set forced after the model was repacked): each row is
 * copied out as plain blocks into the thread's row buffer and goes through the plain tile. Slow, but only tests and
 * benchmarks get here. */
static void tile_x16_unpacked(const mm_part *pt, uint8_t *row, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {
    const weight_matrix w = {pt->type, pt->a.w, pt->rows, pt->a.cols, 0, WEIGHT_X16};
    for (int64_t r = r0; r < r1; r++) {
        weight_x16_row(&w, r, row);
        mm_args one = pt->a;
        one.w = row;
        one.y = pt->a.y + r;
        pt->k->tile(&one, 0, 1, i0, i1);
    }
}

static void run_chunk(const mm_part *pt, uint8_t *row_buf, int64_t r0, int64_t r1, int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += TOKEN_BLOCK) {
        const int64_t i1 = i0 + TOKEN_BLOCK < n ? i0 + TOKEN_BLOCK : n;
        int64_t r = r0;
        if (r < pt->x16_rows) {
            const int64_t rx = r1 < pt->x16_rows ? r1 : pt->x16_rows;
            if (pt->k->tile_x16) pt->k->tile_x16(&pt->a, r, rx, i0, i1);
            else tile_x16_unpacked(pt, row_buf, r, rx, i0, i1);
            r = rx;
        }
        if (r < r1) pt->k->tile(&pt->a, r, r1, i0, i1);
    }
}

/* Decode streams each weight once, so what counts is keeping every thread's memory stream long: a stream restarted
 * at each claimed chunk pays the memory latency again before the prefetchers catch up, and fixed chunks leave
 * threads idle at the end of each product. So each thread reads its own contiguous share from the front, about
 * DECODE_STEP_BYTES per claim; a thread whose share is done takes the back half of the largest share left (making
 * it its own, so it can be split again) until no share has work. */
#define DECODE_STEP_BYTES 65536
/* Tried (ade0d48): each thread, its share done, prefetching into L2 the first 2-32 KiB of its share of the product
 * that followed this one last token, so the next stream starts warm. Paired runs on a busy 2-core AMD machine gave
 * 0.93-1.03x on lfm2-350m and qwen2.5-0.5b, within the +-3% an A/A control showed: not kept. */

static int part_of_group(const mm_job *job, int p, int64_t g) {
    while (p + 1 < job->n_parts && g >= job->parts[p + 1].first_group) p++;
    while (p > 0 && g < job->parts[p].first_group) p--;
    return p;
}

static uint64_t pack_range(int64_t lo, int64_t hi) { return (uint64_t)lo | (uint64_t)hi << 32; }

/* Claims the next piece for thread ith: part *p, rows [*r0, *r1). False when no share has work left. */
static bool claim_decode(mm_job *job, int ith, int nth, int *p, int64_t *r0, int64_t *r1) {
    atomic_ullong *own = &job->shares[ith].range;
    for (;;) {
        unsigned long long v = atomic_load_explicit(own, memory_order_relaxed);
        int64_t lo = (int64_t)(v & 0xffffffffu), hi = (int64_t)(v >> 32);
        while (lo < hi) {
            *p = part_of_group(job, *p, lo);
            const mm_part *pt = &job->parts[*p];
            const int64_t part_end = pt->first_group + (pt->rows + 15) / 16;
            int64_t end = lo + pt->step_groups;
            if (end > hi) end = hi;
            if (end > part_end) end = part_end;
            if (atomic_compare_exchange_weak_explicit(own, &v, pack_range(end, hi), memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *r0 = (lo - pt->first_group) * 16;
                *r1 = (end - pt->first_group) * 16 < pt->rows ? (end - pt->first_group) * 16 : pt->rows;
                return true;
            }
            lo = (int64_t)(v & 0xffffffffu), hi = (int64_t)(v >> 32);
        }
        /* Own share done: take the back half of the largest one left. */
        int victim = -1;
        int64_t most = 0;
        for (int t = 0; t < nth; t++) {
            const unsigned long long w = atomic_load_explicit(&job->shares[t].range, memory_order_relaxed);
            const int64_t left = (int64_t)(w >> 32) - (int64_t)(w & 0xffffffffu);
            if (t != ith && left > most) most = left, victim = t;
        }
        if (victim < 0) return false;
        unsigned long long w = atomic_load_explicit(&job->shares[victim].range, memory_order_relaxed);
        const int64_t vlo = (int64_t)(w & 0xffffffffu), vhi = (int64_t)(w >> 32);
        if (vhi <= vlo) continue;
        const int64_t cut = vhi - (vhi - vlo + 1) / 2;
        if (atomic_compare_exchange_strong_explicit(&job->shares[victim].range, &w, pack_range(vlo, cut),
                                                    memory_order_relaxed, memory_order_relaxed))
            atomic_store_explicit(own, pack_range(cut, vhi), memory_order_relaxed);
    }
}

static void product_task(void *arg, int ith, int nth) {
    mm_job *job = arg;
    uint8_t *row_buf = job->row_bufs ? job->row_bufs + (size_t)ith * job->row_buf_bytes : NULL;
    int p = 0;
    if (job->shared_out) {
        int64_t r0, r1;
        while (claim_decode(job, ith, nth, &p, &r0, &r1)) run_chunk(&job->parts[p], row_buf, r0, r1, job->n);
        return;
    }
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
        if (c >= job->n_chunks) break;
        while (p + 1 < job->n_parts && c >= job->parts[p + 1].first_chunk) p++;
        while (p > 0 && c < job->parts[p].first_chunk) p--;
        const mm_part *pt = &job->parts[p];
        const int64_t r0 = (c - pt->first_chunk) * pt->chunk_rows;
        run_chunk(pt, row_buf, r0, r0 + pt->chunk_rows < pt->rows ? r0 + pt->chunk_rows : pt->rows, job->n);
    }
}

/* Rows per chunk: a multiple of 16, about 4 chunks per thread for balance; small for prefill so a chunk's rows stay
 * in L2 across a token block, larger for decode so claiming stays cheap. */
static int64_t chunk_rows_for(int64_t rows, int64_t n, int nth) {
    int64_t cr = rows / (4 * (int64_t)nth) / 16 * 16;
    const int64_t cap = n >= 4 ? 64 : 512;
    if (cr < 16) cr = 16;
    if (cr > cap) cr = cap;
    return cr;
}

static tr_status check_matrix(const weight_matrix *w) {
    if (!w || w->rows < 0 || w->cols < 0) return tr_fail(TR_ERR_ARG, "matmul: invalid weight matrix");
    if (!tr_type_supported(w->type))
        return tr_fail(TR_ERR_UNSUPPORTED, "matmul: no product for tensor type %s",
                       tr_type_name(w->type) ? tr_type_name(w->type) : "(unknown)");
    const int64_t be = tr_type_block_elems(w->type);
    if (w->cols % be != 0)
        return tr_fail(TR_ERR_ARG, "matmul: row length %lld is not a multiple of the %s block (%lld)",
                       (long long)w->cols, tr_type_name(w->type), (long long)be);
    if (w->layout == WEIGHT_X16 && (w->row_stride != 0 || !weight_x16_type(w->type)))
        return tr_fail(TR_ERR_ARG, "matmul: interleaved %s matrix with a row stride", tr_type_name(w->type));
    return TR_OK;
}

tr_status matmul_multi(thread_pool *tp, const weight_matrix *const *w, int n_w, const float *X, int64_t n,
                       float *const *Y, const int64_t *ldy, matmul_scratch *scratch) {
    if (!w || !X || !Y || !ldy || !scratch || n < 0 || n_w < 1 || n_w > MATMUL_MULTI_MAX)
        return tr_fail(TR_ERR_ARG, "matmul: invalid arguments");
    tr_status st = kernels_check();
    if (st != TR_OK) return st;
    double macs = 0;
    for (int m = 0; m < n_w; m++) {
        if ((st = check_matrix(w[m])) != TR_OK) return st;
        if (!Y[m] || (n > 1 && ldy[m] < w[m]->rows) || w[m]->cols != w[0]->cols)
            return tr_fail(TR_ERR_ARG, "matmul: invalid arguments");
        macs += (double)w[m]->rows * (double)w[m]->cols * (double)n;
    }
    if (n == 0 || w[0]->cols == 0) return TR_OK;

    const mm_isa *isa = current_isa();
    /* Small products run on the caller: waking a sleeping worker costs more than the work (tiny models, the
     * router's MLP). */
    const int nth = macs < MATMUL_INLINE_MACS ? 1 : thread_pool_size(tp);
    mm_job job = {.n_parts = n_w, .n = n};
    size_t x_bytes = 0, x_off[MATMUL_MULTI_MAX] = {0};
    int x_src[MATMUL_MULTI_MAX] = {0};
    for (int m = 0; m < n_w; m++) {
        mm_part *pt = &job.parts[m];
        pt->k = &isa->k[w[m]->type];
        pt->type = w[m]->type;
        pt->rows = w[m]->rows;
        pt->x16_rows = weight_x16_rows(w[m]);
        pt->w_row_bytes = type_row_bytes(w[m]->type, w[m]->cols);
        pt->a.w = w[m]->data;
        pt->a.w_stride = w[m]->row_stride ? w[m]->row_stride : pt->w_row_bytes;
        pt->a.cols = w[m]->cols;
        pt->a.y = Y[m];
        pt->a.ldy = ldy[m];
        pt->X = X;
        if (!pt->k->quant) {
            pt->a.x = (const uint8_t *)X;
            pt->a.x_stride = (size_t)w[m]->cols * sizeof(float);
            continue;
        }
        /* Parts reading the same activation format share one quantized copy (same cols, so same stride). */
        pt->a.x_stride = pt->k->x_row_bytes(w[m]->cols);
        x_src[m] = m;
        for (int e = 0; e < m; e++)
            if (job.parts[e].quantize && job.parts[e].k->quant == pt->k->quant) {
                x_src[m] = e;
                break;
            }
        if (x_src[m] == m) {
            pt->quantize = true;
            x_off[m] = x_bytes;
            x_bytes += (pt->a.x_stride * (size_t)n + 63) / 64 * 64;
        }
    }
    /* Row buffers for interleaved matrices this set has no X16 tile for, after the activations in the scratch. */
    for (int m = 0; m < n_w; m++)
        if (job.parts[m].x16_rows > 0 && !job.parts[m].k->tile_x16 && job.parts[m].w_row_bytes > job.row_buf_bytes)
            job.row_buf_bytes = (job.parts[m].w_row_bytes + 63) / 64 * 64;
    const size_t scratch_bytes = x_bytes + job.row_buf_bytes * (size_t)nth;
    if (scratch_bytes) {
        if ((st = scratch_reserve(scratch, scratch_bytes)) != TR_OK) return st;
        if (job.row_buf_bytes) job.row_bufs = (uint8_t *)scratch->buf + x_bytes;
    }
    if (x_bytes) {
        for (int m = 0; m < n_w; m++)
            if (job.parts[m].k->quant) job.parts[m].a.x = (const uint8_t *)scratch->buf + x_off[x_src[m]];
        if (n >= 2 && nth > 1) thread_pool_run(tp, quant_task, &job);
        else quant_task(&job, 0, 1);
    }
    for (int m = 0; m < n_w; m++) {
        mm_part *pt = &job.parts[m];
        pt->chunk_rows = chunk_rows_for(pt->rows, n, nth);
        pt->first_chunk = job.n_chunks;
        job.n_chunks += (pt->rows + pt->chunk_rows - 1) / pt->chunk_rows;
        pt->first_group = job.n_groups;
        job.n_groups += (pt->rows + 15) / 16;
        const size_t group_bytes = 16 * (pt->w_row_bytes ? pt->w_row_bytes : 1);
        pt->step_groups = DECODE_STEP_BYTES / group_bytes > 1 ? (int64_t)(DECODE_STEP_BYTES / group_bytes) : 1;
    }
    atomic_init(&job.next_chunk, 0);
    /* Decode: contiguous shares (the group count fits the 32-bit halves of a share for any real matrix). */
    const bool on_caller = job.n_chunks <= 1 || nth == 1;
    job.shared_out = !on_caller && n < 4 && nth <= SHARE_MAX_THREADS && job.n_groups < ((int64_t)1 << 31);
    if (job.shared_out)
        for (int t = 0; t < nth; t++)
            atomic_init(&job.shares[t].range, pack_range(job.n_groups * t / nth, job.n_groups * (t + 1) / nth));
    if (on_caller) product_task(&job, 0, 1);
    else thread_pool_run(tp, product_task, &job);
    return TR_OK;
}

tr_status matmul(thread_pool *tp, const weight_matrix *w, const float *X, int64_t n, float *Y, int64_t ldy,
                 matmul_scratch *scratch) {
    const weight_matrix *ws[1] = {w};
    float *ys[1] = {Y};
    const int64_t ldys[1] = {ldy};
    return matmul_multi(tp, ws, 1, X, n, ys, ldys, scratch);
}
