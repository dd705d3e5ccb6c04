/* kernels.h — internal contract of src/kernels: tensor block layouts, row conversion, matrix products and the
 * thread pool that every heavy operation runs on.
 *
 * Matrix products follow llama.cpp's arithmetic so results agree with it: for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 weights the
 * activations are quantized to Q8_0 (or Q8_1) blocks, for K-quants to Q8_K blocks, and the dot products run in
 * integers per block; F32/F16/BF16 weights multiply F32 activations in float. Weights are never copied.
 */
#ifndef TR_KERNELS_H
#define TR_KERNELS_H

#include "tokroute.h"

/* ---------------------------------------------------------------- thread pool */

typedef struct thread_pool thread_pool;
/* Work given to every thread: ith in [0, nth); the calling thread is ith 0. */
typedef void (*pool_task)(void *arg, int ith, int nth);

thread_pool *thread_pool_create(int n_threads); /* NULL on failure (message set) */
void thread_pool_free(thread_pool *tp);
int thread_pool_size(const thread_pool *tp);
/* Runs fn on all threads of the pool and returns when every thread has finished. Not reentrant. */
void thread_pool_run(thread_pool *tp, pool_task fn, void *arg);

/* ---------------------------------------------------------------- rows */

/* n must be a multiple of the type's block size. */
size_t type_row_bytes(tr_type type, int64_t n);
/* dst gets n floats. Returns TR_ERR_UNSUPPORTED for types without a decoder. */
tr_status dequantize_row(tr_type type, const void *src, float *dst, int64_t n);
/* Reference quantizers (used for synthetic models and tests); dst gets type_row_bytes(type, n). */
tr_status quantize_row(tr_type type, const float *src, void *dst, int64_t n);

/* ---------------------------------------------------------------- matrix products */

/* A weight matrix of `rows` rows of `cols` elements, row-major, each row type_row_bytes(type, cols) long. */
typedef struct weight_matrix {
    tr_type type;
    const void *data;
    int64_t rows, cols;
    size_t row_stride; /* bytes from one row to the next; 0 = packed (type_row_bytes(type, cols)) */
} weight_matrix;

/* Reusable scratch for quantized activations; grows on demand, freed with matmul_scratch_free. */
typedef struct matmul_scratch {
    void *buf;
    size_t cap;
} matmul_scratch;
void matmul_scratch_free(matmul_scratch *s);

/* Y[i*ldy + r] = dot(W row r, X[i*cols ...]) for i in [0, n), r in [0, rows).
 * X is n × cols F32 (contiguous rows). Threads split the work. Fails only with TR_ERR_NOMEM or
 * TR_ERR_UNSUPPORTED (type without a product). */
tr_status matmul(thread_pool *tp, const weight_matrix *w, const float *X, int64_t n, float *Y, int64_t ldy,
                 matmul_scratch *scratch);

/* Which instruction set the products use on this machine: "avx512", "avx2", "neon" or "scalar". Setting the
 * environment variable TOKROUTE_KERNELS=scalar|avx2|avx512 forces a lower one (for tests and benchmarks). */
const char *kernels_isa(void);
/* Whether an instruction set ("scalar", "avx2", "avx512", "neon") can run here; and switching the products to it
 * (for tests and benchmarks; not safe while another thread runs a product). */
bool kernels_isa_available(const char *name);
tr_status kernels_force_isa(const char *name);

#endif /* TR_KERNELS_H */
