/* mlp.c — the MLP router's network: memory for its weights and activations, and the forward pass.
 *
 * Input = the SLM's final hidden state (after the output RMSNorm) followed by the features the file asks for, in
 * the fixed order maxprob, entropy, margin, top-k log-probs (features.c; all 0 when the logits are not a
 * distribution), then the embedding of the SLM's top-1 token. Each
 * layer is y = W x + b with W [out][in] row-major F32, ReLU between layers and a sigmoid on the single output.
 * The products go through the kernels' F32 matmul (SIMD where the CPU has it): on the caller's thread, unless
 * tr_router_set_threads gave the router a pool; then only layers big enough to repay waking workers (a router for
 * a hidden size in the hundreds or more) are split.
 *
 * A router with context also keeps per-sequence state: the inputs of the positions it scored or observed, in a
 * ring keyed by position, appended after this position's inputs (nearest first; zeros for a position not held).
 * Induction's values (features.c) and then the n-gram table's (ngram.c) come last, from the tokens
 * tr_router_tokens copied.
 *
 * A hidden state with a NaN or inf scores 0 (routed). All memory is allocated by mlp_alloc, so the forward pass allocates nothing; it writes the net's activation
 * buffers, so one net (one tr_router) must be used by one thread at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "router/router_internal.h"

tr_status mlp_alloc(mlp_net *net, int32_t n_layers, const int32_t *sizes) {
    net->n_layers = n_layers;
    size_t n_floats = 0;
    int32_t widest = 1;
    for (int32_t i = 0; i <= n_layers; i++) {
        net->sizes[i] = sizes[i];
        if (i > 0 && sizes[i] > widest) widest = sizes[i];
        if (i < n_layers) n_floats += (size_t)sizes[i + 1] * (size_t)sizes[i] + (size_t)sizes[i + 1];
    }
    net->block = malloc(n_floats * sizeof(float));
    net->input = malloc((size_t)sizes[0] * sizeof(float));
    net->act[0] = malloc((size_t)widest * sizeof(float));
    net->act[1] = malloc((size_t)widest * sizeof(float));
    if (!net->block || !net->input || !net->act[0] || !net->act[1]) {
        mlp_free(net);
        return tr_fail(TR_ERR_NOMEM, "out of memory for a router of %zu weights", n_floats);
    }
    float *p = net->block;
    for (int32_t i = 0; i < n_layers; i++) {
        net->weights[i] = p;
        p += (size_t)sizes[i + 1] * (size_t)sizes[i];
        net->biases[i] = p;
        p += sizes[i + 1];
    }
    return TR_OK;
}

tr_status mlp_alloc_ring(mlp_net *net) {
    if (net->context < 1) return TR_OK;
    net->context_width = tr_router_context_width(net->features, net->topk, net->slm_n_embd);
    net->ring_size = net->context + ROUTER_RING_AHEAD;
    net->ring = malloc((size_t)net->ring_size * (size_t)net->context_width * sizeof(float));
    net->ring_pos = malloc((size_t)net->ring_size * sizeof(int64_t));
    if (!net->ring || !net->ring_pos) return tr_fail(TR_ERR_NOMEM, "out of memory for the router's context");
    mlp_reset(net);
    return TR_OK;
}

void mlp_reset(mlp_net *net) {
    for (int32_t i = 0; i < net->ring_size; i++) net->ring_pos[i] = -1;
    net->last_position = -1;
}

void mlp_free(mlp_net *net) {
    if (!net) return;
    free(net->ring);
    free(net->ring_pos);
    free(net->block);
    free(net->input);
    free(net->act[0]);
    free(net->act[1]);
    free(net->slm_name);
    free(net->tokens);
    ngram_table_free(net->ngram);
    matmul_scratch_free(&net->scratch);
    memset(net, 0, sizeof *net);
}

/* 1 / (1 + e^-z) without overflow for large |z|. */
static float sigmoid(float z) {
    if (z >= 0) return 1.0f / (1.0f + expf(-z));
    const float e = expf(z);
    return e / (1.0f + e);
}

/* This position's hidden state and logit features into net->input; false when the hidden state is not finite. */
static bool position_inputs(mlp_net *net, const float *hidden, const float *logits, int32_t n_vocab) {
    const int32_t n_embd = net->slm_n_embd;
    bool finite = true;
    for (int32_t i = 0; i < n_embd; i++) {
        net->input[i] = hidden[i];
        finite &= isfinite(hidden[i]) != 0;
    }
    if (finite && (net->features & ROUTER_LOGIT_FEATURES))
        router_logit_features(net->features, net->topk, logits, n_vocab, net->input + n_embd);
    return finite;
}

