/* stop_text.c — holds back the tail of the generated text that could be the start of a stop string, so a stop
 * string never reaches the user, not even in part. */
#include "route/stop_text.h"

#include <stdlib.h>
#include <string.h>

void stop_text_init(stop_text *s, const char *const *stop, int32_t n_stop) {
    memset(s, 0, sizeof *s);
    s->stop = stop;
    s->n_stop = stop ? n_stop : 0;
}

void stop_text_free(stop_text *s) {
    free(s->pending);
    free(s->out);
    memset(s, 0, sizeof *s);
}

static bool grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *p = realloc(*buf, c);
    if (!p) return false;
    *buf = p;
    *cap = c;
    return true;
}

/* Moves the first n pending bytes to out. */
static bool release(stop_text *s, size_t n) {
    if (!grow(&s->out, &s->out_cap, n + 1)) return false;
    memcpy(s->out, s->pending, n);
    s->out[n] = '\0';
    s->out_len = n;
    memmove(s->pending, s->pending + n, s->len - n);
    s->len -= n;
    return true;
}

/* Length of the longest suffix of pending that is a proper prefix of some stop string. */
static size_t held_suffix(const stop_text *s) {
    size_t best = 0;
    for (int32_t i = 0; i < s->n_stop; i++) {
        const size_t sl = strlen(s->stop[i]);
        for (size_t k = sl > 0 ? sl - 1 : 0; k > best; k--)
            if (k <= s->len && memcmp(s->pending + s->len - k, s->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

bool stop_text_push(stop_text *s, const char *piece, size_t len) {
    s->out_len = 0;
    if (s->stopped) return release(s, 0);
    if (!grow(&s->pending, &s->cap, s->len + len + 1)) return false;
    memcpy(s->pending + s->len, piece, len);
    s->len += len;
    s->pending[s->len] = '\0';
    /* The earliest complete stop string wins. */
    size_t cut = s->len + 1;
    for (int32_t i = 0; i < s->n_stop; i++) {
        if (!s->stop[i][0]) continue;
        const char *hit = memmem(s->pending, s->len, s->stop[i], strlen(s->stop[i]));
        if (hit && (size_t)(hit - s->pending) < cut) cut = (size_t)(hit - s->pending);
    }
    if (cut <= s->len) {
        s->stopped = true;
        bool ok = release(s, cut);
        s->len = 0;
        return ok;
    }
    return release(s, s->len - held_suffix(s));
}

bool stop_text_flush(stop_text *s) {
    s->out_len = 0;
    return release(s, s->stopped ? 0 : s->len);
}
