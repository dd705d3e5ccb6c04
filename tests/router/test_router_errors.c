/* test_router_errors.c — every way a router file can be wrong gives a clear error and no router: wrong
 * architecture (a model file), missing keys and tensors, shapes that disagree with the sizes, a last layer wider
 * than 1, an input size that is not the SLM's, unknown or misordered features, non-finite weights, non-F32
 * tensors, stray tensors, truncated and missing files; and tr_router_write_mlp refusing bad descriptions.
 * Broken files are written with the GGUF writer directly, since tr_router_write_mlp would refuse them. */
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

/* A router file description with knobs for breaking it. Tensor shapes come from tensor_sizes (= sizes unless
 * set), so they can disagree with the metadata. */
typedef struct spec {
    const char *arch;
    int32_t n_layers;      /* written as tokroute-router.n_layers; <0: key left out */
    int32_t sizes[4];
    int32_t n_sizes;
    int32_t tensor_sizes[4];
    int32_t n_tensor_layers;
    const char *features[3];
    int32_t n_features;
    int32_t n_embd, n_vocab;
    const char *skip_tensor;
    const char *extra_tensor;
    bool nan_weight;
    bool f16_bias;
    int32_t topk;          /* written as tokroute-router.topk when > 0 */
    int32_t version;       /* written as tokroute-router.version when > 0 */
    int32_t context;       /* written as tokroute-router.context when > 0 */
} spec;

/* Valid by default: 4 → 3 → 1, no features, n_embd 4, n_vocab 16. */
static spec good_spec(void) {
    spec s = {.arch = "tokroute-router", .n_layers = 2, .sizes = {4, 3, 1}, .n_sizes = 3,
              .tensor_sizes = {4, 3, 1}, .n_tensor_layers = 2, .n_embd = 4, .n_vocab = 16};
    return s;
}

static void write_spec(const spec *s, const char *path) {
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "general.architecture", s->arch), TR_OK);
    if (s->n_layers >= 0) assert_int_equal(tr_gguf_writer_set_u32(w, "tokroute-router.n_layers", (uint32_t)s->n_layers), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_i32(w, "tokroute-router.sizes", s->sizes, (uint64_t)s->n_sizes), TR_OK);
    if (s->n_features)
        assert_int_equal(tr_gguf_writer_set_arr_str(w, "tokroute-router.features", s->features, (uint64_t)s->n_features),
                         TR_OK);
    assert_int_equal(tr_gguf_writer_set_f32(w, "tokroute-router.tau", 0.4f), TR_OK);
    if (s->topk > 0) assert_int_equal(tr_gguf_writer_set_u32(w, "tokroute-router.topk", (uint32_t)s->topk), TR_OK);
    if (s->version > 0)
        assert_int_equal(tr_gguf_writer_set_u32(w, "tokroute-router.version", (uint32_t)s->version), TR_OK);
    if (s->context > 0)
        assert_int_equal(tr_gguf_writer_set_u32(w, "tokroute-router.context", (uint32_t)s->context), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "tokroute-router.slm.n_embd", (uint32_t)s->n_embd), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "tokroute-router.slm.n_vocab", (uint32_t)s->n_vocab), TR_OK);
    static float data[64 * 64];
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++) data[i] = 0.01f * (float)(i % 7);
    if (s->nan_weight) data[5] = NAN;
    static uint16_t half[64];
    for (int32_t i = 0; i < s->n_tensor_layers; i++) {
        char name[32];
        const int64_t ne_w[2] = {s->tensor_sizes[i], s->tensor_sizes[i + 1]}, ne_b[1] = {s->tensor_sizes[i + 1]};
        snprintf(name, sizeof name, "mlp.%d.weight", (int)i);
        if (!s->skip_tensor || strcmp(name, s->skip_tensor) != 0)
            assert_int_equal(tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 2, ne_w, data, NULL), TR_OK);
        snprintf(name, sizeof name, "mlp.%d.bias", (int)i);
        if (!s->skip_tensor || strcmp(name, s->skip_tensor) != 0)
            assert_int_equal(tr_gguf_writer_add_tensor(w, name, s->f16_bias ? TR_TYPE_F16 : TR_TYPE_F32, 1, ne_b,
                                                       s->f16_bias ? (const void *)half : data, NULL),
                             TR_OK);
    }
    if (s->extra_tensor) {
        const int64_t ne[1] = {4};
        assert_int_equal(tr_gguf_writer_add_tensor(w, s->extra_tensor, TR_TYPE_F32, 1, ne, data, NULL), TR_OK);
    }
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
}

