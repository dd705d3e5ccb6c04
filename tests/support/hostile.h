/* hostile.h — hostile model files for the load tests: a well-formed file rewritten with one change (a key or tensor
 * dropped, keys set), which must fail to load with a given status and message. */
#ifndef TR_TEST_HOSTILE_H
#define TR_TEST_HOSTILE_H

#include <stdbool.h>

#include "tokroute.h"

/* One change to a base file: a key or tensor dropped, and/or keys set by `extra`. */
typedef struct hostile_change {
    const char *drop_key, *drop_tensor;
    tr_status (*extra)(tr_gguf_writer *w, void *user);
} hostile_change;

/* The base file with the change, as a fresh temporary file (its path, valid until the next call). */
const char *hostile_rewrite(const char *base, const hostile_change *c);
/* Loads path (no vocabulary); the model or NULL, its status in *st. */
tr_model *hostile_load(const char *path, tr_status *st);
/* The changed file must fail to load with `status` and a message containing `needle` and the file's path. */
void hostile_expect_fail(const char *base, const hostile_change *c, tr_status status, const char *needle);

#endif
