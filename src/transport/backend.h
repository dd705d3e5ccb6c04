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

#endif /* TR_BACKEND_H */
