/* train_router.c — tr_train_router: labels and splits the collected positions, standardizes the inputs, runs
 * the epochs (mini-batches split into chunks over a thread pool, Adam at the scheduled rate, the weights' moving
 * average), keeps the best epoch by validation loss (of the average, with ema_decay) and writes the router file
 * with the standardization folded into the first layer. The network and its gradient are in trainer.c. The
 * output is checked for writing before any work, a stop asked for mid-epoch still writes the best epoch so far,
 * and with held-out data the threshold written is calibrated on it (the file is written, loaded back as a router
 * to score that data, and written again with the τ found).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "kernels/kernels.h"
#include "router/router_internal.h"
#include "train/train_kernels.h"
#include "train/trainer_internal.h"

#define CHUNK_ROWS 64

typedef struct trainer {
    tr_train_params p;
    const tr_train_data *d;
    mlp_model m;
    int32_t n_in;
    int64_t n_lab, n_train, n_val;
    float *x, *y, *w;            /* [n_lab][n_in] standardized inputs, labels, class weights */
    int32_t n_aux;               /* auxiliary targets per position (0, or AUX_TARGETS with aux_weight > 0) */
    float *aux;                  /* [n_lab][n_aux] */
    int64_t *train_idx, *val_idx;
    float *mu, *sd;              /* [n_in] */
    /* one batch */
    thread_pool *pool;
    int32_t n_threads;
    float *wt;                   /* [n_params] transposed weights */
    float *chunk_grad;           /* [max_chunks][n_params] */
    double *chunk_loss;
    int64_t *chunk_correct;
    float *work, *xbuf, *ybuf, *wbuf, *zbuf, *abuf; /* per thread */
    size_t work_floats;
    int32_t max_chunks;
    /* the batch being computed */
    const int64_t *rows;
    int64_t n_rows;
    bool eval_only;
    float *z_out;                /* eval_only: the logits of the rows, in row order */
    float *val_z;                /* [n_val] the validation split's logits at the last evaluation */
    int64_t *val_order;          /* [n_val] work space of the gain share */
    /* Adam */
    float *adam_m, *adam_v, *best;
    int64_t step;
    int64_t n_batches;           /* steps per epoch (the learning-rate schedule's unit) */
    float *ema;                  /* [n_params] with ema_decay: the moving average of theta over the steps */
    tr_ngram_table *ngram;       /* TR_FEATURE_NGRAM: the table written into the router */
    float *ngram_loo;            /* [d->n][TR_ROUTER_NGRAM_VALUES] each position's leave-one-example-out values */
    double ngram_seconds;        /* building both */
    int64_t ngram_tokens;        /* the followers counted */
} trainer;

/* ---------------------------------------------------------------- data preparation */

static bool in_validation(uint64_t seed, int32_t group, float fraction) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + (uint64_t)group;
    return (double)(splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0) < fraction;
}

/* Auxiliary targets (multi-task, training only: they come from the LLM, which the device does not have): the
 * LLM's probability of its top-1, the LLM's of the SLM's top-1, the SLM's of the LLM's top-1, and whether the two
 * top-1s agree. */
#define AUX_TARGETS 4

static void aux_targets(const tr_train_data *d, int64_t i, float *out) {
    const float *probs = d->probs + i * COLLECT_N_PROBS;
    out[0] = probs[1];
    out[1] = probs[4];
    out[2] = probs[5];
    out[3] = d->slm_top1[i] == d->llm_top1[i] ? 1.0f : 0.0f;
    for (int a = 0; a < AUX_TARGETS; a++) out[a] = out[a] < 0 ? 0 : out[a] > 1 ? 1 : out[a];
}

