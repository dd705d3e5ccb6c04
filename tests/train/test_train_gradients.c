/* test_train_gradients.c — the trainer's backward pass against central finite differences of the class-weighted
 * BCE and of the pairwise ranking loss (alone and with the BCE), on 3-layer nets (ReLU between layers; one wider than
 * the product's 64-column tiles) and on a single layer (logistic regression), with rows of both
 * labels and unequal weights; with dropout (a fixed mask) likewise; and the loss itself against its formula. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "train/trainer_internal.h"

#define ROWS 7

#define MAX_AUX 4

/* The network's outputs for one input row, in double from theta's layout (W_l [out][in] row-major, then b_l). */
static void reference_outputs(const mlp_model *m, const float *x, double *out) {
    double a[128], b[128];
    for (int32_t i = 0; i < m->sizes[0]; i++) a[i] = x[i];
    for (int32_t l = 0; l < m->n_layers; l++) {
        const int32_t n_in = m->sizes[l], n_out = m->sizes[l + 1];
        for (int32_t o = 0; o < n_out; o++) {
            double v = m->theta[m->b_off[l] + (size_t)o];
            for (int32_t i = 0; i < n_in; i++) v += (double)m->theta[m->w_off[l] + (size_t)o * n_in + i] * a[i];
            b[o] = l + 1 < m->n_layers && v < 0 ? 0 : v;
        }
        memcpy(a, b, (size_t)n_out * sizeof *a);
    }
    memcpy(out, a, (size_t)m->sizes[m->n_layers] * sizeof *out);
}

/* The loss from its definition, row by row: BCE per row, the pairwise part over every ordered pair, and the
 * auxiliary outputs' BCE against aux [ROWS][n_aux], times aux_weight. The trainer's own forward pass must agree
 * on the routing logit. */
static double loss_sum(const mlp_model *m, float *wt, const float *x, const float *y, const float *w,
                       const float *aux, float aux_weight, tr_train_loss loss, float *work) {
    double z[ROWS], s = 0, out[1 + MAX_AUX];
    const int32_t n_aux = m->sizes[m->n_layers] - 1;
    mlp_model_transpose_weights(m, wt); /* theta may have just been nudged */
    for (int r = 0; r < ROWS; r++) {
        reference_outputs(m, x + r * m->sizes[0], out);
        z[r] = out[0];
        assert_float_equal(mlp_model_logit(m, wt, x + r * m->sizes[0], work), z[r], 1e-4 * (1 + fabs(z[r])));
        for (int32_t a = 0; a < n_aux; a++) s += bce_weighted((float)out[1 + a], aux[r * n_aux + a], aux_weight);
    }
    for (int r = 0; r < ROWS && loss != TR_LOSS_PAIRWISE; r++) s += bce_weighted((float)z[r], y[r], w[r]);
    for (int r = 0; r < ROWS && loss != TR_LOSS_BCE; r++)
        for (int q = 0; q < ROWS; q++) {
            const double gain_r = 1 - 2.0 * y[r], gain_q = 1 - 2.0 * y[q]; /* the higher gain should score lower */
            if (gain_r > gain_q) s += (gain_r - gain_q) * log1p(exp(z[r] - z[q])) / (ROWS - 1);
        }
    return s;
}

