/* test_gguf_hostile.c — the GGUF reader and the model loader against hostile files: every truncation of a real
 * model, absurd counts, lengths, dimensions and offsets, unknown types, overlapping tensors, duplicates, bad
 * alignment (well-formed files that are not loadable models: tests/model/test_model_hostile.c). Each must fail
 * with a status and a message that names the problem — never crash, never read past the bytes it was given (buffers are allocated to the exact size,
 * so AddressSanitizer sees any over-read).
 *
 * Most byte-level cases patch one field of a small valid file (base_file), whose validity is itself a test, so each
 * failure is known to come from the one field changed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "support/fixtures.h"
#include "support/gguf_builder.h"
#include "tokroute.h"

/* ---------------------------------------------------------------- a small valid file with known field offsets */

typedef struct base_layout {
    size_t n_tensors_pos, n_kv_pos;
    size_t key0_len_pos;             /* general.architecture key length */
    size_t val0_len_pos;             /* its string value's length */
    size_t kv1_type_pos;             /* test.count: type tag */
    size_t t0_name_len_pos, t0_ndims_pos, t0_ne0_pos, t0_type_pos, t0_offset_pos;
    size_t t1_ndims_pos, t1_ne0_pos, t1_ne1_pos, t1_type_pos, t1_offset_pos;
    size_t data_pos;
} base_layout;

/* kv: general.architecture = "test", test.count = 7 (u32). Tensors: "a" F32 [8] at 0 (32 bytes), "b" F32 [8, 2] at
 * 32 (64 bytes). Data values: a[i] = i, b[i] = 100 + i. */
static void base_file(gbuf *b, base_layout *L) {
    memset(b, 0, sizeof *b);
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, 3);
    L->n_tensors_pos = b->len;
    gb_u64(b, 2);
    L->n_kv_pos = b->len;
    gb_u64(b, 2);
    L->key0_len_pos = b->len;
    gb_key(b, "general.architecture", TR_GGUF_STRING);
    L->val0_len_pos = b->len;
    gb_str(b, "test");
    gb_str(b, "test.count");
    L->kv1_type_pos = b->len;
    gb_u32(b, TR_GGUF_UINT32);
    gb_u32(b, 7);
    L->t0_name_len_pos = b->len;
    gb_str(b, "a");
    L->t0_ndims_pos = b->len;
    gb_u32(b, 1);
    L->t0_ne0_pos = b->len;
    gb_u64(b, 8);
    L->t0_type_pos = b->len;
    gb_u32(b, TR_TYPE_F32);
    L->t0_offset_pos = b->len;
    gb_u64(b, 0);
    gb_str(b, "b");
    L->t1_ndims_pos = b->len;
    gb_u32(b, 2);
    L->t1_ne0_pos = b->len;
    gb_u64(b, 8);
    L->t1_ne1_pos = b->len;
    gb_u64(b, 2);
    L->t1_type_pos = b->len;
    gb_u32(b, TR_TYPE_F32);
    L->t1_offset_pos = b->len;
    gb_u64(b, 32);
    gb_pad(b, 32);
    L->data_pos = b->len;
    for (int i = 0; i < 8; i++) gb_f32(b, (float)i);
    for (int i = 0; i < 16; i++) gb_f32(b, 100.0f + (float)i);
}

/* Opens len bytes from an exact-size copy; asserts failure with `status` and a message containing `substr`. */
static void expect_open_fails(const void *bytes, size_t len, tr_status status, const char *substr) {
    void *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, bytes, len);
    tr_clear_error();
    tr_gguf *g = (tr_gguf *)0x1;
    tr_status st = tr_gguf_open_memory(copy, len, &g);
    const char *msg = tr_last_error();
    if (st != status || !strstr(msg, substr))
        fail_msg("expected status %s with a message containing '%s', got %s: '%s'", tr_status_name(status), substr,
                 tr_status_name(st), msg);
    assert_null(g);
    free(copy);
}

static void expect_patched_fails(const gbuf *b, size_t pos, int width, uint64_t value, tr_status status,
                                 const char *substr) {
    gbuf c = {0};
    gb_bytes(&c, b->data, b->len);
    if (width == 4) gb_patch_u32(&c, pos, (uint32_t)value);
    else gb_patch_u64(&c, pos, value);
    expect_open_fails(c.data, c.len, status, substr);
    gb_free(&c);
}

