/* test_router_mlp.c — MLP router files: written with tr_router_write_mlp, loaded back and scored against hand
 * computations (a 2-layer net with a maxprob feature worked out on paper; CITER's h → 2h → h → 1 shape with both
 * features against a double-precision reference); metadata read back; size checks when scoring; and a router
 * scoring the student SLM's real hidden state and logits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/fixtures.h"
#include "tokroute.h"

/* hidden [0.3, -0.4], logits [2, 1, 0] (maxprob 0.6652410), input x = [0.3, -0.4, 0.6652410];
 * layer 0: W [[1, -1, 0.5], [-2, 0.5, 1]], b [0.1, -0.2] → [1.1326205, -0.3347590] → ReLU → [1.1326205, 0];
 * layer 1: W [[1.5, -0.5]], b [0.25] → 1.9489307; sigmoid → 0.8753300. */
static void test_small_router_matches_hand_computation(void **state) {
    (void)state;
    const int32_t sizes[3] = {3, 2, 1};
    const float w0[6] = {1, -1, 0.5f, -2, 0.5f, 1}, b0[2] = {0.1f, -0.2f};
    const float w1[2] = {1.5f, -0.5f}, b1[1] = {0.25f};
    const float *const weights[2] = {w0, w1};
    const float *const biases[2] = {b0, b1};
    const tr_mlp_router_desc desc = {.n_layers = 2, .sizes = sizes, .weights = weights, .biases = biases,
                                     .features = TR_FEATURE_MAXPROB, .tau = 0.625f, .slm_name = "toy",
                                     .slm_n_embd = 2, .slm_n_vocab = 3};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);

    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    assert_int_equal(tr_router_policy(r), TR_POLICY_MLP);
    assert_float_equal(tr_router_default_tau(r), 0.625f, 0);
    const float hidden[2] = {0.3f, -0.4f}, logits[3] = {2, 1, 0};
    float s = -1;
    assert_int_equal(tr_router_score(r, hidden, 2, logits, 3, &s), TR_OK);
    assert_float_equal(s, 0.8753300f, 2e-6f);

    /* The file is self-contained once loaded. */
    unlink(path);
    float again = -1;
    assert_int_equal(tr_router_score(r, hidden, 2, logits, 3, &again), TR_OK);
    assert_float_equal(again, s, 0);

    /* Sizes are checked on every call. */
    assert_int_equal(tr_router_score(r, hidden, 3, logits, 3, &s), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "hidden size 2"));
    assert_int_equal(tr_router_score(r, hidden, 2, logits, 4, &s), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "vocabulary of 3"));
    assert_int_equal(tr_router_score(r, hidden, 2, NULL, 3, &s), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "logits"));
    assert_int_equal(tr_router_score(r, NULL, 2, logits, 3, &s), TR_ERR_ARG);
    /* A hidden state that is not finite is routed. */
    const float bad_hidden[2] = {NAN, 0.0f};
    assert_int_equal(tr_router_score(r, bad_hidden, 2, logits, 3, &s), TR_OK);
    assert_float_equal(s, 0.0f, 0);
    tr_router_free(r);
}

/* Without features the logits are not needed. Single layer: sigmoid(w·h + b). */
static void test_router_without_features_ignores_logits(void **state) {
    (void)state;
    const int32_t sizes[2] = {4, 1};
    const float w[4] = {0.5f, -1.0f, 2.0f, 0.25f}, b[1] = {-0.5f};
    const float *const weights[1] = {w};
    const float *const biases[1] = {b};
    const tr_mlp_router_desc desc = {.n_layers = 1, .sizes = sizes, .weights = weights, .biases = biases,
                                     .tau = 0.5f, .slm_n_embd = 4, .slm_n_vocab = 10};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    unlink(path);
    const float h[4] = {1.0f, 2.0f, -0.5f, 4.0f};
    float s = -1;
    assert_int_equal(tr_router_score(r, h, 4, NULL, 0, &s), TR_OK);
    const double z = 0.5 - 2.0 - 1.0 + 1.0 - 0.5; /* -2 */
    assert_float_equal(s, (float)(1.0 / (1.0 + exp(-z))), 1e-6f);
    tr_router_free(r);
}

static float rand_uniform(uint64_t *seed, float scale) {
    *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)(((double)(*seed >> 11) / 9007199254740992.0 - 0.5) * 2.0 * scale);
}