static tr_status prepare_data(trainer *t) {
    const tr_train_data *d = t->d;
    int64_t n_lab = 0;
    for (int64_t i = 0; i < d->n; i++) n_lab += label_of(d, i, t->p.labels) >= 0;
    t->n_aux = t->p.aux_weight > 0 ? AUX_TARGETS : 0;
    const bool soft = t->p.labels == TR_LABEL_GAIN || t->p.labels == TR_LABEL_EXPECTED || t->p.labels == TR_LABEL_MIXED;
    if (n_lab == 0) return tr_fail(TR_ERR_ARG, "no labelled positions (label mode %s)", tr_label_mode_name(t->p.labels));
    t->x = malloc((size_t)n_lab * (size_t)t->n_in * sizeof(float));
    t->y = malloc((size_t)n_lab * sizeof(float));
    t->w = malloc((size_t)n_lab * sizeof(float));
    t->train_idx = malloc((size_t)n_lab * sizeof(int64_t));
    t->val_idx = malloc((size_t)n_lab * sizeof(int64_t));
    t->mu = calloc((size_t)t->n_in, sizeof(float));
    t->sd = calloc((size_t)t->n_in, sizeof(float));
    t->aux = malloc((size_t)n_lab * (size_t)(t->n_aux ? t->n_aux : 1) * sizeof(float));
    if (!t->x || !t->y || !t->w || !t->train_idx || !t->val_idx || !t->mu || !t->sd || !t->aux)
        return tr_fail(TR_ERR_NOMEM, "out of memory for %" PRId64 " training positions", n_lab);
    int64_t k = 0, n1 = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const float label = label_of(d, i, t->p.labels);
        if (label < 0) continue;
        const float *ngram = t->ngram_loo ? t->ngram_loo + i * TR_ROUTER_NGRAM_VALUES : NULL;
        const tr_status st =
            train_input_row(d, i, t->p.features, t->p.topk, t->p.context, t->p.slm, ngram, t->x + k * t->n_in);
        if (st != TR_OK) return st;
        t->y[k] = label;
        if (t->n_aux) aux_targets(d, i, t->aux + k * t->n_aux);
        if (t->p.val_fraction > 0 && in_validation(t->p.seed, d->group[i], t->p.val_fraction)) {
            t->val_idx[t->n_val++] = k;
        } else {
            t->train_idx[t->n_train++] = k;
            n1 += label >= 0.5f;
        }
        k++;
    }
    t->n_lab = n_lab;
    const int64_t n0 = t->n_train - n1;
    if (t->n_train == 0 || (!soft && (n1 == 0 || n0 == 0)))
        return tr_fail(TR_ERR_ARG, "the training split needs both labels (%" PRId64 " SLM-preferred, %" PRId64
                       " LLM-preferred positions)", n1, n0);
    const bool weighted = t->p.class_weights && !soft;
    const float w1 = weighted ? (float)((double)t->n_train / (2.0 * (double)n1)) : 1.0f;
    const float w0 = weighted ? (float)((double)t->n_train / (2.0 * (double)n0)) : 1.0f;
    for (int64_t i = 0; i < n_lab; i++) t->w[i] = t->y[i] > 0.5f ? w1 : w0;
    /* Mean and deviation over the training split, in double, row by row (each column summed in the same order as
     * a column-by-column pass, so the same values, without striding through the whole array once per column). */
    double *sum = calloc((size_t)t->n_in, sizeof(double)), *sum2 = calloc((size_t)t->n_in, sizeof(double));
    if (!sum || !sum2) {
        free(sum);
        free(sum2);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the input statistics");
    }
    for (int64_t j = 0; j < t->n_train; j++) {
        const float *row = t->x + t->train_idx[j] * t->n_in;
        for (int32_t c = 0; c < t->n_in; c++) sum[c] += row[c];
    }
    for (int32_t c = 0; c < t->n_in; c++) sum[c] /= (double)t->n_train; /* the means */
    for (int64_t j = 0; j < t->n_train; j++) {
        const float *row = t->x + t->train_idx[j] * t->n_in;
        for (int32_t c = 0; c < t->n_in; c++) {
            const double v = row[c] - sum[c];
            sum2[c] += v * v;
        }
    }
    for (int32_t c = 0; c < t->n_in; c++) {
        const double sd = sqrt(sum2[c] / (double)t->n_train);
        t->mu[c] = (float)sum[c];
        t->sd[c] = sd > 1e-6 ? (float)sd : 1.0f;
    }
    free(sum);
    free(sum2);
    for (int64_t i = 0; i < n_lab; i++)
        for (int32_t c = 0; c < t->n_in; c++) t->x[i * t->n_in + c] = (t->x[i * t->n_in + c] - t->mu[c]) / t->sd[c];
    return TR_OK;
}

/* ---------------------------------------------------------------- one batch over the pool */