static void base_file_is_valid(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    void *copy = malloc(b.len);
    memcpy(copy, b.data, b.len);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(copy, b.len, &g), TR_OK);
    assert_int_equal(tr_gguf_version(g), 3);
    assert_int_equal(tr_gguf_alignment(g), 32);
    assert_int_equal(tr_gguf_n_kv(g), 2);
    assert_int_equal(tr_gguf_n_tensors(g), 2);
    assert_string_equal(tr_gguf_get_str(g, "general.architecture", NULL), "test");
    int64_t v = 0;
    assert_true(tr_gguf_get_int(g, "test.count", &v));
    assert_int_equal(v, 7);
    const tr_gguf_tensor *t = tr_gguf_tensor_at(g, tr_gguf_find_tensor(g, "b"));
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 8);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->n_bytes, 64);
    assert_ptr_equal(t->data, (const uint8_t *)copy + L.data_pos + 32);
    assert_true(((const float *)t->data)[15] == 115.0f);
    tr_gguf_close(g);
    free(copy);
    gb_free(&b);
}

/* ---------------------------------------------------------------- header */

static void bad_magic_and_version(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    gbuf c = {0};
    gb_bytes(&c, b.data, b.len);
    c.data[3] = 'X';
    expect_open_fails(c.data, c.len, TR_ERR_FORMAT, "bad magic");
    memcpy(c.data, "GGML", 4);
    expect_open_fails(c.data, c.len, TR_ERR_FORMAT, "bad magic");
    memcpy(c.data, "FUGG", 4); /* the magic read as a big-endian u32 */
    expect_open_fails(c.data, c.len, TR_ERR_FORMAT, "bad magic");
    gb_free(&c);
    expect_patched_fails(&b, 4, 4, 1, TR_ERR_UNSUPPORTED, "version 1");
    expect_patched_fails(&b, 4, 4, 4, TR_ERR_UNSUPPORTED, "version 4");
    expect_patched_fails(&b, 4, 4, 0x03000000, TR_ERR_UNSUPPORTED, "version"); /* big-endian file */
    expect_open_fails(b.data, 0, TR_ERR_FORMAT, "not a GGUF file");
    expect_open_fails("GGU", 3, TR_ERR_FORMAT, "not a GGUF file");
    gb_free(&b);
}

static void null_arguments_and_bad_paths(void **state) {
    (void)state;
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory("GGUF", 4, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_open_memory(NULL, 10, &g), TR_ERR_ARG);
    assert_int_equal(tr_gguf_open(NULL, &g), TR_ERR_ARG);
    tr_clear_error();
    assert_int_equal(tr_gguf_open("/nonexistent/dir/model.gguf", &g), TR_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(tr_last_error(), "/nonexistent/dir/model.gguf"));
    assert_int_equal(tr_gguf_open("/tmp", &g), TR_ERR_IO); /* a directory */
    assert_null(g);
    /* An empty file (maps nothing). */
    const char *path = temp_path(".gguf");
    char keep[256];
    snprintf(keep, sizeof keep, "%s", path);
    assert_true(write_bytes_file(keep, "", 0));
    tr_clear_error();
    assert_int_equal(tr_gguf_open(keep, &g), TR_ERR_FORMAT);
    assert_null(g);
    assert_non_null(strstr(tr_last_error(), keep));
    unlink(keep);
}

/* ---------------------------------------------------------------- counts and lengths */

static void absurd_counts(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    expect_patched_fails(&b, L.n_kv_pos, 8, 1ull << 63, TR_ERR_FORMAT, "metadata count");
    expect_patched_fails(&b, L.n_kv_pos, 8, UINT64_MAX, TR_ERR_FORMAT, "metadata count");
    expect_patched_fails(&b, L.n_tensors_pos, 8, 1ull << 63, TR_ERR_FORMAT, "tensor count");
    expect_patched_fails(&b, L.n_tensors_pos, 8, UINT64_MAX, TR_ERR_FORMAT, "tensor count");
    /* Counts small enough to pass the size bound but larger than what is there: the directory runs out. */
    expect_patched_fails(&b, L.n_kv_pos, 8, 3, TR_ERR_FORMAT, "entry"); /* the 3rd kv eats the tensor infos */
    expect_patched_fails(&b, L.n_tensors_pos, 8, 3, TR_ERR_FORMAT, "tensor entry 2");
    expect_patched_fails(&b, L.n_kv_pos, 8, b.len / 13, TR_ERR_FORMAT, "metadata entry");
    gb_free(&b);
}

