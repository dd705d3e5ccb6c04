/* test_router_ngram.c — a router with the ngram feature (issue 32): its table survives the file round trip entry
 * for entry, scoring reads it through tr_router_tokens (the highest order held, nothing found = zeros), the
 * writer refuses a missing or broken table, every loading rule refuses a hostile file with TR_ERR_FORMAT and a
 * message naming the rule, and routers without the feature are written without any ngram key and load as before. */
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

#include "router/router_internal.h"
#include "support/fixtures.h"
#include "tokroute.h"

#define BOS 7
#define N_VOCAB 8
#define FEATURES (TR_FEATURE_MAXPROB | TR_FEATURE_NGRAM)
#define N_IN (1 + 1 + TR_ROUTER_NGRAM_VALUES)

/* Order 1: START -> 1 (C 2, gain mean 0.25), 3 -> 4 (3 of 5) then 2 (2; 0.5); order 2: (3, 1) -> 4 (2 of 3) then
 * 5 (1; 0.125). */
typedef struct table_floats {
    float c1[2], s1[2 * NGRAM_STATS], c2[2], s2[NGRAM_STATS];
} table_floats;
static const table_floats valid = {.c1 = {-1, 3}, .s1 = {2, 1, 2, -1, 0, 0.25f, 5, 4, 3, 2, 2, 0.5f}, .c2 = {3, 1},
                                   .s2 = {3, 4, 2, 5, 1, 0.125f}};

static ngram_stats stats_row(const float *r) {
    return (ngram_stats){(int32_t)r[0], (int32_t)r[1], (int32_t)r[2], (int32_t)r[3], (int32_t)r[4], r[5]};
}

static void fill_table(tr_ngram_table *t, ngram_order_table *o1, ngram_order_table *o2, int32_t *c1, int32_t *c2,
                       ngram_stats *s1, ngram_stats *s2) {
    memset(t, 0, sizeof *t);
    t->order = 2;
    t->min_count = 2;
    for (int i = 0; i < 2; i++) c1[i] = (int32_t)valid.c1[i], c2[i] = (int32_t)valid.c2[i];
    for (int i = 0; i < 2; i++) s1[i] = stats_row(valid.s1 + i * NGRAM_STATS);
    s2[0] = stats_row(valid.s2);
    *o1 = (ngram_order_table){.n = 2, .context = c1, .stats = s1};
    *o2 = (ngram_order_table){.n = 1, .context = c2, .stats = s2};
    t->orders[0] = *o1;
    t->orders[1] = *o2;
}

static tr_mlp_router_desc desc_with(const tr_ngram_table *t, unsigned features, const int32_t *sizes,
                                    const float *const *ws, const float *const *bs) {
    return (tr_mlp_router_desc){.n_layers = 1, .sizes = sizes, .weights = ws, .biases = bs, .features = features,
                                .tau = 0.5f, .slm_n_embd = 1, .slm_n_vocab = N_VOCAB, .ngram = t};
}

