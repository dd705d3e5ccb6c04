/* generate.c — routed generation for tr_eval_run: every example's prompt goes through tr_route_generate once per
 * configuration (SLM alone, LLM alone, and each policy at each target τ), greedy, through the LLM backend. Question-answering examples are scored by the answer extracted from the generated text; text stories
 * (the prompt is a story's first tokens) by the negative log-likelihood of the generated tokens under the LLM.
 *
 * Every run starts cold: the SLM context is cleared and, for an LLM in this process, the backend is a fresh one, so
 * each run's TTFT includes its prompt's prefill and the latency table compares configurations fairly (a warm cache
 * from the run before would make whichever configuration runs second look faster). A remote LLM keeps its server's
 * prefix cache between runs: its latencies favour the later configurations. Prompt plus generation must fit the contexts: the
 * tokens to generate are capped to the room left, and an example whose prompt fills the context is counted as
 * skipped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "eval/eval_internal.h"

/* Question-answering prompts end with "Answer:"; a model that goes on to invent the next question is stopped. */
static const char *const qa_stops[] = {"\nQuestion:"};

/* -log p(ids[from..n)) under the LLM (log-probabilities over the allowed ids; one scoring call). */
static tr_status sequence_nll(tr_llm_backend *llm, tr_llm_position *lp, const int32_t *ids, int32_t n, int32_t from,
                              double *nll) {
    tr_status st = tr_llm_score(llm, ids, n, from, n, 1, lp);
    if (st != TR_OK) return st;
    double sum = 0;
    for (int32_t pos = from; pos < n; pos++) sum += -(double)lp[pos - from].logprob;
    *nll = sum;
    return TR_OK;
}

typedef struct gen_state {
    const eval_models *m;
    dataset_format fmt;
    tr_context *slm_ctx;
    tr_llm_position *lp;     /* [n_ctx + 1] scoring the generated text */
    tr_context_params cp;
    int32_t n_ctx;
    int32_t *seq; /* prompt + generated */
} gen_state;

static tr_status run_one(gen_state *g, const dataset_example *ex, const int32_t *prompt, int32_t n_prompt,
                         int32_t max_new, eval_gen_config *c) {
    int32_t n_predict = max_new;
    if (n_predict > g->n_ctx - n_prompt) n_predict = g->n_ctx - n_prompt;
    if (n_predict < 1) {
        c->n_skipped++;
        return TR_OK;
    }
    tr_route_params rp = tr_route_default_params();
    rp.mode = c->mode;
    rp.tau = c->tau;
    if (c->controlled) rp.target_routed = c->target_share;
    rp.n_predict = n_predict;
    rp.on_llm_failure = TR_LLM_FAILURE_ERROR;
    if (g->fmt != DATASET_TEXT) {
        rp.stop = qa_stops;
        rp.n_stop = 1;
    }
    tr_router *router = c->mode == TR_MODE_JOINT ? g->m->routers[c->policy] : NULL;
    tr_llm_backend *llm = NULL;
    tr_status st = TR_OK;
    if (c->mode != TR_MODE_SLM && g->m->llm_model) {
        tr_sampler_params greedy = tr_sampler_default_params();
        greedy.temperature = 0;
        if ((st = tr_llm_backend_embedded(g->m->llm_model, &g->cp, &greedy, &llm)) != TR_OK) return st;
        tr_llm_backend_set_allowed(llm, g->m->n_shared);
    } else if (c->mode != TR_MODE_SLM) {
        llm = g->m->llm;
    }
    memcpy(g->seq, prompt, (size_t)n_prompt * sizeof *prompt);
    tr_route_stats rs;
    memset(&rs, 0, sizeof rs);
    tr_context_clear(g->slm_ctx);
    st = tr_route_generate(g->slm_ctx, router, llm, prompt, n_prompt, &rp, g->seq + n_prompt, n_predict, &rs);
    if (llm != g->m->llm) tr_llm_backend_free(llm);
    if (st != TR_OK) return st;
    const int32_t n_gen = rs.n_tokens < n_predict ? rs.n_tokens : n_predict;
    c->n_examples++;
    c->n_tokens += n_gen;
    c->n_routed += c->mode == TR_MODE_LLM ? n_gen : rs.n_routed;
    c->slm_ms += rs.slm_ms;
    c->llm_ms += rs.llm_ms;
    c->total_ms += rs.total_ms;
    c->ttft_ms_sum += rs.ttft_ms;
    if (n_gen >= 2) {
        c->tbt_ms_sum += rs.mean_tbt_ms;
        c->n_tbt++;
    }
    if (g->fmt == DATASET_TEXT) {
        if (n_gen < 1) return TR_OK;
        double nll = 0;
        st = sequence_nll(g->m->llm, g->lp, g->seq, n_prompt + n_gen, n_prompt, &nll);
        if (st != TR_OK) return st;
        c->nll_sum += nll;
        c->n_nll += n_gen;
        return TR_OK;
    }
    char *text = NULL;
    st = tr_detokenize(tr_model_vocab(g->m->slm), g->seq + n_prompt, n_gen, true, false, &text);
    if (st != TR_OK) return st;
    c->n_correct += dataset_check_answer(g->fmt, ex, text);
    free(text);
    return TR_OK;
}

tr_status eval_generate(const eval_models *m, const dataset *d, const eval_gen_params *gp, eval_gen_config *cfg,
                        int32_t n_cfg, eval_progress_fn progress, void *user) {
    gen_state g = {.m = m, .fmt = dataset_get_format(d)};
    const tr_vocab *vocab = tr_model_vocab(m->slm);
    g.cp = tr_context_default_params();
    g.cp.n_threads = m->n_threads;
    tr_status st = tr_context_create(m->slm, &g.cp, &g.slm_ctx);
    if (st == TR_OK) {
        g.n_ctx = eval_n_ctx(m, g.slm_ctx);
        g.seq = malloc((size_t)(g.n_ctx + 1) * sizeof *g.seq);
        g.lp = malloc((size_t)(g.n_ctx + 1) * sizeof *g.lp);
        if (!g.seq || !g.lp) st = tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    }
    const int64_t n = dataset_count(d);
    for (int64_t e = 0; st == TR_OK && e < n; e++) {
        const dataset_example *ex = dataset_get(d, e);
        dataset_tokens t;
        st = dataset_tokenize(ex, g.fmt, vocab, m->tmpl, 0, &t);
        if (st != TR_OK) break;
        int32_t n_prompt = t.n_prompt;
        if (g.fmt == DATASET_TEXT) n_prompt = t.n_ids < gp->prompt_tokens ? t.n_ids : gp->prompt_tokens;
        for (int32_t k = 0; st == TR_OK && k < n_cfg; k++) {
            if (n_prompt < 1 || n_prompt > g.n_ctx) {
                cfg[k].n_skipped++;
                continue;
            }
            st = run_one(&g, ex, t.ids, n_prompt, gp->max_new_tokens, &cfg[k]);
            if (st != TR_OK) tr_fail_prefix(st, "example %lld", (long long)ex->index);
        }
        dataset_tokens_free(&t);
        if (progress) progress(user, (double)(e + 1) / (double)n);
    }
    free(g.seq);
    free(g.lp);
    tr_context_free(g.slm_ctx);
    return st;
}
