/* fuzz_lines.h — feeds a fuzz input to a streamed-reply reader as the HTTP client does (src/transport/http.c): split
 * at line breaks, one line per call, the wanted callback polled between lines, until the reader asks to stop. */
#ifndef TR_FUZZ_LINES_H
#define TR_FUZZ_LINES_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static inline void feed_lines(const char *body, size_t len, bool (*on_line)(void *, const char *, size_t),
                              bool (*wanted)(void *), void *user) {
    for (size_t at = 0; at <= len;) {
        const char *nl = memchr(body + at, '\n', len - at);
        const size_t n = nl ? (size_t)(nl - (body + at)) : len - at;
        const bool more = on_line(user, body + at, n);
        (void)wanted(user);
        if (!more || !nl) break;
        at += n + 1;
    }
}

#endif /* TR_FUZZ_LINES_H */
