/* svg.c — line charts written as plain SVG (no library): a plot area with a frame, "nice" ticks (1, 2 or 5 times a
 * power of ten) and grid lines, axis labels, a title, one polyline per series, and a legend to the right. Every
 * number written is finite (points with NaN coordinates are left out, others are clamped to the plot area) and
 * every text is XML-escaped, so the file is well-formed whatever the series hold. eval_write_svg_plots draws the
 * evaluation's two charts: accuracy vs routed share (one curve per policy, the oracle and the SLM/LLM levels
 * dashed) and routed share vs τ. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "eval/eval_internal.h"

enum { WIDTH = 760, HEIGHT = 480, LEFT = 72, RIGHT = 180, TOP = 44, BOTTOM = 64 };
static const char *const palette[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#7f7f7f",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};

static void xml_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') fputc(*s, f);
        }
    }
}

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static double tick_step(double span) {
    if (!(span > 0) || !isfinite(span)) return 1;
    double raw = span / 6, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void tick_label(char *buf, size_t cap, double v, double step, bool percent) {
    if (percent) {
        v *= 100;
        step *= 100;
    }
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (decimals > 6) decimals = 6;
    if (fabs(v) < step * 1e-9) v = 0; /* no "-0" */
    snprintf(buf, cap, "%.*f%s", decimals, v, percent ? "%" : "");
}

typedef struct frame {
    double x0, x1, y0, y1; /* data ranges */
    double px0, px1, py0, py1; /* pixel box: left, right, bottom, top */
} frame;

static double px(const frame *fr, double x) {
    return fr->px0 + (clamp(x, fr->x0, fr->x1) - fr->x0) / (fr->x1 - fr->x0) * (fr->px1 - fr->px0);
}
static double py(const frame *fr, double y) {
    return fr->py0 - (clamp(y, fr->y0, fr->y1) - fr->y0) / (fr->y1 - fr->y0) * (fr->py0 - fr->py1);
}

static void axis_ticks(FILE *f, const frame *fr, const svg_chart *c) {
    double step = tick_step(fr->x1 - fr->x0);
    for (double v = ceil(fr->x0 / step - 1e-9) * step; v <= fr->x1 + step * 1e-9; v += step) {
        char lab[32];
        tick_label(lab, sizeof lab, v, step, c->x_percent);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e5e5e5\"/>\n", px(fr, v), fr->py0,
                px(fr, v), fr->py1);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%s</text>\n", px(fr, v), fr->py0 + 18, lab);
    }
    step = tick_step(fr->y1 - fr->y0);
    for (double v = ceil(fr->y0 / step - 1e-9) * step; v <= fr->y1 + step * 1e-9; v += step) {
        char lab[32];
        tick_label(lab, sizeof lab, v, step, c->y_percent);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#e5e5e5\"/>\n", fr->px0, py(fr, v),
                fr->px1, py(fr, v));
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", fr->px0 - 6, py(fr, v) + 4, lab);
    }
}