static void chunk_task(void *arg, int ith, int nth) {
    trainer *t = arg;
    const int32_t n_chunks = (int32_t)((t->n_rows + CHUNK_ROWS - 1) / CHUNK_ROWS);
    float *work = t->work + (size_t)ith * t->work_floats;
    float *xb = t->xbuf + (size_t)ith * CHUNK_ROWS * (size_t)t->n_in;
    float *yb = t->ybuf + (size_t)ith * CHUNK_ROWS, *wb = t->wbuf + (size_t)ith * CHUNK_ROWS;
    float *zb = t->zbuf + (size_t)ith * CHUNK_ROWS;
    float *ab = t->abuf + (size_t)ith * CHUNK_ROWS * (size_t)(t->n_aux ? t->n_aux : 1);
    for (int32_t c = ith; c < n_chunks; c += nth) {
        const int64_t first = (int64_t)c * CHUNK_ROWS;
        const int32_t rows = (int32_t)(t->n_rows - first < CHUNK_ROWS ? t->n_rows - first : CHUNK_ROWS);
        for (int32_t r = 0; r < rows; r++) {
            const int64_t i = t->rows[first + r];
            memcpy(xb + (size_t)r * t->n_in, t->x + i * t->n_in, (size_t)t->n_in * sizeof(float));
            yb[r] = t->y[i];
            wb[r] = t->w[i];
            if (t->n_aux) memcpy(ab + (size_t)r * t->n_aux, t->aux + i * t->n_aux, (size_t)t->n_aux * sizeof(float));
        }
        if (t->eval_only) {
            mlp_model_logits(&t->m, t->wt, xb, rows, zb, work);
            double loss = 0;
            int64_t correct = 0;
            for (int32_t r = 0; r < rows; r++) {
                loss += bce_weighted(zb[r], yb[r], wb[r]);
                correct += (zb[r] >= 0) == (yb[r] > 0.5f);
                t->z_out[first + r] = zb[r];
            }
            t->chunk_loss[c] = loss;
            t->chunk_correct[c] = correct;
        } else {
            float *g = t->chunk_grad + (size_t)c * t->m.n_params;
            memset(g, 0, t->m.n_params * sizeof(float));
            /* dropout's mask: a function of the seed, the step and the chunk, so of no thread */
            const uint64_t mask_seed = t->p.seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)t->step << 20) ^ (uint64_t)c;
            t->chunk_loss[c] = mlp_model_grad_dropout(&t->m, t->wt, xb, yb, wb, ab, t->p.aux_weight, rows, t->p.loss,
                                                      1.0 / (double)t->n_rows, g, work, t->p.dropout, mask_seed);
        }
    }
}

/* Sums the chunk gradients in chunk order and takes the Adam step on parameters [lo, hi) of this thread's share
 * (L2 decay on weights, not biases). Each parameter's update reads only its own state, so any split over threads
 * gives the same bits; the step was the one serial part of a batch, a fifth of the training's wall time at 2
 * threads, before it was split. */
static void reduce_task(void *arg, int ith, int nth) {
    trainer *t = arg;
    const size_t n = t->m.n_params, lo = n * (size_t)ith / (size_t)nth, hi = n * (size_t)(ith + 1) / (size_t)nth;
    const double b1 = 0.9, b2 = 0.999;
    train_adam_args a = {.grad_stride = n, .n_grads = (int32_t)((t->n_rows + CHUNK_ROWS - 1) / CHUNK_ROWS),
                         .b1 = (float)b1, .b2 = (float)b2, .eps = 1e-8f,
                         .lr_c1 = (float)(scheduled_learning_rate(&t->p, t->step, t->n_batches) /
                                         (1.0 - pow(b1, (double)t->step))),
                         .inv_sqrt_c2 = (float)(1.0 / sqrt(1.0 - pow(b2, (double)t->step)))};
    for (int32_t l = 0; l < t->m.n_layers; l++) {
        /* [w_off, b_off) the weights (decayed), [b_off, end) the biases */
        const size_t bounds[3] = {t->m.w_off[l], t->m.b_off[l], t->m.b_off[l] + (size_t)t->m.sizes[l + 1]};
        for (int part = 0; part < 2; part++) {
            const size_t from = bounds[part] > lo ? bounds[part] : lo, to = bounds[part + 1] < hi ? bounds[part + 1] : hi;
            if (from >= to) continue;
            a.theta = t->m.theta + from;
            a.m = t->adam_m + from;
            a.v = t->adam_v + from;
            a.grads = t->chunk_grad + from;
            a.n = to - from;
            a.decay = part == 0 ? t->p.weight_decay : 0.0f;
            train_adam(&a);
        }
    }
    if (t->ema) weights_average_step(t->ema + lo, t->m.theta + lo, hi - lo, t->p.ema_decay, t->step);
}

static void run(trainer *t, pool_task fn) {
    if (t->pool) thread_pool_run(t->pool, fn, t);
    else fn(t, 0, 1);
}

static double batch_step(trainer *t, const int64_t *rows, int64_t n_rows) {
    t->rows = rows;
    t->n_rows = n_rows;
    t->eval_only = false;
    mlp_model_transpose_weights(&t->m, t->wt);
    run(t, chunk_task);
    t->step++;
    run(t, reduce_task); /* the summed gradient and the Adam step */
    const int32_t n_chunks = (int32_t)((n_rows + CHUNK_ROWS - 1) / CHUNK_ROWS);
    double loss = 0;
    for (int32_t c = 0; c < n_chunks; c++) loss += t->chunk_loss[c];
    return loss;
}

