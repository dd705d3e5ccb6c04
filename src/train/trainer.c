/* trainer.c — tr_train_router: fits the MLP router (ReLU hidden layers, one sigmoid output) to collected data.
 *
 * Loss: binary cross-entropy on the output logit z, weighted per class (w_c = n / (2 n_c) with class_weights),
 * averaged over the mini-batch, or a pairwise ranking loss within each chunk of rows (block_loss), or both; Adam with bias correction; L2 weight decay on weights only. Inputs are
 * standardized with the training split's mean and deviation, and the standardization is folded into the first
 * layer when the file is written (W' = W / sd, b' = b - W (mu / sd)), so the file stays a plain MLP over raw
 * features. The validation split holds out whole examples (a hash of seed and example), and the weights kept are
 * those of the epoch with the lowest validation loss; training stops after `patience` epochs without one. With
 * aux_weight the last layer has more outputs after the routing logit, fitted by BCE to the LLM's view of the
 * position (train_router.c, aux_targets) and left out of the file. Also here: inverted dropout of the hidden
 * layers (a hashed mask, mlp_model_grad_dropout), the learning-rate schedule (warm-up, cosine) and one step of the
 * weights' moving average (ema_decay, default 0.9999: what is validated, kept and written).
 *
 * Determinism: initialization and shuffling come from the seed; a mini-batch is cut into fixed chunks of
 * CHUNK_ROWS rows whose gradients are computed independently (on any thread) and summed in chunk order, so the
 * result does not depend on the thread count. Products go through the trainer's own blocked F32 product
 * (train_kernels.h), which reads the row-major activations and deltas as they are: no transposes but W's, once a batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/sample_math.h"
#include "train/train_kernels.h"
#include "train/trainer_internal.h"

tr_train_params tr_train_default_params(void) {
    tr_train_params p;
    memset(&p, 0, sizeof p);
    /* The recipe that closes the most of the gap (README "Router training"): every feature, the SLM's embedding of
     * its proposed token included, the previous position's hidden state and statistics (docs/train.md, "Toward the
     * bound"), the input token's latest earlier occurrence (induction, issue 32), what the training data's n-gram
     * counts say follows the last tokens (ngram, issue 32), expected-gain labels, two hidden layers 256,128. */
    p.features = TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN | TR_FEATURE_TOPK_LOGPROBS |
                 TR_FEATURE_TOKEN_EMBEDDING | TR_FEATURE_INDUCTION | TR_FEATURE_NGRAM;
    p.topk = 8;
    p.context = 1;
    p.hidden[0] = 256;
    p.hidden[1] = 128;
    p.labels = TR_LABEL_EXPECTED;
    p.epochs = 30;
    p.patience = 4;
    p.batch = 256;
    p.learning_rate = 1e-3f;
    /* The weights kept are a moving average over the last ~10,000 steps (about 2.4 epochs of the recipe's 1.09 M
     * positions): +0.9 / +1.3 points of the gap at 10% / 20% routed, 3 seeds, every seed better (docs/train.md). */
    p.ema_decay = 0.9999f;
    p.val_fraction = 0.1f;
    p.class_weights = true;
    p.seed = 1;
    p.tau = 0.5f;
    p.target_routed = 0.1;
    return p;
}

uint64_t splitmix64(uint64_t *state) { return splitmix64_mix(*state += SPLITMIX64_GAMMA); }

static double uniform01(uint64_t *state) { return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); }

/* ---------------------------------------------------------------- the network */

tr_status mlp_model_init(mlp_model *m, int32_t n_layers, const int32_t *sizes, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->n_layers = n_layers;
    size_t n = 0;
    for (int32_t l = 0; l <= n_layers; l++) m->sizes[l] = sizes[l];
    for (int32_t l = 0; l < n_layers; l++) {
        m->w_off[l] = n;
        n += (size_t)sizes[l] * (size_t)sizes[l + 1];
        m->b_off[l] = n;
        n += (size_t)sizes[l + 1];
    }
    m->n_params = n;
    m->theta = calloc(n, sizeof(float));
    if (!m->theta) return tr_fail(TR_ERR_NOMEM, "out of memory for %zu parameters", n);
    /* He-uniform for layers feeding a ReLU, Glorot-uniform for the output layer; biases 0. */
    uint64_t rng = seed ^ 0x5DEECE66Dull;
    for (int32_t l = 0; l < n_layers; l++) {
        const double fan_in = sizes[l], fan_out = sizes[l + 1];
        const double a = l + 1 < n_layers ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
        float *w = m->theta + m->w_off[l];
        for (size_t k = 0; k < (size_t)sizes[l] * (size_t)sizes[l + 1]; k++) w[k] = (float)((2 * uniform01(&rng) - 1) * a);
    }
    return TR_OK;
}

