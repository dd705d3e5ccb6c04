/* scheduler_plan.c — what goes into the next forward pass, when more waits than one pass holds (the worker fills the
 * pass in scheduler.c with these rules; mutex held):
 *
 * 1. Calls first. A job with at most SHORT_CALL_ROWS rows left (a routed call: a few new tokens, one to choose; a
 *    lookahead token) is a call: every waiting call joins the next pass, in arrival order, before any prompt
 *    rows. A call therefore waits for at most the pass in flight, whatever prompts other sessions (or keys) send.
 *    Only when calls would take the whole pass is a little left for prompts (PREFILL_MIN_ROWS rows and one
 *    session's slot; with batching off, one session a pass, calls and prompts take turns), so prompts always
 *    move; the calls that did not fit are the first of the next pass.
 * 2. Prompts in chunks, shortest first with ageing. The rows left go to the jobs with more rows (prompts), each
 *    taking as many rows as are left (chunked prefill: a prompt spans passes). The order is by rows still to
 *    evaluate, less AGE_ROWS per pass that ran without the prompt while it could have joined (passed_over): a
 *    64-token prompt overtakes a 4,000-token one under way, equal prompts that came together finish one after
 *    another rather than all at the end (the one under way has fewer rows left and is not passed over), and no
 *    prompt waits forever, as its key falls by AGE_ROWS each pass it is passed over. A job is a call or a prompt
 *    by its whole feed, so a prompt's last rows do not jump ahead as a call.
 * 3. The pass's size from the measured cost of a row. A pass costs about fixed + per_row × rows (the weights read
 *    once, then each row's products), fitted by exponentially weighted least squares over recent passes
 *    (plan_observe_pass). While calls are in the pass or due (sessions of the last pass that have not sent their
 *    next request yet), prompt chunks are held to PROMPT_SHARE times what the calls themselves cost (a call's pass
 *    at most about three times as long as without prompts), but never fewer than keep the fixed cost under
 *    1/PREFILL_EFFICIENCY of the prompt rows' own, so prompts lose little throughput to smaller passes. Prompts
 *    with no call beside them or due (alone, or a burst's next prompts once all its sessions are back) take the
 *    whole --batch-tokens.
 * 4. Prompts that end in this pass go beyond the share. A prompt whose rows left all fit in what the pass has left
 *    joins it whole (plan_next_prompt), up to --batch-tokens: when many sessions start together with short
 *    prompts (a burst), the ones the first pass could not take end in the next, beside the first ones' calls,
 *    rather than in chunks over several passes behind them (those last prompts were a burst's slowest requests:
 *    its all-calls p99). A call still joins every pass first and waits for at most the pass in flight, now at
 *    most --batch-tokens rows of such prompts; a long prompt (one that does not end in the pass) still gets only
 *    the share, so it holds a call no longer than before. llama-server takes every waiting prompt (up to n_batch)
 *    in its next round the same way.
 * 5. A burst's short prompts that do not all fit share the pass. When prompts may take the whole pass (no call in
 *    it or due) and the prompts not begun yet that could each end in one pass hold more rows than the pass, each
 *    takes an equal chunk of it (the pass's rows left over the prompts left) instead of the first ones taking it
 *    whole: 16 sessions' 64-token prompts take 32 rows each in the first pass and all end in the second, so no
 *    session's calls start while others' prompts still fill passes (the first 8 sessions' first calls waited for a
 *    pass of 448 prompt rows beside them: the burst's other-calls p99); the last prompt ends no later (it ended a
 *    pass after those, in the chunk that the calls left).
 *
 * The design follows vLLM's scheduler with chunked prefill (running decodes are scheduled first, then prefill
 * chunks within the step's token budget; long_prefill_token_threshold and max_long_partial_prefills let short
 * prompts pass long ones) and llama.cpp's llama-server (update_slots, tools/server/server-context.cpp: each
 * generating slot's sampled token goes into the batch first, then pending prompt tokens up to n_batch). Unlike
 * llama-server, whose batch holds up to n_batch (2048) prompt rows and makes every slot's next token wait for them
 * all, the prompt share of a pass here follows the measured cost, so a call's wait stays near a pass of calls. */
#include "server/scheduler_internal.h"

#define SHORT_CALL_ROWS 32    /* a job with at most this many rows left is a call */
#define PREFILL_MIN_ROWS 16   /* rows kept for prompts when calls would fill the pass */
#define PROMPT_SHARE 2        /* prompt rows beside calls: this many times the calls' own cost */
#define PREFILL_EFFICIENCY 8  /* prompt rows per pass: fixed cost at most 1/8 of theirs */
#define AGE_ROWS 16           /* a prompt's key falls by this many rows each pass it is passed over */
#define PASS_COST_DECAY 0.9   /* weight of the previous passes in the cost fit, per pass */

int32_t plan_rows_left(const job *j) {
    if (j->started) return j->n_feed - j->fed;
    return j->req->n_tokens > 0 ? j->req->n_tokens : 1;
}