/* Weighted BCE (mean) and accuracy at score 0.5 over a set of rows, in blocks of max_chunks chunks; z gets the
 * rows' logits. */
static void evaluate(trainer *t, const int64_t *rows, int64_t n_rows, float *z, double *loss, double *accuracy) {
    double sum_loss = 0, sum_w = 0;
    int64_t correct = 0;
    const int64_t block = (int64_t)t->max_chunks * CHUNK_ROWS;
    mlp_model_transpose_weights(&t->m, t->wt); /* the weights as they are now (the last batch stepped them) */
    for (int64_t b = 0; b < n_rows; b += block) {
        t->rows = rows + b;
        t->n_rows = n_rows - b < block ? n_rows - b : block;
        t->eval_only = true;
        t->z_out = z + b;
        run(t, chunk_task);
        const int32_t n_chunks = (int32_t)((t->n_rows + CHUNK_ROWS - 1) / CHUNK_ROWS);
        for (int32_t c = 0; c < n_chunks; c++) {
            sum_loss += t->chunk_loss[c];
            correct += t->chunk_correct[c];
        }
    }
    for (int64_t j = 0; j < n_rows; j++) sum_w += t->w[rows[j]];
    *loss = sum_w > 0 ? sum_loss / sum_w : 0;
    *accuracy = n_rows > 0 ? (double)correct / (double)n_rows : 0;
}

static const float *sort_logits;

static int by_logit(const void *a, const void *b) {
    const float x = sort_logits[*(const int64_t *)a], y = sort_logits[*(const int64_t *)b];
    if (x != y) return x < y ? -1 : 1;
    return *(const int64_t *)a < *(const int64_t *)b ? -1 : *(const int64_t *)a > *(const int64_t *)b;
}

static int by_gain_desc(const void *a, const void *b) { return by_logit(b, a); }

/* The gain g = 1 - 2y the validation split's lowest-scored 10% and 20% capture, over the most any order captures
 * there (the labels' own order: the bound in label terms); the mean of the two. Single-threaded (qsort's
 * comparison reads a file-level pointer, set only here). */
static double val_gain_share(trainer *t) {
    static const double shares[2] = {0.1, 0.2};
    const int64_t n = t->n_val;
    float *gain = n >= 10 ? malloc((size_t)n * sizeof *gain) : NULL;
    if (!gain) return 0;
    for (int64_t j = 0; j < n; j++) gain[j] = 1.0f - 2.0f * t->y[t->val_idx[j]];
    double sums[2][2] = {{0}}; /* [the router's order, the labels' order][share] */
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t j = 0; j < n; j++) t->val_order[j] = j;
        sort_logits = pass == 0 ? t->val_z : gain;
        qsort(t->val_order, (size_t)n, sizeof *t->val_order, pass == 0 ? by_logit : by_gain_desc);
        for (int k = 0; k < 2; k++)
            for (int64_t q = 0; q < (int64_t)floor(shares[k] * (double)n + 0.5); q++) sums[pass][k] += gain[t->val_order[q]];
    }
    free(gain);
    double share = 0;
    for (int k = 0; k < 2; k++) share += sums[1][k] > 0 ? 0.5 * sums[0][k] / sums[1][k] : 0;
    return share;
}

/* ---------------------------------------------------------------- setup, epochs, output */

