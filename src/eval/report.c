/* report.c — the evaluation's outputs: the JSON document (tr_eval_to_json; NaN and undefined values become null),
 * the CSV tables (tokens.csv, sweep.csv, generate.csv, latency.csv) and tr_eval_write, which makes the directory
 * and writes everything (the SVG plots come from svg.c).
 *
 * The latency table has the columns of the published system's Table 1, as means per example of each generation
 * run: routed tokens, SLM time, time to first token, time between tokens, LLM + communication time, overall. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "eval/eval_internal.h"

static cJSON *num(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static void add_num(cJSON *o, const char *key, double v) { cJSON_AddItemToObject(o, key, num(v)); }

static cJSON *point_json(const tr_eval_point *p, bool with_tau) {
    cJSON *o = cJSON_CreateObject();
    add_num(o, "target_routed", p->target_routed);
    if (with_tau) add_num(o, "tau", p->tau);
    add_num(o, "routed", p->routed);
    add_num(o, "accuracy", p->accuracy);
    add_num(o, "gap_closed", p->gap_closed);
    add_num(o, "bound_gap_closed", p->bound_gap_closed);
    add_num(o, "share_of_bound", p->share_of_bound);
    return o;
}

static cJSON *sweep_json(const eval_sweep_point *q, int32_t n, bool with_tau) {
    cJSON *o = cJSON_CreateObject(), *tau = cJSON_CreateArray(), *routed = cJSON_CreateArray(),
          *acc = cJSON_CreateArray();
    for (int32_t j = 0; j < n; j++) {
        if (with_tau) cJSON_AddItemToArray(tau, num(q[j].tau));
        cJSON_AddItemToArray(routed, num(q[j].routed));
        cJSON_AddItemToArray(acc, num(q[j].accuracy));
    }
    if (with_tau) cJSON_AddItemToObject(o, "tau", tau);
    else cJSON_Delete(tau);
    cJSON_AddItemToObject(o, "routed", routed);
    cJSON_AddItemToObject(o, "accuracy", acc);
    return o;
}

static const char *gen_policy_name(const tr_eval *e, const eval_gen_config *c) {
    return c->mode == TR_MODE_JOINT ? e->names[c->policy] : tr_route_mode_name(c->mode);
}

static double per_example(double v, int64_t n) { return n > 0 ? v / (double)n : NAN; }

static cJSON *generation_json(const tr_eval *e) {
    cJSON *g = cJSON_CreateObject(), *runs = cJSON_CreateArray();
    cJSON_AddStringToObject(g, "kind", e->fmt == DATASET_TEXT ? "free-running" : "task");
    cJSON_AddNumberToObject(g, "max_new_tokens", e->params.max_new_tokens);
    if (e->fmt == DATASET_TEXT) cJSON_AddNumberToObject(g, "prompt_tokens", e->params.prompt_tokens);
    for (int32_t i = 0; i < e->n_gen; i++) {
        const eval_gen_config *c = &e->gen[i];
        cJSON *r = cJSON_CreateObject(), *lat = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "mode", tr_route_mode_name(c->mode));
        cJSON_AddStringToObject(r, "policy", gen_policy_name(e, c));
        add_num(r, "target_routed", c->target >= 0 ? e->params.target_routed[c->target] : NAN);
        add_num(r, "tau", c->tau);
        cJSON_AddBoolToObject(r, "controlled", c->controlled);
        cJSON_AddNumberToObject(r, "examples", (double)c->n_examples);
        cJSON_AddNumberToObject(r, "skipped", (double)c->n_skipped);
        cJSON_AddNumberToObject(r, "tokens", (double)c->n_tokens);
        add_num(r, "routed", c->n_tokens ? (double)c->n_routed / (double)c->n_tokens : NAN);
        if (e->fmt == DATASET_TEXT) add_num(r, "perplexity", c->n_nll ? exp(c->nll_sum / (double)c->n_nll) : NAN);
        else add_num(r, "accuracy", per_example((double)c->n_correct, c->n_examples));
        add_num(lat, "routed_tokens", per_example((double)c->n_routed, c->n_examples));
        add_num(lat, "slm_ms", per_example(c->slm_ms, c->n_examples));
        add_num(lat, "ttft_ms", per_example(c->ttft_ms_sum, c->n_examples));
        add_num(lat, "tbt_ms", per_example(c->tbt_ms_sum, c->n_tbt));
        add_num(lat, "llm_ms", per_example(c->llm_ms, c->n_examples));
        add_num(lat, "overall_ms", per_example(c->total_ms, c->n_examples));
        cJSON_AddItemToObject(r, "latency", lat);
        cJSON_AddItemToArray(runs, r);
    }
    cJSON_AddItemToObject(g, "runs", runs);
    return g;
}

tr_status tr_eval_to_json(const tr_eval *e, bool full, char **out) {
    if (!e || !out) return tr_fail(TR_ERR_ARG, "tr_eval_to_json: NULL argument");
    *out = NULL;
    const int32_t k_oracle = e->n_policies - 1;
    cJSON *root = cJSON_CreateObject();
    if (!root) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    add_num(root, "slm_accuracy", e->summary.slm_accuracy);
    add_num(root, "llm_accuracy", e->summary.llm_accuracy);
    add_num(root, "best_of_both", e->summary.best_of_both);
    cJSON *pol = cJSON_AddObjectToObject(root, "policies");
    for (int32_t k = 0; k < k_oracle; k++) {
        cJSON *arr = cJSON_AddArrayToObject(pol, e->names[k]);
        for (int32_t t = 0; t < e->params.n_targets; t++) cJSON_AddItemToArray(arr, point_json(&e->points[k][t], true));
    }
    cJSON *oracle = cJSON_AddArrayToObject(root, "oracle");
    for (int32_t t = 0; t < e->params.n_targets; t++)
        cJSON_AddItemToArray(oracle, point_json(&e->points[k_oracle][t], false));
    cJSON_AddStringToObject(root, "format", e->format_name);
    cJSON_AddStringToObject(root, "data", e->data_path);
    if (e->router_path) cJSON_AddStringToObject(root, "router", e->router_path);
    cJSON *range = cJSON_AddArrayToObject(root, "range");
    cJSON_AddItemToArray(range, cJSON_CreateNumber((double)e->params.first));
    cJSON_AddItemToArray(range, cJSON_CreateNumber((double)(e->params.first + e->n_loaded)));
    cJSON_AddNumberToObject(root, "n_examples", (double)e->summary.n_examples);
    cJSON_AddNumberToObject(root, "n_positions", (double)e->summary.n_positions);
    cJSON_AddNumberToObject(root, "max_target_tokens", e->params.max_target_tokens);
    cJSON_AddStringToObject(root, "chat_template", tr_chat_template_name(e->params.chat_template));
    cJSON_AddNumberToObject(root, "seed", (double)e->params.seed);
    if (e->generated) cJSON_AddItemToObject(root, "generation", generation_json(e));
    cJSON *time = cJSON_AddObjectToObject(root, "time_s");
    add_num(time, "teacher_forced", e->summary.teacher_s);
    add_num(time, "generate", e->summary.generate_s);
    if (full) {
        cJSON *sw = cJSON_AddObjectToObject(root, "sweep");
        for (int32_t k = 0; k < e->n_policies; k++) {
            cJSON *s = cJSON_AddObjectToObject(sw, e->names[k]);
            if (k != k_oracle) cJSON_AddItemToObject(s, "tau_grid", sweep_json(e->tau_sweep[k], e->n_sweep, true));
            cJSON_AddItemToObject(s, "share_grid", sweep_json(e->share_sweep[k], EVAL_SHARE_STEPS + 1, k != k_oracle));
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    *out = text;
    return TR_OK;
}

/* ---------------------------------------------------------------- CSV */

