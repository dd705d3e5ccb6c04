/* fixtures.h — helpers for tests: paths into ../shared, whole-file reads, JSON fixtures, error metrics, waiting for
 * a streamed lookahead. */
#ifndef TR_TEST_FIXTURES_H
#define TR_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

/* "<shared>/<rel>" in a static buffer (valid until the next call). */
const char *shared_path(const char *rel);
/* Reads a whole file (NUL-terminated for convenience); NULL when it cannot be read. */
char *read_file(const char *path, size_t *size);
/* Reads the int array `key` of a JSON file into a malloc'ed buffer; returns the count or -1. */
int32_t json_int_array(const char *json_text, const char *key, int32_t **out);
/* sqrt(mean((a-b)^2) / mean(b^2)). */
double rel_rms(const float *a, const float *b, size_t n);
/* A fresh temporary file path (the file is not created). */
const char *temp_path(const char *suffix);
/* The whole lookahead stream of the last finished request, once complete (its statistics are then final): the
 * count, or -1 when it is still incomplete after 10 s. */
int32_t lookahead_when_complete(tr_llm_backend *llm, int32_t *ids);

#endif
