/* demo_pair.h — the tiny demo pair (stories-student as SLM, stories260K as LLM) for the routing, transport and eval
 * suites: a cmocka group set-up/tear-down that loads both, a 256-token context, an embedded LLM backend, and a
 * prompt's ids. Each helper fails the running test (cmocka) when the library refuses. */
#ifndef TR_TEST_DEMO_PAIR_H
#define TR_TEST_DEMO_PAIR_H

#include <stdint.h>

#include "tokroute.h"

typedef struct demo_pair {
    tr_model *slm, *llm;
} demo_pair;

/* Group set-up: *state = a demo_pair with both models loaded (-1 and the library's message on stderr otherwise). */
int demo_pair_setup(void **state);
int demo_pair_teardown(void **state);
/* Loads both models into *p (false and the message on stderr when either fails). */
bool demo_pair_load(demo_pair *p);
void demo_pair_unload(demo_pair *p);

/* A context of 256 positions on m with n_threads threads. */
tr_context *demo_context(const tr_model *m, int32_t n_threads);
/* The LLM behind the embedded backend (256 positions, n_threads); sp NULL = the backend's default sampling. */
tr_llm_backend *demo_backend(const tr_model *llm, int32_t n_threads, const tr_sampler_params *sp);
/* The ids of text with the default tokenize params (BOS as the model adds it); the count. */
int32_t demo_prompt_tokens(const tr_model *m, const char *text, int32_t *ids, int32_t cap);

#endif