/* "%.6g", or nothing for NaN (an empty CSV cell). */
static void cell(FILE *f, double v, const char *sep) {
    if (isfinite(v)) fprintf(f, "%.6g%s", v, sep);
    else fputs(sep, f);
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    return fopen(path, "w");
}

static tr_status close_checked(FILE *f, const char *path) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return tr_fail(TR_ERR_IO, "cannot write %s", path);
    return TR_OK;
}

static tr_status write_tokens_csv(const tr_eval *e, const char *dir) {
    char path[4096];
    FILE *f = open_in(dir, "tokens.csv", path, sizeof path);
    if (!f) return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "policy,target_routed,tau,routed,accuracy,gap_closed,bound_gap_closed,share_of_bound\n");
    fprintf(f, "slm,0,,0,%.6g,0,0,\n", e->summary.slm_accuracy);
    fprintf(f, "llm,1,,1,%.6g,1,1,1\n", e->summary.llm_accuracy);
    for (int32_t k = 0; k < e->n_policies; k++)
        for (int32_t t = 0; t < e->params.n_targets; t++) {
            const tr_eval_point *p = &e->points[k][t];
            fprintf(f, "%s,", e->names[k]);
            cell(f, p->target_routed, ",");
            cell(f, p->tau, ",");
            cell(f, p->routed, ",");
            cell(f, p->accuracy, ",");
            cell(f, p->gap_closed, ",");
            cell(f, p->bound_gap_closed, ",");
            cell(f, p->share_of_bound, "\n");
        }
    return close_checked(f, path);
}

