/* router.c — the tr_router handle: one interface over the training-free policies (maxprob, margin, entropy; read
 * off the logits, policy.c) and the MLP router file (mlp.c, router_file.c). Every policy gives a confidence in
 * [0, 1]; the caller routes the token to the LLM when it is below tau.
 *
 * An MLP router with context (previous positions' inputs) is scored by position (tr_router_score_at) and reset at
 * each sequence (tr_router_reset); tr_router_score continues after the latest position.
 *
 * Sizes are checked at the edges: against the SLM when a router file is loaded with its tr_model_info, and against
 * the router on every tr_router_score call (the MLP knows its hidden and vocabulary sizes; the policies take any
 * vocabulary). Scoring allocates nothing but writes the router's scratch, so a router is used by one thread at a
 * time (one router per routed generation).
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "router/router_internal.h"

struct tr_router {
    tr_policy policy;
    mlp_net mlp;       /* TR_POLICY_MLP only */
    thread_pool *pool; /* tr_router_set_threads */
};

tr_status tr_router_set_threads(tr_router *router, int32_t n_threads) {
    if (!router || n_threads < 0 || n_threads > 512) return tr_fail(TR_ERR_ARG, "tr_router_set_threads: bad argument");
    if (n_threads == 0) n_threads = tr_physical_cores();
    thread_pool_free(router->pool);
    router->pool = NULL;
    if (n_threads > 1 && router->policy == TR_POLICY_MLP && !(router->pool = thread_pool_create(n_threads)))
        return TR_ERR_NOMEM;
    router->mlp.pool = router->pool;
    return TR_OK;
}

tr_status tr_router_create(tr_policy policy, tr_router **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "tr_router_create: NULL argument");
    *out = NULL;
    if (policy == TR_POLICY_MLP)
        return tr_fail(TR_ERR_ARG, "the mlp policy needs a router file (tr_router_load)");
    if (policy != TR_POLICY_MAXPROB && policy != TR_POLICY_MARGIN && policy != TR_POLICY_ENTROPY)
        return tr_fail(TR_ERR_ARG, "unknown routing policy %d", (int)policy);
    tr_router *r = calloc(1, sizeof *r);
    if (!r) return tr_fail(TR_ERR_NOMEM, "out of memory");
    r->policy = policy;
    *out = r;
    return TR_OK;
}

tr_status tr_router_load(const char *path, const tr_model_info *slm, tr_router **out) {
    if (!path || !out) return tr_fail(TR_ERR_ARG, "tr_router_load: NULL argument");
    *out = NULL;
    tr_router *r = calloc(1, sizeof *r);
    if (!r) return tr_fail(TR_ERR_NOMEM, "out of memory");
    r->policy = TR_POLICY_MLP;
    tr_status st = router_file_load(path, &r->mlp);
    if (st != TR_OK) {
        free(r);
        return st;
    }
    if (slm && slm->n_embd != r->mlp.slm_n_embd)
        st = tr_fail(TR_ERR_ARG, "router expects hidden size %d but the SLM has %d (router file %s)",
                     (int)r->mlp.slm_n_embd, (int)slm->n_embd, path);
    else if (slm && slm->n_vocab != r->mlp.slm_n_vocab)
        st = tr_fail(TR_ERR_ARG, "router expects a vocabulary of %d tokens but the SLM has %d (router file %s)",
                     (int)r->mlp.slm_n_vocab, (int)slm->n_vocab, path);
    if (st != TR_OK) {
        tr_router_free(r);
        return st;
    }
    *out = r;
    return TR_OK;
}

void tr_router_free(tr_router *router) {
    if (!router) return;
    mlp_free(&router->mlp);
    thread_pool_free(router->pool);
    free(router);
}

mlp_net *router_mlp(tr_router *router) {
    return router && router->policy == TR_POLICY_MLP ? &router->mlp : NULL;
}

tr_status tr_router_set_slm(tr_router *router, const tr_model *slm) {
    if (!router || !slm) return tr_fail(TR_ERR_ARG, "tr_router_set_slm: NULL argument");
    if (router->policy != TR_POLICY_MLP) return TR_OK;
    const tr_model_info *info = tr_model_get_info(slm);
    if (info->n_embd != router->mlp.slm_n_embd || info->n_vocab != router->mlp.slm_n_vocab)
        return tr_fail(TR_ERR_ARG, "router expects an SLM with hidden size %d and %d tokens, this one has %d and %d",
                       (int)router->mlp.slm_n_embd, (int)router->mlp.slm_n_vocab, (int)info->n_embd,
                       (int)info->n_vocab);
    router->mlp.slm = slm;
    return TR_OK;
}

unsigned tr_router_features(const tr_router *router) {
    return router && router->policy == TR_POLICY_MLP ? router->mlp.features : 0;
}

int32_t tr_router_topk(const tr_router *router) {
    return router && router->policy == TR_POLICY_MLP ? router->mlp.topk : 0;
}

int32_t tr_router_context(const tr_router *router) {
    return router && router->policy == TR_POLICY_MLP ? router->mlp.context : 0;
}

tr_policy tr_router_policy(const tr_router *router) { return router ? router->policy : TR_POLICY_MAXPROB; }