/* sizes[n_layers] - 1 auxiliary outputs (multi-task) weighted aux_weight. */
static void check_gradients_aux(int32_t n_layers, const int32_t *sizes, tr_train_loss loss_kind, float aux_weight) {
    mlp_model m;
    assert_int_equal(mlp_model_init(&m, n_layers, sizes, 42), TR_OK);
    uint64_t rng = 7;
    /* Biases spread around 0, so some units are off for some rows. */
    for (int32_t l = 0; l < n_layers; l++)
        for (int32_t o = 0; o < sizes[l + 1]; o++)
            m.theta[m.b_off[l] + (size_t)o] = (float)((double)(splitmix64(&rng) >> 11) / 9007199254740992.0 - 0.3);
    float x[ROWS * 16], y[ROWS], w[ROWS], aux[ROWS * MAX_AUX];
    for (int i = 0; i < ROWS * sizes[0]; i++) x[i] = (float)(2.0 * (double)(splitmix64(&rng) >> 11) / 9007199254740992.0 - 1);
    for (int r = 0; r < ROWS; r++) {
        y[r] = loss_kind == TR_LOSS_BCE ? (float)(r % 2) : (float)(r % 3) * 0.25f; /* soft: ties and order */
        w[r] = r % 2 ? 0.75f : 1.6f;
    }
    for (int i = 0; i < ROWS * MAX_AUX; i++) aux[i] = (float)((double)(splitmix64(&rng) >> 11) / 9007199254740992.0);
    float *work = malloc(mlp_work_floats(&m, ROWS) * sizeof(float));
    float *wt = malloc(m.n_params * sizeof(float)), *grad = calloc(m.n_params, sizeof(float));
    float *wt_fd = malloc(m.n_params * sizeof(float)); /* loss_sum's own: wt stays the unperturbed weights' */
    mlp_model_transpose_weights(&m, wt);
    const double scale = 1.0 / ROWS;
    const double loss = mlp_model_grad(&m, wt, x, y, w, aux, aux_weight, ROWS, loss_kind, scale, grad, work);
    assert_float_equal(loss, loss_sum(&m, wt_fd, x, y, w, aux, aux_weight, loss_kind, work), 1e-4);
    int checked = 0;
    for (size_t k = 0; k < m.n_params; k++) {
        /* Central differences at h = 1e-3, and at 1e-4 where a ReLU of some row turns within the wider step (the
         * wider layers of test_wide_layers have units that close to 0); either must match. */
        double numeric[2];
        for (int s = 0; s < 2; s++) {
            const float keep = m.theta[k], h = s == 0 ? 1e-3f : 1e-4f;
            m.theta[k] = keep + h;
            const double up = loss_sum(&m, wt_fd, x, y, w, aux, aux_weight, loss_kind, work);
            m.theta[k] = keep - h;
            const double down = loss_sum(&m, wt_fd, x, y, w, aux, aux_weight, loss_kind, work);
            m.theta[k] = keep;
            numeric[s] = (up - down) / (2.0 * h) * scale;
        }
        bool close = false;
        for (int s = 0; s < 2; s++) close |= fabs(numeric[s] - grad[k]) <= 2e-3 + 2e-2 * fabs(numeric[s]);
        if (!close) print_error("parameter %zu: analytic %.6f, numeric %.6f (h 1e-3), %.6f (h 1e-4)\n", k,
                                (double)grad[k], numeric[0], numeric[1]);
        assert_true(close);
        checked++;
    }
    assert_int_equal(checked, (int)m.n_params);
    /* The gradient accumulates: a second call adds the same amounts. */
    float *twice = malloc(m.n_params * sizeof(float));
    memcpy(twice, grad, m.n_params * sizeof(float));
    mlp_model_grad(&m, wt, x, y, w, aux, aux_weight, ROWS, loss_kind, scale, twice, work);
    for (size_t k = 0; k < m.n_params; k++) assert_float_equal(twice[k], 2 * grad[k], 1e-5 + 1e-5 * fabs(grad[k]));
    free(twice);
    free(work);
    free(wt);
    free(grad);
    free(wt_fd);
    mlp_model_free(&m);
}

static void check_gradients(int32_t n_layers, const int32_t *sizes, tr_train_loss loss_kind) {
    check_gradients_aux(n_layers, sizes, loss_kind, 0);
}

static void test_three_layers(void **state) {
    (void)state;
    const int32_t sizes[4] = {6, 9, 5, 1};
    check_gradients(3, sizes, TR_LOSS_BCE);
}

/* Four more outputs fitted to targets in [0, 1] next to the routing logit: their BCE adds to the loss and its
 * gradient flows back through the shared layers. */
