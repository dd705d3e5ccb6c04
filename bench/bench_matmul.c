/* bench_matmul.c — speed of the matrix products at qwen2.5-0.5b's shapes (dim 896, KV dim 128, FFN 4864, vocab
 * 151936; --dims DIM,QDIM,KV,FFN for another model's, e.g. 1024,2048,1024,3072 for qwen3-0.6b)  * 151936). Decode (n=1) is bound by memory: reported as GB/s of weights streamed, over several distinct layers so
 * the caches cannot hold them. Prefill (n=256) is bound by arithmetic: reported as GOP/s (2 ops per
 * multiply-add). Weights hold quantized random values (content does not change speed).
 *
 * Each type runs twice in the same process, with the weights as in the file ("plain") and repacked into the
 * interleaved layout the kernels prefer ("x16", repack.c), so the two can be compared under the same load.
 *
 *   bench_matmul [--types q8_0,q4_k,...] [--isa avx512|avx2|scalar] [--threads N] [--layers L] [--reps R]
 *                [--no-output] [--cputime] [--layout plain|x16|both] [--tile-rows 8,16,64,128]
 *
 * --tile-rows N,...: instead, GOP/s of one product per shape (896x896, 4864x896, 896x4864, 151936x896, interleaved
 * layout when the kernels have one) at each activation row count N, the batched passes of `tokroute serve`. */
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { VOCAB = 151936, PREFILL = 256, N_MATS = 7 };
static int64_t DIM = 896, QDIM = 896, KV = 128, FFN = 4864;
static int64_t SHAPES[N_MATS][2]; /* rows × cols: q k v o gate up down */

static void set_shapes(void) {
    const int64_t s[N_MATS][2] = {{QDIM, DIM}, {KV, DIM}, {KV, DIM}, {DIM, QDIM}, {FFN, DIM}, {FFN, DIM}, {DIM, FFN}};
    memcpy(SHAPES, s, sizeof s);
}

/* --cputime: process CPU time divided by the thread count instead of wall time, which discounts time the process
 * spent descheduled by neighbours on a shared machine (spinning workers still count). */