static tr_status check_params(const tr_train_params *p, const tr_train_data *d) {
    if (p->features & ~(unsigned)(TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN |
                                  TR_FEATURE_TOPK_LOGPROBS | TR_FEATURE_TOKEN_EMBEDDING | TR_FEATURE_INDUCTION |
                                  TR_FEATURE_NGRAM))
        return tr_fail(TR_ERR_ARG, "unknown feature bits 0x%x", p->features);
    tr_status rows = train_data_check_rows(d, "training (tr_train_router's data)");
    if (rows == TR_OK && p->calibration) rows = train_data_check_rows(p->calibration, "calibration (params.calibration)");
    if (rows != TR_OK) return rows;
    if (p->features & ROUTER_TOKEN_FEATURES) {
        const tr_status st = train_data_check_tokens(d);
        if (st != TR_OK) return st;
    }
    if (p->ngram_data) {
        const tr_train_data *x = p->ngram_data;
        if (!(p->features & TR_FEATURE_NGRAM))
            return tr_fail(TR_ERR_ARG, "ngram_data is counted into the ngram feature's table: add ngram to the "
                           "features, or leave ngram_data out");
        if (x->n_vocab != d->n_vocab || x->n_embd != d->n_embd)
            return tr_fail(TR_ERR_ARG, "ngram_data was collected with another SLM (n_embd %d, n_vocab %d where the "
                           "training data has %d, %d)", (int)x->n_embd, (int)x->n_vocab, (int)d->n_embd,
                           (int)d->n_vocab);
        const tr_status st = train_data_check_tokens(x);
        if (st != TR_OK) return tr_fail_prefix(st, "ngram_data");
    }
    if (p->features & TR_FEATURE_TOKEN_EMBEDDING) {
        if (!p->slm)
            return tr_fail(TR_ERR_ARG, "the token_embedding feature (one of the default features) reads the SLM's "
                           "token table: set params.slm to the SLM the data was collected with (its file is "
                           "tr_train_data_info.slm_path), or clear TR_FEATURE_TOKEN_EMBEDDING");
        const tr_model_info *info = tr_model_get_info(p->slm);
        if (info->n_embd != d->n_embd || info->n_vocab != d->n_vocab)
            return tr_fail(TR_ERR_ARG, "the SLM given (hidden size %d, %d tokens) is not the one the data was collected "
                           "with (%d, %d)", (int)info->n_embd, (int)info->n_vocab, (int)d->n_embd, (int)d->n_vocab);
    }
    if ((p->features & TR_FEATURE_TOPK_LOGPROBS) && (p->topk < 1 || p->topk > d->topk))
        return tr_fail(TR_ERR_ARG, "topk %d is outside 1..%d (the data's)", (int)p->topk, (int)d->topk);
    if (p->labels == TR_LABEL_ROLLOUT && d->rollouts < 1)
        return tr_fail(TR_ERR_ARG, "rollout labels need data collected with rollouts");
    if ((int)p->loss < 0 || (int)p->loss > TR_LOSS_PAIRWISE_BCE) return tr_fail(TR_ERR_ARG, "unknown loss %d", (int)p->loss);
    if (p->epochs < 1 || p->batch < 1 || p->patience < 1) return tr_fail(TR_ERR_ARG, "epochs, batch and patience must be >= 1");
    if (!(p->learning_rate > 0) || !(p->weight_decay >= 0)) return tr_fail(TR_ERR_ARG, "bad learning rate or weight decay");
    if (!(p->val_fraction >= 0 && p->val_fraction < 1)) return tr_fail(TR_ERR_ARG, "val_fraction must be in [0, 1)");
    if (!(p->tau >= 0 && p->tau <= 1)) return tr_fail(TR_ERR_ARG, "tau must be in [0, 1]");
    if (p->context < 0 || p->context > TR_ROUTER_CONTEXT_MAX)
        return tr_fail(TR_ERR_ARG, "context %d is outside 0..%d", (int)p->context, TR_ROUTER_CONTEXT_MAX);
    if (p->n_threads < 0 || p->n_threads > 512) return tr_fail(TR_ERR_ARG, "n_threads out of range");
    if (!(p->aux_weight >= 0 && p->aux_weight <= 100)) return tr_fail(TR_ERR_ARG, "aux_weight must be in [0, 100]");
    if (!(p->ema_decay >= 0 && p->ema_decay < 1)) return tr_fail(TR_ERR_ARG, "ema_decay must be in [0, 1)");
    if (!(p->dropout >= 0 && p->dropout <= 0.9f)) return tr_fail(TR_ERR_ARG, "dropout must be in [0, 0.9]");
    if (!(p->lr_warmup >= 0 && p->lr_warmup <= p->epochs)) return tr_fail(TR_ERR_ARG, "lr_warmup must be in [0, epochs]");
    return TR_OK;
}