static void test_auxiliary_outputs(void **state) {
    (void)state;
    const int32_t sizes[4] = {6, 9, 5, 1 + MAX_AUX};
    check_gradients_aux(3, sizes, TR_LOSS_BCE, 0.7f);
    check_gradients_aux(3, sizes, TR_LOSS_PAIRWISE_BCE, 2.0f);
}

/* Layers wider than one register tile (64 columns) and row counts that leave partial tiles. */
static void test_wide_layers(void **state) {
    (void)state;
    const int32_t sizes[4] = {13, 70, 67, 1};
    check_gradients(3, sizes, TR_LOSS_BCE);
}

static void test_pairwise(void **state) {
    (void)state;
    const int32_t sizes[4] = {6, 9, 5, 1};
    check_gradients(3, sizes, TR_LOSS_PAIRWISE);
    check_gradients(3, sizes, TR_LOSS_PAIRWISE_BCE);
    const int32_t one[2] = {11, 1};
    check_gradients(1, one, TR_LOSS_PAIRWISE);
    /* Only the order counts: a pair already ranked by a wide margin costs little, the reverse a lot; equal gains
     * cost nothing. */
    const float y[2] = {0.0f, 0.5f}, w[2] = {1, 1}; /* row 0 has the higher gain (1 against 0) */
    assert_true(block_loss(TR_LOSS_PAIRWISE, (const float[]){-5, 5}, y, w, 2, NULL) < 1e-4);
    assert_float_equal(block_loss(TR_LOSS_PAIRWISE, (const float[]){5, -5}, y, w, 2, NULL), 10.0, 1e-3);
    const float same[2] = {0.25f, 0.25f};
    assert_float_equal(block_loss(TR_LOSS_PAIRWISE, (const float[]){5, -5}, same, w, 2, NULL), 0.0, 0);
    float dz[2];
    block_loss(TR_LOSS_PAIRWISE, (const float[]){0, 0}, y, w, 2, dz);
    assert_float_equal(dz[0], 0.5, 1e-6); /* pushes row 0 down, row 1 up */
    assert_float_equal(dz[1], -0.5, 1e-6);
    tr_train_loss l;
    assert_int_equal(tr_train_loss_from_name("pairwise+bce", &l), TR_OK);
    assert_int_equal(l, TR_LOSS_PAIRWISE_BCE);
    assert_string_equal(tr_train_loss_name(TR_LOSS_PAIRWISE), "pairwise");
    assert_int_equal(tr_train_loss_from_name("hinge", &l), TR_ERR_ARG);
}

static void test_logistic_regression(void **state) {
    (void)state;
    const int32_t sizes[2] = {11, 1};
    check_gradients(1, sizes, TR_LOSS_BCE);
}

/* Dropout: for a fixed mask (the same mask_seed) the loss is a function of theta whose derivative is the gradient
 * returned (central differences of the returned loss); rate 0 is mlp_model_grad; another seed, another mask. */