static void sweep_rows(FILE *f, const tr_eval *e, const char *policy, const char *grid, const eval_sweep_point *q,
                       int32_t n) {
    for (int32_t j = 0; j < n; j++) {
        fprintf(f, "%s,%s,", policy, grid);
        cell(f, q[j].tau, ",");
        cell(f, q[j].routed, ",");
        cell(f, q[j].accuracy, ",");
        cell(f, eval_gap_closed(q[j].accuracy, e->summary.slm_accuracy, e->summary.llm_accuracy), "\n");
    }
}

static tr_status write_sweep_csv(const tr_eval *e, const char *dir) {
    char path[4096];
    FILE *f = open_in(dir, "sweep.csv", path, sizeof path);
    if (!f) return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "policy,grid,tau,routed,accuracy,gap_closed\n");
    for (int32_t k = 0; k < e->n_policies; k++) {
        if (k != e->n_policies - 1) sweep_rows(f, e, e->names[k], "tau", e->tau_sweep[k], e->n_sweep);
        sweep_rows(f, e, e->names[k], "share", e->share_sweep[k], EVAL_SHARE_STEPS + 1);
    }
    return close_checked(f, path);
}

static tr_status write_generation_csv(const tr_eval *e, const char *dir) {
    char path[4096];
    FILE *f = open_in(dir, "generate.csv", path, sizeof path);
    if (!f) return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "mode,policy,target_routed,tau,controlled,examples,skipped,tokens,routed,%s\n",
            e->fmt == DATASET_TEXT ? "perplexity" : "accuracy");
    for (int32_t i = 0; i < e->n_gen; i++) {
        const eval_gen_config *c = &e->gen[i];
        fprintf(f, "%s,%s,", tr_route_mode_name(c->mode), gen_policy_name(e, c));
        cell(f, c->target >= 0 ? e->params.target_routed[c->target] : NAN, ",");
        cell(f, c->tau, ",");
        fprintf(f, "%d,%lld,%lld,%lld,", c->controlled ? 1 : 0, (long long)c->n_examples, (long long)c->n_skipped, (long long)c->n_tokens);
        cell(f, c->n_tokens ? (double)c->n_routed / (double)c->n_tokens : NAN, ",");
        if (e->fmt == DATASET_TEXT) cell(f, c->n_nll ? exp(c->nll_sum / (double)c->n_nll) : NAN, "\n");
        else cell(f, per_example((double)c->n_correct, c->n_examples), "\n");
    }
    tr_status st = close_checked(f, path);
    if (st != TR_OK) return st;

    f = open_in(dir, "latency.csv", path, sizeof path);
    if (!f) return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "mode,policy,target_routed,tau,controlled,routed_tokens,slm_ms,ttft_ms,tbt_ms,llm_comm_ms,overall_ms\n");
    for (int32_t i = 0; i < e->n_gen; i++) {
        const eval_gen_config *c = &e->gen[i];
        fprintf(f, "%s,%s,", tr_route_mode_name(c->mode), gen_policy_name(e, c));
        cell(f, c->target >= 0 ? e->params.target_routed[c->target] : NAN, ",");
        cell(f, c->tau, ",");
        fprintf(f, "%d,", c->controlled ? 1 : 0);
        cell(f, per_example((double)c->n_routed, c->n_examples), ",");
        cell(f, per_example(c->slm_ms, c->n_examples), ",");
        cell(f, per_example(c->ttft_ms_sum, c->n_examples), ",");
        cell(f, per_example(c->tbt_ms_sum, c->n_tbt), ",");
        cell(f, per_example(c->llm_ms, c->n_examples), ",");
        cell(f, per_example(c->total_ms, c->n_examples), "\n");
    }
    return close_checked(f, path);
}

/* mkdir -p */
static tr_status make_dir(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path - 64) return tr_fail(TR_ERR_ARG, "eval: bad output directory '%.64s'", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return tr_fail(TR_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return tr_fail(TR_ERR_IO, "%s is not a directory", dir);
    return TR_OK;
}

tr_status tr_eval_write(const tr_eval *e, const char *dir) {
    if (!e || !dir) return tr_fail(TR_ERR_ARG, "tr_eval_write: NULL argument");
    tr_status st = make_dir(dir);
    char *json = NULL;
    if (st == TR_OK) st = tr_eval_to_json(e, true, &json);
    if (st == TR_OK) {
        char path[4096];
        FILE *f = open_in(dir, "eval.json", path, sizeof path);
        if (!f) st = tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        else {
            fputs(json, f);
            fputc('\n', f);
            st = close_checked(f, path);
        }
    }
    free(json);
    if (st == TR_OK) st = write_tokens_csv(e, dir);
    if (st == TR_OK) st = write_sweep_csv(e, dir);
    if (st == TR_OK && e->generated) st = write_generation_csv(e, dir);
    if (st == TR_OK) st = eval_write_svg_plots(e, dir);
    return st;
}
