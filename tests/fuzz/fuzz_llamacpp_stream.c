/* fuzz_llamacpp_stream.c — libFuzzer target: arbitrary bytes as llama.cpp's streamed /completion reply to the
 * --llamacpp backend. Byte 0 picks the lookahead asked for (its low 5 bits, up to TR_LOOKAHEAD_MAX); the rest is
 * split at line breaks and fed to llamacpp_stream_line as the HTTP client feeds it. It may not read out of bounds,
 * and what it accepts must keep the client's invariants: no more lookahead than asked, positions in order, an
 * answer only from position 1, never both an answer and no_answer. Any crash, sanitizer report or broken invariant
 * is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "fuzz_lines.h"
#include "transport/llamacpp_stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int32_t lookahead = (data[0] & 31) % (TR_LOOKAHEAD_MAX + 1);
    const int32_t tokens[3] = {1, 2, 3};
    int32_t la_ids[TR_LOOKAHEAD_MAX];
    tr_llm_call call = {.tokens = tokens, .n_tokens = 3, .lookahead = lookahead, .lookahead_ids = la_ids, .id = -1};
    llamacpp_stream s = {.call = &call};
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    feed_lines(body, len, llamacpp_stream_line, llamacpp_stream_wanted, &s);
    if (s.n_lookahead < 0 || s.n_lookahead > lookahead) abort();
    if (s.answered && (s.no_answer || call.id < 0 || s.position != 1 + s.n_lookahead)) abort();
    if (!s.answered && (s.n_lookahead != 0 || call.id != -1)) abort();
    tr_clear_error();
    return 0;
}