static void absurd_string_lengths(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    const uint64_t lens[] = {1ull << 63, UINT64_MAX, UINT64_MAX - 7, (uint64_t)b.len, (uint64_t)b.len - 20};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        expect_patched_fails(&b, L.key0_len_pos, 8, lens[i], TR_ERR_FORMAT, "truncated file");
        expect_patched_fails(&b, L.val0_len_pos, 8, lens[i], TR_ERR_FORMAT, "truncated file");
        expect_patched_fails(&b, L.t0_name_len_pos, 8, lens[i], TR_ERR_FORMAT, "truncated file");
    }
    gb_free(&b);
}

/* A file with one array kv of element type et, declared count n, and `present` elements actually there. */
static void array_file(gbuf *b, uint32_t et, uint64_t n, uint64_t present) {
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 0, 1);
    gb_key(b, "test.arr", TR_GGUF_ARRAY);
    gb_u32(b, et);
    gb_u64(b, n);
    for (uint64_t i = 0; i < present; i++) {
        if (et == TR_GGUF_STRING) gb_str(b, "x");
        else if (et == TR_GGUF_ARRAY) {
            gb_u32(b, TR_GGUF_UINT8);
            gb_u64(b, 1);
            gb_u8(b, 1);
        } else gb_zeros(b, 4);
    }
}

static void absurd_arrays(void **state) {
    (void)state;
    gbuf b;
    /* Control: a well-formed array opens. */
    array_file(&b, TR_GGUF_UINT32, 3, 3);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
    assert_int_equal(tr_gguf_kv_array_len(g, 0), 3);
    tr_gguf_close(g);
    gb_free(&b);
    array_file(&b, TR_GGUF_STRING, 2, 2);
    assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
    assert_string_equal(tr_gguf_arr_str(g, 0, 1, NULL), "x");
    tr_gguf_close(g);
    gb_free(&b);

    const uint64_t counts[] = {1ull << 62, 1ull << 63, UINT64_MAX, 4};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        array_file(&b, TR_GGUF_UINT32, counts[i], 3);
        expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "exceeds the file");
        gb_free(&b);
        array_file(&b, TR_GGUF_FLOAT64, counts[i], 3); /* count * 8 would overflow for the large ones */
        expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "exceeds the file");
        gb_free(&b);
        array_file(&b, TR_GGUF_STRING, counts[i], 3);
        if (counts[i] == 4) gb_u64(&b, UINT64_MAX); /* passes the count bound; element 3 has an absurd length */
        expect_open_fails(b.data, b.len, TR_ERR_FORMAT, counts[i] == 4 ? "element 3" : "exceeds the file");
        gb_free(&b);
    }
    /* A string element whose length is absurd. */
    array_file(&b, TR_GGUF_STRING, 2, 2);
    gb_patch_u64(&b, b.len - 9, 1ull << 63);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "element 1");
    gb_free(&b);
    /* Arrays of arrays and unknown element types. */
    array_file(&b, TR_GGUF_ARRAY, 1, 1);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "arrays of arrays");
    gb_free(&b);
    array_file(&b, 13, 1, 1);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "unknown array element type 13");
    gb_free(&b);
    array_file(&b, 0xFFFFFFFFu, 1, 1);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "unknown array element type");
    gb_free(&b);
}

static void unknown_value_types(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    expect_patched_fails(&b, L.kv1_type_pos, 4, 13, TR_ERR_FORMAT, "unknown value type 13");
    expect_patched_fails(&b, L.kv1_type_pos, 4, 0xFFFFFFFFu, TR_ERR_FORMAT, "unknown value type");
    expect_patched_fails(&b, L.kv1_type_pos, 4, 0x80000000u, TR_ERR_FORMAT, "unknown value type");
    gb_free(&b);
}

