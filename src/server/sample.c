/* sample.c — the server's token choice, made by the library's sampler (tr_sampler, src/model/sampler.c: heap top-k,
 * blockwise top-p, nothing sorts the whole vocabulary) on the worker thread with the scheduler's mutex released.
 * Greedy by default (tr_argmax: the lowest id among equal maxima). With a temperature the generator restarts at
 * every position from splitmix64 of (seed, position), as the routed loop and the embedded backend seed theirs
 * (src/route/route.c, src/transport/embedded.c): a client that resends a position after a rollback or a 409 gets
 * the same token, and the server draws what the embedded backend draws with the same settings.
 *
 * logit_bias (OpenAI's {id: bias}) is added to a copy of the row before the choice. Log-probabilities are those of
 * the model's own distribution over ids < n_vocab (untempered, without the bias), as vLLM reports raw ones.
 * A sampler is kept per recently used setting (temperature, top_k, top_p), each with its candidate buffer (12 bytes
 * per vocabulary entry), so a pass mixing clients' settings does not rebuild them. */
#include <stdlib.h>
#include <string.h>

#include "model/sample_math.h"
#include "server/server_internal.h"

#define SAMPLER_SLOTS 4

struct token_sampler {
    struct {
        tr_sampler *s; /* NULL: free */
        float temperature, top_p;
        int32_t top_k;
        uint64_t used;
    } slot[SAMPLER_SLOTS];
    uint64_t clock;
    float *row; /* the biased copy of a row */
    int32_t row_cap;
};

token_sampler *token_sampler_create(void) { return calloc(1, sizeof(token_sampler)); }

void token_sampler_free(token_sampler *ts) {
    if (!ts) return;
    for (int i = 0; i < SAMPLER_SLOTS; i++) tr_sampler_free(ts->slot[i].s);
    free(ts->row);
    free(ts);
}

/* The sampler for s's setting, made in the least recently used slot when none has it (NULL: out of memory). */
static tr_sampler *sampler_for(token_sampler *ts, const sampling *s) {
    int lru = 0;
    ts->clock++;
    for (int i = 0; i < SAMPLER_SLOTS; i++) {
        if (ts->slot[i].s && ts->slot[i].temperature == s->temperature && ts->slot[i].top_k == s->top_k &&
            ts->slot[i].top_p == s->top_p) {
            ts->slot[i].used = ts->clock;
            return ts->slot[i].s;
        }
        if (ts->slot[i].used < ts->slot[lru].used) lru = i;
    }
    tr_sampler_free(ts->slot[lru].s);
    ts->slot[lru].s = NULL;
    const tr_sampler_params p = {.temperature = s->temperature, .top_k = s->top_k, .top_p = s->top_p, .seed = 1};
    if (tr_sampler_create(&p, &ts->slot[lru].s) != TR_OK) return NULL;
    ts->slot[lru].temperature = s->temperature;
    ts->slot[lru].top_k = s->top_k;
    ts->slot[lru].top_p = s->top_p;
    ts->slot[lru].used = ts->clock;
    return ts->slot[lru].s;
}

/* logits with s's bias added (ids >= n_vocab are never chosen and skipped), or logits itself without a bias. */
static const float *biased_row(token_sampler *ts, const float *logits, int32_t n_vocab, const sampling *s) {
    if (s->n_bias == 0) return logits;
    if (ts->row_cap < n_vocab) {
        float *row = realloc(ts->row, (size_t)n_vocab * sizeof *row);
        if (!row) return NULL;
        ts->row = row;
        ts->row_cap = n_vocab;
    }
    memcpy(ts->row, logits, (size_t)n_vocab * sizeof *ts->row);
    for (int32_t i = 0; i < s->n_bias; i++)
        if (s->bias[i].id >= 0 && s->bias[i].id < n_vocab) ts->row[s->bias[i].id] += s->bias[i].bias;
    return ts->row;
}

int32_t sample_token(token_sampler *ts, const float *logits, int32_t n_vocab, const sampling *s, int32_t position,
                     float *logprob, top_entry *top, int32_t n_top) {
    const float *row = biased_row(ts, logits, n_vocab, s);
    if (!row) row = logits; /* out of memory for the copy: the model's own choice */
    int32_t chosen = -1;
    if (s->temperature > 0) {
        tr_sampler *smp = sampler_for(ts, s);
        if (smp) {
            tr_sampler_reseed(smp, position_seed(s->seed, position));
            chosen = tr_sampler_sample(smp, row, n_vocab);
        }
    }
    if (chosen < 0) chosen = tr_argmax(row, n_vocab); /* greedy, or no memory to sample with */
    if (!logprob && n_top <= 0) return chosen;
    const double lse = log_sum_exp(logits, n_vocab);
    if (logprob) *logprob = (float)((double)logits[chosen] - lse);
    if (n_top > 0) {
        const int32_t n = top_logits(logits, n_vocab, n_top < TOP_LOGPROBS_MAX ? n_top : TOP_LOGPROBS_MAX, top);
        for (int32_t i = 0; i < n; i++) top[i].logprob = (float)((double)logits[top[i].id] - lse);
    }
    return chosen;
}
