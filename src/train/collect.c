/* collect.c — tr_collect: runs each example's reference tokens through both models and stores, per predicted
 * position, what a router may read (the SLM's final hidden state and logit features) and both models' answers.
 * The LLM is any backend (tr_llm_backend: embedded, tokroute serve, vLLM, SGLang, llama.cpp): its answers come from
 * tr_llm_score — per position the top llm_topk ids with their log-probabilities and the reference's — so this file
 * never knows where the LLM runs. The LLM's probability of the SLM's top-1 is read from that list (0 when the token
 * is not among the LLM's top llm_topk).
 *
 * Round 1 is teacher forced: the SLM evaluates the whole example in one batched call that keeps every position's
 * logits and hidden states, and the LLM scores it in one call (one request where the engine allows) on a helper
 * thread meanwhile, so the SLM's work overlaps the LLM's (its round trip, or its compute on another core). Where both models'
 * top-1 miss the reference and rollouts are asked for, a second SLM context holding the reference prefix continues
 * K tokens greedily after each model's token (then truncates back), and the matches with the reference are stored.
 *
 * Round 2 (a router given): each example keeps its first prompt_tokens tokens; after them the routed system
 * generates — the SLM proposes, the router scores, a score below tau takes the LLM's greedy token — for as many
 * positions as the example has (the LLM scores each new position: incremental on backends that keep a cache), and the reference at each position is the LLM's greedy token (the generated
 * prefix has no ground truth). Positions are stored from the first generated one on.
 *
 * Output and resume: see train_internal.h. An example's records and tokens (tokens.bin: BOS, the prompt and the
 * recorded part, what the induction feature reads) are appended and flushed, then its index entry; a resumed
 * collect checks the header (same models, data file, range and settings) and continues after the last entry.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "eval/dataset.h"
#include "model/sample_math.h"
#include "router/router_internal.h"
#include "train/train_internal.h"

tr_collect_params tr_collect_default_params(void) {
    tr_collect_params p;
    memset(&p, 0, sizeof p);
    p.format = TR_DATA_TEXT;
    p.first = 0;
    p.last = -1;
    p.max_tokens = 256;
    p.topk = 16;
    p.seed = 1;
    p.resume = true;
    p.tau = 0.5f;
    p.prompt_tokens = 16;
    p.llm_topk = 20;
    return p;
}

/* One example in flight: its reference tokens and the LLM's answers, scored on a helper thread. Two of them let the
 * LLM score the next example while this one's records are made and the next one's SLM pass runs. */
typedef struct collector collector;
typedef struct example_slot {
    collector *owner;
    int32_t *tokens;             /* [max_tokens] the example's reference */
    int32_t n_tokens;
    int32_t n_prompt;            /* positions before it are prompt, not predicted (at least 1: BOS) */
    tr_llm_position *llm_pos;    /* [max_tokens + 1] the LLM's answers per position */
    pthread_t thread;
    bool scoring, threaded;      /* a score was started (on a thread) and not yet finished */
    tr_status st;                /* loading or scoring it; its message in error (thread-local messages) */
    char error[512];
} example_slot;

struct collector {
    const tr_model *slm;
    tr_llm_backend *llm;
    const tr_vocab *vocab;
    tr_collect_params p;
    int32_t n_embd, n_vocab, n_shared;
    uint32_t record_bytes;
    tr_context *slm_ctx, *roll_ctx;
    dataset *examples;           /* the examples of a data file (first..last) */
    example_slot slots[2];
    example_slot *ex;            /* the example being recorded (one of slots) */
    int32_t *cont;               /* [rollouts] */
    unsigned char *buf;          /* one example's records */
    float *feat_row;             /* [COLLECT_N_STATS + topk] */
    FILE *data, *index, *tokens;
    int32_t n_seq;               /* tokens of c->ex to store in tokens.bin: BOS, prompt and the recorded part */
    uint64_t data_end;           /* bytes of positions.bin in use */
    tr_collect_stats stats;
};

static float prob_of(const float *l, double lse, int32_t id) {
    const double p = exp((double)l[id] - lse);
    return p > 1.0 ? 1.0f : (float)p;
}

/* ---------------------------------------------------------------- examples */

/* Continues e->tokens with draws from the LLM at temperature 1 (no top-k/top-p) with seed (seed, i), each
 * position's draw depending only on (that seed, position), up to max_tokens or the end of the text, then makes the
 * backend greedy again: llm-sample's examples from BOS, text-continue's from a story's first half. */
static tr_status sample_continuation(collector *c, example_slot *e, int32_t example) {
    const int32_t bos = tr_vocab_bos(c->vocab);
    tr_sampler_params sp = tr_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.seed = c->p.seed * 0x9E3779B97F4A7C15ull + (uint64_t)example;
    tr_status st = tr_llm_backend_set_sampling(c->llm, &sp);
    while (st == TR_OK && e->n_tokens < c->p.max_tokens) {
        int32_t id = -1;
        st = tr_llm_next_token(c->llm, e->tokens, e->n_tokens, &id);
        if (st != TR_OK || id < 0 || id == bos || tr_vocab_is_eog(c->vocab, id)) break;
        e->tokens[e->n_tokens++] = id;
    }
    const tr_sampler_params greedy = tr_sampler_default_params();
    const tr_status st2 = tr_llm_backend_set_sampling(c->llm, &greedy);
    return st != TR_OK ? st : st2;
}