/* ---------------------------------------------------------------- tensor infos */

static void absurd_dimensions(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    expect_patched_fails(&b, L.t0_ndims_pos, 4, 0, TR_ERR_FORMAT, "0 dimensions");
    expect_patched_fails(&b, L.t0_ndims_pos, 4, 5, TR_ERR_FORMAT, "5 dimensions");
    expect_patched_fails(&b, L.t0_ndims_pos, 4, 0xFFFFFFFFu, TR_ERR_FORMAT, "dimensions");
    expect_patched_fails(&b, L.t0_ne0_pos, 8, 0, TR_ERR_FORMAT, "dimension 0 has size 0");
    expect_patched_fails(&b, L.t1_ne1_pos, 8, 0, TR_ERR_FORMAT, "dimension 1 has size 0");
    expect_patched_fails(&b, L.t0_ne0_pos, 8, 1ull << 63, TR_ERR_FORMAT, "dimension 0");
    expect_patched_fails(&b, L.t0_ne0_pos, 8, UINT64_MAX, TR_ERR_FORMAT, "dimension 0");
    /* Sizes that fit int64 one by one but not as bytes: ne0 * 4 bytes, or the product of the dimensions, would
     * overflow 64 bits (2^31 * 2^31 * 4 = 2^64 wraps to 0). */
    expect_patched_fails(&b, L.t0_ne0_pos, 8, (1ull << 62) - 1, TR_ERR_FORMAT, "larger than the file");
    gbuf c = {0};
    gb_bytes(&c, b.data, b.len);
    gb_patch_u64(&c, L.t1_ne0_pos, 1ull << 31);
    gb_patch_u64(&c, L.t1_ne1_pos, 1ull << 31);
    expect_open_fails(c.data, c.len, TR_ERR_FORMAT, "larger than the file");
    gb_patch_u64(&c, L.t1_ne0_pos, 1ull << 32);
    gb_patch_u64(&c, L.t1_ne1_pos, 1ull << 61);
    expect_open_fails(c.data, c.len, TR_ERR_FORMAT, "larger than the file");
    gb_free(&c);
    gb_free(&b);

    /* Four dimensions of 2^16 each: 2^64 elements. */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 1, 0);
    const uint64_t ne[4] = {1u << 16, 1u << 16, 1u << 16, 1u << 16};
    gb_tensor_info(&b, "big", 4, ne, TR_TYPE_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "larger than the file");
    gb_free(&b);
    /* 2^32 * 2^32 * 2 * 2 with F16: wraps to exactly 0 bytes if unchecked. */
    gb_header(&b, 3, 1, 0);
    const uint64_t ne2[4] = {1ull << 32, 1ull << 32, 2, 2};
    gb_tensor_info(&b, "wrap", 4, ne2, TR_TYPE_F16, 0);
    gb_pad(&b, 32);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "larger than the file");
    gb_free(&b);
}

static void bad_tensor_types(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    expect_patched_fails(&b, L.t0_type_pos, 4, 99, TR_ERR_UNSUPPORTED, "unknown tensor type 99");
    expect_patched_fails(&b, L.t0_type_pos, 4, 4, TR_ERR_UNSUPPORTED, "unknown tensor type 4"); /* removed Q4_2 */
    expect_patched_fails(&b, L.t0_type_pos, 4, TR_TYPE_COUNT, TR_ERR_UNSUPPORTED, "unknown tensor type");
    expect_patched_fails(&b, L.t0_type_pos, 4, 0xFFFFFFFFu, TR_ERR_UNSUPPORTED, "unknown tensor type");
    /* A known block type whose row length is not a whole number of blocks (Q8_0: 32 per block, ne0 = 8). */
    expect_patched_fails(&b, L.t0_type_pos, 4, TR_TYPE_Q8_0, TR_ERR_FORMAT, "not a multiple of the q8_0 block");
    gb_free(&b);
}

