/* eval.c — tr_eval_run: loads the dataset, builds the policies' routers, runs the teacher-forced pass, computes
 * each policy's points and sweeps from the per-position arrays (metrics.c), then runs routed generation at the τ
 * found for each target (generate.c). The result object owns everything the writers (report.c, svg.c) need.
 *
 * The random policy has no tr_router: its scores are drawn per position from the seed, so it exists only at token
 * level. The oracle has no score at all: it routes the positions where routing helps, up to the budget. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "eval/eval_internal.h"

tr_eval_params tr_eval_default_params(void) {
    tr_eval_params p;
    memset(&p, 0, sizeof p);
    p.format = "text";
    p.end = -1;
    p.target_routed[0] = 0.05;
    p.target_routed[1] = 0.10;
    p.target_routed[2] = 0.20;
    p.n_targets = 3;
    p.max_target_tokens = 255;
    p.n_sweep = 101;
    p.seed = 1234;
    p.generate = true;
    p.prompt_tokens = 16;
    p.chat_template = TR_CHAT_NONE;
    p.n_threads = 1;
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *dup_or_null(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static tr_status check_params(const tr_eval_params *p) {
    if (!p->data_path) return tr_fail(TR_ERR_ARG, "eval: no dataset given");
    if (p->n_targets < 0 || p->n_targets > TR_EVAL_MAX_TARGETS)
        return tr_fail(TR_ERR_ARG, "eval: %d target shares (at most %d)", p->n_targets, TR_EVAL_MAX_TARGETS);
    for (int32_t i = 0; i < p->n_targets; i++)
        if (!(p->target_routed[i] >= 0 && p->target_routed[i] <= 1))
            return tr_fail(TR_ERR_ARG, "eval: target routed share %g is not in [0, 1]", p->target_routed[i]);
    if (p->max_target_tokens < 1) return tr_fail(TR_ERR_ARG, "eval: max_target_tokens must be at least 1");
    if (p->n_sweep < 2 || p->n_sweep > 100000) return tr_fail(TR_ERR_ARG, "eval: n_sweep must be in [2, 100000]");
    if (p->max_new_tokens < 0 || p->prompt_tokens < 1)
        return tr_fail(TR_ERR_ARG, "eval: max_new_tokens must be >= 0 and prompt_tokens >= 1");
    if (p->n_threads < 0) return tr_fail(TR_ERR_ARG, "eval: n_threads must be >= 0");
    return TR_OK;
}

typedef struct stage_progress {
    const tr_eval_params *p;
    const char *stage;
} stage_progress;

static void report_stage(void *user, double fraction) {
    const stage_progress *s = user;
    if (s->p->progress) s->p->progress(s->p->progress_user, s->stage, fraction);
}

/* The routers of the scored policies and their names; random and oracle follow without a router. */
static tr_status make_policies(tr_eval *e, const tr_model *slm, eval_models *m) {
    int32_t k = 0;
    tr_status st = TR_OK;
    if (e->router_path) {
        st = tr_router_load(e->router_path, tr_model_get_info(slm), &m->routers[k]);
        if (st == TR_OK) st = tr_router_set_slm(m->routers[k], slm); /* token-embedding feature */
        if (st != TR_OK) return st;
        tr_router_set_threads(m->routers[k], m->n_threads > 0 ? m->n_threads : 1);
        e->names[k++] = "router";
    }
    const tr_policy builtin[] = {TR_POLICY_MAXPROB, TR_POLICY_MARGIN, TR_POLICY_ENTROPY};
    for (int i = 0; i < 3 && st == TR_OK; i++) {
        st = tr_router_create(builtin[i], &m->routers[k]);
        e->names[k++] = tr_policy_name(builtin[i]);
    }
    e->names[k++] = "random";
    e->names[k++] = "oracle";
    e->n_policies = m->n_policies = k;
    return st;
}

