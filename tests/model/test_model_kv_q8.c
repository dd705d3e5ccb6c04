/* test_model_kv_q8.c — the Q8_0 KV cache (tr_context_params.kv_type, tr_model_params.kv_type):
 *   - its rows are llama.cpp's Q8_0 blocks, and every instruction set's attention kernels agree with the scalar
 *     ones and with float64 over the decoded rows;
 *   - logits and hidden states stay within the Q8_0 tolerance (5e-2 relative RMS, what Q8_0 weights are held to)
 *     of the F16 cache and of llama.cpp's reference, on every conformance shape (head_dim 8, 64, 128), and agree
 *     with llama.cpp's own q8_0 cache (its Walsh-Hadamard rotation included) far more closely than with F16;
 *   - the demo pair's greedy output is unchanged over 64 tokens, alone and routed (synchronous and speculative);
 *   - truncation (routing's rollback, the server's 409 resync) then evaluation equals a fresh run bit for bit, in
 *     contexts and in the server's growing per-session caches;
 *   - the memory is what the format says (34 bytes per 32 values against F16's 64);
 *   - bad kv types and heads Q8_0 cannot hold are refused with a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "kernels/kv_q8.h"
#include "model/multi.h"
#include "support/demo_pair.h"
#include "support/fixtures.h"
#include "tokroute.h"

#define Q8_TOL 5e-2

static const int32_t A[20] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376,
                              298, 315, 421, 395, 317, 426, 338, 401, 396, 267};
static const int32_t B[10] = {385, 328, 17, 500, 3, 261, 370, 432, 511, 266};

static tr_model *load(const char *rel, tr_kv_type kv_type, bool vocab) {
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = vocab;
    mp.kv_type = kv_type;
    tr_model *m = NULL;
    if (tr_model_load(shared_path(rel), &mp, &m) != TR_OK) fail_msg("%s: %s", rel, tr_last_error());
    return m;
}

static tr_context *new_ctx(const tr_model *m, int32_t n_ctx, int32_t n_batch, tr_kv_type kv_type) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_threads = 2;
    cp.kv_type = kv_type;
    tr_context *ctx = NULL;
    if (tr_context_create(m, &cp, &ctx) != TR_OK) fail_msg("context: %s", tr_last_error());
    return ctx;
}

/* Evaluates toks with every position's logits kept; returns malloc'ed copies of logits [n][V] and hidden [n][E]. */
static void eval_copy(tr_context *ctx, const int32_t *toks, int32_t n, float **logits, float **hidden) {
    const tr_model_info *in = tr_model_get_info(tr_context_model(ctx));
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    assert_int_equal(tr_context_eval(ctx, toks, n, TR_EVAL_LOGITS_ALL), TR_OK);
    *logits = malloc((size_t)n * V * sizeof(float));
    *hidden = malloc((size_t)n * E * sizeof(float));
    for (int32_t i = 0; i < n; i++) {
        memcpy(*logits + (size_t)i * V, tr_context_logits(ctx, i), V * sizeof(float));
        memcpy(*hidden + (size_t)i * E, tr_context_hidden(ctx, i), E * sizeof(float));
    }
}

/* ---------------------------------------------------------------- the kernels */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Rows quantized with block 32 are byte for byte the Q8_0 format of the weight code (llama.cpp's blocks), and
 * decode to within half a step of the input; the rotation applied before is an orthonormal involution. */
static void rows_are_q8_0_blocks(void **state) {
    (void)state;
    enum { N = 128 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = frand() * (i < 32 ? 0.01f : 3.0f);
    x[40] = 0.0f;
    for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero block: scale 0, values 0 */
    uint8_t mine[N + 8], ref[N + 8];
    assert_int_equal(kvq8_row_bytes(N, 32), type_row_bytes(TR_TYPE_Q8_0, N));
    kvq8_quantize_row(x, mine, N, 32);
    assert_int_equal(quantize_row(TR_TYPE_Q8_0, x, ref, N), TR_OK);
    assert_memory_equal(mine, ref, kvq8_row_bytes(N, 32));
    for (int block = 8; block <= 32; block *= 2) {
        uint8_t q[N + N / 8 * 2];
        kvq8_quantize_row(x, q, N, block);
        kvq8_dequantize_row(q, y, N, block);
        for (int b = 0; b < N; b += block) {
            float amax = 0;
            for (int j = 0; j < block; j++) amax = fmaxf(amax, fabsf(x[b + j]));
            for (int j = 0; j < block; j++) assert_true(fabsf(y[b + j] - x[b + j]) <= amax / 127.0f * 0.51f + 1e-7f);
        }
    }
    /* The rotation is llama.cpp's Sylvester-ordered Walsh-Hadamard matrix, entries (-1)^popcount(i&j)/sqrt(n),
     * and its own inverse; its run is the largest power of two dividing head_dim (64 at least), V's always 64. */
    for (int n = 64; n <= 256; n *= 2) {
        float v[256], w[256];
        for (int i = 0; i < n; i++) v[i] = w[i] = frand();
        kvq8_rotate(w, n, n);
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int j = 0; j < n; j++) s += (__builtin_popcount((unsigned)(i & j)) & 1 ? -v[j] : v[j]) / sqrt(n);
            assert_true(fabs(w[i] - s) < 1e-5);
        }
        kvq8_rotate(w, n, n);
        for (int i = 0; i < n; i++) assert_true(fabsf(w[i] - v[i]) < 1e-5f);
    }
    assert_int_equal(kvq8_rot_k(64), 64);
    assert_int_equal(kvq8_rot_k(128), 128);
    assert_int_equal(kvq8_rot_k(192), 64);
    assert_int_equal(kvq8_rot_k(96), 0);
    assert_int_equal(kvq8_rot_k(8), 0);
    assert_int_equal(kvq8_rot_v(256), 64);
    assert_int_equal(kvq8_rot_v(32), 0);
    assert_int_equal(kvq8_block_for(64), 32);
    assert_int_equal(kvq8_block_for(48), 16);
    assert_int_equal(kvq8_block_for(8), 8);
    assert_int_equal(kvq8_block_for(12), 0);
    assert_int_equal(kvq8_block_for(0), 0);
}