static void ring_store(mlp_net *net, int64_t position) {
    const int32_t slot = (int32_t)(position % net->ring_size);
    memcpy(net->ring + (size_t)slot * net->context_width, net->input, (size_t)net->context_width * sizeof(float));
    net->ring_pos[slot] = position;
    net->last_position = position;
}

void mlp_observe(mlp_net *net, int64_t position, const float *hidden, const float *logits, int32_t n_vocab) {
    if (net->context < 1 || position < 0) return;
    if (position_inputs(net, hidden, logits, n_vocab)) ring_store(net, position);
}

/* The previous positions' inputs after this position's (zeros for one not held: before the sequence's first). */
static void ring_read(mlp_net *net, int64_t position) {
    float *o = net->input + net->sizes[0] - router_token_values_width(net->features) -
               (size_t)net->context * net->context_width;
    for (int32_t k = 1; k <= net->context; k++, o += net->context_width) {
        const int64_t q = position - k;
        const int32_t slot = q >= 0 ? (int32_t)(q % net->ring_size) : 0;
        if (q >= 0 && net->ring_pos[slot] == q)
            memcpy(o, net->ring + (size_t)slot * net->context_width, (size_t)net->context_width * sizeof(float));
        else
            memset(o, 0, (size_t)net->context_width * sizeof(float));
    }
}

float mlp_forward(mlp_net *net, int64_t position, const float *hidden, const float *logits, int32_t n_vocab) {
    const int32_t n_embd = net->slm_n_embd;
    /* ReLU would turn a NaN into 0 and hide it, so a hidden state that is not finite is caught here: the token
     * is routed (score 0) rather than scored on garbage. */
    if (!position_inputs(net, hidden, logits, n_vocab)) return 0.0f;
    if (net->context > 0) {
        ring_read(net, position);
        ring_store(net, position);
    }
    const int32_t embd_at = n_embd + tr_router_feature_width(net->features & ROUTER_LOGIT_FEATURES, net->topk, n_embd);
    /* The SLM's proposal, read by both token features: one scan of the vocabulary per token. */
    const int32_t top1 =
        net->features & (TR_FEATURE_TOKEN_EMBEDDING | ROUTER_TOKEN_FEATURES) ? tr_argmax(logits, n_vocab) : -1;
    if ((net->features & TR_FEATURE_TOKEN_EMBEDDING) &&
        slm_token_embedding(net->slm, top1, net->input + embd_at) != TR_OK)
        return 0.0f;
    float *tail = net->input + net->sizes[0] - router_token_values_width(net->features);
    if (net->features & TR_FEATURE_INDUCTION) {
        router_induction_values(net->tokens, position, top1, tail);
        tail += TR_ROUTER_INDUCTION_VALUES;
    }
    if (net->features & TR_FEATURE_NGRAM) router_ngram_lookup(net->ngram, net->tokens, position, top1, tail);
    return mlp_forward_input(net, net->input);
}

float mlp_forward_input(mlp_net *net, const float *input) {
    const float *x = input;
    for (int32_t l = 0; l < net->n_layers; l++) {
        const int32_t n_in = net->sizes[l], n_out = net->sizes[l + 1];
        float *y = net->act[l & 1];
        const weight_matrix w = {.type = TR_TYPE_F32, .data = net->weights[l], .rows = n_out, .cols = n_in};
        /* F32 weights need no scratch, so this cannot fail for a net that passed mlp_alloc. Small layers run on
         * the caller even with a pool (matmul's inline threshold). */
        (void)matmul(net->pool, &w, x, 1, y, n_out, &net->scratch);
        const float *b = net->biases[l];
        if (l + 1 < net->n_layers) {
            for (int32_t r = 0; r < n_out; r++) {
                const float v = y[r] + b[r];
                y[r] = v > 0 ? v : 0.0f;
            }
        } else {
            for (int32_t r = 0; r < n_out; r++) y[r] += b[r];
        }
        x = y;
    }
    const float score = sigmoid(x[0]);
    /* Overflow inside the net could still give NaN; never return a score outside [0, 1]. */
    return score >= 0.0f && score <= 1.0f ? score : 0.0f;
}