void mlp_model_free(mlp_model *m) {
    free(m->theta);
    memset(m, 0, sizeof *m);
}

size_t mlp_work_floats(const mlp_model *m, int32_t rows) {
    size_t widest = 1, total = 0;
    for (int32_t l = 1; l <= m->n_layers; l++) {
        total += (size_t)m->sizes[l] * (size_t)rows;
        if ((size_t)m->sizes[l] > widest) widest = (size_t)m->sizes[l];
    }
    if ((size_t)m->sizes[0] > widest) widest = (size_t)m->sizes[0];
    /* every layer's output, two deltas of the widest layer */
    return total + 2 * widest * (size_t)rows;
}

/* Inverted dropout of a hidden layer's outputs a [rows][n]: each unit of each row is dropped (set to 0) with
 * probability rate, by a hash of mask_seed, layer, row and unit, and the kept ones are scaled by 1 / (1 - rate). */
static void apply_dropout(float *a, int32_t rows, int32_t n, int32_t layer, float rate, uint64_t mask_seed) {
    const float scale = 1.0f / (1.0f - rate);
    for (int32_t r = 0; r < rows; r++)
        for (int32_t o = 0; o < n; o++) {
            uint64_t st = mask_seed ^ ((uint64_t)layer << 56) ^ ((uint64_t)r << 32) ^ (uint64_t)o;
            const double u = (double)(splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
            a[(size_t)r * n + o] = u < rate ? 0.0f : a[(size_t)r * n + o] * scale;
        }
}

/* Forward pass of rows inputs x [rows][sizes[0]]; act[0] = x and act[l] gets layer l's output (bias and ReLU
 * fused into the product's store; with dropout > 0 the hidden layers' outputs dropped, apply_dropout). Returns the
 * output logits in act[n_layers]. */
static const float *forward_rows_dropout(const mlp_model *m, const float *wt_all, const float *x, int32_t rows,
                                         float *work, const float **act, float dropout, uint64_t mask_seed) {
    act[0] = x;
    float *out = work;
    for (int32_t l = 0; l < m->n_layers; l++) {
        const int32_t n_in = m->sizes[l], n_out = m->sizes[l + 1];
        /* act[l+1] = act[l] · W_lᵀ + b_l: W_lᵀ [n_in][n_out] is the right operand, row-major. */
        train_gemm(&(train_gemm_args){.m = rows, .n = n_out, .k = n_in, .a = act[l], .a_row = n_in, .a_col = 1,
                                      .b = wt_all + m->w_off[l], .ldb = n_out, .c = out, .ldc = n_out,
                                      .bias = m->theta + m->b_off[l], .relu = l + 1 < m->n_layers});
        if (dropout > 0 && l + 1 < m->n_layers) apply_dropout(out, rows, n_out, l + 1, dropout, mask_seed);
        act[l + 1] = out;
        out += (size_t)n_out * (size_t)rows;
    }
    return act[m->n_layers];
}

static const float *forward_rows(const mlp_model *m, const float *wt_all, const float *x, int32_t rows, float *work,
                                 const float **act) {
    return forward_rows_dropout(m, wt_all, x, rows, work, act, 0, 0);
}

float mlp_model_logit(const mlp_model *m, const float *wt_all, const float *x, float *work) {
    const float *act[ROUTER_TRAIN_MAX_LAYERS + 1];
    return forward_rows(m, wt_all, x, 1, work, act)[0];
}

void mlp_model_logits(const mlp_model *m, const float *wt_all, const float *x, int32_t rows, float *z, float *work) {
    const float *act[ROUTER_TRAIN_MAX_LAYERS + 1];
    const float *out = forward_rows(m, wt_all, x, rows, work, act);
    const int32_t n_out = m->sizes[m->n_layers]; /* the routing logit, then any auxiliary outputs */
    for (int32_t r = 0; r < rows; r++) z[r] = out[(size_t)r * n_out];
}

static float sigmoidf_stable(float z) {
    if (z >= 0) return 1.0f / (1.0f + expf(-z));
    const float e = expf(z);
    return e / (1.0f + e);
}

/* log(1 + e^z) without overflow. */
static double softplus(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }

double bce_weighted(float z, float y, float w) { return w * (softplus(z) - (double)y * z); }

static const char *const loss_names[] = {
    [TR_LOSS_BCE] = "bce",
    [TR_LOSS_PAIRWISE] = "pairwise",
    [TR_LOSS_PAIRWISE_BCE] = "pairwise+bce",
};
#define N_LOSSES (int)(sizeof loss_names / sizeof loss_names[0])

const char *tr_train_loss_name(tr_train_loss l) { return (int)l >= 0 && (int)l < N_LOSSES ? loss_names[l] : "unknown"; }

tr_status tr_train_loss_from_name(const char *name, tr_train_loss *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "tr_train_loss_from_name: NULL argument");
    for (int i = 0; i < N_LOSSES; i++)
        if (strcmp(name, loss_names[i]) == 0) {
            *out = (tr_train_loss)i;
            return TR_OK;
        }
    return tr_fail(TR_ERR_ARG, "unknown loss '%s' (known: bce, pairwise, pairwise+bce)", name);
}

