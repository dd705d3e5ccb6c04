/* test_model_qwen35_llamacpp.c — the qwen35 layout (Gated DeltaNet + gated attention) against llama.cpp itself:
 * `tokroute synth`'s two reduced qwen35 shapes (qwen3.5-tiny: 3 recurrent layers and 1 attention layer, value heads
 * twice the key heads; qwen3.5-small: 8 layers, a RoPE pair left to M-RoPE's unrotated 4th section), in F32 and
 * Q8_0, loaded by llama.cpp of scripts/llamacpp.sh through llamacpp_ref.c (compiled here against that build). The
 * engine must give llama.cpp's logits and final hidden states at every prompt position within the conformance
 * tolerances (relative RMS 2e-3 for F32, 5e-2 for the quantized files; measured 1e-5 to 3e-5, and 7e-3 / 1.5e-2),
 * its argmax where its top two differ clearly, and its 16 greedy tokens decoded one at a time (a quantized file may
 * part at one of llama.cpp's own near-ties, see check_shape) — with the prompt in one chunk and in chunks of 5 or 7
 * (the recurrence carried across chunks). */
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

#include "support/fixtures.h"
#include "support/llamacpp_ref.h"
#include "tokroute.h"

static llamacpp_ref llama; /* llama.cpp's build, this run's files, llamacpp_ref compiled here */

static int setup(void **state) {
    (void)state;
    return llamacpp_ref_setup(&llama, "qwen35", "llama-quantize", "tests/model/llamacpp_ref.c");
}

static int teardown(void **state) {
    (void)state;
    return llamacpp_ref_teardown(&llama);
}

static void check_shape(const char *shape, tr_type type, double tol, int32_t n_batch) {
    llamacpp_check_shape(&llama, shape, TR_ARCH_QWEN35, type, tol, n_batch);
}

static void tiny_f32(void **state) {
    (void)state;
    check_shape("qwen3.5-tiny", TR_TYPE_F32, 2e-3, 256);
    check_shape("qwen3.5-tiny", TR_TYPE_F32, 2e-3, 5);
}

static void small_f32(void **state) {
    (void)state;
    check_shape("qwen3.5-small", TR_TYPE_F32, 2e-3, 256);
    check_shape("qwen3.5-small", TR_TYPE_F32, 2e-3, 5);
}

static void tiny_q8_0(void **state) {
    (void)state;
    check_shape("qwen3.5-tiny", TR_TYPE_Q8_0, 5e-2, 256);
}

static void small_q4_0(void **state) {
    (void)state;
    check_shape("qwen3.5-small", TR_TYPE_Q4_0, 5e-2, 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_f32),
        cmocka_unit_test(small_f32),
        cmocka_unit_test(tiny_q8_0),
        cmocka_unit_test(small_q4_0),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
