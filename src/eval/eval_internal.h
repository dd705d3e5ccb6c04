/* eval_internal.h — the pieces of tr_eval_run: per-position data of the teacher-forced pass, the metrics computed
 * from it (τ for a target share, accuracy of the routed choice, the oracle), routed generation per configuration,
 * and the writers (CSV, JSON, SVG). The metric functions are pure, so tests check them on hand-made arrays. */
#ifndef TR_EVAL_INTERNAL_H
#define TR_EVAL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "eval/dataset.h"
#include "tokroute.h"

enum { EVAL_MAX_POLICIES = 6 }; /* router, maxprob, margin, entropy, random, oracle */
enum { EVAL_LLM_TOPK = 20 };     /* the LLM's top ids read per position: its p(SLM's top-1) is 0 outside them */

/* ---------------------------------------------------------------- metrics (metrics.c) */

/* One policy's scores sorted ascending, with gain_prefix[k] = sum over the k lowest-scored positions of
 * (llm_ok - slm_ok), so the accuracy of routing them is (slm_correct + gain_prefix[k]) / n. */
typedef struct eval_curve {
    int64_t n;
    float *sorted;
    int64_t *gain_prefix; /* n + 1 */
    int64_t slm_correct, llm_correct;
} eval_curve;

tr_status eval_curve_build(const float *scores, const uint8_t *slm_ok, const uint8_t *llm_ok, int64_t n,
                           eval_curve *out);
void eval_curve_free(eval_curve *c);
/* The expected gain of routing one position: p(l) - p(s) under the LLM's distribution, l its top-1 (top[0]) and s
 * the SLM's top-1, p(s) read from the LLM's top list (0 outside it, as collect's label). */
float eval_expected_gain(const tr_llm_position *lp, int32_t slm_top1);
/* Positions with score < tau. */
int64_t eval_curve_count_below(const eval_curve *c, float tau);
/* The τ whose routed count (score < τ) is closest to share·n: a group of equal scores is routed whole or not at
 * all; on a draw the smaller count wins. *n_routed gets the count. n = 0 gives τ 0 and count 0. */
float eval_tau_for_share(const eval_curve *c, double share, int64_t *n_routed);
/* Accuracy when the k lowest-scored positions are routed (ties in position order). */
double eval_curve_accuracy_routing(const eval_curve *c, int64_t k);
/* Accuracy when the positions scored below tau are routed. */
double eval_curve_accuracy_at(const eval_curve *c, float tau);
/* (acc - slm) / (llm - slm); NAN when llm == slm. */
double eval_gap_closed(double acc, double slm, double llm);
/* The oracle's accuracy at a budget: routes only positions where the SLM is wrong and the LLM right (n_gain of
 * them), at most floor(share·n + 0.5); *n_routed gets how many. */
double eval_oracle_accuracy(int64_t n, int64_t slm_correct, int64_t n_gain, double share, int64_t *n_routed);
/* The random policy's score of position i: uniform in [0, 1) from (seed, i). */
float eval_random_score(uint64_t seed, int64_t i);

/* ---------------------------------------------------------------- teacher-forced pass (teacher.c) */

typedef struct eval_positions {
    int64_t n, cap;
    uint8_t *slm_ok, *llm_ok;
    float *expected_gain;            /* p(l) - p(s) under the LLM's distribution p: the bound's ranking */
    float *score[EVAL_MAX_POLICIES]; /* per policy with a router (not random/oracle, filled by eval.c) */
    int64_t n_examples;
} eval_positions;

typedef struct eval_models {
    const tr_model *slm;
    const tr_model *llm_model;       /* the LLM in this process (NULL: only a backend) */
    tr_llm_backend *llm;             /* the LLM's scoring and, unless llm_model is given, generation */
    int32_t n_shared;                /* ids both vocabularies share; the LLM chooses among them */
    tr_router *routers[EVAL_MAX_POLICIES]; /* NULL where the policy has no router (random, oracle) */
    int32_t n_policies;
    tr_chat_template tmpl;
    int32_t n_threads;
} eval_models;

