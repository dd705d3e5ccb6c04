/* budget.c — keeping the routed share on budget in free-running generation.
 *
 * target_routed P: τ follows the routed count. Before deciding position i the controller knows the routed count R
 * and the deficit e = P·i − R (tokens owed to the LLM; negative when ahead). It routes when score < τ with
 *
 *     τ = base + g · e,
 *     base ← base + BASE_RATE · g · e   (starts at τ0: the calibrated τ),
 *
 * and g = GAIN / f, where f is the density of the scores at the P-quantile of the last DENSITY_WINDOW scores (their
 * P ± δ quantiles' spread), so one token of deficit raises the chance of routing by about GAIN whatever the score's
 * scale (maxprob's τ is ~0.2, margin's ~0.03). The proportional part pays a deficit back within about 1/GAIN tokens;
 * the base part learns where this generation's τ lies when τ0 is off (teacher-forced calibration routes less in
 * generation for a trained router, where the SLM reads its own text, and more for maxprob), so the proportional
 * part need not hold a standing deficit. There is no dead zone: one (τ left alone while |e| <= 1) let the count sit
 * at the zone's edge on the side τ0 errs, so short generations ended about a token off on average (64 tokens from
 * the calibrated τ, test_budget: trained router 3.4 / 8.3 / 18.8% for 5 / 10 / 20%, maxprob 10.6% for 10%); without
 * it and with the base learning at 0.1 instead of 0.02, the mean share of 100 prompts' 64-token generations is
 * within 0.33 points of every target (4.9–10.3–20.3%), at the price of more decisions unlike the oracle's (200
 * tokens, 6 router × target sets replayed by bench/route_budget.py: 7.7 per 100 against 6.2). Bounds: beyond
 * SOFT_TOKENS of deficit τ ramps towards TAU_ALL (above every score: route whatever comes), beyond SOFT_TOKENS of
 * surplus towards 0 (route nothing), and it is there wherever the next decision could take the count past ±HARD_TOKENS. So |routed − P·n| <= 2.5 after
 * any n tokens (the share within 1.25 points over 200), even through a stretch where the SLM is sure of everything
 * (a new story's "Once upon a time, there was", which no τ below 1 routes) or from a τ0 far off.
 *
 * Chosen by measurement (bench/route_budget.sh, README "Keeping the budget"; 4 routers × 3 targets × 30 prompts
 * × 200 tokens): against an oracle that routes exactly the lowest-scoring P of each generation, plain quantile
 * tracking of recent scores (τ = their P-quantile, no deficit term) missed the share by 3–4 points on average (the
 * scores drift within a generation), a PI controller on the share in score units and Robbins–Monro quantile
 * tracking left ±1.5 points on 5% of the generations, quantile tracking with a deficit term on 1–3%, a bang-bang
 * (route whenever behind) kept the share exactly but differed from the oracle on 20 decisions per 100 tokens; this
 * controller with the dead zone kept all within ±1.5 (worst 1.0) while differing on 4.6 per 100 (2.3–8.1).
 *
 * The start and short generations: position 0 is decided at τ0 (e = 0). Until DENSITY_MIN scores have been seen the
 * gain assumes scores spread evenly below τ0 (f = P/τ0). A generation of n tokens holds P to within 2.5/n by the
 * bounds and usually within 1/n: on 10 tokens at P = 0.1 it routes 0–2 tokens (usually 1); over many generations
 * the mean share is P (above). A τ0 far from this generation's (an uncalibrated 0.5 for margin) is corrected by
 * the bounds at once and by the base within some 10–20 tokens; the share holds, but more decisions differ from the
 * oracle's meanwhile.
 *
 * max_routed C: a hard cap after the rule above: position i is not routed when that would make the routed positions
 * among 0..i exceed ⌈C·(i+1)⌉, so never more than ⌈C·n⌉ of the first n tokens (200 at 0.1: at most 20). The
 * ceiling lets the first token be routed under any C > 0, as it would be under no cap.
 *
 * Decisions count, not sources: a routed token the LLM could not produce (fallback) counts as routed, because
 * whether a call fails depends on time and the decisions must not (the speculative loop's tokens equal --sync's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "route/budget.h"

#define GAIN 0.1             /* routing probability added per token of deficit */
#define SOFT_TOKENS 1.5      /* beyond this deficit (or surplus) τ ramps towards routing all (or none) ... */
#define HARD_TOKENS 2.5      /* ... reached where the next decision could leave ±HARD_TOKENS: never left */
#define TAU_ALL 1.0009765625f /* above every score in [0, 1]: routes whatever comes */
#define BASE_RATE 0.1        /* share of the proportional correction the base learns per token */
#define DENSITY_WINDOW 64    /* recent scores the density is read from */
#define DENSITY_MIN 8        /* scores needed before it is */

