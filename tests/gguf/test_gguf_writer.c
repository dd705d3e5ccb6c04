/* test_gguf_writer.c — the GGUF writer against the reader: every metadata type and several tensor types round
 * trip exactly; tr_gguf_writer_copy_kv reproduces metadata byte for byte; data produced by the fill callback lands
 * where it belongs; and a write that fails leaves no file behind (and does not clobber an existing one). */
#include <inttypes.h>
#include <math.h>
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

static char *dup_temp(const char *suffix) {
    const char *p = temp_path(suffix);
    char *s = malloc(strlen(p) + 1);
    strcpy(s, p);
    return s;
}

static char *tmp_name(const char *path) {
    char *s = malloc(strlen(path) + 5);
    sprintf(s, "%s.tmp", path);
    return s;
}

static uint32_t f32_bits(double d) {
    float f = (float)d;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---------------------------------------------------------------- the public setters */

static void round_trip_public_setters(void **state) {
    (void)state;
    char *path = dup_temp(".gguf");
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    const float nan_f = nanf(""), neg_zero = -0.0f, tiny = 1e-40f /* subnormal */, inf = INFINITY;
    assert_int_equal(tr_gguf_writer_set_u32(w, "t.u32", 0xFFFFFFFFu), TR_OK);
    assert_int_equal(tr_gguf_writer_set_i32(w, "t.i32", INT32_MIN), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u64(w, "t.u64", 42), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u64(w, "t.u64max", UINT64_MAX), TR_OK);
    assert_int_equal(tr_gguf_writer_set_f32(w, "t.nan", nan_f), TR_OK);
    assert_int_equal(tr_gguf_writer_set_f32(w, "t.negzero", neg_zero), TR_OK);
    assert_int_equal(tr_gguf_writer_set_f32(w, "t.tiny", tiny), TR_OK);
    assert_int_equal(tr_gguf_writer_set_f32(w, "t.inf", inf), TR_OK);
    assert_int_equal(tr_gguf_writer_set_bool(w, "t.true", true), TR_OK);
    assert_int_equal(tr_gguf_writer_set_bool(w, "t.false", false), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "t.empty", ""), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "t.utf8", "h\xc3\xa9llo \xe2\x9c\x93"), TR_OK);
    const char *strs[] = {"alpha", "", "\xe2\x96\x81the"};
    assert_int_equal(tr_gguf_writer_set_arr_str(w, "t.arr_str", strs, 3), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_str(w, "t.arr_str_empty", NULL, 0), TR_OK);
    const int32_t ints[] = {INT32_MIN, -1, 0, 7, INT32_MAX};
    assert_int_equal(tr_gguf_writer_set_arr_i32(w, "t.arr_i32", ints, 5), TR_OK);
    const float floats[] = {1.5f, -0.0f, 3.4e38f, 1e-40f};
    assert_int_equal(tr_gguf_writer_set_arr_f32(w, "t.arr_f32", floats, 4), TR_OK);
    const bool flags[] = {true, false, false, true};
    assert_int_equal(tr_gguf_writer_set_arr_bool(w, "t.arr_bool", flags, 4), TR_OK);
    /* Setting a key again replaces its value and type in place (no duplicate key in the file). */
    assert_int_equal(tr_gguf_writer_set_u32(w, "t.replaced", 1), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "t.replaced", "now a string"), TR_OK);

    /* Tensors: F32 1-D of odd length (padding follows), F16 2-D, Q8_0, Q4_K 3-D, BF16 4-D; bytes are patterns. */
    struct {
        const char *name;
        tr_type type;
        int n_dims;
        int64_t ne[4];
    } ts[] = {
        {"f32.vec", TR_TYPE_F32, 1, {5, 1, 1, 1}},
        {"f16.mat", TR_TYPE_F16, 2, {8, 3, 1, 1}},
        {"q8_0.mat", TR_TYPE_Q8_0, 2, {64, 2, 1, 1}},
        {"q4_k.cube", TR_TYPE_Q4_K, 3, {256, 1, 2, 1}},
        {"bf16.hyper", TR_TYPE_BF16, 4, {2, 3, 2, 2}},
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    uint8_t *bytes[NT];
    size_t n_bytes[NT];
    for (int i = 0; i < NT; i++) {
        n_bytes[i] = (size_t)(ts[i].ne[0] / tr_type_block_elems(ts[i].type)) * tr_type_block_bytes(ts[i].type) *
                     (size_t)(ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3]);
        bytes[i] = malloc(n_bytes[i]);
        for (size_t j = 0; j < n_bytes[i]; j++) bytes[i][j] = (uint8_t)(j * 7 + (size_t)i * 13 + 1);
        int64_t index = -1;
        assert_int_equal(tr_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, bytes[i],
                                                   &index),
                         TR_OK);
        assert_int_equal(index, i);
        bytes[i][0] ^= 0xFF; /* data was copied at add time: later changes must not reach the file */
        bytes[i][0] ^= 0xFF;
    }
    bytes[0][1] ^= 0x55; /* …checked below: the file keeps the original byte */
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    bytes[0][1] ^= 0x55;
    tr_gguf_writer_free(w);
    char *tmp = tmp_name(path);
    assert_false(file_exists(tmp));

    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    assert_int_equal(tr_gguf_version(g), 3);
    assert_int_equal(tr_gguf_alignment(g), 32);
    const char *order[] = {"t.u32", "t.i32", "t.u64", "t.u64max", "t.nan", "t.negzero", "t.tiny", "t.inf", "t.true",
                           "t.false", "t.empty", "t.utf8", "t.arr_str", "t.arr_str_empty", "t.arr_i32", "t.arr_f32",
                           "t.arr_bool", "t.replaced"};
    const int n_keys = (int)(sizeof order / sizeof order[0]);
    assert_int_equal(tr_gguf_n_kv(g), n_keys);
    for (int i = 0; i < n_keys; i++) assert_string_equal(tr_gguf_kv_key(g, i), order[i]);

    int64_t iv;
    double dv;
    bool bv;
    size_t len;
    assert_int_equal(tr_gguf_kv_type(g, 0), TR_GGUF_UINT32);
    assert_true(tr_gguf_get_int(g, "t.u32", &iv) && iv == 0xFFFFFFFFll);
    assert_int_equal(tr_gguf_kv_type(g, 1), TR_GGUF_INT32);
    assert_true(tr_gguf_get_int(g, "t.i32", &iv) && iv == INT32_MIN);
    assert_int_equal(tr_gguf_kv_type(g, 2), TR_GGUF_UINT64);
    assert_true(tr_gguf_get_int(g, "t.u64", &iv) && iv == 42);
    assert_false(tr_gguf_get_int(g, "t.u64max", &iv)); /* above INT64_MAX: documented to fail */
    char buf[64];
    tr_gguf_kv_format(g, 3, buf, sizeof buf);
    assert_string_equal(buf, "18446744073709551615");
    assert_true(tr_gguf_get_float(g, "t.nan", &dv) && isnan(dv));
    assert_true(tr_gguf_get_float(g, "t.negzero", &dv) && f32_bits(dv) == bits_of(neg_zero));
    assert_true(tr_gguf_get_float(g, "t.tiny", &dv) && f32_bits(dv) == bits_of(tiny));
    assert_true(tr_gguf_get_float(g, "t.inf", &dv) && isinf(dv) && dv > 0);
    assert_int_equal(tr_gguf_kv_type(g, 8), TR_GGUF_BOOL);
    assert_true(tr_gguf_get_bool(g, "t.true", &bv) && bv);
    assert_true(tr_gguf_get_bool(g, "t.false", &bv) && !bv);
    assert_string_equal(tr_gguf_get_str(g, "t.empty", &len), "");
    assert_int_equal(len, 0);
    assert_string_equal(tr_gguf_get_str(g, "t.utf8", &len), "h\xc3\xa9llo \xe2\x9c\x93");
    assert_int_equal(len, 10);
    /* Typed getters refuse other types. */
    assert_false(tr_gguf_get_int(g, "t.utf8", &iv));
    assert_false(tr_gguf_get_float(g, "t.u32", &dv));
    assert_false(tr_gguf_get_bool(g, "t.u32", &bv));
    assert_null(tr_gguf_get_str(g, "t.u32", NULL));

    int64_t k = tr_gguf_find_kv(g, "t.arr_str");
    assert_int_equal(tr_gguf_kv_type(g, k), TR_GGUF_ARRAY);
    assert_int_equal(tr_gguf_kv_array_type(g, k), TR_GGUF_STRING);
    assert_int_equal(tr_gguf_kv_array_len(g, k), 3);
    for (int i = 0; i < 3; i++) assert_string_equal(tr_gguf_arr_str(g, k, (uint64_t)i, NULL), strs[i]);
    assert_null(tr_gguf_arr_str(g, k, 3, NULL));
    k = tr_gguf_find_kv(g, "t.arr_str_empty");
    assert_int_equal(tr_gguf_kv_array_type(g, k), TR_GGUF_STRING);
    assert_int_equal(tr_gguf_kv_array_len(g, k), 0);
    k = tr_gguf_find_kv(g, "t.arr_i32");
    assert_int_equal(tr_gguf_kv_array_type(g, k), TR_GGUF_INT32);
    assert_int_equal(tr_gguf_kv_array_len(g, k), 5);
    for (int i = 0; i < 5; i++) assert_true(tr_gguf_arr_int(g, k, (uint64_t)i, &iv) && iv == ints[i]);
    assert_false(tr_gguf_arr_int(g, k, 5, &iv));
    k = tr_gguf_find_kv(g, "t.arr_f32");
    assert_int_equal(tr_gguf_kv_array_type(g, k), TR_GGUF_FLOAT32);
    for (int i = 0; i < 4; i++)
        assert_true(tr_gguf_arr_float(g, k, (uint64_t)i, &dv) && f32_bits(dv) == bits_of(floats[i]));
    k = tr_gguf_find_kv(g, "t.arr_bool");
    assert_int_equal(tr_gguf_kv_array_type(g, k), TR_GGUF_BOOL);
    assert_int_equal(tr_gguf_kv_array_len(g, k), 4);
    for (int i = 0; i < 4; i++) assert_true(tr_gguf_arr_int(g, k, (uint64_t)i, &iv) && iv == flags[i]);
    k = tr_gguf_find_kv(g, "t.replaced");
    assert_int_equal(tr_gguf_kv_type(g, k), TR_GGUF_STRING);
    assert_string_equal(tr_gguf_get_str(g, "t.replaced", NULL), "now a string");

    assert_int_equal(tr_gguf_n_tensors(g), NT);
    for (int i = 0; i < NT; i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
        assert_string_equal(t->name, ts[i].name);
        assert_int_equal(tr_gguf_find_tensor(g, ts[i].name), i);
        assert_int_equal(t->type, ts[i].type);
        assert_int_equal(t->n_dims, ts[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], ts[i].ne[d]);
        assert_int_equal(t->n_bytes, n_bytes[i]);
        assert_int_equal(t->offset % 32, 0);
        assert_memory_equal(t->data, bytes[i], n_bytes[i]);
    }
    tr_gguf_close(g);
    for (int i = 0; i < NT; i++) free(bytes[i]);
    unlink(path);
    free(tmp);
    free(path);
}