static tr_status sample_example(collector *c, example_slot *e, int32_t example) {
    const int32_t bos = tr_vocab_bos(c->vocab);
    e->tokens[0] = bos >= 0 ? bos : 1;
    e->n_tokens = 1;
    return sample_continuation(c, e, example);
}

static const dataset_format dataset_formats[] = {
    [TR_DATA_TEXT] = DATASET_TEXT, [TR_DATA_CSQA] = DATASET_CSQA, [TR_DATA_GSM8K] = DATASET_GSM8K,
    [TR_DATA_ARC] = DATASET_ARC,   [TR_DATA_MMLU] = DATASET_MMLU, [TR_DATA_TEXT_CONTINUE] = DATASET_TEXT,
};

/* The example's reference tokens: the dataset module's prompt + target (BOS + story for text), cut to
 * max_tokens; only target positions are predicted. */
static tr_status load_example(collector *c, example_slot *e, int32_t example) {
    e->n_prompt = 1;
    if (c->p.format == TR_DATA_LLM_SAMPLE) return sample_example(c, e, example);
    const dataset_example *ex = dataset_get(c->examples, example - c->p.first);
    if (!ex) return tr_fail(TR_ERR_RANGE, "example %d is not in the data", (int)example);
    dataset_tokens t;
    tr_status st = dataset_tokenize(ex, dataset_formats[c->p.format], c->vocab, c->p.chat_template, 0, &t);
    if (st != TR_OK) return st;
    e->n_tokens = t.n_ids < c->p.max_tokens ? t.n_ids : c->p.max_tokens;
    memcpy(e->tokens, t.ids, (size_t)e->n_tokens * sizeof(int32_t));
    e->n_prompt = t.n_prompt > 1 ? t.n_prompt : 1;
    dataset_tokens_free(&t);
    if (c->p.format == TR_DATA_TEXT_CONTINUE) { /* BOS and the story's first half, then the LLM's continuation */
        e->n_tokens = e->n_prompt = (e->n_tokens + 1) / 2;
        return sample_continuation(c, e, example);
    }
    return TR_OK;
}

/* ---------------------------------------------------------------- one position */

/* Continues greedily with the SLM after prefix tokens[0..t] + choice and counts matches with tokens[t+2 ...]. */
static tr_status rollout(collector *c, int32_t t, int32_t choice, int32_t *matches) {
    tr_context *r = c->roll_ctx;
    const int32_t need = t + 1;
    if (tr_context_n_past(r) > need) tr_context_truncate(r, need);
    tr_status st = TR_OK;
    if (tr_context_n_past(r) < need)
        st = tr_context_eval(r, c->ex->tokens + tr_context_n_past(r), need - tr_context_n_past(r), TR_EVAL_LOGITS_NONE);
    const int32_t k = c->p.rollouts, avail = c->ex->n_tokens - (t + 2);
    const int32_t n = k < avail ? k : avail;
    /* n <= n_tokens - t - 2, so the cache (max_tokens positions) always holds the continuation. */
    int32_t next = choice, done = 0;
    for (; st == TR_OK && done < n; done++) {
        st = tr_context_eval(r, &next, 1, TR_EVAL_LOGITS_LAST);
        if (st == TR_OK) next = c->cont[done] = tr_argmax(tr_context_logits(r, -1), c->n_vocab);
    }
    if (st == TR_OK) *matches = rollout_matches(c->cont, c->ex->tokens + t + 2, done);
    tr_context_truncate(r, need);
    return st;
}

/* The LLM's probability of id from its top list (0 when id is not listed). */
static float listed_prob(const tr_llm_position *lp, int32_t id) {
    for (int32_t i = 0; i < lp->n_top; i++)
        if (lp->top_ids[i] == id) return (float)exp((double)lp->top_logprobs[i]);
    return 0.0f;
}

/* Fills record bytes for the prediction of `truth` from SLM row (logits, hidden) and the LLM's answer there. */
static tr_status make_record(collector *c, int32_t example, int32_t position, int32_t truth, const float *slm_logits,
                             const float *hidden, const tr_llm_position *lp, unsigned char *out, bool reference_fixed) {
    collect_record rec;
    memset(&rec, 0, sizeof rec);
    rec.example = (uint32_t)example;
    rec.position = (uint32_t)position;
    rec.slm_top1 = tr_argmax(slm_logits, c->n_vocab);
    rec.llm_top1 = lp->top_ids[0];
    rec.truth = reference_fixed ? truth : rec.llm_top1;
    const double slse = log_sum_exp(slm_logits, c->n_vocab);
    rec.slm_p_top1 = prob_of(slm_logits, slse, rec.slm_top1);
    rec.slm_p_truth = rec.truth < c->n_vocab ? prob_of(slm_logits, slse, rec.truth) : 0.0f;
    rec.llm_p_top1 = (float)exp((double)lp->top_logprobs[0]);
    rec.llm_p_truth = reference_fixed ? (float)exp((double)lp->logprob) : rec.llm_p_top1;
    rec.llm_p_slm_top1 = listed_prob(lp, rec.slm_top1);
    rec.slm_p_llm_top1 = rec.llm_top1 < c->n_vocab ? prob_of(slm_logits, slse, rec.llm_top1) : 0.0f;
    router_logit_features(ROUTER_FEATURE_ALL, c->p.topk, slm_logits, c->n_vocab, c->feat_row);
    memcpy(rec.stats, c->feat_row, sizeof rec.stats);
    rec.rollout_slm = rec.rollout_llm = -1;
    if (c->p.rollouts > 0 && reference_fixed && rec.slm_top1 != rec.truth && rec.llm_top1 != rec.truth) {
        tr_status st = rollout(c, position - 1, rec.slm_top1, &rec.rollout_slm);
        if (st == TR_OK) st = rollout(c, position - 1, rec.llm_top1, &rec.rollout_llm);
        if (st != TR_OK) return st;
    }
    c->stats.slm_correct += rec.slm_top1 == rec.truth;
    c->stats.llm_correct += rec.llm_top1 == rec.truth;
    collect_record_encode(&rec, c->feat_row + COLLECT_N_STATS, hidden, (uint32_t)c->p.topk, (uint32_t)c->n_embd, out);
    return TR_OK;
}