/* Causal scores and mixes over random rows, for each instruction set here, against float64 over the decoded
 * rows: head widths 64 and 128 (SIMD), 48 and 8 (scalar blocks of 16 and 8); group 7 as qwen2.5-0.5b. */
static void kernels_agree_with_float64(void **state) {
    (void)state;
    const char *const isas[] = {"scalar", "avx2", "avx512", "neon"};
    const char *const initial = kernels_isa();
    const int64_t hds[] = {64, 128, 48, 8};
    enum { N_POS = 70, GROUP = 7, TOKENS = 3 };
    const kvq8_causal c = {TOKENS * GROUP, N_POS - TOKENS + 1, GROUP};
    int n_isas = 0;
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
        const int64_t hd = hds[h];
        const int block = kvq8_block_for(hd);
        const size_t rb = kvq8_row_bytes(hd, block), stride = rb + 6; /* rows need not be packed */
        uint8_t *K = malloc(stride * N_POS), *V = malloc(stride * N_POS);
        float *kf = malloc(sizeof(float) * N_POS * hd), *vf = malloc(sizeof(float) * N_POS * hd), row[128];
        float *q = malloc(sizeof(float) * c.rows * hd), *P = malloc(sizeof(float) * c.rows * N_POS);
        float *scores = malloc(sizeof(float) * c.rows * N_POS), *out = malloc(sizeof(float) * c.rows * hd);
        for (int32_t p = 0; p < N_POS; p++) {
            for (int64_t d = 0; d < hd; d++) row[d] = frand() * (1.0f + (float)(p % 5));
            kvq8_quantize_row(row, K + p * stride, hd, block);
            kvq8_dequantize_row(K + p * stride, kf + p * hd, hd, block);
            for (int64_t d = 0; d < hd; d++) row[d] = frand();
            kvq8_quantize_row(row, V + p * stride, hd, block);
            kvq8_dequantize_row(V + p * stride, vf + p * hd, hd, block);
        }
        for (int64_t i = 0; i < c.rows * hd; i++) q[i] = frand();
        for (int32_t r = 0; r < c.rows; r++) /* zero past each row's positions, as kvq8_mix asks */
            for (int32_t p = 0; p < N_POS; p++) P[r * N_POS + p] = p < kvq8_row_valid(c, r) ? (frand() + 1.0f) / N_POS : 0;
        const kvq8_rows Kr = {K, stride, hd, block}, Vr = {V, stride, hd, block};
        for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
            if (!kernels_isa_available(isas[k])) continue;
            assert_int_equal(kernels_force_isa(isas[k]), TR_OK);
            n_isas += h == 0;
            for (int64_t i = 0; i < c.rows * N_POS; i++) scores[i] = -12345.0f; /* unseen positions stay so */
            kvq8_scores(&Kr, q, c, scores, N_POS);
            kvq8_mix(&Vr, P, N_POS, c, out);
            double worst_s = 0, worst_o = 0;
            for (int32_t r = 0; r < c.rows; r++) {
                const int32_t valid = kvq8_row_valid(c, r);
                for (int32_t p = 0; p < N_POS; p++) {
                    if (p >= valid) {
                        assert_true(scores[r * N_POS + p] == -12345.0f);
                        continue;
                    }
                    double s = 0, mag = 0;
                    for (int64_t d = 0; d < hd; d++) {
                        s += (double)q[r * hd + d] * kf[p * hd + d];
                        mag += fabs((double)q[r * hd + d] * kf[p * hd + d]);
                    }
                    worst_s = fmax(worst_s, fabs(scores[r * N_POS + p] - s) / mag);
                }
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0, mag = 0;
                    for (int32_t p = 0; p < valid; p++) {
                        o += (double)P[r * N_POS + p] * vf[p * hd + d];
                        mag += fabs((double)P[r * N_POS + p] * vf[p * hd + d]);
                    }
                    worst_o = fmax(worst_o, fabs(out[r * hd + d] - o) / mag);
                }
            }
            fprintf(stderr, "  %-6s head_dim %3lld block %2d: scores %.1e, mix %.1e (relative to the sums' magnitude)\n",
                    isas[k], (long long)hd, block, worst_s, worst_o);
            assert_true(worst_s < 1e-5 && worst_o < 1e-5);
        }
        free(K), free(V), free(kf), free(vf), free(q), free(P), free(scores), free(out);
    }
    assert_int_equal(kernels_force_isa(initial), TR_OK);
    assert_true(n_isas >= 2); /* scalar and this machine's SIMD set */
}

