/* kernels.h — internal contract of src/kernels: tensor block layouts, row conversion, matrix products and the
 * thread pool that every heavy operation runs on.
 *
 * Matrix products follow llama.cpp's arithmetic so results agree with it: for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 weights the
 * activations are quantized to Q8_0 (or Q8_1) blocks, for K-quants to Q8_K blocks, and the dot products run in
 * integers per block; F32/F16/BF16 weights multiply F32 activations in float. Quantized weights may be repacked
 * once at load into an interleaved layout the SIMD kernels stream faster (repack.c); nothing else copies them.
 */
#ifndef TR_KERNELS_H
#define TR_KERNELS_H

#include "tokroute.h"

/* ---------------------------------------------------------------- thread pool */

typedef struct thread_pool thread_pool;
/* One share of a run's work: ith in [0, nth), nth the pool's size. Each share runs exactly once, on whichever thread
 * claims it (share 0 on the calling thread), so a share must not depend on the thread that runs it. */
typedef void (*pool_task)(void *arg, int ith, int nth);

thread_pool *thread_pool_create(int n_threads); /* NULL on failure (message set) */
void thread_pool_free(thread_pool *tp);
int thread_pool_size(const thread_pool *tp);
/* Runs fn's nth shares on the pool's threads and returns when every share has finished. Not reentrant. */
void thread_pool_run(thread_pool *tp, pool_task fn, void *arg);
/* CPUs granted by a cgroup v2 cpu.max text ("<quota> <period>", rounded up), or 0 for "max" (no limit) and for
 * text that does not parse. */
int cgroup_cpu_limit(const char *text);

/* ---------------------------------------------------------------- rows */

/* n must be a multiple of the type's block size. */
size_t type_row_bytes(tr_type type, int64_t n);
/* dst gets n floats. Returns TR_ERR_UNSUPPORTED for types without a decoder. */
tr_status dequantize_row(tr_type type, const void *src, float *dst, int64_t n);
/* Reference quantizers (used for synthetic models and tests); dst gets type_row_bytes(type, n). */
tr_status quantize_row(tr_type type, const float *src, void *dst, int64_t n);

/* ---------------------------------------------------------------- matrix products */

/* How a matrix's bytes are arranged. WEIGHT_X16: rows [0, rows/16*16) are stored in interleaved groups of 16
 * (repack.c); the remaining rows are plain, at the same offsets as in the row-major layout. */
typedef enum weight_layout { WEIGHT_PLAIN = 0, WEIGHT_X16 = 1 } weight_layout;

/* A weight matrix of `rows` rows of `cols` elements, row-major, each row type_row_bytes(type, cols) long. */
typedef struct weight_matrix {
    tr_type type;
    const void *data;
    int64_t rows, cols;
    size_t row_stride; /* bytes from one row to the next; 0 = packed (type_row_bytes(type, cols)) */
    weight_layout layout;
} weight_matrix;

/* ---------------------------------------------------------------- interleaved layout (repack.c) */

/* Types that have an X16 layout: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS. */
bool weight_x16_type(tr_type type);
/* Whether repacking w pays here: a type with an X16 layout, packed rows, at least 16 of them, and an X16 kernel on
 * the active instruction set. TOKROUTE_REPACK=0 in the environment turns repacking off. */
bool weight_repack_wanted(const weight_matrix *w);
/* Bytes the matrix spans. */
size_t weight_bytes(const weight_matrix *w);
/* Writes the X16 layout of w to dst (weight_bytes(w) bytes; dst may be w->data itself when that is writable) and
 * points w at it. */
tr_status weight_repack(weight_matrix *w, void *dst);
/* Rows in interleaved groups (0 for plain matrices). */
int64_t weight_x16_rows(const weight_matrix *w);
/* Row r as plain blocks (type_row_bytes(type, cols) bytes) whatever the layout: for embedding lookups and tests. */
void weight_x16_row(const weight_matrix *w, int64_t r, void *dst);
/* Row r decoded to cols floats, whatever the layout (embedding lookups). */
tr_status weight_dequantize_row(const weight_matrix *w, int64_t r, float *dst);

/* ---------------------------------------------------------------- exact load-time conversion (convert_wasm.c) */

/* The type whose product the active kernels compute faster and that holds exactly w's values, or w->type when
 * there is none: only SIMD128 has one, Q5_0 -> Q8_0 (same scale, q8 = q5 - 16). Plain packed matrices only.
 * TOKROUTE_CONVERT=0 in the environment keeps every file type (for before/after measurements and tests). */
tr_type weight_convert_type(const weight_matrix *w);
/* Bytes the matrix takes in type `to`. */
size_t weight_convert_bytes(const weight_matrix *w, tr_type to);
/* Writes w in type `to` (one weight_convert_type names; weight_convert_bytes(w, to) bytes) to dst and points w at
 * it. */
tr_status weight_convert(weight_matrix *w, tr_type to, void *dst);
/* Whether a model file of file_bytes and extra_bytes of converted copies fit the memory this build can address
 * with room for the KV cache and work buffers (wasm32: the page's own limit, web/worker.js's MAX_MODEL_BYTES). */
bool weight_convert_fits(uint64_t file_bytes, uint64_t extra_bytes);

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
/* Several products of the same input at once (Q, K and V; gate and up): Y[m] = W[m] X with ldy[m], all W[m] with
 * the same cols. One hand-off to the threads for all of them; activations are quantized once per format. */
enum { MATMUL_MULTI_MAX = 4 };
tr_status matmul_multi(thread_pool *tp, const weight_matrix *const *w, int n_w, const float *X, int64_t n,
                       float *const *Y, const int64_t *ldy, matmul_scratch *scratch);

/* Which instruction set the products use on this machine: "avx512", "avx2", "neon", "simd128" (WebAssembly) or
 * "scalar". Setting the environment variable TOKROUTE_KERNELS=scalar|avx2|avx512|neon|simd128 forces one (for tests and benchmarks). */
const char *kernels_isa(void);
/* TR_OK, or TR_ERR_UNSUPPORTED with a message when TOKROUTE_KERNELS names a set that is unknown or cannot run on
 * this CPU (the products then refuse to run rather than silently use another set). */
tr_status kernels_check(void);
/* Whether the active instruction set has an X16 kernel for the type. */
bool kernels_have_x16(tr_type type);
/* Whether an instruction set ("scalar", "avx2", "avx512", "neon", "simd128") can run here; and switching the products to it
 * (for tests and benchmarks; not safe while another thread runs a product). */
bool kernels_isa_available(const char *name);
tr_status kernels_force_isa(const char *name);

#endif /* TR_KERNELS_H */