static tr_status setup(trainer *t) {
    const tr_train_data *d = t->d;
    const int32_t topk = (t->p.features & TR_FEATURE_TOPK_LOGPROBS) ? t->p.topk : 0;
    t->p.topk = topk;
    t->n_in = tr_router_input_width(t->p.features, topk, d->n_embd, t->p.context);
    int32_t sizes[ROUTER_TRAIN_MAX_LAYERS + 1], n_layers = 0;
    sizes[0] = t->n_in;
    for (int i = 0; i < 8 && t->p.hidden[i] > 0; i++) {
        if (t->p.hidden[i] > (1 << 16)) return tr_fail(TR_ERR_ARG, "hidden width %d is too large", (int)t->p.hidden[i]);
        sizes[++n_layers] = t->p.hidden[i];
    }
    if (n_layers == 0 && t->p.hidden[0] == 0) {
        sizes[++n_layers] = 2 * d->n_embd;
        sizes[++n_layers] = d->n_embd;
    }
    tr_status st = TR_OK;
    if (t->p.features & TR_FEATURE_NGRAM) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        st = ngram_train_build(d, t->p.ngram_data, &t->ngram, &t->ngram_loo, &t->ngram_tokens);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        t->ngram_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    if (st == TR_OK) st = prepare_data(t);
    sizes[++n_layers] = 1 + t->n_aux; /* the routing output first */
    if (st == TR_OK) st = mlp_model_init(&t->m, n_layers, sizes, t->p.seed);
    if (st != TR_OK) return st;
    t->n_threads = t->p.n_threads > 0 ? t->p.n_threads : tr_physical_cores();
    if (t->n_threads > 1 && !(t->pool = thread_pool_create(t->n_threads))) return TR_ERR_NOMEM;
    t->max_chunks = (int32_t)((t->p.batch + CHUNK_ROWS - 1) / CHUNK_ROWS);
    if (t->max_chunks < 2 * t->n_threads) t->max_chunks = 2 * t->n_threads;
    const size_t np = t->m.n_params, nth = (size_t)t->n_threads;
    t->work_floats = mlp_work_floats(&t->m, CHUNK_ROWS);
    t->wt = malloc(np * sizeof(float));
    t->chunk_grad = malloc((size_t)t->max_chunks * np * sizeof(float));
    t->chunk_loss = malloc((size_t)t->max_chunks * sizeof(double));
    t->chunk_correct = malloc((size_t)t->max_chunks * sizeof(int64_t));
    t->work = malloc(nth * t->work_floats * sizeof(float));
    t->xbuf = malloc(nth * CHUNK_ROWS * (size_t)t->n_in * sizeof(float));
    t->ybuf = malloc(nth * CHUNK_ROWS * sizeof(float));
    t->wbuf = malloc(nth * CHUNK_ROWS * sizeof(float));
    t->zbuf = malloc(nth * CHUNK_ROWS * sizeof(float));
    t->abuf = malloc(nth * CHUNK_ROWS * (size_t)(t->n_aux ? t->n_aux : 1) * sizeof(float));
    t->adam_m = calloc(np, sizeof(float));
    t->adam_v = calloc(np, sizeof(float));
    t->best = malloc(np * sizeof(float));
    t->val_z = malloc((size_t)(t->n_val ? t->n_val : 1) * sizeof(float));
    t->val_order = malloc((size_t)(t->n_val ? t->n_val : 1) * sizeof(int64_t));
    t->n_batches = (t->n_train + t->p.batch - 1) / t->p.batch;
    if (t->p.ema_decay > 0) {
        if (!(t->ema = malloc(np * sizeof(float)))) return tr_fail(TR_ERR_NOMEM, "out of memory for training");
        memcpy(t->ema, t->m.theta, np * sizeof(float));
    }
    if (!t->val_z || !t->val_order ||!t->wt || !t->chunk_grad || !t->chunk_loss || !t->chunk_correct || !t->work || !t->xbuf ||
        !t->ybuf || !t->wbuf || !t->zbuf || !t->abuf || !t->adam_m || !t->adam_v || !t->best)
        return tr_fail(TR_ERR_NOMEM, "out of memory for training");
    return TR_OK;
}

static void teardown(trainer *t) {
    void *ptrs[] = {t->x, t->y, t->w, t->train_idx, t->val_idx, t->mu, t->sd, t->wt, t->chunk_grad,
                    t->chunk_loss, t->chunk_correct, t->work, t->xbuf, t->ybuf, t->wbuf, t->zbuf, t->abuf, t->aux, t->adam_m,
                    t->adam_v, t->best, t->val_z, t->val_order, t->ema, t->ngram_loo};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free(ptrs[i]);
    ngram_table_free(t->ngram);
    thread_pool_free(t->pool);
    mlp_model_free(&t->m);
}

static void shuffle(int64_t *idx, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)(splitmix64(&s) % (uint64_t)(i + 1));
        const int64_t tmp = idx[i];
        idx[i] = idx[j];
        idx[j] = tmp;
    }
}

/* Exchanges the raw weights and their moving average (with ema_decay; nothing without). */
static void swap_in_average(trainer *t) {
    if (!t->ema) return;
    float *raw = t->m.theta;
    t->m.theta = t->ema;
    t->ema = raw;
}