/* ---------------------------------------------------------------- one example */

/* The LLM's scoring of a slot's example, run on a helper thread (the backend is used by that thread alone until it
 * is joined); the error message, thread-local, travels back in the slot. */
static void *score_main(void *arg) {
    example_slot *e = arg;
    const collector *c = e->owner;
    e->st = tr_llm_score(c->llm, e->tokens, e->n_tokens, e->n_prompt, e->n_tokens, c->p.llm_topk, e->llm_pos);
    if (e->st != TR_OK) snprintf(e->error, sizeof e->error, "%s", tr_last_error());
    return NULL;
}

static bool has_positions(const example_slot *e) { return e->n_tokens >= 2 && e->n_prompt < e->n_tokens; }

/* Loads example into slot e and starts the LLM's scoring of it on a helper thread (on this one if no thread can be
 * made; nothing when the example has nothing to predict). A failure is kept in the slot for its turn. */
static void start_example(collector *c, example_slot *e, int32_t example) {
    e->owner = c;
    e->scoring = false;
    e->st = load_example(c, e, example);
    if (e->st != TR_OK) {
        snprintf(e->error, sizeof e->error, "%s", tr_last_error());
        return;
    }
    if (!has_positions(e)) return;
    e->scoring = true;
    e->threaded = pthread_create(&e->thread, NULL, score_main, e) == 0;
    if (!e->threaded) score_main(e);
}

/* Waits for the slot's scoring; its status (with the message set again on this thread). */
static tr_status finish_example(example_slot *e) {
    if (e->scoring && e->threaded) pthread_join(e->thread, NULL);
    e->scoring = false;
    return e->st == TR_OK ? TR_OK : tr_fail(e->st, "%s", e->error);
}

/* Teacher forcing, c->ex loaded and its scoring started: the SLM's pass runs meanwhile; once the LLM has answered,
 * next (when given) is loaded and its scoring started, so the LLM works on it while this example's records are
 * made and the next SLM pass runs. */
static tr_status teacher_forced(collector *c, int32_t example, example_slot *next, int32_t next_example,
                                int32_t *n_records) {
    *n_records = 0;
    example_slot *e = c->ex;
    tr_status st = e->st;
    if (st == TR_OK && has_positions(e)) {
        tr_context_clear(c->slm_ctx);
        tr_context_clear(c->roll_ctx);
        st = tr_context_eval(c->slm_ctx, e->tokens, e->n_tokens, TR_EVAL_LOGITS_ALL);
    }
    const tr_status llm = finish_example(e);
    if (st == TR_OK) st = llm;
    if (next && st == TR_OK) start_example(c, next, next_example);
    c->n_seq = e->n_tokens;
    if (st != TR_OK || !has_positions(e)) return st;
    const int32_t first = e->n_prompt; /* the first predicted position */
    for (int32_t t = first - 1; st == TR_OK && t + 1 < e->n_tokens; t++) {
        st = make_record(c, example, t + 1, e->tokens[t + 1], tr_context_logits(c->slm_ctx, t),
                         tr_context_hidden(c->slm_ctx, t), &e->llm_pos[t + 1 - first],
                         c->buf + (size_t)*n_records * c->record_bytes, true);
        if (st == TR_OK) (*n_records)++;
    }
    return st;
}