static void bad_offsets(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    expect_patched_fails(&b, L.t1_offset_pos, 8, 64, TR_ERR_FORMAT, "past the end");     /* 64..128 of 96 */
    expect_patched_fails(&b, L.t1_offset_pos, 8, 1024, TR_ERR_FORMAT, "past the end");
    expect_patched_fails(&b, L.t1_offset_pos, 8, UINT64_MAX - 31, TR_ERR_FORMAT, "past the end"); /* aligned */
    expect_patched_fails(&b, L.t1_offset_pos, 8, (1ull << 63), TR_ERR_FORMAT, "past the end");
    /* Offset + size wrapping around 2^64 must not look like it fits. */
    expect_patched_fails(&b, L.t1_offset_pos, 8, UINT64_MAX - 63, TR_ERR_FORMAT, "past the end");
    expect_patched_fails(&b, L.t1_offset_pos, 8, 36, TR_ERR_FORMAT, "not a multiple of the alignment");
    expect_patched_fails(&b, L.t1_offset_pos, 8, 33, TR_ERR_FORMAT, "not a multiple of the alignment");
    expect_patched_fails(&b, L.t1_offset_pos, 8, UINT64_MAX, TR_ERR_FORMAT, "alignment");
    /* Data section missing entirely: the directory ends the file. */
    expect_open_fails(b.data, L.data_pos, TR_ERR_FORMAT, "past the end");
    gb_free(&b);
}

static void overlapping_tensors(void **state) {
    (void)state;
    gbuf b;
    base_layout L;
    base_file(&b, &L);
    /* Same offset. */
    expect_patched_fails(&b, L.t1_offset_pos, 8, 0, TR_ERR_FORMAT, "overlap");
    /* Partial overlap: "a" grows to 16 floats (0..64) while "b" starts at 32. */
    expect_patched_fails(&b, L.t0_ne0_pos, 8, 16, TR_ERR_FORMAT, "overlap");
    /* "b" listed first in the file's order but placed before "a": still checked in offset order. */
    gbuf c = {0};
    gb_bytes(&c, b.data, b.len);
    gb_patch_u64(&c, L.t0_offset_pos, 32);
    gb_patch_u64(&c, L.t1_offset_pos, 0); /* b = 0..64 covers a = 32..64 */
    expect_open_fails(c.data, c.len, TR_ERR_FORMAT, "overlap");
    /* Control: swapped without overlap (b at 0..64, a at 64..96) opens. */
    gb_patch_u64(&c, L.t0_offset_pos, 64);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(c.data, c.len, &g), TR_OK);
    tr_gguf_close(g);
    gb_free(&c);
    gb_free(&b);

    /* Three tensors where only the first and the last overlap once sorted: [0,96) contains [32,64) and [64,96). */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 3, 0);
    const uint64_t n24 = 24, n8 = 8;
    gb_tensor_info(&b, "x", 1, &n8, TR_TYPE_F32, 32);
    gb_tensor_info(&b, "y", 1, &n8, TR_TYPE_F32, 64);
    gb_tensor_info(&b, "z", 1, &n24, TR_TYPE_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 96);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "overlap");
    gb_free(&b);
}

static void duplicates(void **state) {
    (void)state;
    gbuf b = {0};
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "test.x", 1);
    gb_kv_str(&b, "test.y", "y");
    gb_kv_u32(&b, "test.x", 2);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "duplicate metadata key 'test.x'");
    gb_free(&b);

    gb_header(&b, 3, 2, 0);
    const uint64_t n8 = 8;
    gb_tensor_info(&b, "w", 1, &n8, TR_TYPE_F32, 0);
    gb_tensor_info(&b, "w", 1, &n8, TR_TYPE_F32, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "duplicate tensor name 'w'");
    gb_free(&b);
}

/* Files with tens of thousands of names (large vocabularies' metadata, many-tensor models): every name is found
 * at its own index, and one repeated name among them is still rejected, whichever entries it repeats. */
