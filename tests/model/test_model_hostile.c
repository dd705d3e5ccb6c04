/* test_model_hostile.c — the model loader against well-formed GGUF files that are not loadable models: missing
 * tensors and hyperparameters, bad head counts, unsupported architectures, wrong shapes, weight types the engine
 * cannot multiply, IQ4 / Q2_K / Q3_K weights with rows that are not whole blocks, cut blocks or absurd scales. Each
 * must fail with
 * a status and a message naming the problem and the file, or evaluate without harm. (Byte-level hostile files are
 * in tests/gguf/test_gguf_hostile.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "support/fixtures.h"
#include "support/gguf_builder.h"
#include "tokroute.h"

/* ---------------------------------------------------------------- well-formed files that are not models */

typedef struct tiny_opts {
    const char *arch;           /* "llama" */
    int n_embd, n_head, n_ff;   /* 32, 4, 64 */
    int n_head_kv;              /* 2; 0 = key absent */
    int n_layer_key;            /* block_count written (1); tensors exist for one layer */
    const char *omit_key;       /* metadata key left out */
    const char *omit_tensor;    /* tensor left out */
    tr_type q_type;             /* type of blk.0.attn_q.weight (F32) */
    int q_rows;                 /* rows of attn_q (n_embd) */
    int q_dims;                 /* n_dims of attn_q (2) */
    int norm_len;               /* length of blk.0.attn_norm.weight (n_embd) */
    const void *q_data;         /* bytes of attn_q when q_type is not F32 (NULL: filler bytes) */
} tiny_opts;

static tiny_opts tiny_defaults(void) {
    tiny_opts o = {.arch = "llama", .n_embd = 32, .n_head = 4, .n_ff = 64, .n_head_kv = 2, .n_layer_key = 1,
                   .q_type = TR_TYPE_F32, .q_rows = 32, .q_dims = 2, .norm_len = 32};
    return o;
}

enum { TINY_VOCAB = 16 };