static bool use_cputime;
static int n_threads_used = 1;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(use_cputime ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    if (use_cputime) return ((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec) / n_threads_used;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A rows × cols matrix of `type`: a pool of 64 quantized random rows repeated. */
static void *make_matrix(tr_type type, int64_t rows, int64_t cols) {
    const size_t rb = type_row_bytes(type, cols);
    uint8_t *m = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!m || !row) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    const int64_t pool = rows < 64 ? rows : 64;
    unsigned s = 1;
    for (int64_t r = 0; r < pool; r++) {
        for (int64_t k = 0; k < cols; k++) {
            s = s * 1664525u + 1013904223u;
            row[k] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
        }
        quantize_row(type, row, m + rb * (size_t)r, cols);
    }
    for (int64_t r = pool; r < rows; r++) memcpy(m + rb * (size_t)r, m + rb * (size_t)(r % pool), rb);
    free(row);
    return m;
}

static float *make_x(int64_t n, int64_t cols) {
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    return x;
}

/* Rows of 896 are not whole 256-element blocks: like llama.cpp's quantizer, K-quant files store those matrices in a
 * 32-element type instead (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0). */
static tr_type type_for_cols(tr_type type, int64_t cols) {
    if (cols % tr_type_block_elems(type) == 0) return type;
    switch (type) {
    case TR_TYPE_Q4_K: return TR_TYPE_Q5_0;
    case TR_TYPE_Q5_K: return TR_TYPE_Q5_1;
    default: return TR_TYPE_Q8_0;
    }
}

static void run(thread_pool *tp, const weight_matrix *w, const float *x, int64_t n, float *y, matmul_scratch *sc) {
    if (matmul(tp, w, x, n, y, w->rows, sc) != TR_OK) {
        fprintf(stderr, "bench_matmul: %s\n", tr_last_error());
        exit(1);
    }
}

/* Repacks the matrix into the interleaved layout when the kernels have one for it (same bytes, rearranged). */
static const char *apply_layout(weight_matrix *w, bool x16) {
    if (!x16 || !weight_repack_wanted(w)) return "plain";
    if (weight_repack(w, (void *)w->data) != TR_OK) {
        fprintf(stderr, "bench_matmul: %s\n", tr_last_error());
        exit(1);
    }
    return "x16";
}

static void bench_type(tr_type type, thread_pool *tp, int layers, int reps, bool output, bool x16) {
    weight_matrix *w = calloc((size_t)layers * N_MATS, sizeof *w);
    double layer_bytes = 0, layer_ops = 0;
    for (int l = 0; l < layers; l++)
        for (int m = 0; m < N_MATS; m++) {
            weight_matrix *wm = &w[l * N_MATS + m];
            const tr_type t = type_for_cols(type, SHAPES[m][1]);
            *wm = (weight_matrix){t, make_matrix(t, SHAPES[m][0], SHAPES[m][1]), SHAPES[m][0], SHAPES[m][1], 0, WEIGHT_PLAIN};
            apply_layout(wm, x16);
            if (l == 0) {
                layer_bytes += (double)type_row_bytes(t, wm->cols) * (double)wm->rows;
                layer_ops += 2.0 * (double)wm->rows * (double)wm->cols;
            }
        }
    const int64_t widest = FFN > QDIM ? FFN : QDIM;
    float *x = make_x(PREFILL, widest), *y = malloc(sizeof(float) * (size_t)PREFILL * widest);
    matmul_scratch sc = {0};

    /* decode: every matrix of every layer once per "token" */
    for (int m = 0; m < N_MATS * layers; m++) run(tp, &w[m], x, 1, y, &sc); /* warm up */
    /* The machine may be shared: keep the fastest repetition, the one least disturbed. */
    double dec = 1e30, t0;
    for (int rep = 0; rep < reps; rep++) {
        t0 = now_s();
        for (int m = 0; m < N_MATS * layers; m++) run(tp, &w[m], x, 1, y, &sc);
        const double t = (now_s() - t0) / layers;
        dec = t < dec ? t : dec;
    }

    /* prefill: 256 tokens through each matrix of layer 0 */
    double pre = 1e30;
    const int pre_reps = reps / 4 > 2 ? reps / 4 : 2;
    for (int rep = 0; rep < pre_reps; rep++) {
        t0 = now_s();
        for (int m = 0; m < N_MATS; m++) run(tp, &w[m], x, PREFILL, y, &sc);
        const double t = now_s() - t0;
        pre = t < pre ? t : pre;
    }

    printf("%-5s %-6s %-5s layer: decode %6.1f GB/s (%6.1f us/layer)   prefill n=%d %6.1f GOP/s (%5.2f ms/layer)\n",
           tr_type_name(type), kernels_isa(), w[4].layout == WEIGHT_X16 ? "x16" : "plain", layer_bytes / dec * 1e-9, dec * 1e6, PREFILL, layer_ops * PREFILL / pre * 1e-9,
           pre * 1e3);
    fflush(stdout);

    if (output) {
        const tr_type ot = type_for_cols(type, DIM);
        weight_matrix out = {ot, make_matrix(ot, VOCAB, DIM), VOCAB, DIM, 0, WEIGHT_PLAIN};
        const char *layout = apply_layout(&out, x16);
        float *yo = malloc(sizeof(float) * VOCAB * 16);
        const double bytes = (double)type_row_bytes(ot, DIM) * VOCAB;
        run(tp, &out, x, 1, yo, &sc);
        double od = 1e30, op = 1e30;
        for (int rep = 0; rep < 10; rep++) {
            t0 = now_s();
            run(tp, &out, x, 1, yo, &sc);
            const double t = now_s() - t0;
            od = t < od ? t : od;
        }
        for (int rep = 0; rep < 3; rep++) {
            t0 = now_s();
            run(tp, &out, x, 16, yo, &sc);
            const double t = now_s() - t0;
            op = t < op ? t : op;
        }
        printf("%-5s %-6s %-5s output (%s): decode %6.1f GB/s (%6.2f ms)   n=16 %6.1f GOP/s\n", tr_type_name(type),
               kernels_isa(), layout, tr_type_name(ot),
               bytes / od * 1e-9, od * 1e3, 2.0 * VOCAB * DIM * 16 / op * 1e-9);
        free(yo);
        free((void *)out.data);
    }
    for (int m = 0; m < N_MATS * layers; m++) free((void *)w[m].data);
    free(w);
    free(x);
    free(y);
    matmul_scratch_free(&sc);
}

/* --tile-rows: each shape at each activation row count; the fastest of enough repetitions for about 0.2 s. */
static void bench_tile_rows(tr_type type, thread_pool *tp, const char *counts) {
    const int64_t shapes[4][2] = {{DIM, DIM}, {FFN, DIM}, {DIM, FFN}, {VOCAB, DIM}};
    for (int s = 0; s < 4; s++) {
        const tr_type t = type_for_cols(type, shapes[s][1]);
        weight_matrix w = {t, make_matrix(t, shapes[s][0], shapes[s][1]), shapes[s][0], shapes[s][1], 0, WEIGHT_PLAIN};
        const char *layout = apply_layout(&w, true);
        char buf[128];
        snprintf(buf, sizeof buf, "%s", counts);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            const int64_t n = atoll(tok);
            if (n < 1) continue;
            float *x = make_x(n, w.cols), *y = malloc(sizeof(float) * (size_t)(n * w.rows));
            matmul_scratch sc = {0};
            const double ops = 2.0 * (double)w.rows * (double)w.cols * (double)n;
            const int reps = (int)(6e10 / ops) + 3;
            run(tp, &w, x, n, y, &sc);
            double best = 1e30;
            for (int rep = 0; rep < reps; rep++) {
                const double t0 = now_s();
                run(tp, &w, x, n, y, &sc);
                const double dt = now_s() - t0;
                best = dt < best ? dt : best;
            }
            printf("%-5s %-6s %-5s %6lldx%-5lld n=%-4lld %7.1f GOP/s\n", tr_type_name(t), kernels_isa(), layout,
                   (long long)w.rows, (long long)w.cols, (long long)n, ops / best * 1e-9);
            fflush(stdout);
            free(x), free(y);
            matmul_scratch_free(&sc);
        }
        free((void *)w.data);
    }
}

