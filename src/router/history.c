/* history.c — summaries of a sequence's prefix that a router may read (issue 32): what the SLM's statistics have
 * been at the positions before the one scored, in a few numbers.
 *
 * A history is folded one position at a time (history_push, in position order from the sequence's start) and read
 * before the next position (history_features). Its parts:
 *   HISTORY_STATS     exponential moving averages of maxprob, entropy and margin at decays 0.5, 0.8 and 0.95
 *                     (stat-major), the smallest maxprob of the last HISTORY_WINDOW positions, and ln(1 + n)
 *                     for n the positions since the SLM's maxprob was last below 0.5 (all of them when never);
 *   HISTORY_HIDDEN    an exponential moving average (decay 0.8) of the hidden state;
 *   HISTORY_SURPRISE  moving averages (decays 0.5, 0.8, 0.95) of ln p_SLM of the token read at each position.
 * An average starts at its first value (no bias towards 0); an empty history reads as zeros, as the context's
 * absent positions do. The trainer replays a row's prefix through the same functions the router runs at decode
 * time, so both compute the same floats in the same order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "router/router_internal.h"

static const float stat_decays[HISTORY_N_DECAYS] = {0.5f, 0.8f, 0.95f};
#define HIDDEN_DECAY 0.8f
#define LOW_MAXPROB 0.5f
#define SURPRISE_FLOOR (-30.0f)

int32_t history_width(unsigned parts, int32_t n_embd) {
    int32_t n = 0;
    if (parts & HISTORY_STATS) n += HISTORY_N_STATS * HISTORY_N_DECAYS + 2;
    if (parts & HISTORY_STATS_LONG) n += HISTORY_N_STATS + 2;
    if (parts & HISTORY_SIMILARITY) n += 2;
    if (parts & HISTORY_HIDDEN) n += n_embd;
    if (parts & HISTORY_SURPRISE) n += HISTORY_N_DECAYS;
    return n;
}

void history_reset(router_history *h) {
    h->n_seen = 0;
    h->since_low = 0;
}

static float ema(float old, float x, float decay, bool first) { return first ? x : decay * old + (1.0f - decay) * x; }

void history_push(router_history *h, unsigned parts, const float *stats, const float *hidden, int32_t n_embd,
                  float surprise) {
    const bool first = h->n_seen == 0;
    if (parts & (HISTORY_STATS | HISTORY_STATS_LONG)) {
        for (int s = 0; s < HISTORY_N_STATS; s++)
            for (int k = 0; k < HISTORY_N_DECAYS; k++)
                h->stat_ema[s][k] = ema(h->stat_ema[s][k], stats[s], stat_decays[k], first);
        h->recent_maxprob[h->n_seen % HISTORY_WINDOW] = stats[0];
        h->since_low = stats[0] < LOW_MAXPROB ? 0 : h->since_low + 1;
    }
    if ((parts & HISTORY_SIMILARITY) && n_embd <= HISTORY_MAX_EMBD)
        memcpy(h->last_hidden, hidden, (size_t)n_embd * sizeof(float));
    if ((parts & (HISTORY_HIDDEN | HISTORY_SIMILARITY)) && n_embd <= HISTORY_MAX_EMBD)
        for (int32_t j = 0; j < n_embd; j++) h->hidden_ema[j] = ema(h->hidden_ema[j], hidden[j], HIDDEN_DECAY, first);
    if (parts & HISTORY_SURPRISE) {
        const float s = surprise > SURPRISE_FLOOR ? surprise : SURPRISE_FLOOR;
        for (int k = 0; k < HISTORY_N_DECAYS; k++)
            h->surprise_ema[k] = ema(h->surprise_ema[k], s, stat_decays[k], first);
    }
    h->n_seen++;
}

static float cosine(const float *a, const float *b, int32_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int32_t j = 0; j < n; j++) {
        ab += (double)a[j] * b[j];
        aa += (double)a[j] * a[j];
        bb += (double)b[j] * b[j];
    }
    return aa > 0 && bb > 0 ? (float)(ab / sqrt(aa * bb)) : 0.0f;
}

float *history_features(const router_history *h, unsigned parts, int32_t n_embd, float *o) {
    const int32_t width = history_width(parts, n_embd);
    if (h->n_seen == 0) {
        memset(o, 0, (size_t)width * sizeof(float));
        return o + width;
    }
    if (parts & HISTORY_STATS) {
        for (int s = 0; s < HISTORY_N_STATS; s++)
            for (int k = 0; k < HISTORY_N_DECAYS; k++) *o++ = h->stat_ema[s][k];
        const int32_t n = h->n_seen < HISTORY_WINDOW ? h->n_seen : HISTORY_WINDOW;
        float lo = h->recent_maxprob[0];
        for (int32_t j = 1; j < n; j++) lo = h->recent_maxprob[j] < lo ? h->recent_maxprob[j] : lo;
        *o++ = lo;
        *o++ = logf(1.0f + (float)h->since_low);
    }
    if (parts & HISTORY_STATS_LONG) {
        for (int s = 0; s < HISTORY_N_STATS; s++) *o++ = h->stat_ema[s][HISTORY_N_DECAYS - 1];
        const int32_t n = h->n_seen < HISTORY_WINDOW ? h->n_seen : HISTORY_WINDOW;
        float lo = h->recent_maxprob[0];
        for (int32_t j = 1; j < n; j++) lo = h->recent_maxprob[j] < lo ? h->recent_maxprob[j] : lo;
        *o++ = lo;
        *o++ = logf(1.0f + (float)h->since_low);
    }
    if (parts & HISTORY_HIDDEN) {
        memcpy(o, h->hidden_ema, (size_t)n_embd * sizeof(float));
        o += n_embd;
    }
    if (parts & HISTORY_SURPRISE)
        for (int k = 0; k < HISTORY_N_DECAYS; k++) *o++ = h->surprise_ema[k];
    if (parts & HISTORY_SIMILARITY) {
        *o++ = cosine(h->now_hidden, h->last_hidden, n_embd);
        *o++ = cosine(h->now_hidden, h->hidden_ema, n_embd);
    }
    return o;
}

unsigned history_screen_parts(void) {
    const char *env = getenv("TOKROUTE_HISTORY");
    return env ? (unsigned)strtoul(env, NULL, 0) & (HISTORY_STATS | HISTORY_HIDDEN | HISTORY_SURPRISE | HISTORY_STATS_LONG | HISTORY_SIMILARITY) : 0u;
}
