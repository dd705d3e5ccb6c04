/* test_kernels_prefetch_env.c — TOKROUTE_PREFETCH naming a level that does not exist (only l1 and l2 do) is an
 * error reported by kernels_check and by a model load, never a silent fall back to the CPU vendor's default.
 * (Its own program: the variable is read once per process.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static void test_unknown_prefetch_level_is_an_error(void **state) {
    (void)state;
    assert_int_equal(kernels_check(), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), "TOKROUTE_PREFETCH=l3"));

    tr_model *model = NULL;
    tr_model_params mp = tr_model_default_params();
    mp.load_vocab = false;
    assert_int_equal(tr_model_load(TR_SHARED_DIR "/conformance/llama-q8_0.gguf", &mp, &model), TR_ERR_UNSUPPORTED);
    assert_null(model);
    assert_non_null(strstr(tr_last_error(), "TOKROUTE_PREFETCH"));
}

int main(void) {
    setenv("TOKROUTE_PREFETCH", "l3", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_prefetch_level_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
