/* trainer_internal.h — the trainer's network (trainer.c): parameters in one flat vector, forward pass and the
 * gradient of the loss (class-weighted BCE, pairwise ranking, or both, plus optional auxiliary targets; optional
 * dropout) over a block of rows, the learning-rate schedule and the weights' moving average. Used by
 * train_router.c and by the gradient and schedule tests. */
#ifndef TR_TRAINER_INTERNAL_H
#define TR_TRAINER_INTERNAL_H

#include "train/train_internal.h"

#define ROUTER_TRAIN_MAX_LAYERS 9 /* up to 8 hidden layers + the output */

typedef struct mlp_model {
    int32_t n_layers;
    int32_t sizes[ROUTER_TRAIN_MAX_LAYERS + 1];
    size_t w_off[ROUTER_TRAIN_MAX_LAYERS], b_off[ROUTER_TRAIN_MAX_LAYERS]; /* into theta */
    size_t n_params;
    float *theta;  /* W_l [sizes[l+1]][sizes[l]] row-major, then b_l, per layer */
} mlp_model;

uint64_t splitmix64(uint64_t *state);
/* Allocates theta and initializes it from seed (He-uniform for ReLU layers, Glorot for the output, biases 0). */
tr_status mlp_model_init(mlp_model *m, int32_t n_layers, const int32_t *sizes, uint64_t seed);
void mlp_model_free(mlp_model *m);
/* Floats of work space one call over `rows` rows needs. */
size_t mlp_work_floats(const mlp_model *m, int32_t rows);
/* Output logit of one input row (wt_all from mlp_model_transpose_weights). */
float mlp_model_logit(const mlp_model *m, const float *wt_all, const float *x, float *work);
/* Output logits of rows input rows into z (the routing output: column 0 of the last layer). */
void mlp_model_logits(const mlp_model *m, const float *wt_all, const float *x, int32_t rows, float *z, float *work);
/* w * (log(1 + e^z) - y z): the weighted BCE of logit z against label y. */
double bce_weighted(float z, float y, float w);
/* Every layer's W^T, at the same offsets as theta (the forward pass multiplies by them; the logit functions and
 * the gradient take them as wt_all). */
void mlp_model_transpose_weights(const mlp_model *m, float *wt_all);
/* The loss of a block of rows with output logits z, labels y and weights w (summed over rows; the pairwise part
 * over the block's pairs, divided by rows - 1), and, when dz is not NULL, its derivative by each z into dz. */
double block_loss(tr_train_loss loss, const float *z, const float *y, const float *w, int32_t rows, float *dz);
/* Adds scale * d(loss)/d theta over rows x [rows][sizes[0]], labels y and weights w to grad, and returns the
 * (unscaled) loss: block_loss of the routing logit (output 0), plus, when the last layer has n_aux = sizes[n_layers]
 * - 1 > 0 more outputs (multi-task), aux_weight times their BCE against aux [rows][n_aux] (targets in [0, 1]).
 * wt_all from mlp_model_transpose_weights. */
double mlp_model_grad(const mlp_model *m, const float *wt_all, const float *x, const float *y, const float *w,
                      const float *aux, float aux_weight, int32_t rows, tr_train_loss loss, double scale,
                      float *grad, float *work);

/* mlp_model_grad with inverted dropout at rate dropout on every hidden layer's outputs (the mask a function of
 * mask_seed, the layer, the row and the unit: the same seed gives the same mask; 0 = none, mlp_model_grad). */
double mlp_model_grad_dropout(const mlp_model *m, const float *wt_all, const float *x, const float *y, const float *w,
                              const float *aux, float aux_weight, int32_t rows, tr_train_loss loss, double scale,
                              float *grad, float *work, float dropout, uint64_t mask_seed);
/* The learning rate of step (1-based) under p's schedule: learning_rate, times step / warm-up steps during the
 * lr_warmup epochs' linear warm-up, times (1 + cos(pi progress)) / 2 after it with lr_cosine (progress from 0 after
 * the warm-up to 1 at the last epoch's last step). */
double scheduled_learning_rate(const tr_train_params *p, int64_t step, int64_t steps_per_epoch);
/* One step of the weights' moving average (Polyak): avg = d avg + (1 - d) theta over n parameters, d = min(decay,
 * (1 + step) / (10 + step)), so the first steps' average is not mostly the initialization. */
void weights_average_step(float *avg, const float *theta, size_t n, float decay, int64_t step);

#endif /* TR_TRAINER_INTERNAL_H */