/* *stopped_in: the epoch a stop was asked for in (0: none); the weights are then the best epoch's. */
static tr_status run_epochs(trainer *t, tr_train_result *res, int32_t *stopped_in) {
    double best_loss = INFINITY;
    /* The pairwise losses leave the score's scale free: their epochs are compared by the gain they capture. */
    const bool by_gain = t->p.select_by_gain || t->p.loss != TR_LOSS_BCE;
    int32_t since_best = 0;
    const int64_t n_batches = (t->n_train + t->p.batch - 1) / t->p.batch;
    for (int32_t epoch = 1; epoch <= t->p.epochs; epoch++) {
        shuffle(t->train_idx, t->n_train, t->p.seed * 1000003u + (uint64_t)epoch);
        double loss = 0;
        for (int64_t b = 0; b < n_batches; b++) {
            const int64_t first = b * t->p.batch;
            const int64_t rows = t->n_train - first < t->p.batch ? t->n_train - first : t->p.batch;
            loss += batch_step(t, t->train_idx + first, rows);
            if (t->p.progress && !t->p.progress(t->p.progress_user, b + 1, n_batches)) {
                if (res->best_epoch == 0)
                    return tr_fail(TR_ERR_STATE, "training stopped in epoch %d, before any epoch completed", (int)epoch);
                memcpy(t->m.theta, t->best, t->m.n_params * sizeof(float));
                *stopped_in = epoch;
                return TR_OK;
            }
        }
        tr_train_epoch e = {.epoch = epoch, .train_loss = loss / (double)t->n_train};
        if (!isfinite(e.train_loss)) return tr_fail(TR_ERR_STATE, "training diverged in epoch %d (try a lower learning rate)", (int)epoch);
        swap_in_average(t); /* with ema_decay, the average is what is scored and kept */
        if (t->n_val > 0) {
            evaluate(t, t->val_idx, t->n_val, t->val_z, &e.val_loss, &e.val_accuracy);
            e.val_gain_share = val_gain_share(t);
        } else {
            e.val_loss = e.train_loss;
        }
        const double criterion = by_gain && t->n_val > 0 ? -e.val_gain_share : e.val_loss;
        e.best = criterion < best_loss;
        res->epochs_run = epoch;
        if (e.best) {
            best_loss = criterion;
            res->best_val_gain_share = e.val_gain_share;
            since_best = 0;
            memcpy(t->best, t->m.theta, t->m.n_params * sizeof(float));
            res->best_epoch = epoch;
            res->best_val_loss = e.val_loss;
            res->best_val_accuracy = e.val_accuracy;
        } else {
            since_best++;
        }
        swap_in_average(t); /* back to the raw weights the steps go on from */
        if (t->p.on_epoch && !t->p.on_epoch(t->p.epoch_user, &e)) break;
        if (since_best >= t->p.patience) break;
    }
    memcpy(t->m.theta, t->best, t->m.n_params * sizeof(float));
    return TR_OK;
}

/* Folds x' = (x - mu) / sd into layer 0 (once, before the file is first written). */
static void fold_standardization(trainer *t) {
    mlp_model *m = &t->m;
    const int32_t n_in = m->sizes[0], n_out = m->sizes[1];
    float *w0 = m->theta + m->w_off[0], *b0 = m->theta + m->b_off[0];
    for (int32_t o = 0; o < n_out; o++) {
        double shift = 0;
        for (int32_t i = 0; i < n_in; i++) {
            const float w = w0[(size_t)o * n_in + i] / t->sd[i];
            w0[(size_t)o * n_in + i] = w;
            shift += (double)w * t->mu[i];
        }
        b0[o] = (float)(b0[o] - shift);
    }
}

/* The routing output only: the auxiliary outputs (rows 1.. of the last layer, after row 0) are left out, so the
 * file is the plain router a device evaluates. */
static tr_status write_router(const trainer *t, const char *path, float tau) {
    const mlp_model *m = &t->m;
    const float *weights[ROUTER_TRAIN_MAX_LAYERS], *biases[ROUTER_TRAIN_MAX_LAYERS];
    int32_t sizes[ROUTER_TRAIN_MAX_LAYERS + 1];
    for (int32_t l = 0; l < m->n_layers; l++) {
        weights[l] = m->theta + m->w_off[l];
        biases[l] = m->theta + m->b_off[l];
    }
    for (int32_t l = 0; l <= m->n_layers; l++) sizes[l] = l == m->n_layers ? 1 : m->sizes[l];
    const tr_mlp_router_desc desc = {.n_layers = m->n_layers, .sizes = sizes, .weights = weights,
                                     .biases = biases, .features = t->p.features, .tau = tau,
                                     .slm_name = t->d->slm_name, .slm_n_embd = t->d->n_embd,
                                     .slm_n_vocab = t->d->n_vocab, .topk = t->p.topk, .context = t->p.context,
                                     .ngram = t->ngram};
    return tr_router_write_mlp(&desc, path);
}