float tr_router_default_tau(const tr_router *router) {
    return router && router->policy == TR_POLICY_MLP ? router->mlp.tau : ROUTER_DEFAULT_TAU;
}

void tr_router_reset(tr_router *router) {
    if (!router || router->policy != TR_POLICY_MLP) return;
    if (router->mlp.context > 0) mlp_reset(&router->mlp);
    router->mlp.last_position = -1;
    router->mlp.n_tokens = 0;
}

tr_status tr_router_tokens(tr_router *router, const int32_t *ids, int64_t n) {
    if (!router || (n > 0 && !ids) || n < 0) return tr_fail(TR_ERR_ARG, "tr_router_tokens: bad argument");
    mlp_net *net = &router->mlp;
    if (router->policy != TR_POLICY_MLP || !(net->features & ROUTER_TOKEN_FEATURES)) return TR_OK;
    if (n > net->tokens_cap) {
        const int64_t cap = n > 2 * net->tokens_cap ? n : 2 * net->tokens_cap;
        int32_t *p = realloc(net->tokens, (size_t)cap * sizeof(int32_t));
        if (!p) return tr_fail(TR_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
        net->tokens = p;
        net->tokens_cap = cap;
    }
    if (n > 0) memcpy(net->tokens, ids, (size_t)n * sizeof(int32_t));
    net->n_tokens = n;
    return TR_OK;
}

/* The checks every MLP call shares: hidden, logits and the SLM as the router needs them. */
static tr_status check_mlp_inputs(const mlp_net *net, const float *hidden, int32_t n_embd, const float *logits,
                                  int32_t n_vocab) {
    if (!hidden) return tr_fail(TR_ERR_ARG, "the mlp router needs the SLM's hidden state");
    if (n_embd != net->slm_n_embd)
        return tr_fail(TR_ERR_ARG, "router expects hidden size %d but got %d", (int)net->slm_n_embd, (int)n_embd);
    if (net->features && !logits) return tr_fail(TR_ERR_ARG, "this mlp router's features need the SLM's logits");
    if ((net->features & TR_FEATURE_TOKEN_EMBEDDING) && !net->slm)
        return tr_fail(TR_ERR_STATE, "this mlp router reads the SLM's token embeddings: give it the SLM "
                       "(tr_router_set_slm)");
    /* Without features the logits are not read (may be NULL); when given, they must still be the SLM's. */
    if (logits && n_vocab != net->slm_n_vocab)
        return tr_fail(TR_ERR_ARG, "router expects a vocabulary of %d tokens but got %d", (int)net->slm_n_vocab,
                       (int)n_vocab);
    return TR_OK;
}

tr_status tr_router_observe(tr_router *router, int64_t position, const float *hidden, int32_t n_embd,
                            const float *logits, int32_t n_vocab) {
    if (!router) return tr_fail(TR_ERR_ARG, "tr_router_observe: NULL argument");
    if (position < 0) return tr_fail(TR_ERR_RANGE, "tr_router_observe: position %lld < 0", (long long)position);
    if (router->policy != TR_POLICY_MLP || router->mlp.context < 1) return TR_OK;
    const tr_status st = check_mlp_inputs(&router->mlp, hidden, n_embd, logits, n_vocab);
    if (st == TR_OK) mlp_observe(&router->mlp, position, hidden, logits, n_vocab);
    return st;
}

tr_status tr_router_score(tr_router *router, const float *hidden, int32_t n_embd, const float *logits,
                          int32_t n_vocab, float *score) {
    const int64_t next = router && router->policy == TR_POLICY_MLP ? router->mlp.last_position + 1 : 0;
    return tr_router_score_at(router, next < 1 ? 1 : next, hidden, n_embd, logits, n_vocab, score);
}

tr_status tr_router_score_at(tr_router *router, int64_t position, const float *hidden, int32_t n_embd,
                             const float *logits, int32_t n_vocab, float *score) {
    if (!router || !score) return tr_fail(TR_ERR_ARG, "tr_router_score: NULL argument");
    if (position < 0) return tr_fail(TR_ERR_RANGE, "tr_router_score_at: position %lld < 0", (long long)position);
    if (router->policy != TR_POLICY_MLP) {
        if (!logits || n_vocab < 1)
            return tr_fail(TR_ERR_ARG, "the %s policy needs the SLM's logits", tr_policy_name(router->policy));
        logit_stats st;
        logit_stats_compute(logits, n_vocab, &st);
        *score = policy_score(router->policy, &st);
        return TR_OK;
    }
    mlp_net *net = &router->mlp;
    const tr_status st = check_mlp_inputs(net, hidden, n_embd, logits, n_vocab);
    if (st != TR_OK) return st;
    if ((net->features & ROUTER_TOKEN_FEATURES) && net->n_tokens < position)
        return tr_fail(TR_ERR_STATE, "this mlp router reads the sequence's tokens: give it tokens 0..%lld "
                       "(tr_router_tokens) before scoring position %lld (it has %lld)", (long long)position - 1,
                       (long long)position, (long long)net->n_tokens);
    *score = mlp_forward(net, position, hidden, logits, n_vocab);
    net->last_position = position; /* tr_router_score continues after it (context or not: the token features read it) */
    return TR_OK;
}