/* ---------------------------------------------------------------- every GGUF value type, through copy_kv */

/* Metadata with every scalar type and an array of every element type, assembled by hand (no tensors). */
static void all_types_file(gbuf *b, uint64_t *n_kv_out) {
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 0, 0); /* n_kv patched below */
    uint64_t n = 0;
    gb_key(b, "v.u8", TR_GGUF_UINT8), gb_u8(b, 255), n++;
    gb_key(b, "v.i8", TR_GGUF_INT8), gb_u8(b, (uint8_t)-5), n++;
    gb_key(b, "v.u16", TR_GGUF_UINT16), gb_u8(b, 0xFF), gb_u8(b, 0xFF), n++;
    gb_key(b, "v.i16", TR_GGUF_INT16), gb_u8(b, 0xD4), gb_u8(b, 0xFE), n++; /* -300 */
    gb_key(b, "v.u32", TR_GGUF_UINT32), gb_u32(b, 4000000000u), n++;
    gb_key(b, "v.i32", TR_GGUF_INT32), gb_u32(b, (uint32_t)-123456), n++;
    gb_key(b, "v.f32", TR_GGUF_FLOAT32), gb_f32(b, 0.1f), n++;
    gb_key(b, "v.bool", TR_GGUF_BOOL), gb_u8(b, 1), n++;
    gb_key(b, "v.str", TR_GGUF_STRING), gb_str(b, "text \xe2\x9c\x93"), n++;
    gb_key(b, "v.u64", TR_GGUF_UINT64), gb_u64(b, 0xFEDCBA9876543210ull), n++;
    gb_key(b, "v.i64", TR_GGUF_INT64), gb_u64(b, (uint64_t)INT64_MIN), n++;
    double d = 0.1;
    uint64_t db;
    memcpy(&db, &d, 8);
    gb_key(b, "v.f64", TR_GGUF_FLOAT64), gb_u64(b, db), n++;
    /* Arrays of each element type: 3 elements each (strings: 3 including an empty one), plus an empty array. */
    static const uint32_t elem_types[] = {TR_GGUF_UINT8,  TR_GGUF_INT8,    TR_GGUF_UINT16, TR_GGUF_INT16,
                                          TR_GGUF_UINT32, TR_GGUF_INT32,   TR_GGUF_FLOAT32, TR_GGUF_BOOL,
                                          TR_GGUF_STRING, TR_GGUF_UINT64,  TR_GGUF_INT64,  TR_GGUF_FLOAT64};
    for (size_t t = 0; t < sizeof elem_types / sizeof elem_types[0]; t++) {
        char key[32];
        snprintf(key, sizeof key, "a.%u", elem_types[t]);
        gb_key(b, key, TR_GGUF_ARRAY);
        gb_u32(b, elem_types[t]);
        gb_u64(b, 3);
        for (int i = 0; i < 3; i++) {
            switch (elem_types[t]) {
            case TR_GGUF_UINT8: case TR_GGUF_INT8: gb_u8(b, (uint8_t)(0x7F + i * 0x40)); break;
            case TR_GGUF_BOOL: gb_u8(b, (uint8_t)(i & 1)); break;
            case TR_GGUF_UINT16: case TR_GGUF_INT16: gb_u8(b, 0x34), gb_u8(b, (uint8_t)(0x7F + i * 0x40)); break;
            case TR_GGUF_UINT32: case TR_GGUF_INT32: gb_u32(b, 0x7FFFFFF0u + (uint32_t)i * 0x40000000u); break;
            case TR_GGUF_FLOAT32: gb_f32(b, i == 1 ? -0.0f : 1.0f / 3.0f + (float)i); break;
            case TR_GGUF_STRING: gb_str(b, i == 1 ? "" : i == 0 ? "first" : "third"); break;
            case TR_GGUF_UINT64: case TR_GGUF_INT64: gb_u64(b, 0x7FFFFFFFFFFFFFF0ull + (uint64_t)i * (1ull << 62)); break;
            case TR_GGUF_FLOAT64: {
                double x = i == 2 ? -1e300 : 1.0 / 3.0 + i;
                uint64_t xb;
                memcpy(&xb, &x, 8);
                gb_u64(b, xb);
                break;
            }
            }
        }
        n++;
    }
    gb_key(b, "a.empty", TR_GGUF_ARRAY), gb_u32(b, TR_GGUF_UINT8), gb_u64(b, 0), n++;
    gb_patch_u64(b, 16, n);
    *n_kv_out = n;
}

