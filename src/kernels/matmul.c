/* matmul.c — the matrix product entry point: picks the instruction set once, quantizes the activations into the
 * caller's scratch (as llama.cpp does: Q8_0, Q8_1 or Q8_K by weight type), then splits the output across the thread
 * pool.
 *
 * Work is cut into chunks of whole weight rows (a multiple of 16) that threads claim from an atomic counter, so a
 * thread slowed by a neighbour on a shared machine simply claims fewer. Within a chunk, tokens go in blocks of
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
#include <stdlib.h>
#include <string.h>

#define TOKEN_BLOCK 64

/* ---------------------------------------------------------------- instruction set choice */

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_NEON, ISA_COUNT };
static const char *const ISA_NAMES[ISA_COUNT] = {"scalar", "avx2", "avx512", "neon"};

static mm_isa isa_tables[ISA_COUNT];
static bool isa_available[ISA_COUNT];
static _Atomic(const mm_isa *) active_isa;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

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
        isa_available[ISA_AVX2] = true;
        best = ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vnni")) {
            isa_tables[ISA_AVX512] = isa_tables[ISA_AVX2];
            mm_isa_avx512(&isa_tables[ISA_AVX512]);
            isa_available[ISA_AVX512] = true;
            best = ISA_AVX512;
        }
    }
#elif defined(__aarch64__)
    isa_tables[ISA_NEON] = isa_tables[ISA_SCALAR];
    mm_isa_neon(&isa_tables[ISA_NEON]);
    isa_available[ISA_NEON] = true;
    best = ISA_NEON;
#endif
    /* TOKROUTE_KERNELS may only lower the choice: forcing a set the CPU lacks would crash. */
    const int forced = isa_by_name(getenv("TOKROUTE_KERNELS"));
    if (forced >= 0 && isa_available[forced] && forced <= best) best = forced;
    atomic_store(&active_isa, &isa_tables[best]);
}

static const mm_isa *current_isa(void) {
    pthread_once(&isa_once, isa_init);
    return atomic_load(&active_isa);
}

const char *kernels_isa(void) { return current_isa()->name; }

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

typedef struct mm_job {
    mm_args a;
    mm_tile_fn tile;
    int64_t rows, n, chunk_rows, n_chunks;
    atomic_llong next_chunk;
    /* activation quantization */
    mm_quant_fn quant;
    const float *X;
} mm_job;

static void quant_task(void *arg, int ith, int nth) {
    mm_job *job = arg;
    for (int64_t i = ith; i < job->n; i += nth)
        job->quant(job->X + i * job->a.cols, (uint8_t *)job->a.x + (size_t)i * job->a.x_stride, job->a.cols);
}

static void product_task(void *arg, int ith, int nth) {
    mm_job *job = arg;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
        if (c >= job->n_chunks) break;
        const int64_t r0 = c * job->chunk_rows;
        const int64_t r1 = r0 + job->chunk_rows < job->rows ? r0 + job->chunk_rows : job->rows;
        for (int64_t i0 = 0; i0 < job->n; i0 += TOKEN_BLOCK)
            job->tile(&job->a, r0, r1, i0, i0 + TOKEN_BLOCK < job->n ? i0 + TOKEN_BLOCK : job->n);
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

tr_status matmul(thread_pool *tp, const weight_matrix *w, const float *X, int64_t n, float *Y, int64_t ldy,
                 matmul_scratch *scratch) {
    if (!w || !X || !Y || !scratch || n < 0 || w->rows < 0 || w->cols < 0 || (n > 1 && ldy < w->rows))
        return tr_fail(TR_ERR_ARG, "matmul: invalid arguments");
    if (!tr_type_supported(w->type))
        return tr_fail(TR_ERR_UNSUPPORTED, "matmul: no product for tensor type %s",
                       tr_type_name(w->type) ? tr_type_name(w->type) : "(unknown)");
    const int64_t be = tr_type_block_elems(w->type);
    if (w->cols % be != 0)
        return tr_fail(TR_ERR_ARG, "matmul: row length %lld is not a multiple of the %s block (%lld)",
                       (long long)w->cols, tr_type_name(w->type), (long long)be);
    if (n == 0 || w->rows == 0) return TR_OK;

    const mm_isa *isa = current_isa();
    mm_job job = {0};
    job.a.w = w->data;
    job.a.w_stride = w->row_stride ? w->row_stride : type_row_bytes(w->type, w->cols);
    job.a.cols = w->cols;
    job.a.y = Y;
    job.a.ldy = ldy;
    const mm_kernel *k = &isa->k[w->type];
    job.tile = k->tile;
    job.rows = w->rows;
    job.n = n;
    /* Small products run on the caller: waking a sleeping worker costs more than the work (tiny models, the
     * router's MLP). */
    const int nth = (double)w->rows * (double)w->cols * (double)n < MATMUL_INLINE_MACS ? 1 : thread_pool_size(tp);

    if (!k->quant) {
        job.a.x = (const uint8_t *)X;
        job.a.x_stride = (size_t)w->cols * sizeof(float);
    } else {
        job.a.x_stride = k->x_row_bytes(w->cols);
        tr_status st = scratch_reserve(scratch, job.a.x_stride * (size_t)n);
        if (st != TR_OK) return st;
        job.a.x = scratch->buf;
        job.quant = k->quant;
        job.X = X;
        if (n >= 2 && nth > 1) thread_pool_run(tp, quant_task, &job);
        else quant_task(&job, 0, 1);
    }
    job.chunk_rows = chunk_rows_for(w->rows, n, nth);
    job.n_chunks = (w->rows + job.chunk_rows - 1) / job.chunk_rows;
    atomic_init(&job.next_chunk, 0);
    if (job.n_chunks == 1 || nth == 1) product_task(&job, 0, 1);
    else thread_pool_run(tp, product_task, &job);
    return TR_OK;
}