static tr_status routed_round(collector *c, int32_t example, int32_t *n_records) {
    *n_records = 0;
    c->n_seq = 0;
    /* Question-answering examples keep their prompt; text keeps its first prompt_tokens tokens. */
    int32_t n_prompt = c->ex->n_prompt > 1 ? c->ex->n_prompt : c->p.prompt_tokens;
    if (n_prompt > c->ex->n_tokens) n_prompt = c->ex->n_tokens;
    if (n_prompt < 1 || c->ex->n_tokens < 2) return TR_OK;
    c->n_seq = n_prompt;
    tr_context_clear(c->slm_ctx);
    const int32_t context = tr_router_context(c->p.router);
    tr_status st = tr_context_eval(c->slm_ctx, c->ex->tokens, n_prompt, context > 0 ? TR_EVAL_LOGITS_ALL : TR_EVAL_LOGITS_LAST);
    /* A router with context reads the prompt's last positions, as generation shows them to it (route.c). */
    tr_router_reset(c->p.router);
    for (int32_t q = n_prompt - context > 1 ? n_prompt - context : 1; st == TR_OK && q < n_prompt; q++)
        st = tr_router_observe(c->p.router, q, tr_context_hidden(c->slm_ctx, q - 1), c->n_embd,
                               tr_context_logits(c->slm_ctx, q - 1), c->n_vocab);
    for (int32_t pos = n_prompt; st == TR_OK && pos < c->ex->n_tokens; pos++) {
        /* The LLM's answer at pos: the position after the sequence so far. */
        st = tr_llm_score(c->llm, c->ex->tokens, pos, pos, pos + 1, c->p.llm_topk, c->ex->llm_pos);
        if (st != TR_OK) break;
        const float *sl = tr_context_logits(c->slm_ctx, -1), *h = tr_context_hidden(c->slm_ctx, -1);
        unsigned char *out = c->buf + (size_t)*n_records * c->record_bytes;
        float score = 0;
        st = tr_router_tokens(c->p.router, c->ex->tokens, pos); /* the sequence so far: prompt, then routed */
        if (st == TR_OK) st = tr_router_score_at(c->p.router, pos, h, c->n_embd, sl, c->n_vocab, &score);
        if (st == TR_OK) st = make_record(c, example, pos, -1, sl, h, c->ex->llm_pos, out, false);
        if (st != TR_OK) break;
        (*n_records)++;
        const int32_t next = score < c->p.tau ? c->ex->llm_pos[0].top_ids[0] : tr_argmax(sl, c->n_vocab);
        if (tr_vocab_is_eog(c->vocab, next) || pos + 1 >= c->ex->n_tokens) break;
        c->ex->tokens[pos] = next;
        c->n_seq = pos + 1;
        st = tr_context_eval(c->slm_ctx, &next, 1, TR_EVAL_LOGITS_LAST);
    }
    return st;
}

/* The example's tokens (what the induction feature reads, its prompt included) into tokens.bin. */
static tr_status append_tokens(collector *c, int32_t example) {
    unsigned char head[8];
    const uint32_t u[2] = {(uint32_t)example, (uint32_t)c->n_seq};
    for (int k = 0; k < 8; k++) head[k] = (unsigned char)(u[k / 4] >> (8 * (k % 4)));
    bool ok = fwrite(head, 1, sizeof head, c->tokens) == sizeof head;
    for (int32_t q = 0; ok && q < c->n_seq; q++) {
        const uint32_t id = (uint32_t)c->ex->tokens[q];
        const unsigned char b[4] = {(unsigned char)id, (unsigned char)(id >> 8), (unsigned char)(id >> 16),
                                    (unsigned char)(id >> 24)};
        ok = fwrite(b, 1, 4, c->tokens) == 4;
    }
    if (!ok || fflush(c->tokens) != 0)
        return tr_fail(TR_ERR_IO, "cannot write " COLLECT_TOKENS_FILE ": %s", strerror(errno));
    return TR_OK;
}

static tr_status append_example(collector *c, int32_t example, int32_t n_records) {
    const size_t bytes = (size_t)n_records * c->record_bytes;
    if (fwrite(c->buf, 1, bytes, c->data) != bytes || fflush(c->data) != 0)
        return tr_fail(TR_ERR_IO, "cannot write " COLLECT_DATA_FILE ": %s", strerror(errno));
    const tr_status st = append_tokens(c, example); /* before the index entry that makes the example count */
    if (st != TR_OK) return st;
    unsigned char e[COLLECT_INDEX_ENTRY];
    const uint32_t u[2] = {(uint32_t)example, (uint32_t)n_records};
    for (int k = 0; k < 8; k++) e[k] = (unsigned char)(u[k / 4] >> (8 * (k % 4)));
    for (int k = 0; k < 8; k++) e[8 + k] = (unsigned char)(c->data_end >> (8 * k));
    if (fwrite(e, 1, sizeof e, c->index) != sizeof e || fflush(c->index) != 0)
        return tr_fail(TR_ERR_IO, "cannot write " COLLECT_INDEX_FILE ": %s", strerror(errno));
    c->data_end += bytes;
    c->stats.n_positions += n_records;
    c->stats.n_examples++;
    return TR_OK;
}

/* ---------------------------------------------------------------- output folder and resume */

static tr_status write_fresh(collector *c, const unsigned char *header, const char *data_path, const char *index_path,
                             const char *tokens_path) {
    c->data = fopen(data_path, "wb");
    c->index = fopen(index_path, "wb");
    c->tokens = fopen(tokens_path, "wb");
    if (!c->data || !c->index || !c->tokens) return tr_fail(TR_ERR_IO, "cannot create %s: %s", data_path, strerror(errno));
    if (fwrite(header, 1, COLLECT_HEADER_BYTES, c->data) != COLLECT_HEADER_BYTES || fflush(c->data) != 0 ||
        fwrite(COLLECT_INDEX_MAGIC, 1, 8, c->index) != 8 || fflush(c->index) != 0 ||
        fwrite(COLLECT_TOKENS_MAGIC, 1, 8, c->tokens) != 8 || fflush(c->tokens) != 0)
        return tr_fail(TR_ERR_IO, "cannot write %s: %s", data_path, strerror(errno));
    c->data_end = COLLECT_HEADER_BYTES;
    return TR_OK;
}

