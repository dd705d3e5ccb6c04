/* test_kernels_forced.c — TOKROUTE_KERNELS naming an instruction set this CPU cannot run is an error, not a
 * silent fallback: products and model loads fail with TR_ERR_UNSUPPORTED and a message naming the set, until a
 * set that can run is chosen explicitly. (Its own program: the variable is read once per process.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#if defined(__aarch64__)
#define UNAVAILABLE "avx512"
#else
#define UNAVAILABLE "neon"
#endif

static void test_unavailable_isa_is_an_error(void **state) {
    (void)state;
    assert_false(kernels_isa_available(UNAVAILABLE));
    assert_int_equal(kernels_check(), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), UNAVAILABLE));

    float w[32] = {1.0f}, x[32] = {2.0f}, y[1] = {0};
    const weight_matrix m = {TR_TYPE_F32, w, 1, 32, 0, WEIGHT_PLAIN};
    matmul_scratch sc = {0};
    assert_int_equal(matmul(NULL, &m, x, 1, y, 1, &sc), TR_ERR_UNSUPPORTED);
    assert_true(y[0] == 0.0f);

    tr_model *model = NULL;
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    assert_int_equal(tr_model_load(TR_SHARED_DIR "/conformance/llama-q8_0.gguf", &mp, &model), TR_ERR_UNSUPPORTED);
    assert_null(model);
    assert_non_null(strstr(tr_last_error(), "TOKROUTE_KERNELS"));

    /* an explicit, available choice replaces the environment's */
    assert_int_equal(kernels_force_isa("scalar"), TR_OK);
    assert_int_equal(kernels_check(), TR_OK);
    assert_int_equal(matmul(NULL, &m, x, 1, y, 1, &sc), TR_OK);
    assert_true(y[0] == 2.0f);
    matmul_scratch_free(&sc);
}

static void test_unknown_name_is_an_error(void **state) {
    (void)state;
    /* choosing an unknown set by name fails the same way and names it */
    assert_int_equal(kernels_force_isa("sse9"), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), "sse9"));
}

int main(void) {
    setenv("TOKROUTE_KERNELS", UNAVAILABLE, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unavailable_isa_is_an_error),
        cmocka_unit_test(test_unknown_name_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
