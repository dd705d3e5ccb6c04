/* test_model_quants_llamacpp.c — the quant types added after the conformance goldens (IQ4_NL, IQ4_XS, Q2_K, Q3_K)
 * against llama.cpp itself. llama.cpp's own llama-quantize (built once per machine by scripts/llamacpp.sh) turns the
 * F16 conformance models (../shared/conformance, llama and qwen2 layouts, every 2-D weight a multiple of 256 wide)
 * into files of each type: all tensors in the type (--pure), and the mixes users download (the stock IQ4_XS mix;
 * Q3_K_S, Q3_K_M, Q3_K_L and Q2_K: Q3_K/Q4_K/Q5_K/Q6_K tensors chosen per layer by llama-quantize); stories260K's
 * 64-wide matrices take IQ4_NL, while its Q2_K / Q3_K_M files are llama-quantize's fallbacks (Q4_0 and friends), which
 * must load as they are too. llamacpp_ref.c, compiled here against the same build, gives llama.cpp's logits and final
 * hidden states at every prompt position and its 32 greedy tokens; the engine must match them on every instruction
 * set this machine has (the model loaded afresh under each, so the X16 repacking follows the set): relative RMS error
 * <= 1e-2 for the --pure files (measured 0 to 4e-3 with SIMD, up to 7e-3 with the scalar set, whose sums round
 * without FMA; the larger values are the same on every set, consistent with one 8-bit activation rounded the other
 * way after float sums in another order) and <= 5e-2, the conformance tolerance, for mixes (llama.cpp rounds
 * activations to F16 for F16 weights, which the trained stories260K file has); argmax equal where llama.cpp's top
 * two differ clearly; greedy tokens equal up to llama.cpp's own near-ties (see check_case). Our quantizer, given the
 * F16 weights, writes llama-quantize's blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "support/fixtures.h"
#include "support/llamacpp_ref.h"
#include "tokroute.h"

enum { N_GREEDY = 32 };

static llamacpp_ref llama; /* llama.cpp's build, this run's files, llamacpp_ref compiled here */

static int setup(void **state) {
    (void)state;
    return llamacpp_ref_setup(&llama, "quants", "llama-quantize", "tests/model/llamacpp_ref.c");
}

static int teardown(void **state) {
    (void)state;
    return llamacpp_ref_teardown(&llama);
}

typedef struct quant_case {
    const char *src;   /* conformance model stem, F16 */
    const char *qtype; /* llama-quantize's type name */
    bool pure;
    tr_type type;
    int min_tensors; /* 2-D tensors expected in `type` */
} quant_case;

/* Our quantizer on the F16 source tensor against llama-quantize's blocks: same algorithm, so the same bytes except
 * where float rounding (FMA contraction in llama.cpp's build) flips a near-tie. */
static void check_quantizer(const char *src_path, const char *q_path, tr_type type) {
    tr_gguf *src = NULL, *q = NULL;
    assert_int_equal(tr_gguf_open(src_path, &src), TR_OK);
    assert_int_equal(tr_gguf_open(q_path, &q), TR_OK);
    int64_t blocks = 0, same = 0;
    const size_t bb = tr_type_block_bytes(type);
    for (int64_t t = 0; t < tr_gguf_n_tensors(q); t++) {
        const tr_gguf_tensor *qt = tr_gguf_tensor_at(q, t);
        if (qt->type != type) continue;
        const tr_gguf_tensor *st = tr_gguf_tensor_at(src, tr_gguf_find_tensor(src, qt->name));
        assert_non_null(st);
        const int64_t n = qt->ne[0] * qt->ne[1];
        float *x = malloc(sizeof(float) * n);
        uint8_t *ours = malloc(type_row_bytes(type, n));
        assert_int_equal(dequantize_row(st->type, st->data, x, n), TR_OK);
        assert_int_equal(quantize_row(type, x, ours, n), TR_OK);
        for (int64_t b = 0; b < n / tr_type_block_elems(type); b++, blocks++)
            same += memcmp(ours + b * bb, (const uint8_t *)qt->data + b * bb, bb) == 0;
        free(x);
        free(ours);
    }
    fprintf(stderr, "  quantizer: %lld of %lld %s blocks identical to llama-quantize's\n", (long long)same,
            (long long)blocks, tr_type_name(type));
    assert_true(blocks > 0 && same >= blocks * 99 / 100);
    tr_gguf_close(src);
    tr_gguf_close(q);
}