static void test_dropout(void **state) {
    (void)state;
    const int32_t sizes[4] = {6, 12, 9, 1};
    mlp_model m;
    assert_int_equal(mlp_model_init(&m, 3, sizes, 11), TR_OK);
    uint64_t rng = 3;
    for (int32_t l = 0; l < 3; l++)
        for (int32_t o = 0; o < sizes[l + 1]; o++)
            m.theta[m.b_off[l] + (size_t)o] = (float)((double)(splitmix64(&rng) >> 11) / 9007199254740992.0 - 0.2);
    float x[ROWS * 6], y[ROWS], w[ROWS];
    for (int i = 0; i < ROWS * 6; i++) x[i] = (float)(2.0 * (double)(splitmix64(&rng) >> 11) / 9007199254740992.0 - 1);
    for (int r = 0; r < ROWS; r++) {
        y[r] = (float)(r % 3) * 0.4f;
        w[r] = 1.0f;
    }
    float *work = malloc(mlp_work_floats(&m, ROWS) * sizeof(float));
    float *wt = malloc(m.n_params * sizeof(float)), *grad = calloc(m.n_params, sizeof(float));
    float *scratch = calloc(m.n_params, sizeof(float)), *plain = calloc(m.n_params, sizeof(float));
    const float rate = 0.3f;
    const uint64_t seed = 12345;
    mlp_model_transpose_weights(&m, wt);
    const double loss = mlp_model_grad_dropout(&m, wt, x, y, w, NULL, 0, ROWS, TR_LOSS_BCE, 1.0, grad, work, rate, seed);
    const double again = mlp_model_grad_dropout(&m, wt, x, y, w, NULL, 0, ROWS, TR_LOSS_BCE, 1.0, scratch, work, rate, seed);
    assert_float_equal(loss, again, 0);
    const double other = mlp_model_grad_dropout(&m, wt, x, y, w, NULL, 0, ROWS, TR_LOSS_BCE, 1.0, scratch, work, rate, seed + 1);
    assert_true(other != loss);
    const double no_drop = mlp_model_grad(&m, wt, x, y, w, NULL, 0, ROWS, TR_LOSS_BCE, 1.0, plain, work);
    memset(scratch, 0, m.n_params * sizeof(float));
    assert_float_equal(mlp_model_grad_dropout(&m, wt, x, y, w, NULL, 0, ROWS, TR_LOSS_BCE, 1.0, scratch, work, 0, seed),
                       no_drop, 0);
    assert_memory_equal(scratch, plain, m.n_params * sizeof(float));
    assert_true(no_drop != loss);
    for (size_t k = 0; k < m.n_params; k++) {
        double numeric[2];
        for (int s = 0; s < 2; s++) {
            const float keep = m.theta[k], h = s == 0 ? 1e-3f : 1e-4f;
            double at[2];
            for (int side = 0; side < 2; side++) {
                m.theta[k] = keep + (side ? -h : h);
                mlp_model_transpose_weights(&m, wt);
                at[side] = mlp_model_grad_dropout(&m, wt, x, y, w, NULL, 0, ROWS, TR_LOSS_BCE, 1.0, scratch, work, rate,
                                                  seed);
            }
            m.theta[k] = keep;
            numeric[s] = (at[0] - at[1]) / (2.0 * h);
        }
        bool close = false;
        for (int s = 0; s < 2; s++) close |= fabs(numeric[s] - grad[k]) <= 2e-3 + 2e-2 * fabs(numeric[s]);
        if (!close) print_error("parameter %zu: analytic %.6f, numeric %.6f / %.6f\n", k, (double)grad[k], numeric[0],
                                numeric[1]);
        assert_true(close);
    }
    free(work);
    free(wt);
    free(grad);
    free(scratch);
    free(plain);
    mlp_model_free(&m);
}

static void test_bce_formula(void **state) {
    (void)state;
    /* w (log(1 + e^z) - y z): at z = 0 both labels cost w ln 2; large |z| does not overflow. */
    assert_float_equal(bce_weighted(0.0f, 1.0f, 2.0f), 2 * log(2.0), 1e-12);
    assert_float_equal(bce_weighted(0.0f, 0.0f, 1.0f), log(2.0), 1e-12);
    assert_float_equal(bce_weighted(2.0f, 1.0f, 1.0f), log1p(exp(-2.0)), 1e-12);
    assert_float_equal(bce_weighted(2.0f, 0.0f, 1.0f), 2.0 + log1p(exp(-2.0)), 1e-12);
    assert_float_equal(bce_weighted(1000.0f, 0.0f, 1.0f), 1000.0, 1e-9);
    assert_float_equal(bce_weighted(-1000.0f, 0.0f, 1.0f), 0.0, 1e-12);
    assert_true(isfinite(bce_weighted(-1000.0f, 1.0f, 1.0f)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_layers),
        cmocka_unit_test(test_wide_layers),
        cmocka_unit_test(test_auxiliary_outputs),
        cmocka_unit_test(test_logistic_regression),
        cmocka_unit_test(test_pairwise),
        cmocka_unit_test(test_bce_formula),
        cmocka_unit_test(test_dropout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