static void every_value_type_reads(void **state) {
    (void)state;
    gbuf b;
    uint64_t n_kv;
    all_types_file(&b, &n_kv);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
    assert_int_equal(tr_gguf_n_kv(g), (int64_t)n_kv);
    int64_t iv;
    double dv;
    bool bv;
    assert_true(tr_gguf_get_int(g, "v.u8", &iv) && iv == 255);
    assert_true(tr_gguf_get_int(g, "v.i8", &iv) && iv == -5);
    assert_true(tr_gguf_get_int(g, "v.u16", &iv) && iv == 65535);
    assert_true(tr_gguf_get_int(g, "v.i16", &iv) && iv == -300);
    assert_true(tr_gguf_get_int(g, "v.u32", &iv) && iv == 4000000000ll);
    assert_true(tr_gguf_get_int(g, "v.i32", &iv) && iv == -123456);
    assert_true(tr_gguf_get_float(g, "v.f32", &dv) && (float)dv == 0.1f);
    assert_true(tr_gguf_get_bool(g, "v.bool", &bv) && bv);
    assert_string_equal(tr_gguf_get_str(g, "v.str", NULL), "text \xe2\x9c\x93");
    assert_false(tr_gguf_get_int(g, "v.u64", &iv)); /* above INT64_MAX */
    assert_true(tr_gguf_get_int(g, "v.i64", &iv) && iv == INT64_MIN);
    assert_true(tr_gguf_get_float(g, "v.f64", &dv) && dv == 0.1);
    int64_t k = tr_gguf_find_kv(g, "a.1"); /* int8 */
    assert_true(tr_gguf_arr_int(g, k, 0, &iv) && iv == 127);
    assert_true(tr_gguf_arr_int(g, k, 1, &iv) && iv == -65);
    k = tr_gguf_find_kv(g, "a.3"); /* int16: 0x7F34, 0xBF34, 0xFF34 */
    assert_true(tr_gguf_arr_int(g, k, 2, &iv) && iv == (int16_t)0xFF34);
    k = tr_gguf_find_kv(g, "a.10"); /* uint64: the second and third exceed INT64_MAX */
    assert_true(tr_gguf_arr_int(g, k, 0, &iv) && iv == 0x7FFFFFFFFFFFFFF0ll);
    assert_false(tr_gguf_arr_int(g, k, 1, &iv));
    k = tr_gguf_find_kv(g, "a.12");
    assert_true(tr_gguf_arr_float(g, k, 2, &dv) && dv == -1e300);
    k = tr_gguf_find_kv(g, "a.7"); /* bool elements are not integers or floats to the getters */
    assert_int_equal(tr_gguf_kv_array_type(g, k), TR_GGUF_BOOL);
    assert_int_equal(tr_gguf_kv_array_len(g, tr_gguf_find_kv(g, "a.empty")), 0);
    tr_gguf_close(g);
    gb_free(&b);
}

