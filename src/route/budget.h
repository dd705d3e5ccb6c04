/* budget.h — online control of the routed share (tr_route_params.target_routed and max_routed; budget.c). */
#ifndef TR_ROUTE_BUDGET_H
#define TR_ROUTE_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "tokroute.h"

/* Indexed by generated position (0 = the first generated token): what the controller knew before deciding it.
 * Decisions read only entries below their own index and write the next one, so re-deciding a position after a
 * rollback (the speculative loop) gives the decision the synchronous loop made. */
typedef struct route_budget {
    double target, cap;  /* shares; 0 = off */
    float tau0;          /* the start */
    int32_t n;           /* positions that can be decided */
    float *score;        /* [n] the router's score at i */
    float *base;         /* [n + 1] the learned part of τ before deciding i */
    int32_t *routed;     /* [n + 1] routed decisions among positions < i */
} route_budget;

/* TR_ERR_ARG when target_routed or max_routed is outside [0, 1]. */
tr_status budget_check(const tr_route_params *p);
/* Allocates for n_predict positions; tau0 is the threshold to start from. */
tr_status budget_init(route_budget *b, const tr_route_params *p, float tau0, int32_t n_predict);
void budget_free(route_budget *b);
/* Decides position i (0 <= i < n; positions 0..i-1 decided on the current branch) with its score: whether it is
 * routed, and the threshold used (*tau). */
bool budget_decide(route_budget *b, int32_t i, float score, float *tau);

#endif