/* The bound beside every point: routing the positions of largest expected gain, as many as the policy routed. */
static tr_status bound_points(tr_eval *e, const eval_positions *pos) {
    const int64_t n = pos->n;
    float *neg = malloc((size_t)(n ? n : 1) * sizeof *neg);
    if (!neg) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    for (int64_t i = 0; i < n; i++) neg[i] = -pos->expected_gain[i];
    eval_curve c;
    tr_status st = eval_curve_build(neg, pos->slm_ok, pos->llm_ok, n, &c);
    free(neg);
    if (st != TR_OK) return tr_fail_prefix(st, "the bound");
    const tr_eval_summary *s = &e->summary;
    for (int32_t k = 0; k < e->n_policies; k++)
        for (int32_t t = 0; t < e->params.n_targets; t++) {
            tr_eval_point *p = &e->points[k][t];
            const int64_t routed = (int64_t)llround(p->routed * (double)n);
            p->bound_gap_closed = eval_gap_closed(eval_curve_accuracy_routing(&c, routed), s->slm_accuracy,
                                                  s->llm_accuracy);
            p->share_of_bound = p->bound_gap_closed > 0 ? p->gap_closed / p->bound_gap_closed : NAN;
        }
    eval_curve_free(&c);
    return TR_OK;
}

static tr_status token_metrics(tr_eval *e, eval_positions *pos) {
    const int64_t n = pos->n;
    const int32_t k_random = e->n_policies - 2, k_oracle = e->n_policies - 1;
    for (int64_t i = 0; i < n; i++) pos->score[k_random][i] = eval_random_score(e->params.seed, i);
    int64_t n_gain = 0, n_either = 0, slm_correct = 0, llm_correct = 0;
    for (int64_t i = 0; i < n; i++) {
        n_gain += !pos->slm_ok[i] && pos->llm_ok[i];
        n_either += pos->slm_ok[i] || pos->llm_ok[i];
        slm_correct += pos->slm_ok[i];
        llm_correct += pos->llm_ok[i];
    }
    tr_eval_summary *s = &e->summary;
    s->n_positions = n;
    s->slm_accuracy = n ? (double)slm_correct / (double)n : NAN;
    s->llm_accuracy = n ? (double)llm_correct / (double)n : NAN;
    s->best_of_both = n ? (double)n_either / (double)n : NAN;
    for (int32_t k = 0; k < e->n_policies; k++) {
        e->share_sweep[k] = calloc(EVAL_SHARE_STEPS + 1, sizeof *e->share_sweep[k]);
        e->tau_sweep[k] = calloc((size_t)e->n_sweep, sizeof *e->tau_sweep[k]);
        if (!e->share_sweep[k] || !e->tau_sweep[k]) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    }
    for (int32_t k = 0; k < k_oracle; k++) {
        eval_curve c;
        tr_status st = eval_curve_build(pos->score[k], pos->slm_ok, pos->llm_ok, n, &c);
        if (st != TR_OK) return tr_fail_prefix(st, "policy %s", e->names[k]);
        for (int32_t t = 0; t < e->params.n_targets; t++) {
            tr_eval_point *p = &e->points[k][t];
            int64_t routed;
            p->target_routed = e->params.target_routed[t];
            p->tau = eval_tau_for_share(&c, p->target_routed, &routed);
            p->routed = n ? (double)routed / (double)n : NAN;
            p->accuracy = eval_curve_accuracy_at(&c, p->tau);
            p->gap_closed = eval_gap_closed(p->accuracy, s->slm_accuracy, s->llm_accuracy);
        }
        for (int32_t j = 0; j <= EVAL_SHARE_STEPS; j++) {
            eval_sweep_point *q = &e->share_sweep[k][j];
            int64_t routed;
            q->tau = eval_tau_for_share(&c, (double)j / EVAL_SHARE_STEPS, &routed);
            q->routed = n ? (double)routed / (double)n : NAN;
            q->accuracy = eval_curve_accuracy_at(&c, q->tau);
        }
        for (int32_t j = 0; j < e->n_sweep; j++) {
            eval_sweep_point *q = &e->tau_sweep[k][j];
            q->tau = (float)j / (float)(e->n_sweep - 1);
            q->routed = n ? (double)eval_curve_count_below(&c, q->tau) / (double)n : NAN;
            q->accuracy = eval_curve_accuracy_at(&c, q->tau);
        }
        eval_curve_free(&c);
    }
    for (int32_t t = 0; t < e->params.n_targets; t++) {
        tr_eval_point *p = &e->points[k_oracle][t];
        int64_t routed;
        p->target_routed = e->params.target_routed[t];
        p->tau = NAN;
        p->accuracy = eval_oracle_accuracy(n, slm_correct, n_gain, p->target_routed, &routed);
        p->routed = n ? (double)routed / (double)n : NAN;
        p->gap_closed = eval_gap_closed(p->accuracy, s->slm_accuracy, s->llm_accuracy);
    }
    tr_status st = bound_points(e, pos);
    if (st != TR_OK) return st;
    for (int32_t j = 0; j <= EVAL_SHARE_STEPS; j++) {
        eval_sweep_point *q = &e->share_sweep[k_oracle][j];
        int64_t routed;
        q->tau = NAN;
        q->accuracy = eval_oracle_accuracy(n, slm_correct, n_gain, (double)j / EVAL_SHARE_STEPS, &routed);
        q->routed = n ? (double)routed / (double)n : NAN;
    }
    return TR_OK;
}