static void copy_kv_reproduces_every_type_bytewise(void **state) {
    (void)state;
    gbuf b;
    uint64_t n_kv;
    all_types_file(&b, &n_kv);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_copy_kv(w, g), TR_OK);
    char *path = dup_temp(".gguf");
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    tr_gguf_close(g);
    /* The writer emits the same header and key/values in the same order, then pads to 32: the hand-made bytes
     * must come back exactly — every type tag, width and value. */
    size_t size = 0;
    char *out = read_file(path, &size);
    assert_non_null(out);
    assert_int_equal(size, (b.len + 31) / 32 * 32);
    assert_memory_equal(out, b.data, b.len);
    for (size_t i = b.len; i < size; i++) assert_int_equal(out[i], 0);
    free(out);
    unlink(path);
    free(path);
    gb_free(&b);
}

/* tokroute.h: "strings may contain NUL", and copy_kv "copies every key": a string value or string-array element
 * with an embedded NUL must come back whole (an early writer measured them with strlen). */
static void copy_kv_keeps_strings_with_nul(void **state) {
    (void)state;
    gbuf b = {0};
    gb_header(&b, 3, 0, 2);
    gb_key(&b, "s.nul", TR_GGUF_STRING);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_key(&b, "a.nul", TR_GGUF_ARRAY);
    gb_u32(&b, TR_GGUF_STRING);
    gb_u64(&b, 2);
    gb_str(&b, "plain");
    gb_u64(&b, 4);
    gb_bytes(&b, "x\0yz", 4);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(b.data, b.len, &g), TR_OK);
    size_t len = 0;
    assert_memory_equal(tr_gguf_get_str(g, "s.nul", &len), "a\0b", 3); /* the reader keeps all bytes */
    assert_int_equal(len, 3);
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_copy_kv(w, g), TR_OK);
    char *path = dup_temp(".gguf");
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    tr_gguf_close(g);
    tr_gguf *h = NULL;
    assert_int_equal(tr_gguf_open(path, &h), TR_OK);
    /* Checked after cleanup, so the expected failure leaks nothing under the sanitizers. */
    size_t len_str = 0, len_elem = 0;
    const char *s = tr_gguf_get_str(h, "s.nul", &len_str);
    const bool str_ok = s && len_str == 3 && memcmp(s, "a\0b", 3) == 0;
    s = tr_gguf_arr_str(h, tr_gguf_find_kv(h, "a.nul"), 1, &len_elem);
    const bool elem_ok = s && len_elem == 4 && memcmp(s, "x\0yz", 4) == 0;
    tr_gguf_close(h);
    unlink(path);
    free(path);
    gb_free(&b);
    if (!str_ok) fail_msg("copy_kv kept %zu of the 3 bytes of a string with a NUL", len_str);
    if (!elem_ok) fail_msg("copy_kv kept %zu of the 4 bytes of an array string with a NUL", len_elem);
}