/* Share 0 (the caller's) returns once every other share has started: the caller would otherwise take the shares of
 * workers that have not claimed them yet (thread_pool.c) and the run would measure no hand-off at all. */
static void handoff_task(void *arg, int ith, int nth) {
    atomic_int *started = arg;
    if (ith > 0) atomic_fetch_add(started, 1);
    else
        while (atomic_load(started) < nth - 1) {
        }
}

/* What one product pays before any arithmetic: handing the shares to the workers and waiting for them. */
static void bench_dispatch(thread_pool *tp) {
    enum { RUNS = 20000 };
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_s();
        for (int i = 0; i < RUNS; i++) {
            atomic_int started;
            atomic_init(&started, 0);
            thread_pool_run(tp, handoff_task, &started);
        }
        const double t = (now_s() - t0) / RUNS;
        best = t < best ? t : best;
    }
    printf("thread pool dispatch: %.2f us per run\n", best * 1e6);
}

int main(int argc, char **argv) {
    const char *types = "q8_0,q4_k,q5_0,q6_k,f16";
    const char *isa = NULL;
    int threads = 2, layers = 8, reps = 20;
    bool output = true;
    const char *layouts = "both";
    const char *tile_rows = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-output")) output = false;
        else if (!strcmp(argv[i], "--cputime")) use_cputime = true;
        else if (!strcmp(argv[i], "--layout") && i + 1 < argc) layouts = argv[++i];
        else if (!strcmp(argv[i], "--tile-rows") && i + 1 < argc) tile_rows = argv[++i];
        else if (!strcmp(argv[i], "--dims") && i + 1 < argc &&
                 sscanf(argv[++i], "%lld,%lld,%lld,%lld", (long long *)&DIM, (long long *)&QDIM, (long long *)&KV,
                        (long long *)&FFN) == 4 && DIM > 0 && QDIM > 0 && KV > 0 && FFN > 0) continue;
        else {
            fprintf(stderr, "usage: %s [--types list] [--isa name] [--threads N] [--layers L] [--reps R] [--no-output] [--cputime] [--layout plain|x16|both] [--dims D,Q,KV,FF] [--tile-rows N,...]\n",
                    argv[0]);
            return 2;
        }
    }
    if (isa && kernels_force_isa(isa) != TR_OK) {
        fprintf(stderr, "bench_matmul: %s\n", tr_last_error());
        return 1;
    }
    set_shapes();
    n_threads_used = threads;
    thread_pool *tp = thread_pool_create(threads);
    printf("isa %s, %d threads, %d layers\n", kernels_isa(), threads, layers);
    if (!tile_rows) bench_dispatch(tp);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", types);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        tr_type t;
        if (tr_type_from_name(tok, &t) != TR_OK || !tr_type_supported(t)) {
            fprintf(stderr, "bench_matmul: unknown type %s\n", tok);
            continue;
        }
        if (tile_rows) {
            bench_tile_rows(t, tp, tile_rows);
            continue;
        }
        if (strcmp(layouts, "x16") != 0) bench_type(t, tp, layers, reps, output, false);
        if (strcmp(layouts, "plain") != 0) bench_type(t, tp, layers, reps, output, true);
    }
    thread_pool_free(tp);
    return 0;
}