/* Names the first setting in which a folder's header (old) and this run's (mine) differ, both values given. */
static void header_difference(const collect_header *old, const collect_header *mine, char *out, size_t cap) {
#define DIFFER_U(field, what)                                                                                        \
    if (old->field != mine->field) {                                                                                 \
        snprintf(out, cap, "%s: %lld there, %lld here", what, (long long)old->field, (long long)mine->field);      \
        return;                                                                                                      \
    }
    if (strncmp(old->llm_name, mine->llm_name, sizeof old->llm_name) != 0) {
        snprintf(out, cap, "the LLM: '%.64s' there, '%.64s' here (another backend or model)", old->llm_name,
                 mine->llm_name);
        return;
    }
    if (strncmp(old->slm_name, mine->slm_name, sizeof old->slm_name) != 0) {
        snprintf(out, cap, "the SLM: '%.64s' there, '%.64s' here", old->slm_name, mine->slm_name);
        return;
    }
    if (old->format != mine->format) {
        snprintf(out, cap, "the data format: %s there, %s here", tr_data_format_name((tr_data_format)old->format),
                 tr_data_format_name((tr_data_format)mine->format));
        return;
    }
    DIFFER_U(data_hash, "the data file (its hash)")
    DIFFER_U(first, "the range's first example")
    DIFFER_U(round, "the round")
    DIFFER_U(max_tokens, "--max-tokens")
    DIFFER_U(topk, "the SLM's top-k")
    DIFFER_U(llm_topk, "--llm-topk")
    DIFFER_U(rollouts, "--rollouts")
    DIFFER_U(prompt_tokens, "--prompt-tokens")
    DIFFER_U(seed, "the seed")
    DIFFER_U(chat_template, "the chat template")
    DIFFER_U(n_embd, "the SLM's hidden size")
    DIFFER_U(n_vocab, "the vocabulary size")
    DIFFER_U(llm_n_embd, "the LLM's hidden size")
    DIFFER_U(record_bytes, "the record size")
    if (old->tau != mine->tau) {
        snprintf(out, cap, "tau: %g there, %g here", (double)old->tau, (double)mine->tau);
        return;
    }
#undef DIFFER_U
    snprintf(out, cap, "the settings");
}

/* Cuts tokens.bin after the entry of example `last` (the last one kept; -1: none) and reopens it for appending; a
 * folder collected before tokens.bin gets one holding the examples from here on (the older ones' tokens are
 * their records', as before). */
static tr_status resume_tokens(collector *c, const char *tokens_path, int32_t last) {
    size_t n = 0;
    unsigned char *tok = NULL;
    if (access(tokens_path, F_OK) == 0) { /* folders collected before tokens.bin have none: one is started */
        const tr_status st = train_read_file(tokens_path, &tok, &n);
        if (st != TR_OK) return st;
    }
    size_t at = 8;
    const bool ok = n >= 8 && memcmp(tok, COLLECT_TOKENS_MAGIC, 8) == 0;
    while (ok && at + 8 <= n) {
        uint32_t u[2];
        for (int k = 0; k < 2; k++) u[k] = (uint32_t)tok[at + 4 * k] | (uint32_t)tok[at + 4 * k + 1] << 8 |
                                          (uint32_t)tok[at + 4 * k + 2] << 16 | (uint32_t)tok[at + 4 * k + 3] << 24;
        if ((int64_t)u[0] > last || u[1] > COLLECT_MAX_TOKENS || (uint64_t)u[1] * 4 > n - at - 8) break;
        at += 8 + (size_t)u[1] * 4;
    }
    free(tok);
    bool cut = ok && truncate(tokens_path, (off_t)at) == 0;
    if (!ok) { /* missing or not ours: start it over with the magic */
        FILE *f = fopen(tokens_path, "wb");
        cut = f && fwrite(COLLECT_TOKENS_MAGIC, 1, 8, f) == 8;
        if (f && fclose(f) != 0) cut = false;
    }
    if (!cut)
        return tr_fail(TR_ERR_IO, "cannot cut %s back to its last complete example: %s", tokens_path, strerror(errno));
    c->tokens = fopen(tokens_path, "ab");
    if (!c->tokens) return tr_fail(TR_ERR_IO, "cannot reopen %s: %s", tokens_path, strerror(errno));
    return TR_OK;
}

/* Keeps the index entries whose records are complete, cuts the files after them and reopens them for
 * appending; *next gets the example after the last one kept. */
