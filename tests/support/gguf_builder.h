/* gguf_builder.h — hand-assembles GGUF bytes for tests (little-endian, no validation), so a test can state a
 * hostile file field by field: "GGUF", u32 version, u64 n_tensors, u64 n_kv, key/values, tensor infos, padding,
 * data. Also small helpers to write a buffer to a file and to rewrite a model through the public GGUF writer. */
#ifndef TR_TEST_GGUF_BUILDER_H
#define TR_TEST_GGUF_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

typedef struct gbuf {
    uint8_t *data;
    size_t len, cap;
} gbuf;

void gb_free(gbuf *b);
void gb_bytes(gbuf *b, const void *p, size_t n);
void gb_u8(gbuf *b, uint8_t v);
void gb_u32(gbuf *b, uint32_t v);
void gb_u64(gbuf *b, uint64_t v);
void gb_f32(gbuf *b, float v);
/* GGUF string: u64 length + bytes (no NUL). */
void gb_str(gbuf *b, const char *s);
/* Header: magic "GGUF", version, n_tensors, n_kv. */
void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* Key + type tag; the caller appends the value. */
void gb_key(gbuf *b, const char *key, uint32_t type);
void gb_kv_u32(gbuf *b, const char *key, uint32_t v);
void gb_kv_str(gbuf *b, const char *key, const char *v);
/* Tensor info: name, n_dims, ne[0..n_dims), type, offset. */
void gb_tensor_info(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset);
/* Zero bytes up to a multiple of align. */
void gb_pad(gbuf *b, size_t align);
void gb_zeros(gbuf *b, size_t n);
/* Patches a little-endian u32 / u64 at byte offset pos. */
void gb_patch_u32(gbuf *b, size_t pos, uint32_t v);
void gb_patch_u64(gbuf *b, size_t pos, uint64_t v);

/* Writes n bytes to path; false on failure. */
bool write_bytes_file(const char *path, const void *data, size_t n);
bool file_exists(const char *path);

/* Rewrites the GGUF src into path through tr_gguf_writer. Hooks (each optional):
 *  skip_kv(key) → true drops that key; after the copy, extra(w) may add/override keys;
 *  tensors are copied with their data unless skip_tensor(name) is true. */
typedef struct rewrite_hooks {
    bool (*skip_kv)(const char *key, void *user);
    bool (*skip_tensor)(const char *name, void *user);
    tr_status (*extra)(tr_gguf_writer *w, void *user);
    void *user;
} rewrite_hooks;
tr_status gguf_rewrite(const tr_gguf *src, const char *path, const rewrite_hooks *hooks);

#endif