/* Reference forward pass in double: layers [out][in], ReLU between, sigmoid at the end. */
static double reference_forward(int32_t n_layers, const int32_t *sizes, float *const *w, float *const *b,
                                const double *input) {
    double a[256], next[256];
    memcpy(a, input, (size_t)sizes[0] * sizeof *a);
    for (int32_t l = 0; l < n_layers; l++) {
        for (int32_t r = 0; r < sizes[l + 1]; r++) {
            double acc = b[l][r];
            for (int32_t c = 0; c < sizes[l]; c++) acc += (double)w[l][(size_t)r * sizes[l] + c] * a[c];
            next[r] = (l + 1 < n_layers && acc < 0) ? 0 : acc;
        }
        memcpy(a, next, (size_t)sizes[l + 1] * sizeof *a);
    }
    return 1.0 / (1.0 + exp(-a[0]));
}

/* CITER's default: h → 2h → h → 1 with h = 32 and the maxprob and entropy features appended (input 34). */
static void test_citer_shape_with_features(void **state) {
    (void)state;
    enum { H = 32, V = 512 };
    const int32_t sizes[4] = {H + 2, 2 * H, H, 1};
    float *w[3], *b[3];
    uint64_t seed = 7;
    for (int l = 0; l < 3; l++) {
        w[l] = malloc((size_t)sizes[l] * sizes[l + 1] * sizeof(float));
        b[l] = malloc((size_t)sizes[l + 1] * sizeof(float));
        for (int32_t i = 0; i < sizes[l] * sizes[l + 1]; i++) w[l][i] = rand_uniform(&seed, 1.0f / sqrtf((float)sizes[l]));
        for (int32_t i = 0; i < sizes[l + 1]; i++) b[l][i] = rand_uniform(&seed, 0.1f);
    }
    const tr_mlp_router_desc desc = {.n_layers = 3, .sizes = sizes, .weights = (const float *const *)w,
                                     .biases = (const float *const *)b,
                                     .features = TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY, .tau = 0.3f,
                                     .slm_name = "stories-student", .slm_n_embd = H, .slm_n_vocab = V};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);

    /* The metadata is in the file as the format says. */
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    assert_string_equal(tr_gguf_get_str(g, "general.architecture", NULL), "tokroute-router");
    assert_string_equal(tr_gguf_get_str(g, "tokroute-router.slm.name", NULL), "stories-student");
    int64_t v;
    assert_true(tr_gguf_get_int(g, "tokroute-router.n_layers", &v) && v == 3);
    assert_true(tr_gguf_get_int(g, "tokroute-router.slm.n_embd", &v) && v == H);
    assert_true(tr_gguf_get_int(g, "tokroute-router.slm.n_vocab", &v) && v == V);
    const int64_t fk = tr_gguf_find_kv(g, "tokroute-router.features");
    assert_true(fk >= 0 && tr_gguf_kv_array_len(g, fk) == 2);
    assert_string_equal(tr_gguf_arr_str(g, fk, 0, NULL), "maxprob");
    assert_string_equal(tr_gguf_arr_str(g, fk, 1, NULL), "entropy");
    const tr_gguf_tensor *t = tr_gguf_tensor_at(g, tr_gguf_find_tensor(g, "mlp.1.weight"));
    assert_true(t->ne[0] == 2 * H && t->ne[1] == H && t->type == TR_TYPE_F32);
    tr_gguf_close(g);

    tr_model_info info = {.n_embd = H, .n_vocab = V};
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, &info, &r), TR_OK);
    assert_float_equal(tr_router_default_tau(r), 0.3f, 0);
    unlink(path);

    float hidden[H], logits[V];
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < H; i++) hidden[i] = rand_uniform(&seed, 3.0f);
        for (int i = 0; i < V; i++) logits[i] = rand_uniform(&seed, trial < 10 ? 2.0f : 15.0f);
        double input[H + 2], m = -INFINITY, s = 0, hsum = 0;
        for (int i = 0; i < H; i++) input[i] = hidden[i];
        for (int i = 0; i < V; i++) m = fmax(m, logits[i]);
        for (int i = 0; i < V; i++) s += exp(logits[i] - m);
        for (int i = 0; i < V; i++) {
            const double p = exp(logits[i] - m) / s;
            hsum -= p * log(p);
        }
        input[H] = 1 / s;
        input[H + 1] = hsum / log(V);
        const double want = reference_forward(3, sizes, w, b, input);
        float got = -1;
        assert_int_equal(tr_router_score(r, hidden, H, logits, V, &got), TR_OK);
        assert_true(got >= 0.0f && got <= 1.0f);
        assert_float_equal(got, want, 2e-5);
    }
    tr_router_free(r);
    for (int l = 0; l < 3; l++) {
        free(w[l]);
        free(b[l]);
    }
}