/* ---------------------------------------------------------------- accuracy */

typedef struct conf_model {
    const char *name;
    const char *path;
} conf_model;

static const conf_model CONF[] = {
    {"stories260K", "models/stories260K.gguf"},        {"stories-student", "models/stories-student.gguf"},
    {"llama-f32", "conformance/llama-f32.gguf"},       {"llama-q8_0", "conformance/llama-q8_0.gguf"},
    {"qwen2-f32", "conformance/qwen2-f32.gguf"},       {"qwen2-q8_0", "conformance/qwen2-q8_0.gguf"},
    {"qwen3-f32", "conformance/qwen3-f32.gguf"},
};

/* The conformance prompt at every position: Q8_0 against F16 and against llama.cpp's reference (computed with an
 * F16 cache), both within Q8_TOL; the two caches really differ. */
static void logits_within_q8_tolerance(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CONF / sizeof CONF[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "conformance/golden/%s.json", CONF[i].name);
        char *json = read_file(shared_path(rel), NULL);
        assert_non_null(json);
        int32_t *prompt;
        const int32_t n = json_int_array(json, "prompt_tokens", &prompt);
        assert_true(n > 8);
        tr_model *m = load(CONF[i].path, TR_KV_DEFAULT, false);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd, nl = (size_t)n * V, nh = (size_t)n * E;
        snprintf(rel, sizeof rel, "conformance/golden/%s.logits.f32", CONF[i].name);
        size_t size = 0;
        float *ref = (float *)read_file(shared_path(rel), &size);
        assert_non_null(ref);
        assert_int_equal(size, nl * sizeof(float));

        tr_context *f16 = new_ctx(m, 128, 128, TR_KV_F16), *q8 = new_ctx(m, 128, 128, TR_KV_Q8_0);
        assert_int_equal(tr_context_kv_type(f16), TR_KV_F16);
        assert_int_equal(tr_context_kv_type(q8), TR_KV_Q8_0);
        float *l16, *h16, *l8, *h8;
        eval_copy(f16, prompt, n, &l16, &h16);
        eval_copy(q8, prompt, n, &l8, &h8);
        const double el = rel_rms(l8, l16, nl), eh = rel_rms(h8, h16, nh), er = rel_rms(l8, ref, nl);
        const double er16 = rel_rms(l16, ref, nl);
        fprintf(stderr, "  %-16s head_dim %3d: q8_0 vs f16 logits %.2e hidden %.2e; vs llama.cpp %.2e (f16 %.2e)\n",
                CONF[i].name, in->head_dim, el, eh, er, er16);
        assert_true(el <= Q8_TOL && eh <= Q8_TOL && er <= Q8_TOL);
        assert_true(el > 0); /* the cache really is another one */

        /* Decoding one token at a time on the Q8_0 cache agrees with the batch (each row reads the same cache). */
        tr_context *step = new_ctx(m, 128, 128, TR_KV_Q8_0);
        double worst = 0;
        for (int32_t t = 0; t < n; t++) {
            assert_int_equal(tr_context_eval(step, &prompt[t], 1, TR_EVAL_LOGITS_LAST), TR_OK);
            worst = fmax(worst, rel_rms(tr_context_logits(step, -1), l8 + (size_t)t * V, V));
        }
        assert_true(worst < 1e-4);
        tr_context_free(step);
        free(l16), free(h16), free(l8), free(h8), free(ref), free(prompt), free(json);
        tr_context_free(f16);
        tr_context_free(q8);
        tr_model_free(m);
    }
}

/* llama.cpp itself with a q8_0 cache (llamacpp_ref.c, compiled here against scripts/llamacpp.sh's build, as
 * test_model_quants_llamacpp.c does): the same arithmetic, so on F32 weights the engine's Q8_0 cache lands within
 * 1e-3 of it (measured 4e-7 to 1e-4 relative RMS) while F16 is ~1e-2 away. */