/* SLM alone, LLM alone, then every policy with a router at every target's τ. */
static tr_status generation(tr_eval *e, const eval_models *m, const dataset *d, const tr_eval_params *caller) {
    const int32_t n_scored = e->n_policies - 2;
    /* Each policy at each target twice: at the teacher-forced τ alone, and with τ following the routed share. */
    e->n_gen = 2 + 2 * n_scored * e->params.n_targets;
    e->gen = calloc((size_t)e->n_gen, sizeof *e->gen);
    if (!e->gen) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    e->gen[0] = (eval_gen_config){.mode = TR_MODE_SLM, .policy = -1, .target = -1, .tau = NAN};
    e->gen[1] = (eval_gen_config){.mode = TR_MODE_LLM, .policy = -1, .target = -1, .tau = NAN};
    int32_t g = 2;
    for (int32_t k = 0; k < n_scored; k++)
        for (int32_t t = 0; t < e->params.n_targets; t++)
            for (int32_t controlled = 0; controlled < 2; controlled++)
                e->gen[g++] = (eval_gen_config){.mode = TR_MODE_JOINT, .policy = k, .target = t,
                                                .tau = e->points[k][t].tau, .controlled = controlled,
                                                .target_share = e->params.target_routed[t]};
    eval_gen_params gp = {.max_new_tokens = e->params.max_new_tokens, .prompt_tokens = e->params.prompt_tokens};
    if (gp.max_new_tokens == 0) gp.max_new_tokens = e->fmt == DATASET_TEXT ? 64 : e->fmt == DATASET_GSM8K ? 256 : 32;
    e->params.max_new_tokens = gp.max_new_tokens;
    stage_progress sp = {caller, e->fmt == DATASET_TEXT ? "free-running" : "task"};
    tr_status st = eval_generate(m, d, &gp, e->gen, e->n_gen, report_stage, &sp);
    e->generated = st == TR_OK;
    return st;
}

static tr_status eval_run(const eval_models *models, const tr_eval_params *params, tr_eval **out);

tr_status tr_eval_run(const tr_model *slm, const tr_model *llm, const tr_eval_params *params, tr_eval **out) {
    if (!slm || !llm || !params || !out) return tr_fail(TR_ERR_ARG, "tr_eval_run: NULL argument");
    *out = NULL;
    tr_status st = check_params(params);
    if (st != TR_OK) return st;
    const tr_vocab *sv = tr_model_vocab(slm), *lv = tr_model_vocab(llm);
    if (!sv || !lv) return tr_fail(TR_ERR_ARG, "eval: both models need their vocabularies");
    tr_vocab_match match;
    eval_models m = {.slm = slm, .llm_model = llm, .tmpl = params->chat_template, .n_threads = params->n_threads};
    if ((st = tr_vocab_compatible(sv, lv, &match, &m.n_shared)) != TR_OK) return st;
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = params->n_threads;
    if ((st = tr_llm_backend_embedded(llm, &cp, NULL, &m.llm)) != TR_OK) return st;
    tr_llm_backend_set_allowed(m.llm, m.n_shared);
    st = eval_run(&m, params, out);
    tr_llm_backend_free(m.llm);
    return st;
}