/* A real model rewritten with copy_kv and its tensors is the same file, byte for byte. */
static void copy_kv_and_tensors_reproduce_a_model(void **state) {
    (void)state;
    const char *src_path = shared_path("models/stories-student.gguf");
    size_t src_size = 0;
    char *src = read_file(src_path, &src_size);
    assert_non_null(src);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open_memory(src, src_size, &g), TR_OK);
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_copy_kv(w, g), TR_OK);
    for (int64_t i = 0; i < tr_gguf_n_tensors(g); i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
        assert_int_equal(tr_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL), TR_OK);
    }
    char *path = dup_temp(".gguf");
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);

    tr_gguf *h = NULL;
    assert_int_equal(tr_gguf_open(path, &h), TR_OK);
    assert_int_equal(tr_gguf_n_kv(h), tr_gguf_n_kv(g));
    for (int64_t i = 0; i < tr_gguf_n_kv(g); i++) {
        assert_string_equal(tr_gguf_kv_key(h, i), tr_gguf_kv_key(g, i));
        assert_int_equal(tr_gguf_kv_type(h, i), tr_gguf_kv_type(g, i));
        char a[256], c[256];
        tr_gguf_kv_format(g, i, a, sizeof a);
        tr_gguf_kv_format(h, i, c, sizeof c);
        assert_string_equal(a, c);
    }
    const int64_t tok = tr_gguf_find_kv(h, "tokenizer.ggml.tokens");
    assert_int_equal(tr_gguf_kv_array_len(h, tok), 512);
    for (uint64_t j = 0; j < 512; j++)
        assert_string_equal(tr_gguf_arr_str(h, tok, j, NULL),
                            tr_gguf_arr_str(g, tr_gguf_find_kv(g, "tokenizer.ggml.tokens"), j, NULL));
    tr_gguf_close(h);
    tr_gguf_close(g);
    size_t size = 0;
    char *out = read_file(path, &size);
    assert_int_equal(size, src_size);
    assert_memory_equal(out, src, src_size);
    free(out);
    free(src);
    unlink(path);
    free(path);
}

