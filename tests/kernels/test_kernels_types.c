/* test_kernels_types.c — the type table (names, block sizes as in ggml), row sizes, and rejection of unknown or
 * unsupported types without crashing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>

#include <stdlib.h>

#include "kernels/kernels.h"

static void test_block_sizes_match_ggml(void **state) {
    (void)state;
    static const struct { tr_type t; const char *name; int64_t elems; size_t bytes; bool supported; } want[] = {
        {TR_TYPE_F32, "f32", 1, 4, true},       {TR_TYPE_F16, "f16", 1, 2, true},
        {TR_TYPE_BF16, "bf16", 1, 2, true},     {TR_TYPE_Q4_0, "q4_0", 32, 18, true},
        {TR_TYPE_Q4_1, "q4_1", 32, 20, true},   {TR_TYPE_Q5_0, "q5_0", 32, 22, true},
        {TR_TYPE_Q5_1, "q5_1", 32, 24, true},   {TR_TYPE_Q8_0, "q8_0", 32, 34, true},
        {TR_TYPE_Q8_1, "q8_1", 32, 36, false},  {TR_TYPE_Q2_K, "q2_k", 256, 84, true},
        {TR_TYPE_Q3_K, "q3_k", 256, 110, true}, {TR_TYPE_Q4_K, "q4_k", 256, 144, true},
        {TR_TYPE_Q5_K, "q5_k", 256, 176, true}, {TR_TYPE_Q6_K, "q6_k", 256, 210, true},
        {TR_TYPE_Q8_K, "q8_k", 256, 292, false}, {TR_TYPE_IQ4_NL, "iq4_nl", 32, 18, true},
        {TR_TYPE_IQ4_XS, "iq4_xs", 256, 136, true},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(tr_type_name(want[i].t), want[i].name);
        assert_int_equal(tr_type_block_elems(want[i].t), want[i].elems);
        assert_int_equal(tr_type_block_bytes(want[i].t), want[i].bytes);
        assert_int_equal(tr_type_supported(want[i].t), want[i].supported);
        tr_type parsed;
        assert_int_equal(tr_type_from_name(want[i].name, &parsed), TR_OK);
        assert_int_equal(parsed, want[i].t);
    }
    tr_type parsed;
    assert_int_equal(tr_type_from_name("Q4_K", &parsed), TR_OK);
    assert_int_equal(parsed, TR_TYPE_Q4_K);
}

static void test_unknown_ids(void **state) {
    (void)state;
    const int unknown[] = {4, 5, 16, 29, 31, 39, 40, 1000, -1};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const tr_type t = (tr_type)unknown[i];
        assert_null(tr_type_name(t));
        assert_int_equal(tr_type_block_elems(t), 0);
        assert_int_equal(tr_type_block_bytes(t), 0);
        assert_false(tr_type_supported(t));
        assert_int_equal(type_row_bytes(t, 256), 0);
    }
    tr_type parsed;
    assert_int_equal(tr_type_from_name("q7_0", &parsed), TR_ERR_ARG);
    assert_int_equal(tr_type_from_name(NULL, &parsed), TR_ERR_ARG);
}

static void test_row_bytes(void **state) {
    (void)state;
    assert_int_equal(type_row_bytes(TR_TYPE_F32, 896), 3584);
    assert_int_equal(type_row_bytes(TR_TYPE_F16, 896), 1792);
    assert_int_equal(type_row_bytes(TR_TYPE_Q8_0, 896), 28 * 34);
    assert_int_equal(type_row_bytes(TR_TYPE_Q4_K, 4864), 19 * 144);
    assert_int_equal(type_row_bytes(TR_TYPE_Q6_K, 512), 2 * 210);
    assert_int_equal(type_row_bytes(TR_TYPE_Q8_K, 256), 292);
}

static void test_unsupported_types_fail_cleanly(void **state) {
    (void)state;
    float x[256] = {0}, y[4] = {0};
    unsigned char raw[4 * 110] = {0};
    assert_int_equal(dequantize_row((tr_type)16, raw, x, 256), TR_ERR_UNSUPPORTED); /* ggml's IQ2_XXS: unknown here */
    assert_int_equal(dequantize_row((tr_type)77, raw, x, 256), TR_ERR_UNSUPPORTED);
    assert_int_equal(quantize_row((tr_type)16, x, raw, 256), TR_ERR_UNSUPPORTED);
    assert_int_equal(quantize_row((tr_type)-3, x, raw, 256), TR_ERR_UNSUPPORTED);
    assert_int_equal(dequantize_row(TR_TYPE_Q8_0, raw, x, 33), TR_ERR_ARG); /* not whole blocks */
    assert_true(tr_last_error()[0] != '\0');

    matmul_scratch scratch = {0};
    const tr_type bad[] = {TR_TYPE_Q8_K, TR_TYPE_Q8_1, (tr_type)4, (tr_type)16, (tr_type)99};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        weight_matrix w = {.type = bad[i], .data = raw, .rows = 1, .cols = 256};
        assert_int_equal(matmul(NULL, &w, x, 1, y, 1, &scratch), TR_ERR_UNSUPPORTED);
    }
    weight_matrix w = {.type = TR_TYPE_Q8_0, .data = raw, .rows = 1, .cols = 48};
    assert_int_equal(matmul(NULL, &w, x, 1, y, 1, &scratch), TR_ERR_ARG);
    matmul_scratch_free(&scratch);
}