/* A router big enough for its layers to be split over threads (256 -> 512 -> 256 -> 1) scores exactly the same
 * with a pool as on the caller alone: each output row is still one thread's dot product. */
static void test_threads_do_not_change_scores(void **state) {
    (void)state;
    enum { H = 256 };
    const int32_t sizes[4] = {H, 2 * H, H, 1};
    float *w[3], *b[3];
    uint64_t seed = 5;
    for (int l = 0; l < 3; l++) {
        w[l] = malloc((size_t)sizes[l] * sizes[l + 1] * sizeof(float));
        b[l] = malloc((size_t)sizes[l + 1] * sizeof(float));
        for (int32_t i = 0; i < sizes[l] * sizes[l + 1]; i++) w[l][i] = rand_uniform(&seed, 0.1f);
        for (int32_t i = 0; i < sizes[l + 1]; i++) b[l][i] = rand_uniform(&seed, 0.1f);
    }
    const tr_mlp_router_desc desc = {.n_layers = 3, .sizes = sizes, .weights = (const float *const *)w,
                                     .biases = (const float *const *)b, .tau = 0.5f, .slm_name = "t",
                                     .slm_n_embd = H, .slm_n_vocab = 16};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    remove(path);
    float hidden[H], one[8], two[8];
    for (int trial = 0; trial < 8; trial++) {
        for (int i = 0; i < H; i++) hidden[i] = rand_uniform(&seed, 2.0f);
        assert_int_equal(tr_router_set_threads(r, 1), TR_OK);
        assert_int_equal(tr_router_score(r, hidden, H, NULL, 0, &one[trial]), TR_OK);
        assert_int_equal(tr_router_set_threads(r, 2), TR_OK);
        assert_int_equal(tr_router_score(r, hidden, H, NULL, 0, &two[trial]), TR_OK);
    }
    assert_memory_equal(one, two, sizeof one);
    assert_true(one[0] != one[1]); /* the inputs matter */
    assert_int_equal(tr_router_set_threads(r, -1), TR_ERR_ARG);
    tr_router_free(r);
    for (int l = 0; l < 3; l++) {
        free(w[l]);
        free(b[l]);
    }
}

/* A router for the student SLM, loaded against the real model and fed its hidden state and logits. */
static void test_scores_the_student_model(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *model = NULL;
    assert_int_equal(tr_model_load(shared_path("models/stories-student.gguf"), &mp, &model), TR_OK);
    const tr_model_info *info = tr_model_get_info(model);
    assert_int_equal(info->n_embd, 32);
    assert_int_equal(info->n_vocab, 512);

    const int32_t sizes[4] = {34, 64, 32, 1};
    float *w[3], *b[3];
    uint64_t seed = 99;
    for (int l = 0; l < 3; l++) {
        w[l] = malloc((size_t)sizes[l] * sizes[l + 1] * sizeof(float));
        b[l] = calloc((size_t)sizes[l + 1], sizeof(float));
        for (int32_t i = 0; i < sizes[l] * sizes[l + 1]; i++) w[l][i] = rand_uniform(&seed, 0.3f);
    }
    const tr_mlp_router_desc desc = {.n_layers = 3, .sizes = sizes, .weights = (const float *const *)w,
                                     .biases = (const float *const *)b,
                                     .features = TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY, .tau = 0.5f,
                                     .slm_name = info->name, .slm_n_embd = 32, .slm_n_vocab = 512};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, info, &r), TR_OK);
    unlink(path);

    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(model, &cp, &ctx), TR_OK);
    const int32_t prompt[4] = {1, 403, 407, 261};
    assert_int_equal(tr_context_eval(ctx, prompt, 4, TR_EVAL_LOGITS_LAST), TR_OK);
    const float *hidden = tr_context_hidden(ctx, -1), *logits = tr_context_logits(ctx, -1);
    assert_non_null(hidden);
    assert_non_null(logits);
    float s_mlp = -1, s_max = -1;
    assert_int_equal(tr_router_score(r, hidden, 32, logits, 512, &s_mlp), TR_OK);
    assert_true(s_mlp > 0.0f && s_mlp < 1.0f);
    tr_router *maxprob = NULL;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &maxprob), TR_OK);
    assert_int_equal(tr_router_score(maxprob, hidden, 32, logits, 512, &s_max), TR_OK);
    assert_true(s_max > 1.0f / 512 && s_max <= 1.0f);

    tr_router_free(maxprob);
    tr_router_free(r);
    tr_context_free(ctx);
    tr_model_free(model);
    for (int l = 0; l < 3; l++) {
        free(w[l]);
        free(b[l]);
    }
}