/* ---------------------------------------------------------------- the fill callback */

typedef struct fill_log {
    int calls;
    int64_t index[8];
    size_t n_bytes[8];
    int fail_at; /* index that returns an error, or -1 */
} fill_log;

static uint8_t pattern(int64_t tensor, size_t j) { return (uint8_t)(tensor * 31 + (int64_t)j * 3 + 5); }

static tr_status fill(void *user, int64_t tensor_index, void *dst, size_t n_bytes) {
    fill_log *log = user;
    if (log->calls < 8) {
        log->index[log->calls] = tensor_index;
        log->n_bytes[log->calls] = n_bytes;
    }
    log->calls++;
    if (tensor_index == log->fail_at) return TR_ERR_IO;
    for (size_t j = 0; j < n_bytes; j++) ((uint8_t *)dst)[j] = pattern(tensor_index, j);
    return TR_OK;
}

/* Tensors 0 and 2 are produced by the callback; 1 is given; 3 (the largest) by the callback again. */
static tr_gguf_writer *fill_writer(const uint8_t *given) {
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "general.architecture", "test"), TR_OK);
    const int64_t ne0[] = {10}, ne1[] = {8, 2}, ne2[] = {32, 3}, ne3[] = {64, 64};
    assert_int_equal(tr_gguf_writer_add_tensor(w, "t0", TR_TYPE_F32, 1, ne0, NULL, NULL), TR_OK);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "t1", TR_TYPE_F16, 2, ne1, given, NULL), TR_OK);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "t2", TR_TYPE_Q8_0, 2, ne2, NULL, NULL), TR_OK);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "t3", TR_TYPE_F32, 2, ne3, NULL, NULL), TR_OK);
    return w;
}

static void fill_callback_produces_data(void **state) {
    (void)state;
    uint8_t given[32];
    for (int i = 0; i < 32; i++) given[i] = (uint8_t)(200 + i);
    tr_gguf_writer *w = fill_writer(given);
    fill_log log = {.fail_at = -1};
    char *path = dup_temp(".gguf");
    assert_int_equal(tr_gguf_writer_write(w, path, fill, &log), TR_OK);
    tr_gguf_writer_free(w);
    /* Called once per tensor without data, in order, with its exact size. */
    assert_int_equal(log.calls, 3);
    assert_int_equal(log.index[0], 0);
    assert_int_equal(log.n_bytes[0], 40);
    assert_int_equal(log.index[1], 2);
    assert_int_equal(log.n_bytes[1], 3 * 34);
    assert_int_equal(log.index[2], 3);
    assert_int_equal(log.n_bytes[2], 64 * 64 * 4);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    for (int64_t i = 0; i < 4; i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        for (size_t j = 0; j < t->n_bytes; j++) {
            const uint8_t expect = i == 1 ? given[j] : pattern(i, j);
            if (d[j] != expect) fail_msg("tensor %" PRId64 " byte %zu: %u, expected %u", i, j, d[j], expect);
        }
    }
    tr_gguf_close(g);
    unlink(path);
    free(path);
}

/* ---------------------------------------------------------------- failures leave no file */