static void test_round_trip_and_scoring(void **state) {
    (void)state;
    tr_ngram_table t;
    ngram_order_table o1, o2;
    int32_t c1[2], c2[2];
    ngram_stats s1[2], s2[1];
    fill_table(&t, &o1, &o2, c1, c2, s1, s2);
    float w[N_IN] = {0}, b[1] = {0};
    w[N_IN - TR_ROUTER_NGRAM_VALUES] = 2.0f; /* reads found */
    const int32_t sizes[2] = {N_IN, 1};
    const float *const ws[1] = {w}, *const bs[1] = {b};
    const tr_mlp_router_desc d = desc_with(&t, FEATURES, sizes, ws, bs);
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    unlink(path);
    assert_int_equal(tr_router_features(r), FEATURES);
    const tr_ngram_table *got = router_mlp(r)->ngram;
    assert_non_null(got);
    assert_int_equal(got->order, 2);
    assert_int_equal(got->min_count, 2);
    for (int k = 1; k <= 2; k++) {
        assert_int_equal(got->orders[k - 1].n, t.orders[k - 1].n);
        assert_memory_equal(got->orders[k - 1].context, t.orders[k - 1].context,
                            (size_t)t.orders[k - 1].n * (size_t)k * sizeof(int32_t));
        assert_memory_equal(got->orders[k - 1].stats, t.orders[k - 1].stats,
                            (size_t)t.orders[k - 1].n * sizeof(ngram_stats));
    }
    const float h[1] = {0}, logits[N_VOCAB] = {0, 0, 0, 0, 5, 0, 0, 0};
    float s = 0;
    assert_string_equal(tr_router_feature_name(TR_FEATURE_NGRAM), "ngram");
    unsigned f = 0;
    assert_int_equal(tr_router_features_parse("maxprob,ngram", &f), TR_OK);
    assert_int_equal(f, FEATURES);
    assert_int_equal(tr_router_score_at(r, 2, h, 1, logits, N_VOCAB, &s), TR_ERR_STATE); /* no tokens given */
    assert_non_null(strstr(tr_last_error(), "tr_router_tokens"));
    const int32_t held[] = {BOS, 3}, unheld[] = {BOS, 6};
    assert_int_equal(tr_router_tokens(r, held, 2), TR_OK);
    assert_int_equal(tr_router_score_at(r, 2, h, 1, logits, N_VOCAB, &s), TR_OK);
    assert_true(fabsf(s - 1.0f / (1.0f + expf(-2.0f))) < 1e-6f); /* order 1's context 3 */
    assert_int_equal(tr_router_tokens(r, unheld, 2), TR_OK);
    assert_int_equal(tr_router_score_at(r, 2, h, 1, logits, N_VOCAB, &s), TR_OK);
    assert_true(fabsf(s - 0.5f) < 1e-6f); /* nothing held */
    /* The values as the router computes them: position 3 of BOS 1 3 reads (3, 1), nearest first. */
    float v[TR_ROUTER_NGRAM_VALUES];
    const int32_t seq[] = {BOS, 1, 3, 2};
    router_ngram_lookup(got, seq, 3, 4, v); /* context (3, 1): C 3, t1 4 = the SLM's */
    const float want[] = {1, (float)(2.0 / 3.0), (float)(2.0 / 3.0), 1, (float)log1p(3.0), 1, 0.125f};
    assert_memory_equal(v, want, sizeof want);
    tr_router_free(r);
    /* The writer refuses a missing or broken table. */
    const tr_mlp_router_desc no_table = desc_with(NULL, FEATURES, sizes, ws, bs);
    assert_int_equal(tr_router_write_mlp(&no_table, path), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "ngram"));
    s1[1].m2 = 4; /* M2 > M1 */
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "M2 <= M1"));
    s1[1].m2 = 2;
    s1[1].gain_mean = 1.5f;
    assert_int_equal(tr_router_write_mlp(&d, path), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "gain mean 1.5 is not in [0, 1]"));
    assert_int_equal(access(path, F_OK), -1);
}

/* ---------------------------------------------------------------- hostile files */

typedef enum variant {
    V_VALID, V_NOT_INTEGER, V_TOKEN_OUTSIDE, V_START_NEAR, V_NOT_INCREASING, V_BELOW_MIN, V_M2_ABOVE_M1,
    V_SUM_ABOVE_C, V_T2_WITHOUT_M2, V_SAME_FOLLOWERS, V_ONLY_CONTEXT, V_SHAPE, V_NO_ORDER_KEY, V_ORDER_TOO_HIGH,
    V_TENSOR_BEYOND_ORDER, V_NO_FEATURE, V_F16, V_GAIN_NAN, V_GAIN_NEGATIVE, V_GAIN_ABOVE_ONE, V_FIVE_COLUMNS,
} variant;

