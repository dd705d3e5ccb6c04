/* backend.h — the interface every LLM backend implements is public (tr_llm_backend_ops in tokroute.h): given the
 * whole token sequence, return the LLM's next token. The common wrapper in backend.c adds timing, statistics, the
 * simulated network delay, the allowed-id check and the circuit breaker, so implementations only compute. */
#ifndef TR_BACKEND_H
#define TR_BACKEND_H

#include "tokroute.h"

typedef tr_llm_backend_ops backend_ops;

static inline tr_status backend_create(const backend_ops *ops, void *impl, tr_llm_backend **out) {
    return tr_llm_backend_create(ops, impl, out);
}

/* Draft trees (tr_llm_draft). draft_check: TR_OK for a well-formed draft (branches not empty, after their parent,
 * within the limits), else TR_ERR_ARG with a message. draft_child: the first branch under node (-1: the requested
 * position) whose first token is token, or -1. draft_walk: the branches a walk enters given the answers
 * (answers[0] the call's id, then its verify ids): path[i] is the branch entered after answers[i]; returns the
 * length, at most n_answers. */
tr_status draft_check(const tr_llm_draft *d);
int32_t draft_child(const tr_llm_draft *d, int32_t node, int32_t token);
int32_t draft_walk(const tr_llm_draft *d, const int32_t *answers, int32_t n_answers, int32_t *path);

/* Ends the helper's streaming (the running call's remaining lookahead is cancelled) and waits until it is idle,
 * so the statistics are final. A no-op for a backend that never ran asynchronously. */
void backend_settle(tr_llm_backend *b);

#endif /* TR_BACKEND_H */