bool plan_is_call(const job *j) { return (j->started ? j->n_feed : plan_rows_left(j)) <= SHORT_CALL_ROWS; }

int64_t plan_prompt_key(const job *j) { return (int64_t)plan_rows_left(j) - (int64_t)AGE_ROWS * j->passed_over; }

int32_t plan_calls_max_rows(const scheduler *s, bool prompts_wait) {
    const int32_t all = s->p.max_batch_tokens;
    if (!prompts_wait) return all;
    return all > 2 * PREFILL_MIN_ROWS ? all - PREFILL_MIN_ROWS : all / 2 > 0 ? all / 2 : 1;
}

void plan_observe_pass(scheduler *s, int32_t rows, double ms) {
    pass_cost *c = &s->cost;
    const double x = rows;
    c->w = c->w * PASS_COST_DECAY + 1;
    c->sx = c->sx * PASS_COST_DECAY + x;
    c->sy = c->sy * PASS_COST_DECAY + ms;
    c->sxx = c->sxx * PASS_COST_DECAY + x * x;
    c->sxy = c->sxy * PASS_COST_DECAY + x * ms;
}

/* The fitted cost: *fixed_ms + *row_ms per row; false before any pass. Passes all of one size leave the fixed part
 * unknown: then all of it is counted per row (fixed 0). */
static bool fit(const pass_cost *c, double *fixed_ms, double *row_ms) {
    if (c->w <= 0 || c->sx <= 0) return false;
    const double mx = c->sx / c->w, my = c->sy / c->w;
    const double var = c->sxx / c->w - mx * mx;
    *fixed_ms = 0;
    *row_ms = my / mx;
    if (var < 1.0) return *row_ms > 0;
    const double slope = (c->sxy / c->w - mx * my) / var, intercept = my - slope * mx;
    if (slope > 0 && intercept >= 0) {
        *fixed_ms = intercept;
        *row_ms = slope;
    }
    return *row_ms > 0;
}

int32_t plan_prompt_rows(const scheduler *s, int32_t call_rows, bool calls_due) {
    const int32_t left = s->p.max_batch_tokens - call_rows;
    double fixed_ms, row_ms;
    if (left <= 0) return 0;
    if ((call_rows == 0 && !calls_due) || !fit(&s->cost, &fixed_ms, &row_ms)) return left;
    /* PROMPT_SHARE times the calls' cost in prompt rows (their rows and the pass's fixed part), at least the
     * efficient chunk. */
    double rows = PROMPT_SHARE * (call_rows + fixed_ms / row_ms);
    const double efficient = PREFILL_EFFICIENCY * fixed_ms / row_ms;
    if (rows < efficient) rows = efficient;
    if (rows < PREFILL_MIN_ROWS) rows = PREFILL_MIN_ROWS;
    return rows < left ? (int32_t)rows : left;
}

/* A prompt of a burst not begun yet: nothing of it evaluated, and short enough to end in one pass. */
static bool fresh_short_prompt(const scheduler *s, const job *j) {
    return (!j->started || j->fed == 0) && plan_rows_left(j) <= s->p.max_batch_tokens;
}

job *plan_next_prompt(const scheduler *s, int32_t budget, int32_t room, int32_t *max_rows) {
    job *best = NULL;
    int64_t best_key = 0;
    int32_t n_fresh = 0, n_in_pass = 0;
    int64_t fresh_rows = 0;
    for (job *j = s->queue; j; j = j->next) {
        n_in_pass += j->chunk > 0;
        if (!j->runnable || j->chunk > 0 || plan_is_call(j)) continue;
        if (fresh_short_prompt(s, j)) n_fresh++, fresh_rows += plan_rows_left(j);
        if (budget <= 0 && plan_rows_left(j) > room) continue;
        const int64_t key = plan_prompt_key(j);
        if (!best || key < best_key) best = j, best_key = key;
    }
    if (!best) return NULL;
    *max_rows = plan_rows_left(best) <= room ? room : budget;
    /* Rule 5: a burst's short prompts that do not all fit share the pass (when the prompts may take all of it). */
    const int32_t slots = MAX_SEQS - n_in_pass, sharing = n_fresh < slots ? n_fresh : slots;
    if (budget >= room && sharing > 1 && fresh_rows > room && fresh_short_prompt(s, best))
        *max_rows = room / sharing > 1 ? room / sharing : 1;
    return best;
}

int32_t plan_count_returned(scheduler *s) {
    int32_t n = 0;
    for (const job *j = s->queue; j; j = j->next) {
        if (j->kind != JOB_ROUTE) continue;
        const session *x = j->sess ? j->sess : sched_find_session(s, j->req->session);
        n += x && x->last_pass == s->n_passes;
    }
    return n;
}

bool plan_calls_due(scheduler *s, bool last_pass_recent) {
    return last_pass_recent && s->last_pass_seqs > 1 && plan_count_returned(s) < s->last_pass_seqs;
}