static void q8_0_matches_llamacpp(void **state) {
    (void)state;
    char bin[512] = "", dir[64] = "/tmp/tokroute-kvq8-XXXXXX", cmd[2048];
    FILE *p = popen(TR_SOURCE_DIR "/scripts/llamacpp.sh llama-quantize", "r");
    assert_non_null(p);
    assert_non_null(fgets(bin, sizeof bin, p));
    assert_int_equal(pclose(p), 0);
    bin[strcspn(bin, "\n")] = '\0';
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "cc -O1 -o %s/ref %s/tests/model/llamacpp_ref.c -I%s/../../src/include -I%s/../../src/ggml/include -L%s "
             "-lllama -lm -Wl,-rpath,%s",
             dir, TR_SOURCE_DIR, bin, bin, bin, bin);
    assert_int_equal(system(cmd), 0);
    /* F32 weights isolate the cache; with Q8_0 weights the two engines' products already differ by ~7e-3 (the
     * conformance goldens), so only the conformance tolerance applies. */
    const char *const names[] = {"llama-f32", "qwen2-f32", "qwen3-f32", "llama-q8_0", "qwen2-q8_0"};
    const double tols[] = {1e-3, 1e-3, 1e-3, Q8_TOL, Q8_TOL};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[256], list[4096] = "", *json;
        snprintf(rel, sizeof rel, "conformance/golden/%s.json", names[i]);
        assert_non_null(json = read_file(shared_path(rel), NULL));
        int32_t *prompt;
        const int32_t n = json_int_array(json, "prompt_tokens", &prompt);
        for (int32_t t = 0; t < n; t++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", t ? "," : "", prompt[t]);
        snprintf(rel, sizeof rel, "conformance/%s.gguf", names[i]);
        snprintf(cmd, sizeof cmd, "LLAMACPP_REF_KV_Q8_0=1 %s/ref %s %s 1 %s/%s", dir, shared_path(rel), list, dir,
                 names[i]);
        assert_int_equal(system(cmd), 0);
        tr_model *m = load(rel, TR_KV_Q8_0, false);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t nl = (size_t)n * in->n_vocab, nh = (size_t)n * in->n_embd;
        char path[256];
        size_t size = 0;
        snprintf(path, sizeof path, "%s/%s.logits.f32", dir, names[i]);
        float *ref_l = (float *)read_file(path, &size);
        assert_true(ref_l && size == nl * sizeof(float));
        snprintf(path, sizeof path, "%s/%s.hidden.f32", dir, names[i]);
        float *ref_h = (float *)read_file(path, &size);
        assert_true(ref_h && size == nh * sizeof(float));
        snprintf(rel, sizeof rel, "conformance/golden/%s.logits.f32", names[i]);
        float *golden_f16 = (float *)read_file(shared_path(rel), &size);
        assert_true(golden_f16 && size == nl * sizeof(float));
        tr_context *ctx = new_ctx(m, 128, 128, TR_KV_DEFAULT);
        float *l, *h;
        eval_copy(ctx, prompt, n, &l, &h);
        const double el = rel_rms(l, ref_l, nl), eh = rel_rms(h, ref_h, nh), e16 = rel_rms(l, golden_f16, nl);
        fprintf(stderr, "  %-11s q8_0 cache vs llama.cpp's q8_0 cache: logits %.2e hidden %.2e (vs its f16: %.2e)\n",
                names[i], el, eh, e16);
        assert_true(el < tols[i] && eh < tols[i]);
        if (tols[i] < Q8_TOL) assert_true(el < 0.05 * e16);
        free(l), free(h), free(ref_l), free(ref_h), free(golden_f16), free(prompt), free(json);
        tr_context_free(ctx);
        tr_model_free(m);
        snprintf(cmd, sizeof cmd, "rm -f %s/%s.*", dir, names[i]);
        assert_int_equal(system(cmd), 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------------------- the demo pair */

enum { N_GEN = 64 };

/* F16's top-two gap, relative to the top logit, after the tokens seq[0..n) (the chance a ~1% perturbation of the
 * logits has of flipping the argmax there). */
static float f16_gap_after(const tr_model *m, const int32_t *seq, int32_t n) {
    tr_context *ctx = new_ctx(m, 256, 256, TR_KV_F16);
    assert_int_equal(tr_context_eval(ctx, seq, n, TR_EVAL_LOGITS_LAST), TR_OK);
    const int32_t V = tr_model_get_info(m)->n_vocab;
    const float *l = tr_context_logits(ctx, -1);
    const int32_t top = tr_argmax(l, V);
    float second = -INFINITY;
    for (int32_t v = 0; v < V; v++)
        if (v != top && l[v] > second) second = l[v];
    const float gap = (l[top] - second) / fabsf(l[top]);
    tr_context_free(ctx);
    return gap;
}

/* Greedy decoding with both caches in step (each fed F16's token): the first position whose argmax differs, or -1. */
static int32_t greedy_divergence(const tr_model *m, const int32_t *prompt, int32_t n_prompt) {
    tr_context *f16 = new_ctx(m, 256, 256, TR_KV_F16), *q8 = new_ctx(m, 256, 256, TR_KV_Q8_0);
    assert_int_equal(tr_context_eval(f16, prompt, n_prompt, TR_EVAL_LOGITS_LAST), TR_OK);
    assert_int_equal(tr_context_eval(q8, prompt, n_prompt, TR_EVAL_LOGITS_LAST), TR_OK);
    const int32_t V = tr_model_get_info(m)->n_vocab;
    int32_t first = -1;
    for (int32_t i = 0; i < N_GEN && first < 0; i++) {
        const int32_t id = tr_argmax(tr_context_logits(f16, -1), V);
        if (tr_argmax(tr_context_logits(q8, -1), V) != id) first = i;
        assert_int_equal(tr_context_eval(f16, &id, 1, TR_EVAL_LOGITS_LAST), TR_OK);
        assert_int_equal(tr_context_eval(q8, &id, 1, TR_EVAL_LOGITS_LAST), TR_OK);
    }
    tr_context_free(f16);
    tr_context_free(q8);
    return first;
}

typedef struct routed {
    int32_t ids[N_GEN];
    tr_route_stats stats;
    tr_token_source source[N_GEN];
    float score[N_GEN];
    int32_t n;
} routed;

static bool record(void *user, const tr_route_token *t) {
    routed *r = user;
    if (t->index >= 0 && t->index < N_GEN) {
        r->source[t->index] = t->source;
        r->score[t->index] = t->score;
        r->n = t->index + 1;
    }
    return true;
}

#define TAU 0.5f

/* A routed generation of the pair with the caches the models were loaded with (the SLM's context and the
 * embedded LLM's both take the model's type); depth > 0 speculates under a simulated round trip, rolling the
 * SLM's cache back whenever the LLM disagrees. */
static void route(const tr_model *slm, const tr_model *llm, const int32_t *prompt, int32_t n_prompt, int32_t depth,
                  tr_kv_type expect, routed *out) {
    memset(out, 0, sizeof *out);
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(slm, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_kv_type(ctx), expect);
    tr_sampler_params sp = tr_sampler_default_params();
    tr_llm_backend *backend = NULL;
    assert_int_equal(tr_llm_backend_embedded(llm, &cp, &sp, &backend), TR_OK);
    if (depth > 0) tr_llm_backend_set_jitter(backend, 2.0, 7);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_JOINT;
    rp.tau = TAU;
    rp.n_predict = N_GEN;
    rp.stop_at_eog = false;
    rp.sampling.temperature = 0.0f;
    rp.speculate_depth = depth;
    rp.lookahead = depth > 0 ? 4 : 0;
    rp.on_token = record;
    rp.user = out;
    assert_int_equal(tr_route_generate(ctx, router, backend, prompt, n_prompt, &rp, out->ids, N_GEN, &out->stats),
                     TR_OK);
    tr_router_free(router);
    tr_llm_backend_free(backend);
    tr_context_free(ctx);
}

/* A divergence between the caches' outputs is allowed only at a near tie: F16's top two within NEAR_TIE of each
 * other (the Q8_0 cache moves logits by ~1% RMS on these 8-wide heads), or a routing decision whose score is within
 * 0.01 of tau. */
#define NEAR_TIE 0.02f

static void demo_pair_greedy_unchanged(void **state) {
    (void)state;
    tr_model *slm16 = load("models/stories-student.gguf", TR_KV_DEFAULT, true);
    tr_model *llm16 = load("models/stories260K.gguf", TR_KV_DEFAULT, true);
    tr_model *slm8 = load("models/stories-student.gguf", TR_KV_Q8_0, true);
    tr_model *llm8 = load("models/stories260K.gguf", TR_KV_Q8_0, true);
    /* The first is scripts/demo.sh's prompt (routed there at tau 0.5 as here). */
    const char *prompts[] = {"Once upon a time, there was a little dog named Max.", "Once upon a time",
                             "Tom and his dog went to the park.", "The little bird", "Lily wanted to"};
    enum { N_PROMPTS = sizeof prompts / sizeof prompts[0] };
    int32_t n_same = 0, n_routed = 0;
    for (int k = 0; k < N_PROMPTS; k++) {
        int32_t prompt[64];
        const int32_t n_prompt = demo_prompt_tokens(slm16, prompts[k], prompt, 64);
        /* Each model alone. */
        const tr_model *alone[2] = {slm16, llm16};
        for (int w = 0; w < 2; w++) {
            const int32_t d = greedy_divergence(alone[w], prompt, n_prompt);
            if (d < 0) {
                n_same++;
                continue;
            }
            int32_t seq[256];
            int32_t out[N_GEN];
            memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
            tr_context *ctx = new_ctx(alone[w], 256, 256, TR_KV_F16);
            assert_int_equal(tr_context_eval(ctx, prompt, n_prompt, TR_EVAL_LOGITS_LAST), TR_OK);
            for (int32_t i = 0; i < d; i++) {
                out[i] = tr_argmax(tr_context_logits(ctx, -1), tr_model_get_info(alone[w])->n_vocab);
                assert_int_equal(tr_context_eval(ctx, &out[i], 1, TR_EVAL_LOGITS_LAST), TR_OK);
                seq[n_prompt + i] = out[i];
            }
            tr_context_free(ctx);
            const float gap = f16_gap_after(alone[w], seq, n_prompt + d);
            fprintf(stderr, "  \"%s\" %s alone: first differs at token %d, where F16's top two are %.4f apart\n",
                    prompts[k], w ? "LLM" : "SLM", d, gap);
            assert_true(gap < NEAR_TIE);
        }
        /* Routed: Q8_0 (from the models' load parameters) against F16; speculating against synchronous. */
        routed r16, r8, r8s;
        route(slm16, llm16, prompt, n_prompt, 0, TR_KV_F16, &r16);
        route(slm8, llm8, prompt, n_prompt, 0, TR_KV_Q8_0, &r8);
        route(slm8, llm8, prompt, n_prompt, 8, TR_KV_Q8_0, &r8s);
        assert_int_equal(r16.n, N_GEN);
        assert_int_equal(r8.n, N_GEN);
        assert_memory_equal(r8.ids, r8s.ids, sizeof r8.ids);
        assert_memory_equal(r8.source, r8s.source, sizeof r8.source);
        n_routed += r8.stats.n_routed;
        int32_t d = 0;
        while (d < N_GEN && r16.ids[d] == r8.ids[d] && r16.source[d] == r8.source[d]) d++;
        if (d == N_GEN) {
            n_same++;
            continue;
        }
        int32_t seq[256];
        memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
        memcpy(seq + n_prompt, r16.ids, (size_t)d * sizeof *seq);
        const float gap = f16_gap_after(r16.source[d] == TR_SOURCE_LLM ? llm16 : slm16, seq, n_prompt + d);
        fprintf(stderr, "  \"%s\" routed: first differs at token %d (%s, score %.4f / %.4f, tau %.2f; F16's top two "
                "%.4f apart)\n", prompts[k], d, r16.source[d] == TR_SOURCE_LLM ? "LLM" : "SLM", r16.score[d],
                r8.score[d], TAU, gap);
        if (r16.source[d] != r8.source[d]) assert_true(fabsf(r16.score[d] - TAU) < 0.01f);
        else assert_true(gap < NEAR_TIE);
    }
    fprintf(stderr, "  %d of %d greedy runs (each model alone and routed) identical over %d tokens; %d tokens routed\n",
            n_same, 3 * N_PROMPTS, N_GEN, n_routed);
    assert_true(n_routed > 0 && n_routed < N_GEN * N_PROMPTS); /* both models really took part */
    assert_true(n_same >= 2 * N_PROMPTS); /* measured: 10 of 15 */
    /* A context with default parameters takes the model's cache type; its own parameter overrides it. */
    tr_context *ctx = new_ctx(slm8, 32, 32, TR_KV_DEFAULT);
    assert_int_equal(tr_context_kv_type(ctx), TR_KV_Q8_0);
    tr_context_free(ctx);
    ctx = new_ctx(slm8, 32, 32, TR_KV_F16);
    assert_int_equal(tr_context_kv_type(ctx), TR_KV_F16);
    tr_context_free(ctx);
    tr_model_free(slm16), tr_model_free(llm16), tr_model_free(slm8), tr_model_free(llm8);
}

/* ---------------------------------------------------------------- truncation */

static const char *const TRUNC_MODELS[] = {"models/stories260K.gguf", "conformance/qwen2-f32.gguf",
                                           "conformance/qwen3-f32.gguf"};

/* Evaluate A, truncate to 7, evaluate B: bit-identical to a fresh Q8_0 context given A[0..7) then B; and
 * truncating to several points and replaying the rest of A reproduces A's outputs bit for bit. */
static void truncate_then_continue_equals_fresh(void **state) {
    (void)state;
    for (size_t mi = 0; mi < sizeof TRUNC_MODELS / sizeof TRUNC_MODELS[0]; mi++) {
        tr_model *m = load(TRUNC_MODELS[mi], TR_KV_Q8_0, false);
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
        tr_context *ctx = new_ctx(m, 64, 64, TR_KV_DEFAULT), *fresh = new_ctx(m, 64, 64, TR_KV_DEFAULT);
        float *la, *ha, *lb, *hb, *lp, *hp, *lf, *hf;
        eval_copy(ctx, A, 20, &la, &ha);
        assert_int_equal(tr_context_truncate(ctx, 7), TR_OK);
        eval_copy(ctx, B, 10, &lb, &hb);
        eval_copy(fresh, A, 7, &lp, &hp);
        eval_copy(fresh, B, 10, &lf, &hf);
        assert_memory_equal(lb, lf, 10 * V * sizeof(float));
        assert_memory_equal(hb, hf, 10 * E * sizeof(float));
        assert_true(rel_rms(lb, la + 7 * V, 3 * V) > 1e-2); /* B really differs from what it overwrote */
        assert_int_equal(tr_context_truncate(ctx, 0), TR_OK);
        assert_int_equal(tr_context_eval(ctx, A, 20, TR_EVAL_LOGITS_NONE), TR_OK);
        const int32_t points[] = {19, 12, 1, 0};
        for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
            const int32_t k = points[p];
            assert_int_equal(tr_context_truncate(ctx, k), TR_OK);
            float *lr, *hr, *lx, *hx;
            eval_copy(ctx, A + k, 20 - k, &lr, &hr);
            tr_context *again = new_ctx(m, 64, 64, TR_KV_Q8_0);
            if (k > 0) assert_int_equal(tr_context_eval(again, A, k, TR_EVAL_LOGITS_NONE), TR_OK);
            eval_copy(again, A + k, 20 - k, &lx, &hx);
            assert_memory_equal(lr, lx, (size_t)(20 - k) * V * sizeof(float));
            assert_memory_equal(hr, hx, (size_t)(20 - k) * E * sizeof(float));
            if (k == 0) assert_memory_equal(lr, la, 20 * V * sizeof(float));
            free(lr), free(hr), free(lx), free(hx);
            tr_context_free(again);
        }
        free(la), free(ha), free(lb), free(hb), free(lp), free(hp), free(lf), free(hf);
        tr_context_free(ctx);
        tr_context_free(fresh);
        tr_model_free(m);
    }
}

/* The server's path: per-session caches (kv_seq) of a model loaded with Q8_0 grow past their first 64 positions
 * by the relayout copy, are truncated as a 409 resync does, and continue; each step's logits equal a Q8_0 context
 * fed the same tokens. */
static void server_sessions_truncate_and_grow(void **state) {
    (void)state;
    for (size_t mi = 0; mi < sizeof TRUNC_MODELS / sizeof TRUNC_MODELS[0]; mi++) {
        tr_model *m = load(TRUNC_MODELS[mi], TR_KV_Q8_0, false);
        const int32_t V = tr_model_get_info(m)->n_vocab;
        multi_engine *e = NULL;
        assert_int_equal(multi_engine_create(m, 2, 64, 160, &e), TR_OK);
        kv_seq *seq = NULL;
        assert_int_equal(kv_seq_create(m, 1, 160, &seq), TR_OK);
        assert_int_equal(seq->kv.type, TR_KV_Q8_0);
        tr_context *ref = new_ctx(m, 160, 64, TR_KV_DEFAULT);
        int32_t ids[150];
        for (int32_t i = 0; i < 150; i++) ids[i] = i == 0 ? 1 : 3 + (i * 97 + 13) % 509;
        float *logits = malloc((size_t)V * sizeof *logits);
        /* 100 tokens in chunks of 25, back to 60 (a resync), then the other 90 in chunks of 30. */
        const int32_t plan[][2] = {{0, 25}, {25, 25}, {50, 25}, {75, 25}, {-60, 0}, {60, 30}, {90, 30}, {120, 30}};
        for (size_t s = 0; s < sizeof plan / sizeof plan[0]; s++) {
            if (plan[s][0] < 0) {
                kv_seq_truncate(seq, -plan[s][0]);
                assert_int_equal(tr_context_truncate(ref, -plan[s][0]), TR_OK);
                continue;
            }
            const int32_t *toks = ids + plan[s][0], n = plan[s][1];
            assert_int_equal(kv_seq_reserve(seq, seq->n_past + n), TR_OK);
            kv_seq *const seqs[1] = {seq};
            const int32_t *const tok_lists[1] = {toks};
            assert_int_equal(multi_forward(e, seqs, tok_lists, &n, 1, logits), TR_OK);
            assert_int_equal(tr_context_eval(ref, toks, n, TR_EVAL_LOGITS_LAST), TR_OK);
            assert_memory_equal(logits, tr_context_logits(ref, -1), (size_t)V * sizeof *logits);
        }
        assert_int_equal(seq->n_past, 150);
        assert_true(seq->kv.n_ctx >= 150);
        assert_int_equal(kv_seq_bytes(seq), kv_seq_bytes_for(m, seq->kv.n_ctx));
        free(logits);
        tr_context_free(ref);
        kv_seq_free(seq);
        multi_engine_free(e);
        tr_model_free(m);
    }
}

/* ---------------------------------------------------------------- memory */

static void memory_is_halved(void **state) {
    (void)state;
    const struct {
        const char *path;
        size_t q8_row, f16_row; /* bytes per (head, position) */
    } cases[] = {
        {"conformance/qwen2-f32.gguf", 2 * 34, 64 * 2},      /* head_dim 64: two Q8_0 blocks */
        {"conformance/qwen3-f32.gguf", 4 * 34, 128 * 2},     /* head_dim 128 */
        {"models/stories260K.gguf", 2 + 8, 8 * 2},           /* head_dim 8: one block of 8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tr_model *m16 = load(cases[i].path, TR_KV_DEFAULT, false), *m8 = load(cases[i].path, TR_KV_Q8_0, false);
        const tr_model_info *in = tr_model_get_info(m16);
        const size_t per_pos = 2 * (size_t)in->n_layer * (size_t)in->n_head_kv; /* K and V rows per position */
        tr_context *c16 = new_ctx(m16, 256, 64, TR_KV_DEFAULT), *c8 = new_ctx(m16, 256, 64, TR_KV_Q8_0);
        tr_context *c32 = new_ctx(m16, 256, 64, TR_KV_F32);
        assert_int_equal(tr_context_kv_bytes(c16), per_pos * 256 * cases[i].f16_row);
        assert_int_equal(tr_context_kv_bytes(c8), per_pos * 256 * cases[i].q8_row);
        assert_int_equal(tr_context_kv_bytes(c32), 2 * tr_context_kv_bytes(c16));
        /* The server's budget counts the model's type: a session's bytes are K, V and the token ids. */
        assert_int_equal(kv_seq_bytes_for(m16, 128), per_pos * 128 * cases[i].f16_row + 128 * sizeof(int32_t));
        assert_int_equal(kv_seq_bytes_for(m8, 128), per_pos * 128 * cases[i].q8_row + 128 * sizeof(int32_t));
        fprintf(stderr, "  %-28s head_dim %3d: KV of 256 positions %zu bytes in f16, %zu in q8_0 (%.3f)\n",
                cases[i].path, in->head_dim, tr_context_kv_bytes(c16), tr_context_kv_bytes(c8),
                (double)tr_context_kv_bytes(c8) / (double)tr_context_kv_bytes(c16));
        tr_context_free(c16), tr_context_free(c8), tr_context_free(c32);
        tr_model_free(m16), tr_model_free(m8);
    }
    assert_int_equal(tr_context_kv_bytes(NULL), 0);
}

/* ---------------------------------------------------------------- refusals */

/* A one-layer llama with one head of width hd (random F32 weights, no vocabulary). */
static void write_one_head_model(const char *path, int hd) {
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "general.architecture", "llama"), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "llama.context_length", 64), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)hd), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "llama.block_count", 1), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "llama.attention.head_count", 1), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "llama.feed_forward_length", 32), TR_OK);
    enum { VOCAB = 16, F = 32 };
    float *data = malloc(sizeof(float) * 64 * 64), *ones = malloc(sizeof(float) * 64);
    for (int i = 0; i < 64 * 64; i++) data[i] = frand() * 0.5f;
    for (int i = 0; i < 64; i++) ones[i] = 1.0f;
    const struct {
        const char *name;
        int n_dims;
        int64_t ne[2];
    } ts[] = {{"token_embd.weight", 2, {hd, VOCAB}},     {"output_norm.weight", 1, {hd, 1}},
              {"blk.0.attn_norm.weight", 1, {hd, 1}},    {"blk.0.attn_q.weight", 2, {hd, hd}},
              {"blk.0.attn_k.weight", 2, {hd, hd}},      {"blk.0.attn_v.weight", 2, {hd, hd}},
              {"blk.0.attn_output.weight", 2, {hd, hd}}, {"blk.0.ffn_norm.weight", 1, {hd, 1}},
              {"blk.0.ffn_gate.weight", 2, {hd, F}},     {"blk.0.ffn_up.weight", 2, {hd, F}},
              {"blk.0.ffn_down.weight", 2, {F, hd}}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        assert_int_equal(tr_gguf_writer_add_tensor(w, ts[i].name, TR_TYPE_F32, ts[i].n_dims, ts[i].ne,
                                                   ts[i].n_dims == 1 ? ones : data, NULL),
                         TR_OK);
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    free(data);
    free(ones);
}

