/* forward.h — the steps of the forward pass (forward.c) that forward_chunk and the batched multi_forward share. */
#ifndef TR_MODEL_FORWARD_H
#define TR_MODEL_FORWARD_H

#include "model/arch.h"

/* Embeddings of tokens into rows [row, row + n) of the activations and their RoPE tables for positions pos0.. */
tr_status forward_embed(tr_context *ctx, const int32_t *tokens, int32_t row, int32_t n, int32_t pos0);
/* Every layer over the pass's n rows (spans in row order): plans, then commits (or, on failure, resets) the spans'
 * per-sequence states. */
tr_status forward_layers(tr_context *ctx, int32_t n, const seq_span *sp, int32_t n_sp);
/* Brings a sequence's state (NULL: nothing to do) up to n_past by running its kept tokens [state->pos, n_past). */
tr_status forward_replay(tr_context *ctx, kv_cache *kv, seq_state *state, const int32_t *tokens, int32_t n_past);
/* Logits of n final hidden states (after output_norm), with the family's last step. */
tr_status forward_logits(tr_context *ctx, const float *hidden, int32_t n, float *logits_out);

#endif /* TR_MODEL_FORWARD_H */
