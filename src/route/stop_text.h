/* stop_text.h — streaming text with stop strings: text is appended piece by piece and released only when no stop
 * string could still begin inside it; a completed stop string ends the stream, and the text before it is
 * released. */
#ifndef TR_STOP_TEXT_H
#define TR_STOP_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "tokroute.h"

typedef struct stop_text {
    const char *const *stop;
    int32_t n_stop;
    char *pending;      /* held back, not yet released */
    size_t len, cap;
    char *out;          /* released by the last call, NUL-terminated */
    size_t out_len, out_cap;
    bool stopped;
} stop_text;

void stop_text_init(stop_text *s, const char *const *stop, int32_t n_stop);
void stop_text_free(stop_text *s);
/* Appends a piece; s->out/out_len get what may be shown now. Returns false on allocation failure. */
bool stop_text_push(stop_text *s, const char *piece, size_t len);
/* Releases everything held back (end of generation). */
bool stop_text_flush(stop_text *s);

#endif