/* Loads a router written from s and expects status with every given substring in the message. */
static void expect_load_error(const spec *s, tr_status status, const char *sub1, const char *sub2) {
    const char *path = temp_path(".gguf");
    write_spec(s, path);
    tr_router *r = (tr_router *)(uintptr_t)1;
    const tr_status st = tr_router_load(path, NULL, &r);
    if (st != status || !strstr(tr_last_error(), sub1) || (sub2 && !strstr(tr_last_error(), sub2)))
        print_error("got %s: '%s'\n", tr_status_name(st), tr_last_error());
    assert_int_equal(st, status);
    assert_null(r);
    assert_non_null(strstr(tr_last_error(), "router file"));
    assert_non_null(strstr(tr_last_error(), sub1));
    if (sub2) assert_non_null(strstr(tr_last_error(), sub2));
    unlink(path);
}

static void test_good_spec_loads(void **state) {
    (void)state;
    const spec s = good_spec();
    const char *path = temp_path(".gguf");
    write_spec(&s, path);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    assert_float_equal(tr_router_default_tau(r), 0.4f, 0);
    tr_router_free(r);
    unlink(path);
}

/* Version 2 adds context (the previous positions' inputs after this position's): such a file loads with its
 * input size n_embd * (1 + context); a file of a version this build does not know is refused, naming it; files
 * without the key are version 1 (every router before context) and still load (test_good_spec_loads). */
static void test_context_and_versions(void **state) {
    (void)state;
    spec s = good_spec();
    s.version = 2;
    s.context = 2;
    s.sizes[0] = s.tensor_sizes[0] = 12; /* no features: each previous position adds its 4 hidden values */
    const char *path = temp_path(".gguf");
    write_spec(&s, path);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    assert_int_equal(tr_router_context(r), 2);
    tr_router_free(r);
    unlink(path);
    s.sizes[0] = s.tensor_sizes[0] = 4; /* context 2 but sized for none */
    expect_load_error(&s, TR_ERR_FORMAT, "input size 4", "2 previous positions");
    s.sizes[0] = s.tensor_sizes[0] = 12;
    s.context = 9;
    expect_load_error(&s, TR_ERR_FORMAT, "tokroute-router.context", "0..8");
    s.context = 2;
    s.version = 3;
    expect_load_error(&s, TR_ERR_UNSUPPORTED, "version 3", "newer tokroute");
    assert_int_equal(tr_router_input_width(0, 0, 4, 2), 12);
    assert_int_equal(tr_router_context_width(TR_FEATURE_MAXPROB | TR_FEATURE_TOKEN_EMBEDDING, 0, 4), 5);
}

static void test_model_file_is_not_a_router(void **state) {
    (void)state;
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(shared_path("models/stories-student.gguf"), NULL, &r), TR_ERR_FORMAT);
    assert_null(r);
    assert_non_null(strstr(tr_last_error(), "not a router file"));
    assert_non_null(strstr(tr_last_error(), "'llama'"));
    assert_non_null(strstr(tr_last_error(), "stories-student.gguf"));

    spec s = good_spec();
    s.arch = "qwen2";
    expect_load_error(&s, TR_ERR_FORMAT, "not a router file", "'qwen2'");
}

