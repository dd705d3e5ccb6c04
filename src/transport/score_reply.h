/* score_reply.h — scoring replies as the remote backends read them (tr_llm_score): vLLM's POST /v1/completions
 * with prompt_logprobs (tokroute serve answers in the same shape) and llama.cpp's POST /completion with n_probs for
 * one position. Everything read off the network is bounds-checked: a position missing, an entry that is not an
 * object, a key that is not a token id, an id or a count out of range, a log-probability that is not a finite
 * number, an id listed twice, no entry for the actual token: TR_ERR_FORMAT with a message naming the position.
 * Nothing is written outside the positions asked for. Fuzzed by tests/fuzz/fuzz_score_reply.c. */
#ifndef TR_SCORE_REPLY_H
#define TR_SCORE_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

/* vLLM's completions reply into call->out for positions [first, end) (see score_reply.c for the shape and the vLLM
 * source it follows), and call->n_evaluated (usage: prompt tokens not served from the cache). *ended: the position
 * after the sequence was asked for and the reply has no log-probabilities for it because the LLM ended the text
 * there (finish_reason "stop", token_ids [] — tokroute serve leaves the end of sequence out): TR_OK with that
 * position left unfilled. */
tr_status score_reply_vllm(const char *body, size_t len, tr_llm_score_call *call, bool *ended);

/* llama.cpp's /completion reply for one position pos (the prompt was tokens[0..pos), n_predict 1): the top list of
 * the first generated token's probabilities into *out; with pos < n_tokens the sampled token must be tokens[pos]
 * (forced by the request) and its log-probability becomes out->logprob. *n_evaluated gets timings.prompt_n. */
tr_status score_reply_llamacpp(const char *body, size_t len, const tr_llm_score_call *call, int32_t pos,
                               tr_llm_position *out, int64_t *n_evaluated);

#endif /* TR_SCORE_REPLY_H */