tr_status budget_check(const tr_route_params *p) {
    if (!(p->target_routed >= 0 && p->target_routed <= 1))
        return tr_fail(TR_ERR_ARG, "target_routed must be in [0, 1] (got %g)", p->target_routed);
    if (!(p->max_routed >= 0 && p->max_routed <= 1))
        return tr_fail(TR_ERR_ARG, "max_routed must be in [0, 1] (got %g)", p->max_routed);
    return TR_OK;
}

tr_status budget_init(route_budget *b, const tr_route_params *p, float tau0, int32_t n_predict) {
    memset(b, 0, sizeof *b);
    b->target = p->target_routed;
    b->cap = p->max_routed;
    b->tau0 = tau0;
    b->n = n_predict;
    b->score = malloc(((size_t)n_predict + 1) * sizeof *b->score);
    b->base = malloc(((size_t)n_predict + 1) * sizeof *b->base);
    b->routed = malloc(((size_t)n_predict + 1) * sizeof *b->routed);
    if (!b->score || !b->base || !b->routed) {
        budget_free(b);
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    }
    b->base[0] = tau0;
    b->routed[0] = 0;
    return TR_OK;
}

void budget_free(route_budget *b) {
    free(b->score);
    free(b->base);
    free(b->routed);
    memset(b, 0, sizeof *b);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* 1 / the density of the scores near their P-quantile: the spread between the P − δ and P + δ quantiles of the
 * last DENSITY_WINDOW scores over 2δ (δ at least two scores' worth). */
static double inverse_density(const route_budget *b, int32_t i) {
    const double p = b->target;
    const int32_t lo = i > DENSITY_WINDOW ? i - DENSITY_WINDOW : 0, m = i - lo;
    if (m < DENSITY_MIN) return (b->tau0 > 0.01f ? b->tau0 : 0.01) / p;
    float w[DENSITY_WINDOW];
    memcpy(w, b->score + lo, (size_t)m * sizeof *w);
    qsort(w, (size_t)m, sizeof *w, cmp_float);
    const double d = p / 2 > 2.0 / m ? p / 2 : 2.0 / m;
    const double q_lo = p - d > 0 ? p - d : 0, q_hi = p + d < 1 ? p + d : 1;
    int32_t k_lo = (int32_t)(q_lo * m), k_hi = (int32_t)(q_hi * m);
    if (k_lo > m - 1) k_lo = m - 1;
    if (k_hi > m - 1) k_hi = m - 1;
    const double spread = ((double)w[k_hi] - (double)w[k_lo]) / (q_hi - q_lo);
    return spread > 1e-6 ? spread : 1e-6;
}

static float clamp01(double x) { return (float)(x < 0 ? 0 : x > 1 ? 1 : x); }

bool budget_decide(route_budget *b, int32_t i, float score, float *tau) {
    const int32_t before = b->routed[i];
    float t = b->tau0;
    b->base[i + 1] = b->base[i];
    if (b->target > 0) {
        const double e = b->target * i - before;
        const double g = e != 0.0 ? GAIN * inverse_density(b, i) : 0.0;
        t = clamp01(b->base[i] + g * e);
        b->base[i + 1] = clamp01(b->base[i] + BASE_RATE * g * e);
        double u = (fabs(e) - SOFT_TOKENS) / (HARD_TOKENS - SOFT_TOKENS);
        u = u < 0 ? 0 : u > 1 ? 1 : u;
        t = e > 0 ? (float)(t + (TAU_ALL - t) * u) : (float)(t * (1 - u));
        if (e + b->target > HARD_TOKENS) t = TAU_ALL;
        else if (e + b->target - 1 < -HARD_TOKENS) t = 0;
    }
    bool routed = score < t;
    if (routed && b->cap > 0 && before + 1 > ceil(b->cap * (i + 1) - 1e-9)) routed = false;
    b->score[i] = score;
    b->routed[i + 1] = before + routed;
    *tau = t;
    return routed;
}