static void test_missing_pieces(void **state) {
    (void)state;
    spec s = good_spec();
    s.skip_tensor = "mlp.1.bias";
    expect_load_error(&s, TR_ERR_FORMAT, "missing tensor mlp.1.bias", NULL);
    s = good_spec();
    s.skip_tensor = "mlp.0.weight";
    expect_load_error(&s, TR_ERR_FORMAT, "missing tensor mlp.0.weight", NULL);
    s = good_spec();
    s.n_layers = -1;
    expect_load_error(&s, TR_ERR_FORMAT, "missing key tokroute-router.n_layers", NULL);
}

static void test_shapes_must_agree(void **state) {
    (void)state;
    /* Tensors for 4 → 5 → 1 under metadata saying 4 → 3 → 1. */
    spec s = good_spec();
    s.tensor_sizes[1] = 5;
    expect_load_error(&s, TR_ERR_FORMAT, "tensor mlp.0.weight has shape [4, 5", "need [4, 3]");
    /* n_layers disagreeing with the sizes array. */
    s = good_spec();
    s.n_layers = 3;
    expect_load_error(&s, TR_ERR_FORMAT, "tokroute-router.sizes", "n_layers + 1 = 4");
    /* A third layer's tensors the metadata knows nothing about. */
    s = good_spec();
    s.extra_tensor = "mlp.2.bias";
    expect_load_error(&s, TR_ERR_FORMAT, "unexpected tensor mlp.2.bias", NULL);
    s = good_spec();
    s.extra_tensor = "output.weight";
    expect_load_error(&s, TR_ERR_FORMAT, "unexpected tensor output.weight", NULL);
    /* A zero width. */
    s = good_spec();
    s.sizes[1] = 0;
    expect_load_error(&s, TR_ERR_FORMAT, "sizes[1] = 0", NULL);
}

static void test_last_size_must_be_one(void **state) {
    (void)state;
    spec s = good_spec();
    s.sizes[2] = s.tensor_sizes[2] = 2;
    expect_load_error(&s, TR_ERR_FORMAT, "last layer has 2 outputs", NULL);
}

static void test_input_size_must_match(void **state) {
    (void)state;
    /* Inside the file: sizes[0] must be n_embd + features. */
    spec s = good_spec();
    s.n_embd = 5;
    expect_load_error(&s, TR_ERR_FORMAT, "input size 4 does not match slm.n_embd 5 + 0 features", NULL);
    s = good_spec();
    s.features[0] = "maxprob";
    s.n_features = 1;
    expect_load_error(&s, TR_ERR_FORMAT, "input size 4 does not match slm.n_embd 4 + 1 features", NULL);

    /* Against the SLM: a router for hidden size 64 given the student (hidden size 32, vocabulary 512). */
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    tr_model *model = NULL;
    assert_int_equal(tr_model_load(shared_path("models/stories-student.gguf"), &mp, &model), TR_OK);
    const tr_model_info *info = tr_model_get_info(model);

    const int32_t sizes[2] = {64, 1};
    float w[64] = {0}, b[1] = {0};
    const float *const ws[1] = {w};
    const float *const bs[1] = {b};
    tr_mlp_router_desc d = {.n_layers = 1, .sizes = sizes, .weights = ws, .biases = bs, .tau = 0.5f,
                            .slm_n_embd = 64, .slm_n_vocab = 512};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, info, &r), TR_ERR_ARG);
    assert_null(r);
    assert_non_null(strstr(tr_last_error(), "router expects hidden size 64 but the SLM has 32"));
    unlink(path);

    /* Right hidden size, wrong vocabulary. */
    const int32_t sizes32[2] = {32, 1};
    d.sizes = sizes32;
    d.slm_n_embd = 32;
    d.slm_n_vocab = 1000;
    path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    assert_int_equal(tr_router_load(path, info, &r), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "vocabulary of 1000 tokens but the SLM has 512"));
    /* Without the SLM's info the same file loads. */
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    tr_router_free(r);
    unlink(path);
    tr_model_free(model);
}