static void check_case(const quant_case *c) {
    char rel[256], model[256], prefix[256], cmd[2048];
    snprintf(rel, sizeof rel, "conformance/golden/%s.json", c->src);
    char *json = read_file(shared_path(rel), NULL);
    assert_non_null(json);
    int32_t *prompt;
    const int32_t n = json_int_array(json, "prompt_tokens", &prompt);
    assert_true(n > 1);
    char csv[2048] = "";
    for (int32_t i = 0; i < n; i++) snprintf(csv + strlen(csv), sizeof csv - strlen(csv), "%s%d", i ? "," : "", prompt[i]);

    snprintf(rel, sizeof rel, "%s/%s.gguf", strncmp(c->src, "stories", 7) == 0 ? "models" : "conformance", c->src);
    char src_path[512];
    snprintf(src_path, sizeof src_path, "%s", shared_path(rel));
    snprintf(prefix, sizeof prefix, "%s/%s-%s%s", llama.work, c->src, c->qtype, c->pure ? "-pure" : "");
    snprintf(model, sizeof model, "%s.gguf", prefix);
    snprintf(cmd, sizeof cmd, "%s/llama-quantize %s %s %s %s 2 >%s.log 2>&1", llama.bin, c->pure ? "--pure" : "",
             src_path, model, c->qtype, prefix);
    assert_int_equal(run_command(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s %s %s %d %s", llama.exe, model, csv, N_GREEDY, prefix);
    assert_int_equal(run_command(cmd), 0);

    /* the file holds the type where we expect it */
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(model, &g), TR_OK);
    int in_type = 0, in_f16 = 0;
    for (int64_t t = 0; t < tr_gguf_n_tensors(g); t++) {
        in_type += tr_gguf_tensor_at(g, t)->type == c->type;
        in_f16 += tr_gguf_tensor_at(g, t)->type == TR_TYPE_F16;
    }
    tr_gguf_close(g);
    fprintf(stderr, "%s %s%s: %d tensors in %s\n", c->src, c->qtype, c->pure ? " --pure" : "", in_type, tr_type_name(c->type));
    assert_true(in_type >= c->min_tensors);
    if (c->pure) check_quantizer(src_path, model, c->type);

    char path[512];
    int32_t greedy[N_GREEDY], runner_up[N_GREEDY];
    double gap[N_GREEDY];
    read_greedy_dump(prefix, N_GREEDY, greedy, runner_up, gap);

    static const char *const isas[] = {"scalar", "avx2", "avx512", "neon"};
    const char *best = kernels_isa();
    for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
        if (!kernels_isa_available(isas[s])) continue;
        assert_int_equal(kernels_force_isa(isas[s]), TR_OK);
        tr_model_params mp = tr_model_default_params();
        mp.load_vocab = false;
        tr_model *m = NULL;
        if (tr_model_load(model, &mp, &m) != TR_OK) fail_msg("%s: %s", model, tr_last_error());
        const tr_model_info *in = tr_model_get_info(m);
        const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
        snprintf(path, sizeof path, "%s.logits.f32", prefix);
        float *ref_logits = read_f32_dump(path, (size_t)n * V);
        snprintf(path, sizeof path, "%s.hidden.f32", prefix);
        float *ref_hidden = read_f32_dump(path, (size_t)n * E);

        tr_context_params cp = tr_context_default_params();
        cp.n_ctx = 128;
        cp.n_threads = 2;
        tr_context *ctx = NULL;
        assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
        assert_int_equal(tr_context_eval(ctx, prompt, n, TR_EVAL_LOGITS_ALL), TR_OK);
        float *logits = malloc(sizeof(float) * n * V), *hidden = malloc(sizeof(float) * n * E);
        int argmax_checked = 0;
        for (int32_t i = 0; i < n; i++) {
            memcpy(logits + i * V, tr_context_logits(ctx, i), V * sizeof(float));
            memcpy(hidden + i * E, tr_context_hidden(ctx, i), E * sizeof(float));
            const int32_t top = reference_clear_argmax(ref_logits + i * V, V);
            if (top >= 0) {
                argmax_checked++;
                if (tr_argmax(logits + i * V, (int32_t)V) != top) fail_msg("%s: argmax differs at %d", isas[s], i);
            }
        }
        const double e_logits = rel_rms(logits, ref_logits, (size_t)n * V);
        const double e_hidden = rel_rms(hidden, ref_hidden, (size_t)n * E);
        int matched = 0;
        int32_t id = tr_argmax(tr_context_logits(ctx, n - 1), (int32_t)V);
        for (int i = 0; i < N_GREEDY && id == greedy[i]; i++) {
            matched++;
            if (i + 1 == N_GREEDY) break;
            assert_int_equal(tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST), TR_OK);
            id = tr_argmax(tr_context_logits(ctx, -1), (int32_t)V);
        }
        fprintf(stderr, "  %-6s logits rel RMS %.2e, hidden %.2e, argmax checked at %d/%d, greedy %d/%d", isas[s],
                e_logits, e_hidden, argmax_checked, n, matched, N_GREEDY);
        if (matched < N_GREEDY)
            fprintf(stderr, " (then %d where llama.cpp has %d, runner-up %d, %.2g%% behind)", id, greedy[matched],
                    runner_up[matched], 100 * gap[matched]);
        fprintf(stderr, "\n");
        const double tol = c->pure ? 1e-2 : 5e-2;
        assert_true(e_logits <= tol && e_hidden <= tol);
        assert_true(argmax_checked > 0);
        /* Tokens must match all the way, or up to a step where llama.cpp's own two best tokens are within 0.5% and
         * ours is its runner-up: with 8-bit activations, one value rounded the other way (float sums in another
         * order) can swap such a pair, and the sequences part there (IQ4: 0.06-0.23% on 7 of 18 runs; the Q2_K / Q3_K
         * files of the random-weight models matched all 32 tokens in all 27 runs). stories260K's mixes keep its 172-wide ffn_down in F16,
         * whose activations llama.cpp rounds to F16 (the engine keeps F32: hidden states differ by ~1e-2 there,
         * not 1e-7), so there a pair within 2% may swap (measured: 0.04% in the Q2_K mix, 1.1% in the Q3_K_M
         * mix, neither file holding a single Q2_K / Q3_K tensor). */
        const double tie = in_f16 > 0 ? 2e-2 : 5e-3;
        if (matched < N_GREEDY) assert_true(id == runner_up[matched] && gap[matched] < tie);
        free(logits);
        free(hidden);
        free(ref_logits);
        free(ref_hidden);
        tr_context_free(ctx);
        tr_model_free(m);
    }
    assert_int_equal(kernels_force_isa(best), TR_OK);
    free(prompt);
    free(json);
}