static void bad_kv_types_are_refused(void **state) {
    (void)state;
    assert_string_equal(tr_kv_type_name(TR_KV_F16), "f16");
    assert_string_equal(tr_kv_type_name(TR_KV_F32), "f32");
    assert_string_equal(tr_kv_type_name(TR_KV_Q8_0), "q8_0");
    assert_string_equal(tr_kv_type_name(TR_KV_DEFAULT), "default");
    assert_null(tr_kv_type_name((tr_kv_type)4));
    assert_null(tr_kv_type_name((tr_kv_type)-1));

    tr_model *m = load("models/stories260K.gguf", TR_KV_DEFAULT, false);
    const int bad[] = {4, 99, -1, 0x7fffffff};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tr_context_params cp = tr_context_default_params();
        cp.kv_type = (tr_kv_type)bad[i];
        tr_context *ctx = (tr_context *)&cp; /* must be reset to NULL */
        assert_int_equal(tr_context_create(m, &cp, &ctx), TR_ERR_ARG);
        assert_null(ctx);
        assert_non_null(strstr(tr_last_error(), "KV cache type"));
        tr_model_params mp = tr_model_default_params();
        mp.kv_type = (tr_kv_type)bad[i];
        tr_model *bad_model = (tr_model *)&mp;
        assert_int_equal(tr_model_load(shared_path("models/stories260K.gguf"), &mp, &bad_model), TR_ERR_ARG);
        assert_null(bad_model);
        assert_non_null(strstr(tr_last_error(), "KV cache type"));
    }
    tr_model_free(m);

    /* head_dim 12: no Q8_0 (nor narrower) block fits a row; 24 takes blocks of 8, 48 blocks of 16 — and those
     * still agree with F16. */
    const char *path = temp_path(".gguf");
    write_one_head_model(path, 12);
    tr_model_params mp = tr_model_default_params();
    mp.kv_type = TR_KV_Q8_0;
    tr_model *odd = NULL;
    assert_int_equal(tr_model_load(path, &mp, &odd), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), "head_dim"));
    mp.kv_type = TR_KV_F16;
    assert_int_equal(tr_model_load(path, &mp, &odd), TR_OK);
    tr_context_params cp = tr_context_default_params();
    cp.kv_type = TR_KV_Q8_0;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(odd, &cp, &ctx), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), "multiple of 8"));
    tr_model_free(odd);
    const int widths[] = {24, 48};
    for (size_t i = 0; i < 2; i++) {
        write_one_head_model(path, widths[i]);
        mp.kv_type = TR_KV_Q8_0;
        tr_model *w = NULL;
        assert_int_equal(tr_model_load(path, &mp, &w), TR_OK);
        const int32_t toks[12] = {1, 5, 9, 3, 14, 2, 7, 7, 0, 11, 6, 15};
        tr_context *c8 = new_ctx(w, 16, 16, TR_KV_DEFAULT), *c16 = new_ctx(w, 16, 16, TR_KV_F16);
        float *l8, *h8, *l16, *h16;
        eval_copy(c8, toks, 12, &l8, &h8);
        eval_copy(c16, toks, 12, &l16, &h16);
        const double e = rel_rms(l8, l16, 12 * 16);
        fprintf(stderr, "  one head of %d (blocks of %d): q8_0 vs f16 logits %.2e\n", widths[i], kvq8_block_for(widths[i]), e);
        assert_true(e > 0 && e < Q8_TOL);
        free(l8), free(h8), free(l16), free(h16);
        tr_context_free(c8), tr_context_free(c16);
        tr_model_free(w);
    }
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_are_q8_0_blocks),
        cmocka_unit_test(kernels_agree_with_float64),
        cmocka_unit_test(logits_within_q8_tolerance),
        cmocka_unit_test(q8_0_matches_llamacpp),
        cmocka_unit_test(demo_pair_greedy_unchanged),
        cmocka_unit_test(truncate_then_continue_equals_fresh),
        cmocka_unit_test(server_sessions_truncate_and_grow),
        cmocka_unit_test(memory_is_halved),
        cmocka_unit_test(bad_kv_types_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