static void failed_fill_leaves_no_file(void **state) {
    (void)state;
    uint8_t given[32] = {0};
    char *path = dup_temp(".gguf"), *tmp = tmp_name(path);
    tr_gguf_writer *w = fill_writer(given);
    fill_log log = {.fail_at = 2};
    assert_int_equal(tr_gguf_writer_write(w, path, fill, &log), TR_ERR_IO);
    assert_int_equal(log.calls, 2); /* stopped at the failing tensor */
    assert_false(file_exists(path));
    assert_false(file_exists(tmp));

    /* A tensor without data and no callback: an argument error, and again no file. */
    tr_clear_error();
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "t0"));
    assert_false(file_exists(path));
    assert_false(file_exists(tmp));

    /* An existing file under the name survives a failed write untouched. */
    assert_true(write_bytes_file(path, "precious", 8));
    log = (fill_log){.fail_at = 3};
    assert_int_equal(tr_gguf_writer_write(w, path, fill, &log), TR_ERR_IO);
    size_t size = 0;
    char *kept = read_file(path, &size);
    assert_non_null(kept);
    assert_int_equal(size, 8);
    assert_memory_equal(kept, "precious", 8);
    assert_false(file_exists(tmp));
    free(kept);
    /* …and the same writer can still write successfully afterwards, replacing it. */
    log = (fill_log){.fail_at = -1};
    assert_int_equal(tr_gguf_writer_write(w, path, fill, &log), TR_OK);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    assert_int_equal(tr_gguf_n_tensors(g), 4);
    tr_gguf_close(g);
    tr_gguf_writer_free(w);
    unlink(path);
    free(path);
    free(tmp);
}

static void unwritable_path_fails(void **state) {
    (void)state;
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_set_u32(w, "k", 1), TR_OK);
    tr_clear_error();
    assert_int_equal(tr_gguf_writer_write(w, "/nonexistent-dir/x.gguf", NULL, NULL), TR_ERR_IO);
    assert_non_null(strstr(tr_last_error(), "/nonexistent-dir/x.gguf"));
    assert_false(file_exists("/nonexistent-dir/x.gguf"));
    assert_int_equal(tr_gguf_writer_write(w, NULL, NULL, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_write(NULL, "/tmp/x.gguf", NULL, NULL), TR_ERR_ARG);
    tr_gguf_writer_free(w);
}

static void bad_arguments_are_rejected(void **state) {
    (void)state;
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    const int64_t ne[] = {32, 2}, zero[] = {32, 0}, odd[] = {33, 1};
    float data[64] = {0};
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", TR_TYPE_F32, 0, ne, data, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", TR_TYPE_F32, 5, ne, data, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, NULL, TR_TYPE_F32, 2, ne, data, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", TR_TYPE_F32, 2, NULL, data, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", TR_TYPE_F32, 2, zero, data, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", TR_TYPE_Q8_0, 2, odd, data, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", (tr_type)99, 2, ne, data, NULL), TR_ERR_UNSUPPORTED);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "x", (tr_type)4, 2, ne, data, NULL), TR_ERR_UNSUPPORTED);
    assert_int_equal(tr_gguf_writer_set_u32(w, NULL, 1), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_set_str(w, "s", NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_set_arr_i32(w, "a", NULL, 3), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_set_u32(NULL, "k", 1), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_copy_kv(w, NULL), TR_ERR_ARG);
    /* None of the rejected calls left an entry behind: one good tensor and one key give a clean file. */
    int64_t index = -1;
    assert_int_equal(tr_gguf_writer_add_tensor(w, "good", TR_TYPE_F32, 2, ne, data, &index), TR_OK);
    assert_int_equal(index, 0);
    assert_int_equal(tr_gguf_writer_set_u32(w, "k", 7), TR_OK);
    char *path = dup_temp(".gguf");
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    assert_int_equal(tr_gguf_n_tensors(g), 1);
    assert_int_equal(tr_gguf_n_kv(g), 1);
    assert_string_equal(tr_gguf_tensor_at(g, 0)->name, "good");
    tr_gguf_close(g);
    unlink(path);
    free(path);
    tr_gguf_writer_free(NULL);
}

/* Sizes are products of caller-given counts: every product and the running data offset are overflow-checked, so
 * a huge shape is refused instead of wrapping to a small size (which would under-allocate and read past buffers). */
