/* synth.h — what a family gives `tokroute synth` (synth.c): its shapes (real models' exact sizes, and small ones
 * for tests), the metadata they add to the common hyperparameters and, where its layers are not the shared decoder
 * layer's tensors, the tensors of a layer. */
#ifndef TR_MODEL_SYNTH_H
#define TR_MODEL_SYNTH_H

#include "tokroute.h"

typedef struct synth_shape {
    const char *name;
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_theta, norm_eps;
    bool tied, biases, qk_norm, rope_freqs;
    int32_t rope_dim;      /* 0: head_dim */
    const void *extra;     /* the family's own sizes (its synth_hparams / synth_layer read them) */
} synth_shape;

/* FILL_ROPE_QUARTER: RoPE frequency factors 1 on the first quarter of the pairs and 1e30 after (the rest do not
 * rotate: gemma4's "proportional" RoPE at partial_rotary_factor 0.25, as llama.cpp's converter writes it). */
typedef enum synth_fill { FILL_WEIGHT, FILL_NORM, FILL_BIAS, FILL_ROPE_FREQS, FILL_SSM_A, FILL_ROPE_QUARTER } synth_fill;

typedef struct synth_plan synth_plan;

/* A tensor of the file: 2-D [cols, rows], or 1-D of cols values when rows is 0, filled as `fill` says. */
void synth_add(synth_plan *pl, const char *name, tr_type type, int64_t cols, int64_t rows, synth_fill fill);
/* Layer il's weight "blk.<il>.<role>.weight" [cols, rows] in the type the parameters (and the Q4_K_M mix, by role)
 * give it; its 1-D tensor "blk.<il>.<suffix>" of n F32 values. */
void synth_weight(synth_plan *pl, int il, const char *role, int64_t cols, int64_t rows);
void synth_vector(synth_plan *pl, int il, const char *suffix, int64_t n, synth_fill fill);
/* A weight outside the layers ("<name>.weight" [cols, rows]) in the parameters' type. */
void synth_global_weight(synth_plan *pl, const char *name, int64_t cols, int64_t rows);
/* The shared decoder layer's tensors (decoder.c's bind_decoder_layer): biases and Q/K norms as the shape says,
 * the post-norms when post_norms. */
void synth_decoder_layer(synth_plan *pl, const synth_shape *s, int il, bool post_norms);
/* The shape being written (for a family's synth_layer). */
const synth_shape *synth_plan_shape(const synth_plan *pl);

/* "<arch>.<suffix>" metadata; they do nothing once st is not TR_OK, and return st. */
tr_status synth_set_u32(tr_gguf_writer *w, const char *arch, const char *suffix, uint32_t v, tr_status st);
tr_status synth_set_f32(tr_gguf_writer *w, const char *arch, const char *suffix, float v, tr_status st);

#endif /* TR_MODEL_SYNTH_H */
