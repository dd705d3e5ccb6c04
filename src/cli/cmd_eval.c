/* cmd_eval.c — `tokroute eval`: a thin client of tr_eval_run (tr_eval_run_backend for an LLM behind a server).
 * Loads the SLM and the LLM (or opens its backend), parses the options into
 * tr_eval_params, shows a progress bar per stage on stderr (on a terminal), writes the output files with
 * tr_eval_write, and prints either a table (share of the SLM→LLM gap closed per policy and target, then the
 * generation runs with their latency) or, with --json, the JSON document on stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli_backend.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage_head =
    "usage: tokroute eval --slm SLM LLM --data FILE --format F [options]\n"
    "  LLM is one of:\n";
static const char *usage_rest =
    "  --format F             text (stories separated by <|endoftext|> lines), csqa, gsm8k, arc, mmlu\n"
    "  --range A:B            examples A..B-1 (also A:, :B, A; default all)\n"
    "  --router FILE          also evaluate a trained router file (policy \"router\")\n"
    "  --routed S1,S2,...     target routed shares (default 0.05,0.1,0.2)\n"
    "  --out DIR              write eval.json, tokens.csv, sweep.csv, generate.csv, latency.csv and the plots\n"
    "                         accuracy_vs_routed.svg and routed_vs_tau.svg\n"
    "  --json                 print the result as JSON on stdout instead of the table\n"
    "  --max-target N         teacher-forced target tokens per example (default 255: BOS + 255 = 256)\n"
    "  --no-generate          token level only (no task / free-running generation)\n"
    "  --max-new N            tokens generated per example (default: text 64, gsm8k 256, others 32)\n"
    "  --prompt-tokens N      text: story tokens given as the prompt, BOS included (default 16)\n"
    "  --chat-template NAME   question prompts as a user turn: chatml, llama2, llama3, gemma, gemma4, none (default: the SLM's\n"
    "                         template when it has one, else plain prompts)\n"
    "  --sweep N              points of the τ grid (default 101);  --seed S  the random policy's seed (default 1234)\n"
    "  -t, --threads N        threads per model (default 1);  --kv-type f16|q8_0|f32  KV caches (default f16)\n";
static char usage[4096];

typedef struct eval_opts {
    const char *slm, *out, *chat_template;
    cli_backend_opts bo;
    bool json;
    tr_eval_params p;
    tr_kv_type kv_type; /* --kv-type */
} eval_opts;

static bool parse_shares(const char *text, tr_eval_params *p) {
    p->n_targets = 0;
    const char *s = text;
    while (s && *s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !(v >= 0 && v <= 1) || (*end && *end != ',') || p->n_targets == TR_EVAL_MAX_TARGETS) {
            fprintf(stderr, "tokroute: bad value for --routed: '%s' (up to %d shares in [0, 1], comma-separated)\n",
                    text, TR_EVAL_MAX_TARGETS);
            return false;
        }
        p->target_routed[p->n_targets++] = v;
        s = *end ? end + 1 : end;
    }
    if (p->n_targets == 0) return fprintf(stderr, "tokroute: --routed needs at least one share\n"), false;
    return true;
}

/* "A:B", "A:", ":B" or "A" → [first, end), end -1 = to the end. */
static bool parse_range(const char *text, int64_t *first, int64_t *end) {
    char *stop;
    const char *colon = strchr(text, ':');
    long long a = 0, b = -1;
    if (colon != text) {
        if (*text < '0' || *text > '9') return false;
        a = strtoll(text, &stop, 10);
        if (stop != (colon ? colon : text + strlen(text))) return false;
    }
    if (!colon) b = a + 1;
    else if (colon[1]) {
        if (colon[1] < '0' || colon[1] > '9') return false;
        b = strtoll(colon + 1, &stop, 10);
        if (*stop || b < a) return false;
    }
    *first = a;
    *end = b;
    return true;
}