#define CASE(fn, src, qtype, pure, type, min_tensors)                                \
    static void fn(void **state) {                                                    \
        (void)state;                                                                  \
        const quant_case c = {src, qtype, pure, type, min_tensors};                     \
        check_case(&c);                                                               \
    }

/* 2 layers × 7 matrices plus the embeddings (and llama's output): --pure puts every one in the type */
CASE(llama_iq4_nl, "llama-f16", "IQ4_NL", true, TR_TYPE_IQ4_NL, 16)
CASE(llama_iq4_xs, "llama-f16", "IQ4_XS", true, TR_TYPE_IQ4_XS, 16)
CASE(qwen2_iq4_nl, "qwen2-f16", "IQ4_NL", true, TR_TYPE_IQ4_NL, 15)
CASE(qwen2_iq4_xs, "qwen2-f16", "IQ4_XS", true, TR_TYPE_IQ4_XS, 15)
/* a trained model: 64-wide matrices in IQ4_NL (172-wide ffn_down cannot be, llama-quantize picks another type) */
CASE(stories_iq4_nl, "stories260K", "IQ4_NL", false, TR_TYPE_IQ4_NL, 20)
/* the stock mix: IQ4_XS for most matrices, other types where llama-quantize chooses them */
CASE(qwen2_iq4_xs_mix, "qwen2-f16", "IQ4_XS", false, TR_TYPE_IQ4_XS, 8)
CASE(llama_q3_k, "llama-f16", "Q3_K", true, TR_TYPE_Q3_K, 16)
CASE(llama_q2_k, "llama-f16", "Q2_K", true, TR_TYPE_Q2_K, 16)
CASE(qwen2_q3_k, "qwen2-f16", "Q3_K", true, TR_TYPE_Q3_K, 15)
CASE(qwen2_q2_k, "qwen2-f16", "Q2_K", true, TR_TYPE_Q2_K, 15)
/* the stock mixes: Q3_K / Q2_K for most matrices, Q4_K/Q5_K/Q6_K where llama-quantize chooses them */
CASE(qwen2_q3_k_s, "qwen2-f16", "Q3_K_S", false, TR_TYPE_Q3_K, 8)
CASE(qwen2_q3_k_m, "qwen2-f16", "Q3_K_M", false, TR_TYPE_Q3_K, 6)
CASE(qwen2_q3_k_l, "qwen2-f16", "Q3_K_L", false, TR_TYPE_Q3_K, 4)
CASE(qwen2_q2_k_mix, "qwen2-f16", "Q2_K", false, TR_TYPE_Q2_K, 4)
CASE(llama_q3_k_m, "llama-f16", "Q3_K_M", false, TR_TYPE_Q3_K, 6)
/* a trained model whose rows are 64 wide: llama-quantize falls back to 32-element types for every matrix */
CASE(stories_q3_k_m, "stories260K", "Q3_K_M", false, TR_TYPE_Q3_K, 0)
CASE(stories_q2_k, "stories260K", "Q2_K", false, TR_TYPE_Q2_K, 0)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_iq4_nl), cmocka_unit_test(llama_iq4_xs),     cmocka_unit_test(qwen2_iq4_nl),
        cmocka_unit_test(qwen2_iq4_xs), cmocka_unit_test(qwen2_iq4_xs_mix), cmocka_unit_test(stories_iq4_nl),
        cmocka_unit_test(llama_q3_k),     cmocka_unit_test(llama_q2_k),     cmocka_unit_test(qwen2_q3_k),
        cmocka_unit_test(qwen2_q2_k),     cmocka_unit_test(qwen2_q3_k_s),   cmocka_unit_test(qwen2_q3_k_m),
        cmocka_unit_test(qwen2_q3_k_l),   cmocka_unit_test(qwen2_q2_k_mix), cmocka_unit_test(llama_q3_k_m),
        cmocka_unit_test(stories_q3_k_m), cmocka_unit_test(stories_q2_k),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