static void duplicates_among_many(void **state) {
    (void)state;
    enum { N = 40000 };
    char name[32];
    for (int dup = 0; dup < 3; dup++) {
        const int n = dup ? N + 1 : N;
        gbuf b = {0};
        gb_header(&b, 3, 0, (uint64_t)n);
        for (int i = 0; i < N; i++) {
            snprintf(name, sizeof name, "meta.key.%d", i);
            gb_kv_u32(&b, name, (uint32_t)i);
        }
        const int again = dup == 1 ? 0 : N - 1; /* repeat the first key, then the one just before */
        if (dup) {
            snprintf(name, sizeof name, "meta.key.%d", again);
            gb_kv_u32(&b, name, 7);
            char want[64];
            snprintf(want, sizeof want, "duplicate metadata key '%s'", name);
            expect_open_fails(b.data, b.len, TR_ERR_FORMAT, want);
        } else {
            tr_gguf *g = NULL;
            assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
            assert_int_equal(tr_gguf_n_kv(g), N);
            for (int i = 0; i < N; i++) {
                snprintf(name, sizeof name, "meta.key.%d", i);
                assert_int_equal(tr_gguf_find_kv(g, name), i);
            }
            assert_int_equal(tr_gguf_find_kv(g, "meta.key.40000"), -1);
            assert_int_equal(tr_gguf_find_kv(g, "meta.key."), -1);
            tr_gguf_close(g);
        }
        gb_free(&b);
    }

    /* the same for tensor names: N one-element F32 tensors 32 bytes apart */
    for (int dup = 0; dup < 2; dup++) {
        const int n = dup ? N + 1 : N;
        gbuf b = {0};
        gb_header(&b, 3, (uint64_t)n, 0);
        const uint64_t one = 1;
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "blk.%d.weight", i < N ? i : N / 2);
            gb_tensor_info(&b, name, 1, &one, TR_TYPE_F32, (uint64_t)i * 32);
        }
        gb_pad(&b, 32);
        gb_zeros(&b, (size_t)n * 32);
        if (dup) {
            snprintf(name, sizeof name, "duplicate tensor name 'blk.%d.weight'", N / 2);
            expect_open_fails(b.data, b.len, TR_ERR_FORMAT, name);
        } else {
            tr_gguf *g = NULL;
            assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
            for (int i = 0; i < N; i += 7) {
                snprintf(name, sizeof name, "blk.%d.weight", i);
                assert_int_equal(tr_gguf_find_tensor(g, name), i);
            }
            assert_int_equal(tr_gguf_find_tensor(g, "blk.weight"), -1);
            tr_gguf_close(g);
        }
        gb_free(&b);
    }
}

/* One kv general.alignment of the given type/value, one F32 [8] tensor at `offset`, data padded to 64. */
static void alignment_file(gbuf *b, uint32_t type, uint64_t value, uint64_t offset) {
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 1, 1);
    gb_key(b, "general.alignment", type);
    if (type == TR_GGUF_UINT64) gb_u64(b, value);
    else gb_u32(b, (uint32_t)value);
    const uint64_t n8 = 8;
    gb_tensor_info(b, "t", 1, &n8, TR_TYPE_F32, offset);
    gb_pad(b, 64);
    gb_zeros(b, 128);
}

static void bad_alignment(void **state) {
    (void)state;
    gbuf b;
    const uint64_t bad[] = {0, 3, 6, 48, 0x80000001u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        alignment_file(&b, TR_GGUF_UINT32, bad[i], 0);
        expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "general.alignment");
        gb_free(&b);
    }
    alignment_file(&b, TR_GGUF_UINT64, 32, 0); /* right value, wrong type */
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "general.alignment");
    gb_free(&b);
    /* A valid larger alignment is honoured: offset 32 is misaligned for 64, offset 64 is fine. */
    alignment_file(&b, TR_GGUF_UINT32, 64, 32);
    expect_open_fails(b.data, b.len, TR_ERR_FORMAT, "not a multiple of the alignment 64");
    gb_free(&b);
    alignment_file(&b, TR_GGUF_UINT32, 64, 64);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
    assert_int_equal(tr_gguf_alignment(g), 64);
    assert_int_equal((uintptr_t)((const uint8_t *)tr_gguf_tensor_at(g, 0)->data - b.data) % 64, 0);
    tr_gguf_close(g);
    gb_free(&b);
}

/* ---------------------------------------------------------------- truncations of a real model */