/* 1 consumed, 0 not ours, -1 bad value (printed). */
static int parse_number_option(int argc, char **argv, int *i, eval_opts *o) {
    const char *v;
    long x;
    const int kv = cli_kv_type_option(argc, argv, i, &o->kv_type);
    if (kv != 0) return kv;
    if (cli_option(argc, argv, i, "-t", "--threads", &v)) {
        if (!cli_int("--threads", v, 0, 512, &x)) return -1;
        o->p.n_threads = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--max-target", &v)) {
        if (!cli_int("--max-target", v, 1, 1 << 20, &x)) return -1;
        o->p.max_target_tokens = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--max-new", &v)) {
        if (!cli_int("--max-new", v, 1, 1 << 20, &x)) return -1;
        o->p.max_new_tokens = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--prompt-tokens", &v)) {
        if (!cli_int("--prompt-tokens", v, 1, 1 << 20, &x)) return -1;
        o->p.prompt_tokens = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--sweep", &v)) {
        if (!cli_int("--sweep", v, 2, 100000, &x)) return -1;
        o->p.n_sweep = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--seed", &v)) {
        if (!cli_int("--seed", v, 0, 0x7fffffffL, &x)) return -1;
        o->p.seed = (uint64_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--routed", &v)) {
        if (!v || !parse_shares(v, &o->p)) return v ? -1 : (fprintf(stderr, "tokroute: --routed needs a value\n"), -1);
    } else {
        return 0;
    }
    return 1;
}

static int parse(int argc, char **argv, eval_opts *o) {
    const char *v, *range = NULL;
    for (int i = 1; i < argc; i++) {
        int r = parse_number_option(argc, argv, &i, o);
        if (r == 0) r = cli_llm_option(argc, argv, &i, &o->bo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_flag(argc, argv, &i, NULL, "--json")) {
            o->json = true;
            continue;
        }
        if (cli_flag(argc, argv, &i, NULL, "--no-generate")) {
            o->p.generate = false;
            continue;
        }
        const struct { const char *name; const char **dst; } strings[] = {
            {"--slm", &o->slm},
            {"--data", &o->p.data_path},  {"--format", &o->p.format},
            {"--router", &o->p.router_path}, {"--out", &o->out},
            {"--chat-template", &o->chat_template}, {"--range", &range},
        };
        size_t k = 0;
        while (k < sizeof strings / sizeof strings[0] && !cli_option(argc, argv, &i, NULL, strings[k].name, &v)) k++;
        if (k == sizeof strings / sizeof strings[0]) return cli_usage_error(usage, "unknown option '%s'", argv[i]);
        if (!v) return cli_usage_error(usage, "%s needs a value", strings[k].name);
        *strings[k].dst = v;
    }
    if (range && !parse_range(range, &o->p.first, &o->p.end))
        return cli_usage_error(usage, "bad --range '%s' (A:B, A:, :B or A; B >= A)", range);
    const char *bad = cli_backend_check(&o->bo);
    if (bad) return cli_usage_error(usage, "%s", bad);
    if (!o->slm || !cli_backend_given(&o->bo) || !o->p.data_path)
        return cli_usage_error(usage, "need --slm, an LLM (--llm FILE or a server) and --data");
    if (!o->p.format) return cli_usage_error(usage, "need --format");
    return -1; /* parsed, go on */
}

typedef struct progress_state {
    const char *stage;
    double start_ms;
} progress_state;

static void show_progress(void *user, const char *stage, double fraction) {
    progress_state *ps = user;
    if (!isatty(STDERR_FILENO)) return;
    if (!ps->stage || strcmp(ps->stage, stage) != 0) {
        ps->stage = stage;
        ps->start_ms = cli_now_ms();
    }
    const double elapsed_s = (cli_now_ms() - ps->start_ms) / 1e3;
    const double eta_s = fraction > 0 ? elapsed_s * (1 - fraction) / fraction : 0;
    int width = 32, filled = (int)(fraction * width + 0.5);
    fprintf(stderr, "\r%-15s [", stage);
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %3.0f%%  %5.1fs  ETA %5.1fs", fraction * 100.0, elapsed_s, eta_s);
    if (fraction >= 1.0) fputc('\n', stderr);
    fflush(stderr);
}

static void print_table(const tr_eval *e, const tr_eval_params *p) {
    const tr_eval_summary *s = tr_eval_get_summary(e);
    printf("%lld examples, %lld target positions\n", (long long)s->n_examples, (long long)s->n_positions);
    printf("SLM accuracy %.4f   LLM accuracy %.4f   either right %.4f\n\n", s->slm_accuracy, s->llm_accuracy,
           s->best_of_both);
    printf("share of the SLM->LLM gap closed [its share of the bound's at the same routed share] (accuracy, tau)\n"
           "bound: routing by the LLM's expected gain p(l) - p(s), the best a router reading only the SLM can hope for\n"
           "%-9s", "policy");
    for (int32_t t = 0; t < p->n_targets; t++) {
        char head[32];
        snprintf(head, sizeof head, "%g%% routed", p->target_routed[t] * 100);
        printf("  %-33s", head);
    }
    printf("\n%-9s", "bound");
    for (int32_t t = 0; t < p->n_targets; t++) { /* at the first policy's share (each row's own is in the JSON) */
        tr_eval_point pt;
        tr_eval_get_point(e, 0, t, &pt);
        char cellbuf[48];
        snprintf(cellbuf, sizeof cellbuf, "%6.1f%%", pt.bound_gap_closed * 100);
        printf("  %-33s", cellbuf);
    }
    printf("\n");
    for (int32_t k = 0; k < tr_eval_n_policies(e); k++) {
        printf("%-9s", tr_eval_policy_name(e, k));
        for (int32_t t = 0; t < p->n_targets; t++) {
            tr_eval_point pt;
            tr_eval_get_point(e, k, t, &pt);
            char cellbuf[64];
            if (isnan(pt.tau))
                snprintf(cellbuf, sizeof cellbuf, "%6.1f%% [%4.0f%%] (%.4f)", pt.gap_closed * 100,
                         pt.share_of_bound * 100, pt.accuracy);
            else
                snprintf(cellbuf, sizeof cellbuf, "%6.1f%% [%4.0f%%] (%.4f, %.3g)", pt.gap_closed * 100,
                         pt.share_of_bound * 100, pt.accuracy, pt.tau);
            printf("  %-33s", cellbuf);
        }
        printf("\n");
    }
}

/* One number of every routed generation run per policy and target: at the teacher-forced τ alone, and with τ
 * following the share (tr_route_params.target_routed). field: the run's key; percent: shown as a share. */
static void print_generation_field(const cJSON *runs, const tr_eval_params *p, const char *title, const char *field,
                                   bool percent) {
    printf("\n%s in generation (at the teacher-forced tau / with tau following the share)\n%-9s", title, "policy");
    for (int32_t t = 0; t < p->n_targets; t++) {
        char head[32];
        snprintf(head, sizeof head, "%g%% target", p->target_routed[t] * 100);
        printf("  %-21s", head);
    }
    const char *row_policy = NULL;
    const cJSON *r;
    cJSON_ArrayForEach(r, runs) {
        const cJSON *policy = cJSON_GetObjectItem(r, "policy"), *value = cJSON_GetObjectItem(r, field);
        const cJSON *mode = cJSON_GetObjectItem(r, "mode");
        if (!cJSON_IsString(policy) || !cJSON_GetObjectItem(r, "controlled") || !cJSON_IsString(mode) ||
            strcmp(mode->valuestring, "joint") != 0)
            continue;
        if (!row_policy || strcmp(row_policy, policy->valuestring) != 0) {
            row_policy = policy->valuestring;
            printf("\n%-9s", row_policy);
        }
        char cell[24] = "   n/a"; /* null: no example generated */
        if (cJSON_IsNumber(value))
            snprintf(cell, sizeof cell, percent ? "%5.1f%%" : "%6.4f", value->valuedouble * (percent ? 100 : 1));
        if (cJSON_IsTrue(cJSON_GetObjectItem(r, "controlled"))) printf(" / %s%-6s", cell, "");
        else printf("  %s", cell);
    }
    printf("\n");
}

/* What the generation runs reached, read from the result's JSON: the routed share at each target and, for a task,
 * the answer accuracy (the SLM's and the LLM's alone first), for free-running text the perplexity. */
static void print_generation(const tr_eval *e, const tr_eval_params *p) {
    char *json = NULL;
    if (tr_eval_to_json(e, false, &json) != TR_OK) return;
    cJSON *root = cJSON_Parse(json);
    free(json);
    const cJSON *gen = cJSON_GetObjectItem(root, "generation"), *runs = cJSON_GetObjectItem(gen, "runs");
    const cJSON *kind = cJSON_GetObjectItem(gen, "kind");
    const bool task = cJSON_IsString(kind) && strcmp(kind->valuestring, "task") == 0;
    const char *field = task ? "accuracy" : "perplexity";
    const cJSON *r;
    bool alone = false;
    cJSON_ArrayForEach(r, runs) { /* the models alone */
        const cJSON *mode = cJSON_GetObjectItem(r, "mode"), *value = cJSON_GetObjectItem(r, field);
        if (!cJSON_IsString(mode) || strcmp(mode->valuestring, "joint") == 0 || !cJSON_IsNumber(value)) continue;
        const char *first = task ? "\nanswer accuracy in generation: " : "\nperplexity in generation: ";
        printf("%s%s %.4f", alone ? "   " : first, strcmp(mode->valuestring, "slm") == 0 ? "SLM" : "LLM",
               value->valuedouble);
        alone = true;
    }
    if (alone) printf("\n");
    if (cJSON_GetArraySize(runs) > 2) {
        print_generation_field(runs, p, "routed share", "routed", true);
        print_generation_field(runs, p, task ? "answer accuracy" : "perplexity", field, false);
    }
    cJSON_Delete(root);
}

int cmd_eval(int argc, char **argv) {
    eval_opts o = {.p = tr_eval_default_params()};
    o.p.format = NULL;
    cli_backend_init(&o.bo);
    snprintf(usage, sizeof usage, "%s%s%s", usage_head, cli_llm_usage, usage_rest);
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.chat_template) {
        if (tr_chat_template_from_name(o.chat_template, &o.p.chat_template) != TR_OK)
            return cli_usage_error(usage, "%s", tr_last_error());
    } else {
        tr_gguf *g = NULL;
        if (tr_gguf_open(o.slm, &g) == TR_OK) {
            o.p.chat_template = tr_chat_template_detect(g);
            tr_gguf_close(g);
        }
    }
    tr_model_params mp = tr_model_default_params();
    mp.kv_type = o.kv_type;
    tr_model *slm = NULL, *llm = NULL;
    tr_llm_backend *backend = NULL;
    tr_status st = tr_model_load(o.slm, &mp, &slm);
    if (st != TR_OK) return cli_fail(st);
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = o.p.n_threads;
    cp.kv_type = o.kv_type;
    if (!cli_backend_open(&o.bo, slm, &cp, NULL, &llm, &backend)) {
        tr_model_free(slm);
        return 1;
    }
    progress_state ps = {0};
    o.p.progress = show_progress;
    o.p.progress_user = &ps;
    const double t0 = cli_now_ms();
    tr_eval *e = NULL;
    st = llm ? tr_eval_run(slm, llm, &o.p, &e) : tr_eval_run_backend(slm, backend, &o.p, &e);
    if (st == TR_OK && o.out) st = tr_eval_write(e, o.out);
    if (st == TR_OK) {
        if (o.json) {
            char *json = NULL;
            st = tr_eval_to_json(e, false, &json);
            if (st == TR_OK) printf("%s\n", json);
            free(json);
        } else {
            print_table(e, &o.p);
            print_generation(e, &o.p);
            if (o.out) printf("\nwritten to %s (eval.json, CSV tables, SVG plots)\n", o.out);
        }
        fprintf(stderr, "tokroute eval: %.1f s\n", (cli_now_ms() - t0) / 1e3);
    }
    rc = st == TR_OK ? 0 : cli_fail(st);
    tr_eval_free(e);
    tr_llm_backend_free(backend);
    tr_model_free(slm);
    tr_model_free(llm);
    return rc;
}
