/* backend.h — the one interface every LLM backend implements (embedded, tokroute server, OpenAI-compatible,
 * llama.cpp server): given the whole token sequence, return the LLM's next token. The common wrapper in
 * backend.c adds timing, statistics and the simulated network delay, so implementations only compute. */
#ifndef TR_BACKEND_H
#define TR_BACKEND_H

#include "tokroute.h"

typedef struct backend_ops {
    const char *name;
    /* Evaluates what the backend has not seen of tokens[0..n) and writes the next token; adds the number of
     * tokens it evaluated to *evaluated. */
    tr_status (*next_token)(void *impl, const int32_t *tokens, int32_t n, int32_t *next, int64_t *evaluated);
    void (*free)(void *impl);
} backend_ops;

/* Wraps impl (ownership passes to the backend, freed with ops->free even on failure). */
tr_status backend_create(const backend_ops *ops, void *impl, tr_llm_backend **out);

#endif /* TR_BACKEND_H */