static void every_truncation_point(void **state) {
    (void)state;
    size_t size = 0;
    char *file = read_file(shared_path("models/stories-student.gguf"), &size);
    assert_non_null(file);
    assert_true(size > 100000);
    /* The reader touches only the header and directory; tensor data is located, never read. Each prefix is placed
     * at the end of an exact-size allocation, so reading byte `len` would hit the sanitizer's redzone. Only the
     * directory part needs copying per prefix. */
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(file, size, &g), TR_OK);
    const size_t dir_end = (size_t)((const char *)tr_gguf_tensor_at(g, 0)->data - file); /* tensor 0 is at 0 */
    tr_gguf_close(g);
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    memcpy(buf, file, size);
    size_t n_truncated_msg = 0;
    for (size_t len = 0; len < size; len++) {
        uint8_t *base = buf + (size - len);
        memcpy(base, file, len < dir_end ? len : dir_end);
        tr_clear_error();
        g = (tr_gguf *)0x1;
        tr_status st = tr_gguf_open_memory(len ? base : NULL, len, &g);
        const char *msg = tr_last_error();
        if (st != TR_ERR_FORMAT || g != NULL || msg[0] == '\0')
            fail_msg("prefix of %zu bytes: status %s, message '%s'", len, tr_status_name(st), msg);
        if (strstr(msg, "truncated") || strstr(msg, "exceeds the file") || strstr(msg, "larger than the file") ||
            strstr(msg, "not a GGUF file"))
            n_truncated_msg++;
        else
            fail_msg("prefix of %zu bytes: message does not say the file is short: '%s'", len, msg);
    }
    assert_int_equal(n_truncated_msg, size);
    /* The whole file still opens (the loop did not just fail everything). */
    memcpy(buf, file, size);
    assert_int_equal(tr_gguf_open_memory(buf, size, &g), TR_OK);
    tr_gguf_close(g);
    free(buf);
    free(file);
}

static void truncated_files_through_model_load(void **state) {
    (void)state;
    size_t size = 0;
    char *file = read_file(shared_path("models/stories-student.gguf"), &size);
    assert_non_null(file);
    char path[256];
    snprintf(path, sizeof path, "%s", temp_path(".gguf"));
    /* 50 points: the first bytes, inside the directory, at the data boundary, inside data, one byte short. */
    size_t points[50];
    int n = 0;
    const size_t fixed[] = {0, 1, 3, 4, 8, 23, 24, 31, 100, 13124, 13125, 13151, 13152, 13153, size - 2, size - 1};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) points[n++] = fixed[i];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    while (n < 50) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        points[n++] = (size_t)(x % size);
    }
    for (int i = 0; i < n; i++) {
        assert_true(write_bytes_file(path, file, points[i]));
        for (int mmap_mode = 0; mmap_mode < 2; mmap_mode++) {
            tr_model_params mp = tr_model_default_params();
            mp.use_mmap = mmap_mode == 1;
            tr_model *m = (tr_model *)0x1;
            tr_clear_error();
            tr_status st = tr_model_load(path, &mp, &m);
            if (st == TR_OK || m != NULL || tr_last_error()[0] == '\0')
                fail_msg("truncated to %zu bytes (mmap %d): status %s, message '%s'", points[i], mmap_mode,
                         tr_status_name(st), tr_last_error());
            assert_int_equal(st, TR_ERR_FORMAT);
            /* With a mapping, the message names the file. */
            if (mp.use_mmap && !strstr(tr_last_error(), path))
                fail_msg("truncated to %zu bytes: message does not name the file: '%s'", points[i], tr_last_error());
        }
    }
    unlink(path);
    free(file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(base_file_is_valid),
        cmocka_unit_test(bad_magic_and_version),
        cmocka_unit_test(null_arguments_and_bad_paths),
        cmocka_unit_test(absurd_counts),
        cmocka_unit_test(absurd_string_lengths),
        cmocka_unit_test(absurd_arrays),
        cmocka_unit_test(unknown_value_types),
        cmocka_unit_test(absurd_dimensions),
        cmocka_unit_test(bad_tensor_types),
        cmocka_unit_test(bad_offsets),
        cmocka_unit_test(overlapping_tensors),
        cmocka_unit_test(duplicates),
        cmocka_unit_test(duplicates_among_many),
        cmocka_unit_test(bad_alignment),
        cmocka_unit_test(every_truncation_point),
        cmocka_unit_test(truncated_files_through_model_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