static const char *write_variant(variant v) {
    table_floats t = valid;
    switch (v) {
    case V_NOT_INTEGER: t.s1[6] = 5.5f; break;
    case V_TOKEN_OUTSIDE: t.c1[1] = N_VOCAB; break;
    case V_START_NEAR: t.c2[0] = -1; break;
    case V_NOT_INCREASING: t.c1[1] = -1; break;
    case V_BELOW_MIN: t.s1[0] = 1, t.s1[2] = 1; break;
    case V_M2_ABOVE_M1: t.s1[10] = 4; break;
    case V_SUM_ABOVE_C: t.s1[8] = 3, t.s1[10] = 3; break;
    case V_T2_WITHOUT_M2: t.s1[3] = 5; break;
    case V_SAME_FOLLOWERS: t.s1[9] = 4; break;
    case V_GAIN_NAN: t.s1[5] = NAN; break;
    case V_GAIN_NEGATIVE: t.s1[11] = -0.5f; break;
    case V_GAIN_ABOVE_ONE: t.s2[5] = 1.0f + 1e-6f; break;
    case V_FIVE_COLUMNS: /* a table from before the gain mean: each row's first five */
        for (int r = 0; r < 2; r++) memmove(t.s1 + r * 5, valid.s1 + r * NGRAM_STATS, 5 * sizeof(float));
        break;
    default: break;
    }
    float w[N_IN] = {0}, b[1] = {0};
    const int32_t sizes[2] = {N_IN, 1};
    const char *feats[2] = {"maxprob", "ngram"};
    tr_gguf_writer *g = NULL;
    assert_int_equal(tr_gguf_writer_create(&g), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(g, "general.architecture", "tokroute-router"), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(g, "tokroute-router.n_layers", 1), TR_OK);
    const int32_t plain_sizes[2] = {N_IN - TR_ROUTER_NGRAM_VALUES, 1};
    assert_int_equal(tr_gguf_writer_set_arr_i32(g, "tokroute-router.sizes", v == V_NO_FEATURE ? plain_sizes : sizes, 2),
                     TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_str(g, "tokroute-router.features", feats, v == V_NO_FEATURE ? 1 : 2), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(g, "tokroute-router.slm.n_embd", 1), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(g, "tokroute-router.slm.n_vocab", N_VOCAB), TR_OK);
    if (v != V_NO_ORDER_KEY)
        assert_int_equal(tr_gguf_writer_set_u32(g, "tokroute-router.ngram.order", v == V_ORDER_TOO_HIGH ? 9 : 2), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(g, "tokroute-router.ngram.min_count", 2), TR_OK);
    const int64_t ne_w[2] = {v == V_NO_FEATURE ? N_IN - TR_ROUTER_NGRAM_VALUES : N_IN, 1}, ne_b[1] = {1};
    assert_int_equal(tr_gguf_writer_add_tensor(g, "mlp.0.weight", TR_TYPE_F32, 2, ne_w, w, NULL), TR_OK);
    assert_int_equal(tr_gguf_writer_add_tensor(g, "mlp.0.bias", TR_TYPE_F32, 1, ne_b, b, NULL), TR_OK);
    const int64_t ne_c1[2] = {1, 2}, ne_s1[2] = {v == V_FIVE_COLUMNS ? 5 : NGRAM_STATS, v == V_SHAPE ? 1 : 2};
    const int64_t ne_c2[2] = {2, 1}, ne_s2[2] = {NGRAM_STATS, 1};
    if (v == V_F16) {
        const uint16_t half[2] = {0xbc00, 0x4200}; /* -1, 3 */
        assert_int_equal(tr_gguf_writer_add_tensor(g, "ngram.1.context", TR_TYPE_F16, 2, ne_c1, half, NULL), TR_OK);
    } else {
        assert_int_equal(tr_gguf_writer_add_tensor(g, "ngram.1.context", TR_TYPE_F32, 2, ne_c1, t.c1, NULL), TR_OK);
    }
    assert_int_equal(tr_gguf_writer_add_tensor(g, "ngram.1.stats", TR_TYPE_F32, 2, ne_s1, t.s1, NULL), TR_OK);
    assert_int_equal(tr_gguf_writer_add_tensor(g, "ngram.2.context", TR_TYPE_F32, 2, ne_c2, t.c2, NULL), TR_OK);
    if (v != V_ONLY_CONTEXT)
        assert_int_equal(tr_gguf_writer_add_tensor(g, "ngram.2.stats", TR_TYPE_F32, 2, ne_s2, t.s2, NULL), TR_OK);
    if (v == V_TENSOR_BEYOND_ORDER) {
        const float c3[3] = {1, 2, 3};
        const int64_t ne_c3[2] = {3, 1};
        assert_int_equal(tr_gguf_writer_add_tensor(g, "ngram.3.context", TR_TYPE_F32, 2, ne_c3, c3, NULL), TR_OK);
    }
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_gguf_writer_write(g, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(g);
    return path;
}

static void expect_refused(variant v, const char *words) {
    const char *path = write_variant(v);
    tr_router *r = NULL;
    const tr_status st = tr_router_load(path, NULL, &r);
    unlink(path);
    assert_null(r);
    if (st != TR_ERR_FORMAT || !strstr(tr_last_error(), words))
        fail_msg("variant %d: status %d, message '%s' (wanted TR_ERR_FORMAT and '%s')", (int)v, (int)st,
                 tr_last_error(), words);
}

static void test_hostile_files(void **state) {
    (void)state;
    const char *path = write_variant(V_VALID); /* the writer of the variants makes a file that loads */
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    unlink(path);
    assert_int_equal(router_mlp(r)->ngram->orders[0].n, 2);
    tr_router_free(r);
    expect_refused(V_NOT_INTEGER, "not an integer");
    expect_refused(V_TOKEN_OUTSIDE, "outside");
    expect_refused(V_START_NEAR, "START only where position 0 can be");
    expect_refused(V_NOT_INCREASING, "not strictly increasing");
    expect_refused(V_BELOW_MIN, "below min_count");
    expect_refused(V_M2_ABOVE_M1, "0 <= M2 <= M1");
    expect_refused(V_SUM_ABOVE_C, "M1 + M2 <= C");
    expect_refused(V_T2_WITHOUT_M2, "t2 = -1 exactly when M2 = 0");
    expect_refused(V_SAME_FOLLOWERS, "distinct");
    expect_refused(V_ONLY_CONTEXT, "needs both ngram.2.context and ngram.2.stats");
    expect_refused(V_SHAPE, "ngram.1.stats has shape");
    expect_refused(V_NO_ORDER_KEY, "missing key tokroute-router.ngram.order");
    expect_refused(V_ORDER_TOO_HIGH, "ngram.order = 9 is outside 1..8");
    expect_refused(V_TENSOR_BEYOND_ORDER, "unexpected tensor ngram.3.context");
    expect_refused(V_NO_FEATURE, "unexpected tensor ngram.1.context");
    expect_refused(V_F16, "ngram.1.context must be f32");
    expect_refused(V_GAIN_NAN, "ngram.1.stats row 0 gain mean is not finite");
    expect_refused(V_GAIN_NEGATIVE, "order 1 context 1 gain mean -0.5 is not in [0, 1]");
    expect_refused(V_GAIN_ABOVE_ONE, "order 2 context 0 gain mean 1.00000095 is not in [0, 1]");
    expect_refused(V_FIVE_COLUMNS, "ngram.1.stats has 5 columns: a table from before the gain mean");
}

/* A router without the feature carries no ngram key or tensor (what builds before it wrote) and loads. */
static void test_routers_without_it(void **state) {
    (void)state;
    float w[2] = {1, 0}, b[1] = {0};
    const int32_t sizes[2] = {2, 1};
    const float *const ws[1] = {w}, *const bs[1] = {b};
    const tr_mlp_router_desc d = desc_with(NULL, TR_FEATURE_MAXPROB, sizes, ws, bs);
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&d, path), TR_OK);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    assert_true(tr_gguf_find_kv(g, "tokroute-router.ngram.order") < 0);
    assert_true(tr_gguf_find_kv(g, "tokroute-router.version") < 0); /* still version 1 */
    assert_int_equal(tr_gguf_n_tensors(g), 2);
    tr_gguf_close(g);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, NULL, &r), TR_OK);
    unlink(path);
    assert_null(router_mlp(r)->ngram);
    const int32_t seq[] = {BOS, 1};
    assert_int_equal(tr_router_tokens(r, seq, 2), TR_OK); /* ignored */
    tr_router_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_scoring),
        cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_routers_without_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