/* Every feature at once: hidden [2] + maxprob, entropy, margin and the top-3 log-probs (input 8), one linear
 * layer, so the score is sigmoid(w · x + b) with x worked out in double from the logits. Also round-trips the
 * feature list and k through the file. */
static void test_all_features_round_trip(void **state) {
    (void)state;
    const int32_t sizes[2] = {8, 1};
    const float w[8] = {0.5f, -0.25f, 1.5f, -2.0f, 0.75f, 0.3f, -0.2f, 0.1f}, b[1] = {0.05f};
    const float *const weights[1] = {w};
    const float *const biases[1] = {b};
    const unsigned all = TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN | TR_FEATURE_TOPK_LOGPROBS;
    const tr_mlp_router_desc desc = {.n_layers = 1, .sizes = sizes, .weights = weights, .biases = biases,
                                     .features = all, .tau = 0.5f, .slm_n_embd = 2, .slm_n_vocab = 5, .topk = 3};
    assert_int_equal(tr_router_feature_width(all, 3, 2), 6);
    assert_int_equal(tr_router_feature_width(all | TR_FEATURE_TOKEN_EMBEDDING, 3, 2), 8);
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    unlink(path);
    assert_int_equal(tr_router_features(r), all);
    assert_int_equal(tr_router_topk(r), 3);

    const float hidden[2] = {0.4f, -1.2f}, logits[5] = {1.0f, 3.0f, -0.5f, 2.5f, 0.0f};
    double z = 0, p[5], s = 0, h = 0;
    for (int i = 0; i < 5; i++) s += exp(logits[i]);
    for (int i = 0; i < 5; i++) {
        p[i] = exp(logits[i]) / s;
        h -= p[i] * log(p[i]);
    }
    /* sorted probabilities: p[1] > p[3] > p[0] */
    const double x[8] = {hidden[0], hidden[1], p[1], h / log(5.0), p[1] - p[3], log(p[1]), log(p[3]), log(p[0])};
    for (int i = 0; i < 8; i++) z += w[i] * x[i];
    z += b[0];
    float score = -1;
    assert_int_equal(tr_router_score(r, hidden, 2, logits, 5, &score), TR_OK);
    assert_float_equal(score, 1.0 / (1.0 + exp(-z)), 2e-6);
    tr_router_free(r);

    /* The writer checks k against the features. */
    tr_mlp_router_desc bad = desc;
    bad.topk = 0;
    assert_int_equal(tr_router_write_mlp(&bad, temp_path(".gguf")), TR_ERR_ARG);
    unsigned parsed = 0;
    assert_int_equal(tr_router_features_parse("maxprob,topk", &parsed), TR_OK);
    assert_int_equal(parsed, TR_FEATURE_MAXPROB | TR_FEATURE_TOPK_LOGPROBS);
    assert_int_equal(tr_router_features_parse("none", &parsed), TR_OK);
    assert_int_equal(parsed, 0);
    assert_int_equal(tr_router_features_parse("maxprob,,entropy", &parsed), TR_ERR_ARG);
    assert_int_equal(tr_router_features_parse("logprob", &parsed), TR_ERR_ARG);
    assert_string_equal(tr_router_feature_name(TR_FEATURE_MARGIN), "margin");
    assert_null(tr_router_feature_name(1u << 9));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_router_matches_hand_computation),
        cmocka_unit_test(test_router_without_features_ignores_logits),
        cmocka_unit_test(test_citer_shape_with_features),
        cmocka_unit_test(test_scores_the_student_model),
        cmocka_unit_test(test_threads_do_not_change_scores),
        cmocka_unit_test(test_all_features_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
