/* llamacpp_stream.h — llama.cpp's streamed /completion reply (server-sent events) as the --llamacpp backend reads it
 * for lookahead: the request asks for 1 + K greedy tokens with "stream": true, the first token is the answer (handed
 * on with tr_llm_call_answered), the next ones are lookahead (tr_llm_call_push_lookahead). Each event carries one
 * token and its 1-based position ("tokens_predicted"); llama.cpp holds back a token that ends inside a UTF-8
 * character and sends the next one alone, so a position that skips ahead ends the lookahead there (and if the answer
 * itself was held back, the stream has no answer: no_answer, and the caller asks again without streaming).
 * Everything read is bounds-checked; a malformed event ends the lookahead, never fails an answered call. Fuzzed by
 * tests/fuzz/fuzz_llamacpp_stream.c. */
#ifndef TR_LLAMACPP_STREAM_H
#define TR_LLAMACPP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

typedef struct llamacpp_stream {
    tr_llm_call *call;
    bool answered;       /* the answer came and was handed on */
    bool no_answer;      /* the stream cannot give the answer (held back, malformed or an error event first) */
    bool wanted;         /* the caller still takes lookahead tokens */
    bool done;           /* the final event came */
    bool broken;         /* an event that does not belong after the answer: the lookahead ended */
    int32_t position;    /* the last token's position (1: the answer) */
    int32_t n_lookahead; /* lookahead tokens received */
} llamacpp_stream;

/* One line of the event stream (an http_line_fn; user is the llamacpp_stream). Returns whether to read on. */
bool llamacpp_stream_line(void *user, const char *line, size_t len);
/* Whether the caller still wants the rest (an http_wanted_fn). */
bool llamacpp_stream_wanted(void *user);

#endif /* TR_LLAMACPP_STREAM_H */