double block_loss(tr_train_loss loss, const float *z, const float *y, const float *w, int32_t rows, float *dz) {
    double total = 0;
    if (dz) memset(dz, 0, (size_t)rows * sizeof *dz);
    if (loss == TR_LOSS_BCE || loss == TR_LOSS_PAIRWISE_BCE)
        for (int32_t r = 0; r < rows; r++) {
            total += bce_weighted(z[r], y[r], w[r]);
            if (dz) dz[r] += (float)(w[r] * ((double)sigmoidf_stable(z[r]) - y[r]));
        }
    if ((loss == TR_LOSS_PAIRWISE || loss == TR_LOSS_PAIRWISE_BCE) && rows > 1) {
        /* The gain g = 1 - 2y: a pair (r, s) with g_r > g_s wants z_r < z_s, weighted by how much it matters. */
        const double norm = 1.0 / (double)(rows - 1);
        for (int32_t r = 0; r < rows; r++)
            for (int32_t q = 0; q < rows; q++) {
                const double d = 2.0 * ((double)y[q] - (double)y[r]); /* g_r - g_q */
                if (!(d > 0)) continue;
                const float x = z[r] - z[q];
                total += norm * d * softplus(x);
                if (dz) {
                    const float g = (float)(norm * d * sigmoidf_stable(x));
                    dz[r] += g;
                    dz[q] -= g;
                }
            }
    }
    return total;
}

/* The loss and its derivative by each output of out [rows][n_out] into delta (scaled): the routing loss of column
 * 0, and with n_out > 1 the weighted BCE of each auxiliary column against aux [rows][n_out - 1]. tmp: 2 rows. */
static double output_loss(const float *out, int32_t n_out, int32_t rows, const float *y, const float *w,
                          const float *aux, float aux_weight, tr_train_loss loss_kind, double scale, float *delta,
                          float *tmp) {
    if (n_out == 1) {
        const double loss = block_loss(loss_kind, out, y, w, rows, delta);
        for (int32_t r = 0; r < rows; r++) delta[r] = (float)(delta[r] * scale);
        return loss;
    }
    float *z = tmp, *dz = tmp + rows;
    for (int32_t r = 0; r < rows; r++) z[r] = out[(size_t)r * n_out];
    double loss = block_loss(loss_kind, z, y, w, rows, dz);
    for (int32_t r = 0; r < rows; r++) {
        delta[(size_t)r * n_out] = (float)(dz[r] * scale);
        for (int32_t a = 1; a < n_out; a++) {
            const float za = out[(size_t)r * n_out + a], ta = aux[(size_t)r * (n_out - 1) + a - 1];
            loss += bce_weighted(za, ta, aux_weight);
            delta[(size_t)r * n_out + a] = (float)(aux_weight * ((double)sigmoidf_stable(za) - ta) * scale);
        }
    }
    return loss;
}

double mlp_model_grad(const mlp_model *m, const float *wt_all, const float *x, const float *y, const float *w,
                      const float *aux, float aux_weight, int32_t rows, tr_train_loss loss_kind, double scale,
                      float *grad, float *work) {
    return mlp_model_grad_dropout(m, wt_all, x, y, w, aux, aux_weight, rows, loss_kind, scale, grad, work, 0, 0);
}