static tr_status resume_existing(collector *c, const unsigned char *header, const char *data_path,
                                 const char *index_path, const char *tokens_path, int32_t *next) {
    FILE *f = fopen(data_path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open %s: %s", data_path, strerror(errno));
    unsigned char old[COLLECT_HEADER_BYTES];
    const size_t got = fread(old, 1, sizeof old, f);
    fseek(f, 0, SEEK_END);
    const long data_size = ftell(f);
    fclose(f);
    collect_header h;
    tr_status st = collect_header_decode(old, got, &h);
    if (st != TR_OK) return tr_fail_prefix(st, "cannot resume from %s", data_path);
    /* The range's end may differ: a resume may collect further (or stop earlier) than the first run asked. */
    unsigned char mine[COLLECT_HEADER_BYTES];
    memcpy(mine, header, sizeof mine);
    memcpy(mine + COLLECT_LAST_OFFSET, old + COLLECT_LAST_OFFSET, 4);
    memcpy(mine + COLLECT_SLM_PATH_OFFSET, old + COLLECT_SLM_PATH_OFFSET, COLLECT_PATH_BYTES);
    if (memcmp(old, mine, COLLECT_HEADER_BYTES) != 0) {
        collect_header want;
        char what[300] = "the settings";
        if (collect_header_decode(mine, sizeof mine, &want) == TR_OK) header_difference(&h, &want, what, sizeof what);
        return tr_fail(TR_ERR_STATE, "%s holds another collect, so it cannot be resumed: %s. Use another folder, or "
                       "start this one over (collect --restart)", data_path, what);
    }
    size_t n_index = 0;
    unsigned char *index = NULL;
    if (access(index_path, F_OK) == 0 && (st = train_read_file(index_path, &index, &n_index)) != TR_OK) return st;
    if (n_index < 8 || memcmp(index, COLLECT_INDEX_MAGIC, 8) != 0) n_index = 0;
    uint64_t end = COLLECT_HEADER_BYTES;
    size_t kept = 0;
    int32_t last = -1;
    for (size_t e = 0; n_index >= 8 && e < (n_index - 8) / COLLECT_INDEX_ENTRY; e++) {
        const unsigned char *p = index + 8 + e * COLLECT_INDEX_ENTRY;
        uint32_t u[2];
        uint64_t off = 0;
        for (int k = 0; k < 2; k++) u[k] = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 |
                                          (uint32_t)p[4 * k + 2] << 16 | (uint32_t)p[4 * k + 3] << 24;
        for (int k = 7; k >= 0; k--) off = off << 8 | p[8 + k];
        const uint64_t bytes = (uint64_t)u[1] * c->record_bytes;
        if (off != end || (int64_t)u[0] <= last || end + bytes > (uint64_t)data_size) break;
        last = (int32_t)u[0];
        end += bytes;
        kept++;
        c->stats.n_positions += u[1];
    }
    free(index);
    if (truncate(data_path, (off_t)end) != 0 || (n_index >= 8 && truncate(index_path, (off_t)(8 + kept * COLLECT_INDEX_ENTRY)) != 0))
        return tr_fail(TR_ERR_IO, "cannot cut %s back to its last complete example: %s", data_path, strerror(errno));
    if (n_index < 8) {
        f = fopen(index_path, "wb");
        if (!f || fwrite(COLLECT_INDEX_MAGIC, 1, 8, f) != 8) {
            if (f) fclose(f);
            return tr_fail(TR_ERR_IO, "cannot write %s", index_path);
        }
        fclose(f);
    }
    if ((st = resume_tokens(c, tokens_path, last)) != TR_OK) return st;
    c->data = fopen(data_path, "ab");
    c->index = fopen(index_path, "ab");
    if (!c->data || !c->index) return tr_fail(TR_ERR_IO, "cannot reopen %s: %s", data_path, strerror(errno));
    c->data_end = end;
    c->stats.n_examples = c->stats.n_resumed = (int32_t)kept;
    *next = last >= 0 ? last + 1 : c->p.first;
    return TR_OK;
}

static tr_status open_output(collector *c, const collect_header *h, const char *dir, int32_t *next) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return tr_fail(TR_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    char data_path[4096], index_path[4096], tokens_path[4096];
    snprintf(data_path, sizeof data_path, "%s/%s", dir, COLLECT_DATA_FILE);
    snprintf(index_path, sizeof index_path, "%s/%s", dir, COLLECT_INDEX_FILE);
    snprintf(tokens_path, sizeof tokens_path, "%s/%s", dir, COLLECT_TOKENS_FILE);
    unsigned char header[COLLECT_HEADER_BYTES];
    collect_header_encode(h, header);
    *next = c->p.first;
    if (c->p.resume && access(data_path, F_OK) == 0)
        return resume_existing(c, header, data_path, index_path, tokens_path, next);
    return write_fresh(c, header, data_path, index_path, tokens_path);
}

/* ---------------------------------------------------------------- setup */

static tr_status check_params(const tr_collect_params *p) {
    if (p->max_tokens < 2 || p->max_tokens > (1 << 20)) return tr_fail(TR_ERR_ARG, "max_tokens %d is outside 2..2^20", (int)p->max_tokens);
    if (p->topk < 1 || p->topk > TR_ROUTER_TOPK_MAX)
        return tr_fail(TR_ERR_ARG, "topk %d is outside 1..%d", (int)p->topk, TR_ROUTER_TOPK_MAX);
    if (p->llm_topk < 1 || p->llm_topk > TR_SCORE_TOPK_MAX)
        return tr_fail(TR_ERR_ARG, "llm_topk %d is outside 1..%d", (int)p->llm_topk, TR_SCORE_TOPK_MAX);
    if (p->rollouts < 0 || p->rollouts > 4096) return tr_fail(TR_ERR_ARG, "rollouts %d is outside 0..4096", (int)p->rollouts);
    if (p->first < 0) return tr_fail(TR_ERR_ARG, "the first example must be >= 0");
    if ((int)p->format < 0 || p->format > TR_DATA_TEXT_CONTINUE) return tr_fail(TR_ERR_ARG, "unknown data format %d", (int)p->format);
    if (p->last >= 0 && p->last < p->first) return tr_fail(TR_ERR_ARG, "empty example range %d:%d", (int)p->first, (int)p->last);
    if (p->router && !(p->tau >= 0 && p->tau <= 1)) return tr_fail(TR_ERR_ARG, "tau %g is outside [0, 1]", p->tau);
    if (p->router && p->prompt_tokens < 1) return tr_fail(TR_ERR_ARG, "round 2 needs prompt_tokens >= 1");
    return TR_OK;
}

/* The LLM as the header records it: a name (the model's, or what the caller calls the remote LLM). The header's
 * llm_n_embd is 0 since the LLM is read through a backend (collects of version 1 before that stored its width). */
typedef struct llm_identity {
    const char *name;
} llm_identity;

static tr_status setup(collector *c, const char *data_path, const llm_identity *llm_id, collect_header *h) {
    const tr_model_info *si = tr_model_get_info(c->slm);
    c->vocab = tr_model_vocab(c->slm);
    if (!c->vocab) return tr_fail(TR_ERR_ARG, "the SLM has no vocabulary");
    c->n_embd = si->n_embd;
    c->n_vocab = si->n_vocab;
    c->n_shared = si->n_vocab;
    tr_vocab_match match;
    int32_t n_shared = 0;
    const int32_t llm_vocab = tr_llm_backend_n_vocab(c->llm);
    if (llm_vocab > 0 && llm_vocab < si->n_vocab) return tr_fail(TR_ERR_ARG, "the LLM's vocabulary is smaller than the SLM's");
    tr_status vst = tr_vocab_compatible_size(c->vocab, llm_vocab, &match, &n_shared);
    if (vst != TR_OK) return vst;
    tr_llm_backend_set_allowed(c->llm, c->n_shared);
    tr_llm_backend_set_end_id(c->llm, tr_vocab_eos(c->vocab)); /* llm-sample: an LLM that ends the text */
    if (c->n_embd > COLLECT_MAX_EMBD) return tr_fail(TR_ERR_UNSUPPORTED, "hidden size %d is too large", (int)c->n_embd);
    int32_t n_examples = -1;
    uint64_t hash = 0;
    if (c->p.format != TR_DATA_LLM_SAMPLE) {
        if (!data_path) return tr_fail(TR_ERR_ARG, "the %s format needs a data file", tr_data_format_name(c->p.format));
        tr_status st = file_hash(data_path, &hash);
        if (st == TR_OK)
            st = dataset_load(data_path, dataset_formats[c->p.format], c->p.first, c->p.last < 0 ? -1 : c->p.last,
                              &c->examples);
        if (st != TR_OK) return st;
        n_examples = c->p.first + (int32_t)dataset_count(c->examples);
    } else if (c->p.last < 0) {
        return tr_fail(TR_ERR_ARG, "llm-sample needs the number of examples (a range A:B)");
    }
    if (n_examples >= 0) {
        if (c->p.last < 0 || c->p.last > n_examples) c->p.last = n_examples;
        if (c->p.first > c->p.last) c->p.first = c->p.last;
    }
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = c->p.max_tokens;
    cp.n_batch = c->p.max_tokens;
    cp.n_threads = c->p.n_threads;
    tr_status st = tr_context_create(c->slm, &cp, &c->slm_ctx);
    if (st == TR_OK && c->p.rollouts > 0) st = tr_context_create(c->slm, &cp, &c->roll_ctx);
    if (st != TR_OK) return st;
    c->record_bytes = collect_record_bytes((uint32_t)c->n_embd, (uint32_t)c->p.topk);
    for (int k = 0; k < 2; k++) {
        example_slot *e = &c->slots[k];
        e->tokens = malloc((size_t)c->p.max_tokens * sizeof(int32_t));
        e->llm_pos = malloc((size_t)(c->p.max_tokens + 1) * sizeof *e->llm_pos);
        if (!e->tokens || !e->llm_pos) return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    c->cont = malloc((size_t)(c->p.rollouts + 1) * sizeof(int32_t));
    c->buf = malloc((size_t)c->p.max_tokens * c->record_bytes);
    c->feat_row = malloc((size_t)(COLLECT_N_STATS + c->p.topk) * sizeof(float));
    if (!c->cont || !c->buf || !c->feat_row) return tr_fail(TR_ERR_NOMEM, "out of memory");

    memset(h, 0, sizeof *h);
    h->version = COLLECT_VERSION;
    h->header_bytes = COLLECT_HEADER_BYTES;
    h->record_bytes = c->record_bytes;
    h->n_embd = (uint32_t)c->n_embd;
    h->n_vocab = (uint32_t)c->n_vocab;
    h->topk = (uint32_t)c->p.topk;
    h->rollouts = (uint32_t)c->p.rollouts;
    h->format = (uint32_t)c->p.format;
    h->round = c->p.router ? 2 : 1;
    h->max_tokens = (uint32_t)c->p.max_tokens;
    h->first = c->p.first;
    h->last = c->p.last;
    h->seed = c->p.format == TR_DATA_LLM_SAMPLE || c->p.format == TR_DATA_TEXT_CONTINUE ? c->p.seed : 0;
    h->data_hash = hash;
    h->llm_n_embd = 0;
    h->llm_topk = (uint32_t)c->p.llm_topk;
    h->prompt_tokens = c->p.router ? (uint32_t)c->p.prompt_tokens : 0;
    h->tau = c->p.router ? c->p.tau : 0.0f;
    h->chat_template = (uint32_t)c->p.chat_template;
    snprintf(h->slm_name, sizeof h->slm_name, "%s", si->name ? si->name : "");
    if (c->p.slm_path && strlen(c->p.slm_path) < sizeof h->slm_path) snprintf(h->slm_path, sizeof h->slm_path, "%s", c->p.slm_path);
    snprintf(h->llm_name, sizeof h->llm_name, "%s", llm_id->name ? llm_id->name : tr_llm_backend_name(c->llm));
    return TR_OK;
}

static void cleanup(collector *c) {
    if (c->data) fclose(c->data);
    if (c->index) fclose(c->index);
    if (c->tokens) fclose(c->tokens);
    tr_context_free(c->slm_ctx);
    tr_context_free(c->roll_ctx);
    for (int k = 0; k < 2; k++) {
        free(c->slots[k].llm_pos);
        free(c->slots[k].tokens);
    }
    dataset_free(c->examples);
    free(c->cont);
    free(c->buf);
    free(c->feat_row);
}

static tr_status collect_run(const tr_model *slm, tr_llm_backend *llm, const llm_identity *llm_id,
                             const char *data_path, const char *out_dir, const tr_collect_params *params,
                             tr_collect_stats *stats) {
    collector c;
    memset(&c, 0, sizeof c);
    c.slm = slm;
    c.llm = llm;
    c.p = params ? *params : tr_collect_default_params();
    tr_status st = check_params(&c.p);
    collect_header h;
    int32_t next = 0;
    if (st == TR_OK) st = setup(&c, data_path, llm_id, &h);
    if (st == TR_OK) st = open_output(&c, &h, out_dir, &next);
    const int64_t total = c.p.last - c.p.first;
    /* Teacher forcing on a data file keeps the LLM one example ahead; llm-sample's and text-continue's examples
     * are drawn through the LLM itself, so each is scored only once drawn; round 2 asks the LLM position by
     * position. */
    const bool ahead = !c.p.router && c.p.format != TR_DATA_LLM_SAMPLE && c.p.format != TR_DATA_TEXT_CONTINUE;
    example_slot *cur = &c.slots[0], *nxt = &c.slots[1];
    if (st == TR_OK && ahead && next < c.p.last) start_example(&c, cur, next);
    for (int32_t ex = next; st == TR_OK && ex < c.p.last; ex++) {
        int32_t n_records = 0;
        c.ex = cur;
        if (c.p.router) {
            st = load_example(&c, cur, ex);
            if (st == TR_OK) st = routed_round(&c, ex, &n_records);
        } else {
            if (!ahead) start_example(&c, cur, ex);
            st = teacher_forced(&c, ex, ahead && ex + 1 < c.p.last ? nxt : NULL, ex + 1, &n_records);
        }
        example_slot *t = cur;
        cur = nxt;
        nxt = t;
        if (st == TR_OK) st = append_example(&c, ex, n_records);
        if (st != TR_OK) {
            st = tr_fail_prefix(st, "example %d (collected so far: %d examples; a rerun resumes there)", (int)ex,
                                (int)c.stats.n_examples);
            break;
        }
        if (c.p.progress && !c.p.progress(c.p.progress_user, ex - c.p.first + 1, total))
            st = tr_fail(TR_ERR_STATE, "collect stopped after example %d (resume continues from there)", (int)ex);
    }
    if (st == TR_OK && c.p.progress && next >= c.p.last) c.p.progress(c.p.progress_user, total, total);
    /* An example scored ahead but not recorded (a stop or a failure before its turn) is waited for and dropped. */
    for (int k = 0; k < 2; k++)
        if (c.slots[k].scoring && c.slots[k].threaded) pthread_join(c.slots[k].thread, NULL);
    if (stats) *stats = c.stats;
    cleanup(&c);
    return st;
}

tr_status tr_collect(const tr_model *slm, const tr_model *llm, const char *data_path, const char *out_dir,
                     const tr_collect_params *params, tr_collect_stats *stats) {
    if (!slm || !llm || !out_dir) return tr_fail(TR_ERR_ARG, "tr_collect: NULL argument");
    const tr_collect_params p = params ? *params : tr_collect_default_params();
    if (tr_model_vocab(llm) && tr_model_vocab(slm)) {
        tr_vocab_match match;
        int32_t n_shared = 0;
        tr_status st = tr_vocab_compatible(tr_model_vocab(slm), tr_model_vocab(llm), &match, &n_shared);
        if (st != TR_OK) return st;
    }
    /* The LLM's context holds one example (and, in round 2 and llm-sample, the position after it). */
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = p.max_tokens >= 2 && p.max_tokens <= (1 << 20) ? p.max_tokens + 1 : 2;
    cp.n_batch = cp.n_ctx;
    cp.n_threads = p.n_threads;
    tr_llm_backend *backend = NULL;
    tr_status st = tr_llm_backend_embedded(llm, &cp, NULL, &backend);
    if (st != TR_OK) return st;
    const tr_model_info *li = tr_model_get_info(llm);
    const llm_identity id = {.name = li->name ? li->name : ""};
    st = collect_run(slm, backend, &id, data_path, out_dir, &p, stats);
    tr_llm_backend_free(backend);
    return st;
}

tr_status tr_collect_backend(const tr_model *slm, tr_llm_backend *llm, const char *llm_name, const char *data_path,
                             const char *out_dir, const tr_collect_params *params, tr_collect_stats *stats) {
    if (!slm || !llm || !out_dir) return tr_fail(TR_ERR_ARG, "tr_collect_backend: NULL argument");
    const llm_identity id = {.name = llm_name};
    return collect_run(slm, llm, &id, data_path, out_dir, params, stats);
}