/* Tokens an example may span: the SLM context's size, and the embedded LLM's when smaller (a remote LLM's context is
 * its server's business: a sequence it cannot hold comes back as an error). */
int32_t eval_n_ctx(const eval_models *m, const tr_context *slm_ctx);
typedef void (*eval_progress_fn)(void *user, double fraction);

tr_status eval_teacher_forced(const eval_models *m, const dataset *d, int32_t max_target, eval_positions *out,
                              eval_progress_fn progress, void *user);
void eval_positions_free(eval_positions *p);

/* ---------------------------------------------------------------- routed generation (generate.c) */

/* One generation run over all examples: a mode, and in joint mode a policy and τ. */
typedef struct eval_gen_config {
    tr_route_mode mode;
    int32_t policy;          /* -1 outside joint mode */
    int32_t target;          /* index of the target share, -1 outside joint mode */
    float tau;               /* the teacher-forced τ for the target (where a controlled run starts) */
    bool controlled;         /* τ follows the routed share in generation (tr_route_params.target_routed) */
    double target_share;     /* the target's share (joint mode) */
    /* results */
    int64_t n_examples, n_skipped, n_correct;  /* skipped: the prompt does not fit the context */
    int64_t n_tokens, n_routed;
    double nll_sum;          /* text: negative log-likelihood of the generated tokens under the LLM */
    int64_t n_nll;
    double slm_ms, llm_ms, total_ms, ttft_ms_sum, tbt_ms_sum;
    int64_t n_tbt;           /* runs with a mean TBT (two tokens or more) */
} eval_gen_config;

typedef struct eval_gen_params {
    int32_t max_new_tokens;
    int32_t prompt_tokens;   /* text */
} eval_gen_params;

tr_status eval_generate(const eval_models *m, const dataset *d, const eval_gen_params *gp, eval_gen_config *cfg,
                        int32_t n_cfg, eval_progress_fn progress, void *user);

/* ---------------------------------------------------------------- the result (eval.c) and writers */

typedef struct eval_sweep_point {
    float tau;
    double routed, accuracy;
} eval_sweep_point;

struct tr_eval {
    tr_eval_params params;
    char *data_path, *router_path, *format_name;
    dataset_format fmt;
    int64_t n_loaded;        /* examples in the range (some may have had nothing to score) */
    tr_eval_summary summary;
    int32_t n_policies;      /* oracle included (last) */
    const char *names[EVAL_MAX_POLICIES];
    tr_eval_point points[EVAL_MAX_POLICIES][TR_EVAL_MAX_TARGETS];
    eval_sweep_point *tau_sweep[EVAL_MAX_POLICIES];   /* n_sweep points on the τ grid (not the oracle) */
    eval_sweep_point *share_sweep[EVAL_MAX_POLICIES]; /* EVAL_SHARE_STEPS + 1 points, 0..100% */
    int32_t n_sweep;
    eval_gen_config *gen;
    int32_t n_gen;
    bool generated;
};

enum { EVAL_SHARE_STEPS = 100 };

/* Writers (report.c, svg.c). */
tr_status eval_write_csv(const tr_eval *e, const char *dir);
tr_status eval_write_svg_plots(const tr_eval *e, const char *dir);

/* A line chart as SVG: series of (x, y) points with names; axes from x_min..x_max, y_min..y_max with ticks,
 * axis labels, a title and a legend. dashed marks reference series. */
typedef struct svg_series {
    const char *name;
    const double *x, *y;
    int32_t n;
    bool dashed;
} svg_series;

typedef struct svg_chart {
    const char *title, *x_label, *y_label;
    double x_min, x_max, y_min, y_max;
    bool x_percent, y_percent; /* tick labels as percentages of 1 */
    const svg_series *series;
    int32_t n_series;
} svg_chart;

tr_status svg_write_chart(FILE *f, const svg_chart *c);

#endif /* TR_EVAL_INTERNAL_H */
