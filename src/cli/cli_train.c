/* cli_train.c — progress bar with ETA and the gap report of the training commands (see cli_train.h). */
#include "cli/cli_train.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/cli_common.h"

void cli_eta_start(cli_eta *e, const char *label, bool force) {
    e->label = label;
    e->start_ms = cli_now_ms();
    e->last_draw_ms = 0;
    e->start_done = -1;
    e->enabled = force || isatty(STDERR_FILENO);
    e->extra[0] = '\0';
}

static void format_seconds(double s, char *buf, size_t cap) {
    if (s < 0 || s > 1e7) snprintf(buf, cap, "--:--");
    else if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, cap, "%02d:%02d", (int)s / 60, (int)s % 60);
}

void cli_eta_update(cli_eta *e, int64_t done, int64_t total) {
    if (!e->enabled || total <= 0) return;
    const double now = cli_now_ms();
    if (e->start_done < 0) e->start_done = done > 0 ? done - 1 : 0;
    if (done < total && now - e->last_draw_ms < 100) return;
    e->last_draw_ms = now;
    const double elapsed = (now - e->start_ms) / 1e3;
    const int64_t fresh = done - e->start_done;
    const double left = fresh > 0 ? elapsed / (double)fresh * (double)(total - done) : -1;
    char el[16], eta[16];
    format_seconds(elapsed, el, sizeof el);
    format_seconds(left, eta, sizeof eta);
    const int width = 30, filled = (int)((double)done / (double)total * width + 0.5);
    fprintf(stderr, "\r%s [", e->label);
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : ' ', stderr);
    fprintf(stderr, "] %lld/%lld %s elapsed, %s left %s\033[K", (long long)done, (long long)total, el, eta, e->extra);
    fflush(stderr);
}

void cli_eta_finish(cli_eta *e) {
    if (e->enabled && e->last_draw_ms > 0) fputc('\n', stderr);
    e->last_draw_ms = 0;
}

typedef struct gap_row {
    const char *name;
    tr_gap_point points[16];
} gap_row;

/* A policy's gap closed over the bound's at the same share (NAN when the bound closes nothing). */
static double share_of(const tr_gap_point *p, const tr_gap_point *bound) {
    return bound->gap_closed > 0 ? p->gap_closed / bound->gap_closed : NAN;
}

bool cli_gap_report(const tr_train_data *data, tr_router *router, const double *targets, int n, bool json) {
    if (n > 16) n = 16;
    gap_row rows[5];
    int n_rows = 0;
    tr_gap_report rep;
    tr_status st = TR_OK;
    if (router) {
        rows[n_rows].name = "router";
        st = tr_train_gap(data, router, targets, n, rows[n_rows++].points, &rep);
    }
    const tr_policy policies[3] = {TR_POLICY_MAXPROB, TR_POLICY_MARGIN, TR_POLICY_ENTROPY};
    for (int k = 0; st == TR_OK && k < 3; k++) {
        tr_router *pr = NULL;
        st = tr_router_create(policies[k], &pr);
        if (st == TR_OK) {
            rows[n_rows].name = tr_policy_name(policies[k]);
            st = tr_train_gap(data, pr, targets, n, rows[n_rows++].points, &rep);
        }
        tr_router_free(pr);
    }
    if (st == TR_OK) {
        rows[n_rows].name = "oracle";
        st = tr_train_gap(data, NULL, targets, n, rows[n_rows++].points, &rep);
    }
    tr_gap_point bound[16];
    if (st == TR_OK) st = tr_train_gap_bound(data, targets, n, bound);
    if (st != TR_OK) return cli_fail(st), false;
    if (json) {
        printf("{\"slm_accuracy\": %.6f, \"llm_accuracy\": %.6f, \"oracle_accuracy\": %.6f, \"positions\": %lld, "
               "\"policies\": {", rep.slm_accuracy, rep.llm_accuracy, rep.oracle_accuracy,
               (long long)tr_train_data_get_info(data).n_positions);
        for (int r = 0; r < n_rows; r++) {
            printf("%s\"%s\": [", r ? ", " : "", rows[r].name);
            for (int j = 0; j < n; j++) {
                const tr_gap_point *p = &rows[r].points[j];
                printf("%s{\"target_routed\": %.4f, \"tau\": %.6f, \"routed\": %.6f, \"accuracy\": %.6f, "
                       "\"gap_closed\": %.6f, \"bound_gap_closed\": %.6f, \"share_of_bound\": ", j ? ", " : "",
                       p->target_routed, p->tau, p->routed, p->accuracy, p->gap_closed, bound[j].gap_closed);
                const double share = share_of(p, &bound[j]);
                if (isfinite(share)) printf("%.6f}", share);
                else printf("null}");
            }
            printf("]");
        }
        printf("}}\n");
        return true;
    }
    fprintf(stderr, "token accuracy: SLM %.4f, LLM %.4f, best of both %.4f (%lld positions)\n", rep.slm_accuracy,
            rep.llm_accuracy, rep.oracle_accuracy, (long long)tr_train_data_get_info(data).n_positions);
    fprintf(stderr, "share of the SLM-to-LLM gap closed [its share of the bound's] (accuracy) at each routed share;\n"
            "bound: routing by the LLM's expected gain p(l) - p(s)\n%-8s", "policy");
    for (int j = 0; j < n; j++) fprintf(stderr, "  %5.1f%% routed          ", targets[j] * 100);
    fputc('\n', stderr);
    fprintf(stderr, "%-8s", "bound");
    for (int j = 0; j < n; j++) fprintf(stderr, "  %5.1f%% (%.4f)        ", bound[j].gap_closed * 100, bound[j].accuracy);
    fputc('\n', stderr);
    for (int r = 0; r < n_rows; r++) {
        fprintf(stderr, "%-8s", rows[r].name);
        for (int j = 0; j < n; j++)
            fprintf(stderr, "  %5.1f%% [%4.0f%%] (%.4f)", rows[r].points[j].gap_closed * 100,
                    share_of(&rows[r].points[j], &bound[j]) * 100, rows[r].points[j].accuracy);
        fputc('\n', stderr);
    }
    return true;
}

const char *cli_train_slm_path(const char *given, const tr_train_data_info *info, const char *command) {
    if (given) return given;
    const char *recorded = info && info->slm_path ? info->slm_path : "";
    if (*recorded && access(recorded, R_OK) == 0) {
        fprintf(stderr, "tokroute %s: token_embedding reads the SLM's token table from %s (recorded by collect; "
                "--slm to give another)\n", command, recorded);
        return recorded;
    }
    if (*recorded)
        fprintf(stderr, "tokroute %s: token_embedding reads the SLM's token table, and %s (where collect found the "
                "SLM) is not there: give --slm SLM.gguf, or --features maxprob,entropy,margin,topk to do without\n",
                command, recorded);
    else
        fprintf(stderr, "tokroute %s: token_embedding reads the SLM's token table: give --slm SLM.gguf (the SLM the "
                "data was collected with), or --features maxprob,entropy,margin,topk to do without\n", command);
    return NULL;
}