double mlp_model_grad_dropout(const mlp_model *m, const float *wt_all, const float *x, const float *y, const float *w,
                              const float *aux, float aux_weight, int32_t rows, tr_train_loss loss_kind, double scale,
                              float *grad, float *work, float dropout, uint64_t mask_seed) {
    const float *act[ROUTER_TRAIN_MAX_LAYERS + 1];
    const float *out = forward_rows_dropout(m, wt_all, x, rows, work, act, dropout, mask_seed);
    size_t widest = 1, outputs = 0;
    for (int32_t l = 0; l <= m->n_layers; l++) {
        if ((size_t)m->sizes[l] > widest) widest = (size_t)m->sizes[l];
        if (l > 0) outputs += (size_t)m->sizes[l] * (size_t)rows;
    }
    float *delta = work + outputs, *delta_prev = delta + widest * (size_t)rows; /* after the layers' outputs */
    const double loss = output_loss(out, m->sizes[m->n_layers], rows, y, w, aux, aux_weight, loss_kind, scale, delta,
                                    delta_prev);
    for (int32_t l = m->n_layers - 1; l >= 0; l--) {
        const int32_t n_in = m->sizes[l], n_out = m->sizes[l + 1];
        float *gb = grad + m->b_off[l];
        for (int32_t r = 0; r < rows; r++)
            for (int32_t o = 0; o < n_out; o++) gb[o] += delta[(size_t)r * n_out + o];
        /* dW[o][i] += sum_r delta[r][o] act[r][i]: delta read down its columns, no transpose. */
        train_gemm(&(train_gemm_args){.m = n_out, .n = n_in, .k = rows, .a = delta, .a_row = 1, .a_col = n_out,
                                      .b = act[l], .ldb = n_in, .c = grad + m->w_off[l], .ldc = n_in,
                                      .accumulate = true});
        if (l == 0) break;
        /* delta_prev[r][i] = sum_o delta[r][o] W[o][i], zero where the ReLU was (act[l] <= 0). */
        train_gemm(&(train_gemm_args){.m = rows, .n = n_in, .k = n_out, .a = delta, .a_row = n_out, .a_col = 1,
                                      .b = m->theta + m->w_off[l], .ldb = n_in, .c = delta_prev, .ldc = n_in,
                                      .mask = act[l]});
        if (dropout > 0) { /* a dropped unit's output is 0, so the mask above zeroed it; the kept ones were scaled */
            const float keep_scale = 1.0f / (1.0f - dropout);
            for (size_t k = 0; k < (size_t)rows * (size_t)n_in; k++) delta_prev[k] *= keep_scale;
        }
        float *tmp = delta;
        delta = delta_prev;
        delta_prev = tmp;
    }
    return loss;
}

/* ---------------------------------------------------------------- schedule and averaging */

double scheduled_learning_rate(const tr_train_params *p, int64_t step, int64_t steps_per_epoch) {
    const double t = (double)step, warm = (double)p->lr_warmup * (double)steps_per_epoch;
    const double total = (double)p->epochs * (double)steps_per_epoch;
    double lr = p->learning_rate;
    if (t < warm) lr *= t / warm;
    if (p->lr_cosine && total > warm) {
        const double progress = t <= warm ? 0 : (t - warm) / (total - warm);
        lr *= 0.5 * (1.0 + cos(M_PI * (progress < 1 ? progress : 1)));
    }
    return lr;
}

void weights_average_step(float *avg, const float *theta, size_t n, float decay, int64_t step) {
    const double early = (1.0 + (double)step) / (10.0 + (double)step);
    const float d = (float)(decay < early ? decay : early), keep = 1.0f - d;
    for (size_t k = 0; k < n; k++) avg[k] = d * avg[k] + keep * theta[k];
}

/* W [rows][cols] -> Wᵀ in 16 × 16 blocks (both sides stay in cache lines). */
static void transpose(const float *a, int64_t rows, int64_t cols, float *t) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16)
            for (int64_t r = r0; r < r0 + 16 && r < rows; r++)
                for (int64_t c = c0; c < c0 + 16 && c < cols; c++) t[c * rows + r] = a[r * cols + c];
}

void mlp_model_transpose_weights(const mlp_model *m, float *wt_all) {
    for (int32_t l = 0; l < m->n_layers; l++)
        transpose(m->theta + m->w_off[l], m->sizes[l + 1], m->sizes[l], wt_all + m->w_off[l]);
}
