/* sglang_reply.h — reading SGLang's POST /generate replies (the SGLang backend, sglang.c). Kept apart from the
 * transport so the fuzz target (tests/fuzz/fuzz_sglang_reply.c) reaches exactly what the network feeds. */
#ifndef TR_SGLANG_REPLY_H
#define TR_SGLANG_REPLY_H

#include <stddef.h>

#include "tokroute.h"

/* A next-token reply: the generated id (output_ids[0] and meta_info.output_token_logprobs[0][1], which must agree
 * when both are there), its log-probability when given, and the tokens SGLang evaluated (prompt_tokens -
 * cached_tokens). TR_ERR_FORMAT with a message for a reply without a usable id. */
tr_status sglang_parse_next(const char *body, size_t len, tr_llm_call *call);

/* A scoring reply to a request with logprob_start_len 0 and top_logprobs_num >= call->top_k: fills call->out for
 * positions [first, end) from meta_info.input_token_logprobs / input_top_logprobs (entry p is input index p) and,
 * for p == n_tokens, output_top_logprobs[0]. Ids >= call->n_allowed (when set) are dropped from the top lists,
 * which keep their first top_k entries (TR_ERR_RANGE when dropping leaves fewer). Every entry is checked (count,
 * shape, the echoed token ids, finite numbers); TR_ERR_FORMAT with a message naming the position otherwise. */
tr_status sglang_parse_score(const char *body, size_t len, tr_llm_score_call *call);

#endif /* TR_SGLANG_REPLY_H */