/* Writes a one-layer model with small pseudo-random F32 weights (tied output, no vocabulary). */
static void write_tiny_model(const char *path, const tiny_opts *o) {
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    char key[128];
#define SET_U32(suffix, v)                                                             \
    do {                                                                               \
        snprintf(key, sizeof key, "%s.%s", o->arch, suffix);                          \
        if (!o->omit_key || strcmp(o->omit_key, key) != 0)                             \
            assert_int_equal(tr_gguf_writer_set_u32(w, key, (uint32_t)(v)), TR_OK);    \
    } while (0)
    if (!o->omit_key || strcmp(o->omit_key, "general.architecture") != 0)
        assert_int_equal(tr_gguf_writer_set_str(w, "general.architecture", o->arch), TR_OK);
    SET_U32("context_length", 64);
    SET_U32("embedding_length", o->n_embd);
    SET_U32("block_count", o->n_layer_key);
    SET_U32("attention.head_count", o->n_head);
    if (o->n_head_kv) SET_U32("attention.head_count_kv", o->n_head_kv);
    SET_U32("feed_forward_length", o->n_ff);
#undef SET_U32
    const int E = o->n_embd, F = o->n_ff, kv = o->n_head_kv ? E / o->n_head * o->n_head_kv : E;
    const size_t max_floats = (size_t)(E > F ? E : F) * (size_t)(E > F ? E : F) * 4 + (size_t)E * TINY_VOCAB;
    float *data = malloc(max_floats * sizeof *data);
    uint32_t x = 1;
    for (size_t i = 0; i < max_floats; i++) {
        x = x * 1664525u + 1013904223u;
        data[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    float *ones = malloc((size_t)(E > F ? E : F) * 2 * sizeof *ones);
    for (int i = 0; i < (E > F ? E : F) * 2; i++) ones[i] = 1.0f;
    struct {
        const char *name;
        int n_dims;
        int64_t ne[3];
        bool norm;
    } ts[] = {
        {"token_embd.weight", 2, {E, TINY_VOCAB, 1}, false},
        {"output_norm.weight", 1, {E, 1, 1}, true},
        {"blk.0.attn_norm.weight", 1, {o->norm_len, 1, 1}, true},
        {"blk.0.attn_q.weight", o->q_dims, {E, o->q_rows, 1}, false},
        {"blk.0.attn_k.weight", 2, {E, kv, 1}, false},
        {"blk.0.attn_v.weight", 2, {E, kv, 1}, false},
        {"blk.0.attn_output.weight", 2, {E, E, 1}, false},
        {"blk.0.ffn_norm.weight", 1, {E, 1, 1}, true},
        {"blk.0.ffn_gate.weight", 2, {E, F, 1}, false},
        {"blk.0.ffn_up.weight", 2, {E, F, 1}, false},
        {"blk.0.ffn_down.weight", 2, {F, E, 1}, false},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        if (o->omit_tensor && strcmp(o->omit_tensor, ts[i].name) == 0) continue;
        const bool is_q = strcmp(ts[i].name, "blk.0.attn_q.weight") == 0;
        const tr_type type = is_q ? o->q_type : TR_TYPE_F32;
        /* Non-F32 types get bytes of the right count (their content is never decoded in these cases). */
        const void *bytes = is_q && o->q_data ? o->q_data : ts[i].norm ? ones : data;
        assert_int_equal(tr_gguf_writer_add_tensor(w, ts[i].name, type, ts[i].n_dims, ts[i].ne, bytes, NULL),
                         TR_OK);
    }
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    free(data);
    free(ones);
}

static void expect_load_fails(const tiny_opts *o, tr_status status, const char *substr1, const char *substr2) {
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    write_tiny_model(path, o);
    tr_model *m = (tr_model *)0x1;
    tr_clear_error();
    tr_status st = tr_model_load(path, NULL, &m);
    const char *msg = tr_last_error();
    if (st != status || !strstr(msg, substr1) || (substr2 && !strstr(msg, substr2)) || !strstr(msg, path))
        fail_msg("expected %s with '%s'%s%s and the path, got %s: '%s'", tr_status_name(status), substr1,
                 substr2 ? " and " : "", substr2 ? substr2 : "", tr_status_name(st), msg);
    assert_null(m);
    unlink(path);
}

static void tiny_model_control_loads(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    tiny_opts o = tiny_defaults();
    write_tiny_model(path, &o);
    tr_model *m = NULL;
    assert_int_equal(tr_model_load(path, NULL, &m), TR_OK);
    const tr_model_info *in = tr_model_get_info(m);
    assert_int_equal(in->n_embd, 32);
    assert_int_equal(in->n_head_kv, 2);
    assert_int_equal(in->n_vocab, TINY_VOCAB);
    assert_true(in->tied_output);
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    const int32_t toks[] = {1, 5, 9};
    assert_int_equal(tr_context_eval(ctx, toks, 3, TR_EVAL_LOGITS_LAST), TR_OK);
    const float *lg = tr_context_logits(ctx, -1);
    for (int i = 0; i < TINY_VOCAB; i++) assert_true(lg[i] == lg[i] && lg[i] > -1e30f && lg[i] < 1e30f);
    tr_context_free(ctx);
    tr_model_free(m);
    unlink(path);
}

static void model_missing_pieces(void **state) {
    (void)state;
    tiny_opts o = tiny_defaults();
    o.omit_tensor = "blk.0.ffn_up.weight";
    expect_load_fails(&o, TR_ERR_FORMAT, "missing tensor 'blk.0.ffn_up.weight'", NULL);
    o = tiny_defaults();
    o.omit_tensor = "token_embd.weight";
    expect_load_fails(&o, TR_ERR_FORMAT, "missing tensor 'token_embd.weight'", NULL);
    o = tiny_defaults();
    o.omit_tensor = "output_norm.weight";
    expect_load_fails(&o, TR_ERR_FORMAT, "missing tensor 'output_norm.weight'", NULL);
    o = tiny_defaults();
    o.n_layer_key = 2; /* tensors exist for layer 0 only */
    expect_load_fails(&o, TR_ERR_FORMAT, "missing tensor 'blk.1.", NULL);
    o = tiny_defaults();
    o.arch = "qwen2"; /* qwen2 requires Q/K/V biases */
    expect_load_fails(&o, TR_ERR_FORMAT, "missing tensor 'blk.0.attn_q.bias'", NULL);
    o = tiny_defaults();
    o.arch = "qwen3"; /* qwen3 requires per-head Q/K norms */
    expect_load_fails(&o, TR_ERR_FORMAT, "missing tensor 'blk.0.attn_q_norm.weight'", NULL);
}

static void model_missing_hyperparameters(void **state) {
    (void)state;
    const char *keys[] = {"llama.embedding_length", "llama.block_count", "llama.attention.head_count",
                          "llama.feed_forward_length"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        tiny_opts o = tiny_defaults();
        o.omit_key = keys[i];
        expect_load_fails(&o, TR_ERR_FORMAT, "missing metadata", keys[i]);
    }
    tiny_opts o = tiny_defaults();
    o.omit_key = "general.architecture";
    expect_load_fails(&o, TR_ERR_FORMAT, "missing general.architecture", NULL);
    o = tiny_defaults();
    o.n_layer_key = 0;
    expect_load_fails(&o, TR_ERR_FORMAT, "block_count = 0 is outside", NULL);
}

static void model_bad_hyperparameters(void **state) {
    (void)state;
    tiny_opts o = tiny_defaults();
    o.n_head_kv = 3; /* 4 heads */
    expect_load_fails(&o, TR_ERR_FORMAT, "head_count_kv = 3 does not divide head_count 4", NULL);
    o = tiny_defaults();
    o.n_head_kv = 8;
    expect_load_fails(&o, TR_ERR_FORMAT, "head_count_kv = 8", NULL);
    o = tiny_defaults();
    o.n_head = 5; /* 32 is not a multiple of 5 */
    o.n_head_kv = 0;
    expect_load_fails(&o, TR_ERR_FORMAT, "not a multiple of head_count 5", NULL);
}

static void model_unsupported_architecture(void **state) {
    (void)state;
    tiny_opts o = tiny_defaults();
    o.arch = "gpt2";
    expect_load_fails(&o, TR_ERR_UNSUPPORTED, "architecture 'gpt2' is not supported", NULL);
    o.arch = "mamba";
    expect_load_fails(&o, TR_ERR_UNSUPPORTED, "architecture 'mamba'", NULL);
}

static void model_wrong_shapes(void **state) {
    (void)state;
    tiny_opts o = tiny_defaults();
    o.q_rows = 16;
    expect_load_fails(&o, TR_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has shape [32, 16]", "expected [32, 32]");
    o = tiny_defaults();
    o.q_dims = 1;
    o.q_rows = 1;
    expect_load_fails(&o, TR_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has shape", "1-D");
    o = tiny_defaults();
    o.norm_len = 64;
    expect_load_fails(&o, TR_ERR_FORMAT, "tensor 'blk.0.attn_norm.weight' has 64 elements", "expected 32");
}

static tr_status claim_two_kv_heads(tr_gguf_writer *w, void *user) {
    (void)user;
    return tr_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 2);
}

static void model_kv_heads_mismatch_tensors(void **state) {
    (void)state;
    tiny_opts o = tiny_defaults();
    o.n_head_kv = 1;
    char path[256], path2[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    snprintf(path2, sizeof path2, "%s", temp_path(".gguf"));
    write_tiny_model(path, &o);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    /* Control: a plain rewrite is faithful (loads, one KV head). */
    tr_model *m = NULL;
    assert_int_equal(gguf_rewrite(g, path2, NULL), TR_OK);
    assert_int_equal(tr_model_load(path2, NULL, &m), TR_OK);
    assert_int_equal(tr_model_get_info(m)->n_head_kv, 1);
    tr_model_free(m);
    rewrite_hooks h = {.extra = claim_two_kv_heads};
    assert_int_equal(gguf_rewrite(g, path2, &h), TR_OK);
    tr_gguf_close(g);
    m = (tr_model *)0x1;
    tr_clear_error();
    assert_int_equal(tr_model_load(path2, NULL, &m), TR_ERR_FORMAT);
    assert_null(m);
    assert_non_null(strstr(tr_last_error(), "tensor 'blk.0.attn_k.weight' has shape [32, 8]"));
    unlink(path);
    unlink(path2);
}

static void model_unsupported_weight_type(void **state) {
    (void)state;
    /* Q8_K and Q8_1 are activation formats with known layouts but no weight products; Q8_K blocks hold 256 values,
     * so the rows are 256 long for the file itself to be valid. */
    tiny_opts o = tiny_defaults();
    o.n_embd = 256;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.q_rows = 256;
    o.norm_len = 256;
    o.q_type = TR_TYPE_Q8_K;
    expect_load_fails(&o, TR_ERR_UNSUPPORTED, "tensor 'blk.0.attn_q.weight' has type q8_k", NULL);
    o.q_type = TR_TYPE_Q8_1;
    expect_load_fails(&o, TR_ERR_UNSUPPORTED, "has type q8_1", NULL);
    /* Control: the same file with F32 loads. */
    o.q_type = TR_TYPE_F32;
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    write_tiny_model(path, &o);
    tr_model *m = NULL;
    assert_int_equal(tr_model_load(path, NULL, &m), TR_OK);
    tr_model_free(m);
    unlink(path);
}

/* ---------------------------------------------------------------- IQ4_NL / IQ4_XS weights */

/* attn_q of a tiny model (n × n) in `type`, from quantized pseudo-random values; malloc'ed. */
static uint8_t *quantized_q(tr_type type, int n) {
    const size_t rb = type_row_bytes(type, n);
    uint8_t *q = malloc(rb * (size_t)n);
    float *row = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < n; r++) {
        for (int k = 0; k < n; k++) row[k] = 0.01f * (float)((r * 31 + k * 17) % 21 - 10);
        assert_int_equal(quantize_row(type, row, q + rb * (size_t)r, n), TR_OK);
    }
    free(row);
    return q;
}

/* Loads path and evaluates three tokens; returns whether every logit is finite. */
static bool eval_finite(const char *path) {
    tr_model *m = NULL;
    if (tr_model_load(path, NULL, &m) != TR_OK) fail_msg("%s: %s", path, tr_last_error());
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(m, &cp, &ctx), TR_OK);
    const int32_t toks[] = {1, 5, 9};
    assert_int_equal(tr_context_eval(ctx, toks, 3, TR_EVAL_LOGITS_LAST), TR_OK);
    const float *lg = tr_context_logits(ctx, -1);
    bool finite = true;
    for (int i = 0; i < TINY_VOCAB; i++) finite = finite && lg[i] - lg[i] == 0.0f;
    tr_context_free(ctx);
    tr_model_free(m);
    return finite;
}

/* Rows that are not whole IQ4 blocks are refused; a file cut inside an IQ4 block is refused. Absurd scales are
 * handled as for the other types (block contents are not validated; the integer sums cannot overflow whatever the
 * scales): with the same F16 scale in every block (1, 65504, inf, NaN), every 6-bit IQ4_XS sub-block scale at
 * either end and every index at the table's ends, the model loads and evaluates as Q4_0 carrying those scales
 * does: finite logits for 1, a NaN reaching the logits for NaN (huge weights may overflow activations in either). */
static void model_iq4_weights(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    tiny_opts o = tiny_defaults();
    /* IQ4_NL attn_q with its type id patched to IQ4_XS: 32-wide rows are not whole 256-blocks (and the bytes would
     * be an eighth of what they claim). The type follows the name, n_dims and two dimensions in the tensor info. */
    o.q_type = TR_TYPE_IQ4_NL;
    uint8_t *nl = quantized_q(TR_TYPE_IQ4_NL, 32);
    o.q_data = nl;
    write_tiny_model(path, &o);
    size_t fsize = 0;
    char *f = read_file(path, &fsize);
    char *info = memmem(f, fsize, "blk.0.attn_q.weight", 19);
    assert_non_null(info);
    uint32_t type_id;
    memcpy(&type_id, info + 19 + 4 + 16, 4);
    assert_int_equal(type_id, TR_TYPE_IQ4_NL);
    type_id = TR_TYPE_IQ4_XS;
    memcpy(info + 19 + 4 + 16, &type_id, 4);
    FILE *out = fopen(path, "wb");
    assert_int_equal(fwrite(f, 1, fsize, out), fsize);
    fclose(out);
    tr_model *bad = (tr_model *)0x1;
    assert_int_equal(tr_model_load(path, NULL, &bad), TR_ERR_FORMAT);
    assert_null(bad);
    assert_non_null(strstr(tr_last_error(), "not a multiple of the iq4_xs block"));
    free(f);
    free(nl);

    for (int t = 0; t < 2; t++) {
        const tr_type type = t ? TR_TYPE_IQ4_XS : TR_TYPE_IQ4_NL;
        o = tiny_defaults();
        if (type == TR_TYPE_IQ4_XS) o.n_embd = o.q_rows = o.norm_len = 256;
        const int n = o.n_embd;
        const size_t bb = tr_type_block_bytes(type), bytes = type_row_bytes(type, n) * (size_t)n;
        uint8_t *q = quantized_q(type, n);
        o.q_type = type;
        o.q_data = q;
        write_tiny_model(path, &o);
        assert_true(eval_finite(path));

        /* cut the file inside the second block of attn_q (found by its bytes) */
        size_t size = 0;
        char *file = read_file(path, &size);
        assert_non_null(file);
        const char *at = memmem(file, size, q, bytes);
        assert_non_null(at);
        assert_int_equal(truncate(path, (off_t)(at - file) + (off_t)bb + (off_t)bb / 2), 0);
        tr_model *m = (tr_model *)0x1;
        assert_int_not_equal(tr_model_load(path, NULL, &m), TR_OK);
        assert_null(m);
        if (!strstr(tr_last_error(), "larger than the file") && !strstr(tr_last_error(), "truncated"))
            fail_msg("%s", tr_last_error());
        free(file);

        /* extreme scales and indices: the same F16 scale in every block of IQ4 and of Q4_0 */
        static const uint16_t scales[] = {0x3C00 /* 1 */, 0x7BFF /* 65504 */, 0x7C00 /* inf */, 0x7E00 /* NaN */};
        for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
            bool finite[2];
            for (int ref = 0; ref < 2; ref++) {
                const tr_type tt = ref ? TR_TYPE_Q4_0 : type;
                const size_t tb = tr_type_block_bytes(tt), tbytes = type_row_bytes(tt, n) * (size_t)n;
                uint8_t *w = quantized_q(tt, n);
                for (size_t b = 0; b < tbytes / tb; b++) {
                    uint8_t *blk = w + b * tb;
                    memcpy(blk, &scales[k], 2);
                    if (tt == TR_TYPE_IQ4_XS) { /* 6-bit scales all 63 or all 0 (-32 once biased) */
                        memset(blk + 2, b % 2 ? 0xFF : 0x00, 6);
                    }
                    const size_t qs = tt == TR_TYPE_IQ4_XS ? 128 : 16; /* indices at the table's (or range's) ends */
                    memset(blk + tb - qs, b % 3 ? 0x00 : 0xFF, qs);
                }
                o.q_type = tt;
                o.q_data = w;
                write_tiny_model(path, &o);
                finite[ref] = eval_finite(path);
                free(w);
            }
            if (k == 0) assert_true(finite[0] && finite[1]);
            if (k == 3) assert_true(!finite[0] && !finite[1]);
        }
        free(q);
    }
    unlink(path);
}

/* ---------------------------------------------------------------- Q2_K / Q3_K weights */

/* Puts F16 scale bits h in every scale field of a block of type tt (Q2_K: d and dmin; Q4_0: d), its sub-block
 * scales (and Q2_K's mins) all at the top or all at zero (`top`), and its values at one end or the other (`high`):
 * qs (and Q3_K's hmask) all ones or all zeros. */
static void absurd_block(tr_type tt, uint8_t *blk, uint16_t h, bool top, bool high) {
    const uint8_t v = high ? 0xFF : 0x00, s = top ? 0xFF : 0x00;
    switch (tt) {
    case TR_TYPE_Q2_K: /* scales[16] | qs[64] | d | dmin */
        memset(blk, s, 16);
        memset(blk + 16, v, 64);
        memcpy(blk + 80, &h, 2);
        memcpy(blk + 82, &h, 2);
        break;
    case TR_TYPE_Q3_K: /* hmask[32] | qs[64] | scales[12] | d: 6-bit scales 63 (+31) or 0 (-32) */
        memset(blk, v, 96);
        memset(blk + 96, s, 12);
        memcpy(blk + 108, &h, 2);
        break;
    default: /* Q4_0: d | qs[16] */
        memcpy(blk, &h, 2);
        memset(blk + 2, v, 16);
        break;
    }
}

/* As model_iq4_weights for the 2- and 3-bit K-quants: rows that are not whole 256-blocks and files cut inside a
 * block are refused; the same absurd F16 scale (1, 65504, inf, NaN) in every block, sub-block scales and mins at
 * both ends and values at both ends load and evaluate as Q4_0 carrying that scale does. */
static void model_k23_weights(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    for (int t = 0; t < 2; t++) {
        const tr_type type = t ? TR_TYPE_Q3_K : TR_TYPE_Q2_K;
        /* Q4_0 attn_q (32 wide) with its type id patched: 32-wide rows are not whole 256-blocks. */
        tiny_opts o = tiny_defaults();
        o.q_type = TR_TYPE_Q4_0;
        uint8_t *q40 = quantized_q(TR_TYPE_Q4_0, 32);
        o.q_data = q40;
        write_tiny_model(path, &o);
        size_t fsize = 0;
        char *f = read_file(path, &fsize);
        char *info = memmem(f, fsize, "blk.0.attn_q.weight", 19);
        assert_non_null(info);
        uint32_t type_id;
        memcpy(&type_id, info + 19 + 4 + 16, 4);
        assert_int_equal(type_id, TR_TYPE_Q4_0);
        type_id = type;
        memcpy(info + 19 + 4 + 16, &type_id, 4);
        FILE *out = fopen(path, "wb");
        assert_int_equal(fwrite(f, 1, fsize, out), fsize);
        fclose(out);
        tr_model *bad = (tr_model *)0x1;
        assert_int_equal(tr_model_load(path, NULL, &bad), TR_ERR_FORMAT);
        assert_null(bad);
        if (!strstr(tr_last_error(), "not a multiple of the") || !strstr(tr_last_error(), tr_type_name(type)))
            fail_msg("%s", tr_last_error());
        free(f);
        free(q40);

        o = tiny_defaults();
        o.n_embd = o.q_rows = o.norm_len = 256;
        const int n = o.n_embd;
        const size_t bb = tr_type_block_bytes(type), bytes = type_row_bytes(type, n) * (size_t)n;
        uint8_t *q = quantized_q(type, n);
        o.q_type = type;
        o.q_data = q;
        write_tiny_model(path, &o);
        assert_true(eval_finite(path));

        /* cut the file inside the second block of attn_q */
        size_t size = 0;
        char *file = read_file(path, &size);
        const char *at = memmem(file, size, q, bytes);
        assert_non_null(at);
        assert_int_equal(truncate(path, (off_t)(at - file) + (off_t)bb + (off_t)bb / 2), 0);
        tr_model *m = (tr_model *)0x1;
        assert_int_not_equal(tr_model_load(path, NULL, &m), TR_OK);
        assert_null(m);
        if (!strstr(tr_last_error(), "larger than the file") && !strstr(tr_last_error(), "truncated"))
            fail_msg("%s", tr_last_error());
        free(file);

        static const uint16_t scales[] = {0x3C00 /* 1 */, 0x7BFF /* 65504 */, 0x7C00 /* inf */, 0x7E00 /* NaN */};
        for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
            bool finite[2];
            for (int ref = 0; ref < 2; ref++) {
                const tr_type tt = ref ? TR_TYPE_Q4_0 : type;
                const size_t tb = tr_type_block_bytes(tt), tbytes = type_row_bytes(tt, n) * (size_t)n;
                uint8_t *w = quantized_q(tt, n);
                for (size_t b = 0; b < tbytes / tb; b++) absurd_block(tt, w + b * tb, scales[k], b % 2, b % 3 == 0);
                o.q_type = tt;
                o.q_data = w;
                write_tiny_model(path, &o);
                finite[ref] = eval_finite(path);
                free(w);
            }
            if (k == 0) assert_true(finite[0] && finite[1]);
            if (k == 3) assert_true(!finite[0] && !finite[1]);
        }
        free(q);
    }
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_model_control_loads),
        cmocka_unit_test(model_missing_pieces),
        cmocka_unit_test(model_missing_hyperparameters),
        cmocka_unit_test(model_bad_hyperparameters),
        cmocka_unit_test(model_unsupported_architecture),
        cmocka_unit_test(model_wrong_shapes),
        cmocka_unit_test(model_kv_heads_mismatch_tensors),
        cmocka_unit_test(model_unsupported_weight_type),
        cmocka_unit_test(model_iq4_weights),
        cmocka_unit_test(model_k23_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
