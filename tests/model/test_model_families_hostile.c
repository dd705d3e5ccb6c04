/* test_model_families_hostile.c — files of the families added through the architecture interface that are
 * well-formed GGUF but not loadable models of their family: each must fail with a status and a message naming the
 * key or tensor and the file (never a crash, never a model that runs on garbage). The files are `tokroute synth`'s
 * small shapes rewritten (support/hostile.h).
 *
 *   smollm3: the RMS epsilon missing (llama.cpp requires it), a rotated size other than the head's (llama.cpp
 *   asserts n_rot == head size), a layer's tensor missing or of the wrong shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "support/fixtures.h"
#include "support/hostile.h"
#include "tokroute.h"

static char smollm3[256];

static void synth(const char *shape, char *path) {
    snprintf(path, 256, "%s", temp_path(".gguf"));
    tr_synth_params sp = tr_synth_default_params();
    sp.shape = shape;
    sp.type = TR_TYPE_F32;
    if (tr_synth_write(&sp, path) != TR_OK) fail_msg("synth %s: %s", shape, tr_last_error());
}

static int setup(void **state) {
    (void)state;
    synth("smollm3-tiny", smollm3);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    remove(smollm3);
    return 0;
}

static tr_status smollm3_rope_16(tr_gguf_writer *w, void *u) {
    (void)u;
    return tr_gguf_writer_set_u32(w, "smollm3.rope.dimension_count", 16);
}

static void smollm3_hostile(void **state) {
    (void)state;
    tr_status st;
    tr_model *m = hostile_load(smollm3, &st); /* the base file loads */
    assert_non_null(m);
    tr_model_free(m);
    hostile_expect_fail(smollm3, &(hostile_change){.drop_key = "smollm3.attention.layer_norm_rms_epsilon"},
                        TR_ERR_FORMAT, "missing metadata smollm3.attention.layer_norm_rms_epsilon");
    hostile_expect_fail(smollm3, &(hostile_change){.extra = smollm3_rope_16}, TR_ERR_FORMAT,
                        "rope.dimension_count 16 differs from the head size 32");
    hostile_expect_fail(smollm3, &(hostile_change){.drop_tensor = "blk.3.attn_k.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.3.attn_k.weight'");
    hostile_expect_fail(smollm3, &(hostile_change){.drop_tensor = "blk.7.ffn_down.weight"}, TR_ERR_FORMAT,
                        "missing tensor 'blk.7.ffn_down.weight'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm3_hostile),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