/* Fails now, not after the training, when the file cannot be written; leaves an existing file as it was. */
static tr_status check_output(const char *path) {
    const bool existed = access(path, F_OK) == 0;
    FILE *f = fopen(path, "ab");
    if (!f) return tr_fail(TR_ERR_IO, "cannot write the router file %s: %s", path, strerror(errno));
    fclose(f);
    if (!existed) remove(path);
    return TR_OK;
}

/* The τ that routes target_routed of the held-out positions, by the router just written to path. */
static tr_status calibrate_tau(const trainer *t, const char *path, float *tau, double *routed) {
    tr_router *router = NULL;
    tr_status st = tr_router_load(path, NULL, &router);
    if (st == TR_OK && t->p.slm) st = tr_router_set_slm(router, t->p.slm);
    if (st == TR_OK) st = tr_calibrate(router, t->p.calibration, t->p.target_routed, tau, routed);
    tr_router_free(router);
    return st;
}

/* The τ that routes target_routed of the validation split (before the standardization is folded in). */
static float validation_tau(trainer *t) {
    double loss, accuracy;
    evaluate(t, t->val_idx, t->n_val, t->val_z, &loss, &accuracy);
    for (int64_t j = 0; j < t->n_val; j++) t->val_order[j] = j;
    sort_logits = t->val_z;
    qsort(t->val_order, (size_t)t->n_val, sizeof *t->val_order, by_logit);
    const int64_t k = (int64_t)floor(t->p.target_routed * (double)t->n_val + 0.5);
    if (k >= t->n_val) return 1.0f;
    const double z = t->val_z[t->val_order[k]];
    return (float)(1.0 / (1.0 + exp(-z)));
}

/* Writes the trained network (the best epoch's weights), with the calibrated τ when asked. A pairwise loss leaves
 * 0.5 meaningless: without held-out data its τ is the validation split's for target_routed. */
static tr_status write_output(trainer *t, const char *path, tr_train_result *res) {
    if (t->p.loss != TR_LOSS_BCE && !t->p.calibration && t->n_val > 0) t->p.tau = validation_tau(t);
    fold_standardization(t);
    res->tau = t->p.tau;
    tr_status st = write_router(t, path, t->p.tau);
    if (st == TR_OK && t->p.calibration) {
        st = calibrate_tau(t, path, &res->tau, &res->calibration_routed);
        if (st == TR_OK) st = write_router(t, path, res->tau);
        else res->tau = t->p.tau;
    }
    return st;
}

tr_status tr_train_router(const tr_train_data *data, const tr_train_params *params, const char *out_path,
                          tr_train_result *result) {
    if (!data || !out_path) return tr_fail(TR_ERR_ARG, "tr_train_router: NULL argument");
    trainer t;
    memset(&t, 0, sizeof t);
    t.d = data;
    t.p = params ? *params : tr_train_default_params();
    tr_train_result res;
    memset(&res, 0, sizeof res);
    int32_t stopped_in = 0;
    tr_status st = check_params(&t.p, data);
    if (st == TR_OK && t.p.calibration && !(t.p.target_routed >= 0 && t.p.target_routed <= 1))
        st = tr_fail(TR_ERR_ARG, "target_routed %g is outside [0, 1]", t.p.target_routed);
    if (st == TR_OK) st = check_output(out_path);
    if (st == TR_OK) st = setup(&t);
    if (st == TR_OK) {
        res.n_train = t.n_train;
        res.n_val = t.n_val;
        res.n_dropped = data->n - t.n_lab;
        double n1 = 0;
        for (int64_t j = 0; j < t.n_train; j++) n1 += t.y[t.train_idx[j]];
        res.positive_share = n1 / (double)t.n_train;
        res.ngram_contexts = ngram_table_contexts(t.ngram);
        res.ngram_seconds = t.ngram_seconds;
        res.ngram_bytes = ngram_table_bytes(t.ngram);
        res.ngram_tokens = t.ngram_tokens;
        st = run_epochs(&t, &res, &stopped_in);
    }
    if (st == TR_OK) st = write_output(&t, out_path, &res);
    if (st == TR_OK && stopped_in)
        st = tr_fail(TR_ERR_STATE, "training stopped in epoch %d; the best epoch so far (%d) was written to %s",
                     (int)stopped_in, (int)res.best_epoch, out_path);
    teardown(&t);
    if (result) *result = res;
    return st;
}