tr_status svg_write_chart(FILE *f, const svg_chart *c) {
    if (!f || !c || (c->n_series > 0 && !c->series)) return tr_fail(TR_ERR_ARG, "svg_write_chart: invalid argument");
    frame fr = {c->x_min, c->x_max, c->y_min, c->y_max, LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP};
    if (!isfinite(fr.x0) || !isfinite(fr.x1) || !(fr.x1 > fr.x0)) fr.x0 = 0, fr.x1 = 1;
    if (!isfinite(fr.y0) || !isfinite(fr.y1) || !(fr.y1 > fr.y0)) fr.y0 = 0, fr.y1 = 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", WIDTH, HEIGHT, WIDTH, HEIGHT);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, HEIGHT);
    fprintf(f, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", (LEFT + WIDTH - RIGHT) / 2);
    xml_text(f, c->title);
    fprintf(f, "</text>\n");
    axis_ticks(f, &fr, c);
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"black\"/>\n", fr.px0,
            fr.py1, fr.px1 - fr.px0, fr.py0 - fr.py1);
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">", (fr.px0 + fr.px1) / 2, HEIGHT - 20);
    xml_text(f, c->x_label);
    fprintf(f, "</text>\n<text x=\"18\" y=\"%.2f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.2f)\">",
            (fr.py0 + fr.py1) / 2, (fr.py0 + fr.py1) / 2);
    xml_text(f, c->y_label);
    fprintf(f, "</text>\n");
    for (int32_t s = 0; s < c->n_series; s++) {
        const svg_series *se = &c->series[s];
        const char *color = palette[s % (int32_t)(sizeof palette / sizeof palette[0])];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
                se->dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int32_t i = 0; i < se->n; i++)
            if (isfinite(se->x[i]) && isfinite(se->y[i]))
                fprintf(f, "%s%.2f,%.2f", i ? " " : "", px(&fr, se->x[i]), py(&fr, se->y[i]));
        fprintf(f, "\"/>\n");
        const double ly = TOP + 10 + 20.0 * s, lx = WIDTH - RIGHT + 16;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", lx,
                ly, lx + 24, ly, color, se->dashed ? " stroke-dasharray=\"6 4\"" : "");
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\">", lx + 30, ly + 4);
        xml_text(f, se->name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? tr_fail(TR_ERR_IO, "svg: write failed") : TR_OK;
}

/* ---------------------------------------------------------------- the evaluation's charts */

static tr_status write_chart_file(const char *dir, const char *name, const svg_chart *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    tr_status st = svg_write_chart(f, c);
    if (fclose(f) != 0 && st == TR_OK) st = tr_fail(TR_ERR_IO, "cannot write %s", path);
    return st;
}

tr_status eval_write_svg_plots(const tr_eval *e, const char *dir) {
    enum { NS = EVAL_SHARE_STEPS + 1 };
    const int32_t np = e->n_policies, nt = e->n_sweep;
    double *buf = malloc(sizeof *buf * (size_t)(np * 2 * (NS > nt ? NS : nt) + 8));
    svg_series series[EVAL_MAX_POLICIES + 2];
    if (!buf) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    double *at = buf, y_lo = e->summary.slm_accuracy, y_hi = e->summary.llm_accuracy;
    for (int32_t k = 0; k < np; k++) {
        double *x = at, *y = at + NS;
        at += 2 * NS;
        for (int32_t j = 0; j < NS; j++) {
            x[j] = e->share_sweep[k][j].routed;
            y[j] = e->share_sweep[k][j].accuracy;
            if (isfinite(y[j])) y_lo = fmin(y_lo, y[j]), y_hi = fmax(y_hi, y[j]);
        }
        series[k] = (svg_series){e->names[k], x, y, NS, k == np - 1};
    }
    static const double ends[2] = {0, 1};
    double *lv = at;
    at += 4;
    lv[0] = lv[1] = e->summary.slm_accuracy;
    lv[2] = lv[3] = e->summary.llm_accuracy;
    series[np] = (svg_series){"SLM only", ends, lv, 2, true};
    series[np + 1] = (svg_series){"LLM only", ends, lv + 2, 2, true};
    double pad = (y_hi - y_lo) * 0.05;
    svg_chart acc = {"Token accuracy vs routed share", "tokens routed to the LLM", "top-1 accuracy (teacher-forced)",
                     0, 1, y_lo - pad, y_hi + pad, true, true, series, np + 2};
    tr_status st = write_chart_file(dir, "accuracy_vs_routed.svg", &acc);

    at = buf;
    for (int32_t k = 0; k < np - 1; k++) { /* the oracle has no τ */
        double *x = at, *y = at + nt;
        at += 2 * nt;
        for (int32_t j = 0; j < nt; j++) {
            x[j] = e->tau_sweep[k][j].tau;
            y[j] = e->tau_sweep[k][j].routed;
        }
        series[k] = (svg_series){e->names[k], x, y, nt, false};
    }
    svg_chart tau = {"Routed share vs threshold", "threshold τ (route when score < τ)", "tokens routed to the LLM",
                     0, 1, 0, 1, false, true, series, np - 1};
    if (st == TR_OK) st = write_chart_file(dir, "routed_vs_tau.svg", &tau);
    free(buf);
    return st;
}