static void test_features_must_be_known_and_ordered(void **state) {
    (void)state;
    spec s = good_spec();
    s.sizes[0] = s.tensor_sizes[0] = 6;
    s.features[0] = "maxprob";
    s.features[1] = "logprob";
    s.n_features = 2;
    expect_load_error(&s, TR_ERR_UNSUPPORTED, "unknown router feature 'logprob'", NULL);
    s.features[0] = "entropy";
    s.features[1] = "maxprob";
    expect_load_error(&s, TR_ERR_FORMAT, "order maxprob, entropy", NULL);
    s.features[0] = "maxprob";
    s.features[1] = "maxprob";
    expect_load_error(&s, TR_ERR_FORMAT, "'maxprob' is listed twice", NULL);
}

/* The top-k feature needs its k, and the order extends to margin and topk_logprobs. */
static void test_topk_feature_needs_k(void **state) {
    (void)state;
    spec s = good_spec();
    s.sizes[0] = s.tensor_sizes[0] = 4 + 1 + 3;
    s.features[0] = "margin";
    s.features[1] = "topk_logprobs";
    s.n_features = 2;
    expect_load_error(&s, TR_ERR_FORMAT, "missing key tokroute-router.topk", NULL);
    s.topk = 65;
    expect_load_error(&s, TR_ERR_FORMAT, "tokroute-router.topk = 65 is outside 1..64", NULL);
    s.topk = 17; /* more than the vocabulary of 16 */
    s.sizes[0] = s.tensor_sizes[0] = 4 + 1 + 17;
    expect_load_error(&s, TR_ERR_FORMAT, "exceeds slm.n_vocab 16", NULL);
    s.topk = 4; /* input 8 = 4 + margin + 3 would need topk 3 */
    s.sizes[0] = s.tensor_sizes[0] = 8;
    expect_load_error(&s, TR_ERR_FORMAT, "input size 8 does not match slm.n_embd 4 + 5 features", NULL);
    s.topk = 3;
    s.features[0] = "topk_logprobs";
    s.features[1] = "margin";
    expect_load_error(&s, TR_ERR_FORMAT, "order maxprob, entropy, margin, topk_logprobs", NULL);
    s.features[0] = "margin";
    s.features[1] = "topk";  /* the CLI's short name is not a file name */
    expect_load_error(&s, TR_ERR_UNSUPPORTED, "unknown router feature 'topk'", NULL);
    s.features[1] = "topk_logprobs";
    const char *path = temp_path(".gguf");
    write_spec(&s, path);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    assert_int_equal(tr_router_features(r), TR_FEATURE_MARGIN | TR_FEATURE_TOPK_LOGPROBS);
    assert_int_equal(tr_router_topk(r), 3);
    tr_router_free(r);
    unlink(path);
}

/* A header claiming layers of 2^20 × 2^20 weights over small tensors is refused on the tensor shapes, before any
 * weight memory is allocated (allocating first would ask for terabytes). */
static void test_shapes_checked_before_allocating(void **state) {
    (void)state;
    spec s = good_spec();
    s.n_layers = 3;
    s.n_sizes = 4;
    s.sizes[0] = 4;
    s.sizes[1] = 1 << 20;
    s.sizes[2] = 1 << 20;
    s.sizes[3] = 1;
    s.n_tensor_layers = 3;
    s.tensor_sizes[0] = 4;
    s.tensor_sizes[1] = 3;
    s.tensor_sizes[2] = 3;
    s.tensor_sizes[3] = 1;
    expect_load_error(&s, TR_ERR_FORMAT, "tensor mlp.0.weight has shape [4, 3, 1, 1]", "[4, 1048576]");
    /* The last layer's tensors missing: still caught before allocating. */
    s = good_spec();
    s.skip_tensor = "mlp.1.bias";
    s.sizes[1] = s.tensor_sizes[1] = 3;
    expect_load_error(&s, TR_ERR_FORMAT, "missing tensor mlp.1.bias", NULL);
}

static void test_weights_must_be_finite_f32(void **state) {
    (void)state;
    spec s = good_spec();
    s.nan_weight = true;
    expect_load_error(&s, TR_ERR_FORMAT, "tensor mlp.0.weight has a non-finite value at 5", NULL);
    s = good_spec();
    s.f16_bias = true;
    expect_load_error(&s, TR_ERR_UNSUPPORTED, "tensor mlp.0.bias is f16", NULL);
}