tr_status tr_eval_run_backend(const tr_model *slm, tr_llm_backend *llm, const tr_eval_params *params, tr_eval **out) {
    if (!slm || !llm || !params || !out) return tr_fail(TR_ERR_ARG, "tr_eval_run_backend: NULL argument");
    *out = NULL;
    tr_status st = check_params(params);
    if (st != TR_OK) return st;
    const tr_vocab *sv = tr_model_vocab(slm);
    if (!sv) return tr_fail(TR_ERR_ARG, "eval: the SLM needs its vocabulary");
    tr_vocab_match match;
    eval_models m = {.slm = slm, .llm = llm, .tmpl = params->chat_template, .n_threads = params->n_threads};
    if ((st = tr_vocab_compatible_size(sv, tr_llm_backend_n_vocab(llm), &match, &m.n_shared)) != TR_OK) return st;
    tr_llm_backend_set_allowed(llm, m.n_shared);
    return eval_run(&m, params, out);
}

static tr_status eval_run(const eval_models *models, const tr_eval_params *params, tr_eval **out) {
    eval_models m = *models;
    tr_status st = TR_OK;
    dataset_format fmt;
    if ((st = dataset_format_from_name(params->format ? params->format : "text", &fmt)) != TR_OK) return st;

    tr_eval *e = calloc(1, sizeof *e);
    if (!e) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    e->params = *params;
    e->fmt = fmt;
    e->n_sweep = params->n_sweep;
    e->data_path = dup_or_null(params->data_path);
    e->router_path = dup_or_null(params->router_path);
    e->format_name = dup_or_null(dataset_format_name(fmt));
    e->params.data_path = e->data_path;
    e->params.router_path = e->router_path;
    e->params.format = e->format_name;
    e->params.progress = NULL; /* not kept past this call */
    e->params.progress_user = NULL;
    if (!e->data_path || !e->format_name || (params->router_path && !e->router_path))
        st = tr_fail(TR_ERR_NOMEM, "eval: out of memory");

    dataset *d = NULL;
    eval_positions pos = {0};
    if (st == TR_OK) st = dataset_load(params->data_path, fmt, params->first, params->end, &d);
    if (st == TR_OK && dataset_count(d) == 0) st = tr_fail(TR_ERR_RANGE, "eval: the range selects no examples");
    if (st == TR_OK) e->n_loaded = dataset_count(d);
    if (st == TR_OK) st = make_policies(e, m.slm, &m);
    double t0 = now_s();
    stage_progress sp = {params, "teacher-forced"};
    if (st == TR_OK) st = eval_teacher_forced(&m, d, params->max_target_tokens, &pos, report_stage, &sp);
    if (st == TR_OK && pos.n == 0) st = tr_fail(TR_ERR_RANGE, "eval: no target positions to score");
    if (st == TR_OK) {
        e->summary.n_examples = pos.n_examples;
        st = token_metrics(e, &pos);
    }
    e->summary.teacher_s = now_s() - t0;
    eval_positions_free(&pos);
    t0 = now_s();
    if (st == TR_OK && params->generate) st = generation(e, &m, d, params);
    e->summary.generate_s = e->generated ? now_s() - t0 : 0;
    for (int32_t k = 0; k < EVAL_MAX_POLICIES; k++) tr_router_free(m.routers[k]);
    dataset_free(d);
    if (st != TR_OK) {
        tr_eval_free(e);
        return st;
    }
    *out = e;
    return TR_OK;
}

void tr_eval_free(tr_eval *e) {
    if (!e) return;
    for (int32_t k = 0; k < EVAL_MAX_POLICIES; k++) {
        free(e->tau_sweep[k]);
        free(e->share_sweep[k]);
    }
    free(e->gen);
    free(e->data_path);
    free(e->router_path);
    free(e->format_name);
    free(e);
}

const tr_eval_summary *tr_eval_get_summary(const tr_eval *e) { return e ? &e->summary : NULL; }
int32_t tr_eval_n_policies(const tr_eval *e) { return e ? e->n_policies : 0; }

const char *tr_eval_policy_name(const tr_eval *e, int32_t policy) {
    return e && policy >= 0 && policy < e->n_policies ? e->names[policy] : NULL;
}

tr_status tr_eval_get_point(const tr_eval *e, int32_t policy, int32_t target, tr_eval_point *out) {
    if (!e || !out) return tr_fail(TR_ERR_ARG, "tr_eval_get_point: NULL argument");
    if (policy < 0 || policy >= e->n_policies || target < 0 || target >= e->params.n_targets)
        return tr_fail(TR_ERR_RANGE, "tr_eval_get_point: policy %d or target %d out of range", policy, target);
    *out = e->points[policy][target];
    return TR_OK;
}
