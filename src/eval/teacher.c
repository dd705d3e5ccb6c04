/* teacher.c — the teacher-forced pass of tr_eval_run: each example's prompt + target goes through the SLM in one
 * batched evaluation (logits of every position) and is scored by the LLM backend (tr_llm_score: one request where
 * the engine allows), and every target position records whether each model's top-1 is the ground-truth token and
 * each router's score of the SLM's state there, and the LLM's expected gain p(l) - p(s) (the bound's ranking, from
 * its top EVAL_LLM_TOPK ids).
 *
 * The position that predicts target token j is the one holding token j-1 (the prompt's last token for j = 0). The
 * LLM's top-1 is taken over the ids both vocabularies share (a padded LLM vocabulary never wins with a padding id).
 * Targets are cut so prompt + target fits both contexts. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "eval/eval_internal.h"

static tr_status positions_reserve(eval_positions *p, int64_t more, int32_t n_scored) {
    if (p->n + more <= p->cap) return TR_OK;
    int64_t cap = p->cap ? p->cap : 4096;
    while (cap < p->n + more) cap *= 2;
    uint8_t *a = realloc(p->slm_ok, (size_t)cap);
    if (a) p->slm_ok = a;
    uint8_t *b = a ? realloc(p->llm_ok, (size_t)cap) : NULL;
    if (b) p->llm_ok = b;
    float *g = b ? realloc(p->expected_gain, (size_t)cap * sizeof *g) : NULL;
    if (g) p->expected_gain = g;
    if (!a || !b || !g) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    for (int32_t k = 0; k < n_scored; k++) {
        float *s = realloc(p->score[k], (size_t)cap * sizeof *s);
        if (!s) return tr_fail(TR_ERR_NOMEM, "eval: out of memory");
        p->score[k] = s;
    }
    p->cap = cap;
    return TR_OK;
}

void eval_positions_free(eval_positions *p) {
    if (!p) return;
    free(p->slm_ok);
    free(p->llm_ok);
    free(p->expected_gain);
    for (int k = 0; k < EVAL_MAX_POLICIES; k++) free(p->score[k]);
    memset(p, 0, sizeof *p);
}

int32_t eval_n_ctx(const eval_models *m, const tr_context *slm_ctx) {
    int32_t n = tr_context_n_ctx(slm_ctx);
    if (m->llm_model) {
        const int32_t l = tr_model_get_info(m->llm_model)->n_ctx_train;
        if (l > 0 && l < n) n = l;
    }
    return n;
}

static tr_status score_example(const eval_models *m, tr_context *sc, tr_llm_position *lp, const dataset_tokens *t,
                               eval_positions *out) {
    const tr_model_info *si = tr_model_get_info(m->slm);
    tr_context_clear(sc);
    const int32_t from = t->n_prompt > 0 ? t->n_prompt - 1 : 0;
    /* Positions from + 1 .. n_ids - 1 are predicted; the LLM's top-1 among the shared ids (the allowed range). */
    tr_status st = tr_llm_score(m->llm, t->ids, t->n_ids, from + 1, t->n_ids, EVAL_LLM_TOPK, lp);
    if (st == TR_OK) st = tr_context_eval(sc, t->ids, t->n_ids, TR_EVAL_LOGITS_ALL);
    if (st != TR_OK) return st;
    if ((st = positions_reserve(out, t->n_ids - from, m->n_policies)) != TR_OK) return st;
    /* A router with context reads the prompt's last positions too, as generation shows them to it. */
    for (int32_t k = 0; k < m->n_policies; k++) {
        if (!m->routers[k]) continue;
        tr_router_reset(m->routers[k]);
        /* The whole example: scoring position p reads tokens 0..p-1 only (the induction feature). */
        if ((st = tr_router_tokens(m->routers[k], t->ids, t->n_ids)) != TR_OK) return st;
        const int32_t context = tr_router_context(m->routers[k]);
        for (int32_t pos = from - context > 0 ? from - context : 0; st == TR_OK && pos < from; pos++)
            st = tr_router_observe(m->routers[k], pos + 1, tr_context_hidden(sc, pos), si->n_embd,
                                   tr_context_logits(sc, pos), si->n_vocab);
        if (st != TR_OK) return st;
    }
    for (int32_t pos = from; pos + 1 < t->n_ids; pos++) {
        const int32_t truth = t->ids[pos + 1];
        const float *sl = tr_context_logits(sc, pos);
        const float *hidden = tr_context_hidden(sc, pos);
        if (!sl || !hidden) return tr_fail(TR_ERR_STATE, "eval: the SLM kept no logits");
        const int64_t i = out->n++;
        const int32_t slm_top1 = tr_argmax(sl, si->n_vocab);
        out->slm_ok[i] = slm_top1 == truth;
        out->llm_ok[i] = lp[pos - from].top_ids[0] == truth;
        out->expected_gain[i] = eval_expected_gain(&lp[pos - from], slm_top1);
        for (int32_t k = 0; k < m->n_policies; k++) {
            if (!m->routers[k]) continue;
            st = tr_router_score_at(m->routers[k], pos + 1, hidden, si->n_embd, sl, si->n_vocab, &out->score[k][i]);
            if (st != TR_OK) return st;
        }
    }
    return TR_OK;
}

tr_status eval_teacher_forced(const eval_models *m, const dataset *d, int32_t max_target, eval_positions *out,
                              eval_progress_fn progress, void *user) {
    memset(out, 0, sizeof *out);
    const tr_vocab *vocab = tr_model_vocab(m->slm);
    if (!vocab) return tr_fail(TR_ERR_ARG, "eval: the SLM has no vocabulary to tokenize the data with");
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = m->n_threads;
    tr_context *sc = NULL;
    tr_status st = tr_context_create(m->slm, &cp, &sc);
    const int32_t n_ctx = st == TR_OK ? eval_n_ctx(m, sc) : 0;
    tr_llm_position *lp = st == TR_OK ? malloc((size_t)(n_ctx + 1) * sizeof *lp) : NULL;
    if (st == TR_OK && !lp) st = tr_fail(TR_ERR_NOMEM, "eval: out of memory");
    const int64_t n = dataset_count(d);
    for (int64_t e = 0; st == TR_OK && e < n; e++) {
        const dataset_example *ex = dataset_get(d, e);
        dataset_tokens t;
        st = dataset_tokenize(ex, dataset_get_format(d), vocab, m->tmpl, max_target, &t);
        if (st != TR_OK) break;
        if (t.n_ids > n_ctx) t.n_ids = n_ctx;
        if (t.n_ids > t.n_prompt) { /* a prompt that fills the context leaves nothing to score */
            st = score_example(m, sc, lp, &t, out);
            if (st != TR_OK) tr_fail_prefix(st, "example %lld", (long long)ex->index);
            else out->n_examples++;
        }
        dataset_tokens_free(&t);
        if (progress) progress(user, (double)(e + 1) / (double)n);
    }
    tr_context_free(sc);
    free(lp);
    if (st != TR_OK) eval_positions_free(out);
    return st;
}