static void test_physical_cores_and_isa(void **state) {
    (void)state;
    assert_true(tr_physical_cores() >= 1);
    /* main() set TOKROUTE_KERNELS=scalar before the first kernel call: the choice must honour it */
    assert_string_equal(kernels_isa(), "scalar");
    const char *isa = kernels_isa();
    assert_non_null(isa);
    assert_true(kernels_isa_available(isa));
    assert_true(kernels_isa_available("scalar"));
    assert_false(kernels_isa_available("sse9"));
    assert_int_equal(kernels_force_isa("sse9"), TR_ERR_UNSUPPORTED);
}

/* cgroup v2 cpu.max: "<quota> <period>" grants quota/period CPUs (a partial one counts), "max" none. */
static void test_cgroup_cpu_max_parsing(void **state) {
    (void)state;
    assert_int_equal(cgroup_cpu_limit("max 100000\n"), 0);
    assert_int_equal(cgroup_cpu_limit("200000 100000\n"), 2);
    assert_int_equal(cgroup_cpu_limit("150000 100000"), 2);
    assert_int_equal(cgroup_cpu_limit("50000 100000\n"), 1);
    assert_int_equal(cgroup_cpu_limit("100000 100000"), 1);
    assert_int_equal(cgroup_cpu_limit("  400000\t100000 \n"), 4);
    assert_int_equal(cgroup_cpu_limit("999999999999 1"), 4096); /* bounded */
    /* malformed text means no limit, never a crash or a zero/negative thread count */
    const char *bad[] = {"", "\n", "abc 100000", "-100000 100000", "100000 0", "100000 -5", "100000",
                         "100000 100000 junk", "0 100000", "100000x 100000", "99999999999999999999999 1", NULL};
    for (int i = 0; bad[i]; i++) assert_int_equal(cgroup_cpu_limit(bad[i]), 0);
    assert_int_equal(cgroup_cpu_limit(NULL), 0);
    /* the default thread count never exceeds the CPUs this process may run on */
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    assert_true(tr_physical_cores() >= 1 && tr_physical_cores() <= CPU_COUNT(&set));
}

int main(void) {
    setenv("TOKROUTE_KERNELS", "scalar", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sizes_match_ggml),
        cmocka_unit_test(test_unknown_ids),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_unsupported_types_fail_cleanly),
        cmocka_unit_test(test_physical_cores_and_isa),
        cmocka_unit_test(test_cgroup_cpu_max_parsing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