static void test_truncated_and_missing_files(void **state) {
    (void)state;
    const spec s = good_spec();
    const char *path = temp_path(".gguf");
    write_spec(&s, path);
    size_t size = 0;
    char *bytes = read_file(path, &size);
    assert_non_null(bytes);
    unlink(path);
    /* The writer pads after every tensor, so find where the last tensor's data ends and cut just before it. */
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(bytes, size, &g), TR_OK);
    size_t data_end = 0;
    for (int64_t i = 0; i < tr_gguf_n_tensors(g); i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
        const size_t end = (size_t)((const char *)t->data - bytes) + t->n_bytes;
        if (end > data_end) data_end = end;
    }
    tr_gguf_close(g);
    const size_t cuts[] = {data_end - 1, size / 2, 40, 3};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        const char *cut = temp_path(".gguf");
        FILE *f = fopen(cut, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, cuts[k], f), cuts[k]);
        fclose(f);
        tr_router *r = NULL;
        assert_int_equal(tr_router_load(cut, NULL, &r), TR_ERR_FORMAT);
        assert_null(r);
        assert_non_null(strstr(tr_last_error(), "router file"));
        assert_true(strstr(tr_last_error(), "truncated") || strstr(tr_last_error(), "exceeds the file") ||
                    strstr(tr_last_error(), "not a GGUF file"));
        unlink(cut);
    }
    free(bytes);

    tr_router *r = NULL;
    assert_int_equal(tr_router_load("/nonexistent/router.gguf", NULL, &r), TR_ERR_IO);
    assert_non_null(strstr(tr_last_error(), "/nonexistent/router.gguf"));
    assert_int_equal(tr_router_load(NULL, NULL, &r), TR_ERR_ARG);
    assert_int_equal(tr_router_load(path, NULL, NULL), TR_ERR_ARG);
}

static void test_writer_refuses_bad_descriptions(void **state) {
    (void)state;
    const int32_t sizes[3] = {4, 3, 2};
    float w0[12] = {0}, w1[6] = {0}, b0[3] = {0}, b1[2] = {0};
    const float *const ws[2] = {w0, w1};
    const float *const bs[2] = {b0, b1};
    tr_mlp_router_desc d = {.n_layers = 2, .sizes = sizes, .weights = ws, .biases = bs, .tau = 0.5f,
                            .slm_n_embd = 4, .slm_n_vocab = 16};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "last layer has 2 outputs"));

    const int32_t ok_sizes[3] = {4, 3, 1};
    d.sizes = ok_sizes;
    d.features = TR_FEATURE_ENTROPY;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "input size 4 does not match"));
    d.features = 1u << 5;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    d.features = 0;
    d.tau = 1.5f;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    d.tau = 0.5f;
    w1[1] = INFINITY;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "non-finite"));
    w1[1] = 0;
    d.n_layers = 0;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    assert_int_equal(tr_router_write_mlp(NULL, path), TR_ERR_ARG);
    assert_int_equal(access(path, F_OK), -1); /* nothing was written */
    d.n_layers = 2;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_spec_loads),
        cmocka_unit_test(test_context_and_versions),
        cmocka_unit_test(test_model_file_is_not_a_router),
        cmocka_unit_test(test_missing_pieces),
        cmocka_unit_test(test_shapes_must_agree),
        cmocka_unit_test(test_last_size_must_be_one),
        cmocka_unit_test(test_input_size_must_match),
        cmocka_unit_test(test_features_must_be_known_and_ordered),
        cmocka_unit_test(test_topk_feature_needs_k),
        cmocka_unit_test(test_shapes_checked_before_allocating),
        cmocka_unit_test(test_weights_must_be_finite_f32),
        cmocka_unit_test(test_truncated_and_missing_files),
        cmocka_unit_test(test_writer_refuses_bad_descriptions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