static void size_overflow_is_rejected(void **state) {
    (void)state;
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    /* 2^32 x 2^32 F32 elements: 2^66 bytes wraps to 0 in 64 bits */
    const int64_t wrap[] = {INT64_C(1) << 32, INT64_C(1) << 32};
    tr_clear_error();
    assert_int_equal(tr_gguf_writer_add_tensor(w, "wrap", TR_TYPE_F32, 2, wrap, NULL, NULL), TR_ERR_RANGE);
    assert_non_null(strstr(tr_last_error(), "wrap"));
    /* Q8_0: 2^62 elements / 32 per block x 34 bytes: 2^57 x 34 overflows, before any other dimension */
    const int64_t q8[] = {INT64_C(1) << 62, 1, 1, 4};
    assert_int_equal(tr_gguf_writer_add_tensor(w, "q8", TR_TYPE_Q8_0, 4, q8, NULL, NULL), TR_ERR_RANGE);
    /* each tensor fits (2^62 bytes) but their data offsets add past 2^64: the write fails, leaving no file */
    const int64_t big[] = {INT64_C(1) << 60};
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "b%d", i);
        assert_int_equal(tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 1, big, NULL, NULL), TR_OK);
    }
    char *path = dup_temp(".gguf"), *tmp = tmp_name(path);
    fill_log log = {.fail_at = -1};
    assert_int_equal(tr_gguf_writer_write(w, path, fill, &log), TR_ERR_RANGE);
    assert_int_equal(log.calls, 0); /* refused before producing any data */
    assert_false(file_exists(path));
    assert_false(file_exists(tmp));
    /* an array whose byte size wraps (2^62 + 1 int32 values: 4 bytes after wrapping) */
    const int32_t four[1] = {7};
    assert_int_equal(tr_gguf_writer_set_arr_i32(w, "arr", four, (UINT64_C(1) << 62) + 1), TR_ERR_RANGE);
    const char *strs[1] = {"x"};
    assert_int_equal(tr_gguf_writer_set_arr_str(w, "strs", strs, UINT64_MAX / 2), TR_ERR_RANGE);
    tr_gguf_writer_free(w);
    free(path);
    free(tmp);
}

/* Many keys and tensors: re-setting a key replaces it in place and a repeated tensor name is refused, also after
 * tens of thousands of entries (the writer indexes names instead of scanning them). */
static void many_names_stay_unique(void **state) {
    (void)state;
    enum { N = 20000 };
    tr_gguf_writer *w = NULL;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    char name[32];
    const int64_t one[] = {1};
    const float zero = 0.0f;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "k.%d", i);
        assert_int_equal(tr_gguf_writer_set_u32(w, name, (uint32_t)i), TR_OK);
        snprintf(name, sizeof name, "t.%d", i);
        assert_int_equal(tr_gguf_writer_add_tensor(w, name, TR_TYPE_F32, 1, one, &zero, NULL), TR_OK);
    }
    assert_int_equal(tr_gguf_writer_set_str(w, "k.17", "replaced"), TR_OK);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "t.19999", TR_TYPE_F32, 1, one, &zero, NULL), TR_ERR_ARG);
    assert_int_equal(tr_gguf_writer_add_tensor(w, "t.0", TR_TYPE_F32, 1, one, &zero, NULL), TR_ERR_ARG);
    char *path = dup_temp(".gguf");
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    tr_gguf *g = NULL;
    assert_int_equal(tr_gguf_open(path, &g), TR_OK);
    assert_int_equal(tr_gguf_n_kv(g), N);
    assert_int_equal(tr_gguf_n_tensors(g), N);
    assert_int_equal(tr_gguf_find_kv(g, "k.17"), 17);
    assert_string_equal(tr_gguf_get_str(g, "k.17", NULL), "replaced");
    int64_t v = -1;
    assert_true(tr_gguf_get_int(g, "k.18", &v));
    assert_int_equal(v, 18);
    assert_int_equal(tr_gguf_find_tensor(g, "t.12345"), 12345);
    tr_gguf_close(g);
    unlink(path);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_public_setters),
        cmocka_unit_test(every_value_type_reads),
        cmocka_unit_test(copy_kv_reproduces_every_type_bytewise),
        cmocka_unit_test(copy_kv_and_tensors_reproduce_a_model),
        cmocka_unit_test(copy_kv_keeps_strings_with_nul),
        cmocka_unit_test(fill_callback_produces_data),
        cmocka_unit_test(failed_fill_leaves_no_file),
        cmocka_unit_test(unwritable_path_fails),
        cmocka_unit_test(bad_arguments_are_rejected),
        cmocka_unit_test(size_overflow_is_rejected),
        cmocka_unit_test(many_names_stay_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
