/* ui_page_events.c — the page's own generation endpoint, POST /api/generate: its request fields (prompt, mode, tau,
 * max_tokens, policy, chat, temperature, seed, target_routed, max_routed — the budget as the OpenAI endpoints take
 * it, a cap below the target refused by name; any other is a 400 naming it, as on the OpenAI endpoints) and the
 * server-sent events it answers with. temperature defaults to 0 (greedy, the page's view of routing); sampling
 * without a seed draws a fresh one, reported in "start" so a run can be replayed.
 *
 * Events: "start" {id, n_prompt, seed}, "token" {i, id, text, source: slm|llm|fallback, score, tau, slm_ms, llm_ms and,
 * when the LLM overrode the SLM, slm_id and slm_text}, "text" {text} for text held back until the end, "warning"
 * {message} once when the LLM is unavailable (its tokens fall back to the SLM's) or its context is short, "error"
 * {message}, and last "done" with the profiling figures. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/openai_api.h"
#include "common/openai_request.h"
#include "ui/ui_internal.h"

/* ---------------------------------------------------------------- request */

/* A number field checked as the OpenAI endpoints check theirs (the same plain words); name is a literal. */
static bool page_number(const cJSON *j, const char *name, double lo, double hi, bool integer, double *v,
                        const char **param, char *msg_buf, size_t msg_cap) {
    oai_error e;
    if (oai_number_field(j, name, lo, hi, integer, v, &e)) return true;
    *param = name;
    snprintf(msg_buf, msg_cap, "%s", e.message);
    return false;
}

const char *ui_page_parse(tr_ui *ui, const cJSON *j, ui_request *r, const char **param, const char **code,
                          char *msg_buf, size_t msg_cap) {
    *param = "";
    *code = NULL;
    if (!cJSON_IsObject(j)) return "the body must be a JSON object";
    static const char *const fields[] = {"prompt",      "mode", "tau",           "max_tokens", "policy", "chat",
                                         "temperature", "seed", "target_routed", "max_routed", NULL};
    const char *unknown = oai_unknown_field(j, fields);
    if (unknown) {
        *param = unknown; /* a name in j */
        *code = "unknown_field";
        snprintf(msg_buf, msg_cap, "unknown field '%.60s' (/api/generate takes prompt, mode, tau, max_tokens, policy, "
                 "chat, temperature, seed, target_routed and max_routed)", unknown);
        return msg_buf;
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    *param = "prompt";
    if (!cJSON_IsString(prompt) || !prompt->valuestring[0]) return "\"prompt\" must be a non-empty string";

    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(j, "mode");
    r->mode = ui->p.open_backend ? TR_MODE_JOINT : TR_MODE_SLM;
    *param = "mode";
    if (mode) {
        const char *m = cJSON_IsString(mode) ? mode->valuestring : "";
        if (strcmp(m, "joint") == 0) r->mode = TR_MODE_JOINT;
        else if (strcmp(m, "small_only") == 0 || strcmp(m, "slm") == 0) r->mode = TR_MODE_SLM;
        else if (strcmp(m, "llm_only") == 0 || strcmp(m, "llm") == 0) r->mode = TR_MODE_LLM;
        else return "\"mode\" must be \"joint\", \"small_only\" or \"llm_only\"";
    }
    if (r->mode != TR_MODE_SLM && !ui->p.open_backend) return "this server has no LLM: only small_only is possible";

    double tau = ui->p.default_tau, max_tokens = ui->p.max_tokens < 128 ? ui->p.max_tokens : 128;
    if (!page_number(j, "tau", 0, 1, false, &tau, param, msg_buf, msg_cap) ||
        !page_number(j, "max_tokens", 1, ui->p.max_tokens, true, &max_tokens, param, msg_buf, msg_cap))
        return msg_buf;
    r->tau = (float)tau;
    r->max_tokens = (int32_t)max_tokens;

    const cJSON *policy = cJSON_GetObjectItemCaseSensitive(j, "policy");
    r->router_file = ui->router_path != NULL;
    r->policy = ui->p.policy;
    *param = "policy";
    if (policy && !ui->router_path) {
        if (!cJSON_IsString(policy) || tr_policy_from_name(policy->valuestring, &r->policy) != TR_OK ||
            r->policy == TR_POLICY_MLP)
            return "\"policy\" must be \"maxprob\", \"margin\" or \"entropy\"";
    }
    oai_error budget_error;
    if (!ui_budget_fields(ui, j, r, &budget_error)) {
        *param = budget_error.param[0] == 't' ? "target_routed" : "max_routed"; /* a literal, as *param must be */
        snprintf(msg_buf, msg_cap, "%s", budget_error.message);
        return msg_buf;
    }
    r->sampling = tr_sampler_default_params();
    double temperature = 0, seed = -1;
    if (!page_number(j, "temperature", 0, 2, false, &temperature, param, msg_buf, msg_cap) ||
        !page_number(j, "seed", 0, OAI_SEED_MAX, true, &seed, param, msg_buf, msg_cap))
        return msg_buf;
    r->sampling.temperature = (float)temperature;
    if (seed >= 0) r->sampling.seed = (uint64_t)seed;
    else if (!oai_fresh_seed(&r->sampling.seed)) return "no random bytes for a seed";

    const cJSON *chat = cJSON_GetObjectItemCaseSensitive(j, "chat");
    *param = "chat";
    if (chat && !cJSON_IsBool(chat)) return "\"chat\" must be true or false";
    const bool use_chat = cJSON_IsTrue(chat);
    if (use_chat && ui->p.chat_template == TR_CHAT_NONE) return "the SLM has no chat template";

    *param = "prompt";
    const tr_vocab *vocab = tr_model_vocab(ui->p.slm);
    const char *text = prompt->valuestring;
    const size_t len = strlen(text);
    int32_t cap = (int32_t)(len + 64), n = 0;
    tr_status st = TR_ERR_NOMEM;
    for (int attempt = 0; attempt < 2; attempt++) { /* the second with the exact count */
        free(r->prompt);
        if (!(r->prompt = malloc((size_t)cap * sizeof *r->prompt))) break;
        if (use_chat) {
            tr_chat_message msg = {"user", text};
            st = tr_chat_tokenize(vocab, ui->p.chat_template, &msg, 1, true, true, r->prompt, cap, &n);
        } else {
            tr_tokenize_params tp = tr_tokenize_default_params();
            st = tr_tokenize(vocab, text, len, &tp, r->prompt, cap, &n);
        }
        if (st != TR_ERR_RANGE || n <= cap) break;
        cap = n;
    }
    if (st != TR_OK) {
        snprintf(msg_buf, msg_cap, "cannot tokenize the prompt: %s", tr_last_error());
        return msg_buf;
    }
    r->n_prompt = n;
    if (n == 0) return "the prompt is empty after tokenizing";
    const int32_t n_ctx = tr_context_n_ctx(ui->slots[0].ctx);
    if ((int64_t)n + r->max_tokens > n_ctx) {
        *param = "max_tokens";
        snprintf(msg_buf, msg_cap, "context full: the prompt (%d tokens) + max tokens (%d) exceed the context (%d)", n,
                 r->max_tokens, n_ctx);
        return msg_buf;
    }
    *param = "";
    return NULL;
}

/* ---------------------------------------------------------------- events */

typedef struct page_state {
    bool warned; /* the "LLM unavailable" warning went out */
} page_state;

void *ui_page_state_new(void) { return calloc(1, sizeof(page_state)); }

/* Appends one event. */
static void emit(ui_job *job, const char *event, cJSON *data) {
    char *json = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (!json) return;
    const size_t need = strlen(event) + strlen(json) + 24;
    char *line = malloc(need);
    if (line) {
        const int n = snprintf(line, need, "event: %s\ndata: %s\n\n", event, json);
        ui_job_append(job, line, (size_t)n);
    }
    free(line);
    cJSON_free(json);
}

static void emit_message(ui_job *job, const char *event, const char *message) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "message", message && *message ? message : "generation failed");
    emit(job, event, d);
}

/* Rounded so the JSON shows 0.4, not 0.40000000596046448. */
static double rounded(double x, double scale) { return (double)(long long)(x * scale + (x < 0 ? -0.5 : 0.5)) / scale; }

static void on_start(ui_job *job) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "id", (double)job->id);
    cJSON_AddNumberToObject(d, "n_prompt", job->req.n_prompt);
    oai_add_seed(d, job->req.sampling.seed); /* sent back, it replays the run */
    emit(job, "start", d);
}

static void on_token(ui_job *job, const tr_route_token *t) {
    page_state *s = job->state;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "i", t->index);
    cJSON_AddNumberToObject(d, "id", t->id);
    cJSON_AddStringToObject(d, "text", t->text ? t->text : "");
    cJSON_AddStringToObject(d, "source", t->llm_unavailable ? "fallback" : t->source == TR_SOURCE_LLM ? "llm" : "slm");
    if (t->score >= 0) cJSON_AddNumberToObject(d, "score", rounded(t->score, 1e4));
    else cJSON_AddNullToObject(d, "score");
    cJSON_AddNumberToObject(d, "tau", rounded(t->tau, 1e4));
    cJSON_AddNumberToObject(d, "slm_ms", rounded(t->slm_ms, 1e3));
    cJSON_AddNumberToObject(d, "llm_ms", rounded(t->llm_ms, 1e3));
    if (t->source == TR_SOURCE_LLM && t->slm_id >= 0) {
        char piece[128];
        int32_t n = tr_token_to_piece(tr_model_vocab(job->ui->p.slm), t->slm_id, true, piece, (int32_t)sizeof piece - 1);
        piece[n < 0 ? 0 : n < (int32_t)sizeof piece ? n : (int32_t)sizeof piece - 1] = 0;
        cJSON_AddNumberToObject(d, "slm_id", t->slm_id);
        cJSON_AddStringToObject(d, "slm_text", piece);
    }
    if (t->llm_unavailable && !s->warned) { /* once per generation, before the token it concerns */
        s->warned = true;
        char msg[512];
        snprintf(msg, sizeof msg, "the LLM (%s) is unavailable: routed tokens use the SLM's own proposal, marked as "
                 "fallbacks", job->ui->llm_name ? job->ui->llm_name : "remote");
        emit_message(job, "warning", msg);
    }
    emit(job, "token", d);
}

/* Token texts travel in their token events; only the tail held back until the end comes here on its own. */
static void on_text(ui_job *job, const char *text, size_t len, const tr_route_token *t) {
    if (t) return;
    char *copy = strndup(text, len);
    if (!copy) return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "text", copy);
    free(copy);
    emit(job, "text", d);
}

static void on_warning(ui_job *job, const char *message) { emit_message(job, "warning", message); }

static void on_error(ui_job *job, tr_status st, const char *message) { emit_message(job, "error", message); }

static void on_done(ui_job *job, const tr_route_stats *s, const tr_llm_stats *llm, const char *stop) {
    const ui_request *r = &job->req;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "id", (double)job->id);
    cJSON_AddStringToObject(d, "mode", tr_route_mode_name(r->mode));
    cJSON_AddNumberToObject(d, "tau", rounded(r->tau, 1e4));
    cJSON_AddNumberToObject(d, "n_prompt", s->n_prompt);
    cJSON_AddNumberToObject(d, "n_tokens", s->n_tokens);
    cJSON_AddNumberToObject(d, "n_routed", s->n_routed);
    cJSON_AddNumberToObject(d, "routed_pct", s->n_tokens ? rounded(100.0 * s->n_routed / s->n_tokens, 100) : 0);
    cJSON_AddNumberToObject(d, "target_routed", r->target_routed);
    cJSON_AddNumberToObject(d, "max_routed", r->max_routed);
    cJSON_AddNumberToObject(d, "tau_last", rounded(s->tau_last, 1e4));
    cJSON_AddNumberToObject(d, "ttft_ms", rounded(s->ttft_ms, 1e3));
    cJSON_AddNumberToObject(d, "mean_tbt_ms", rounded(s->mean_tbt_ms, 1e3));
    cJSON_AddNumberToObject(d, "slm_ms", rounded(s->slm_ms, 1e3));
    cJSON_AddNumberToObject(d, "router_ms", rounded(s->router_ms, 1e3));
    cJSON_AddNumberToObject(d, "llm_ms", rounded(s->llm_ms, 1e3));
    cJSON_AddNumberToObject(d, "total_ms", rounded(s->total_ms, 1e3));
    cJSON_AddNumberToObject(d, "n_fallback", s->n_fallback);
    /* Requests sent to the LLM, of them failed; and routed tokens the loop waited at, which can outnumber the
     * requests: while the circuit breaker is open a routed token is refused at once without one (llm_refused). */
    cJSON_AddNumberToObject(d, "llm_calls", (double)llm->calls);
    cJSON_AddNumberToObject(d, "llm_failed", (double)llm->failures);
    cJSON_AddNumberToObject(d, "llm_refused", (double)llm->short_circuited);
    /* Hiding the round trip: routed tokens waited for, routed tokens answered without a call (of them by a draft
     * walk), time spent waiting. */
    cJSON_AddNumberToObject(d, "llm_blocking", (double)s->llm_blocking);
    cJSON_AddNumberToObject(d, "lookahead_hits", (double)s->n_lookahead_hits);
    cJSON_AddNumberToObject(d, "draft_hits", (double)s->n_draft_hits);
    cJSON_AddNumberToObject(d, "llm_wait_ms", rounded(s->llm_wait_ms, 1e3));
    /* Counted by the network backends; the embedded backend sends nothing and reports 0. */
    cJSON_AddNumberToObject(d, "bytes_sent", (double)s->llm_bytes_sent);
    cJSON_AddNumberToObject(d, "bytes_received", (double)s->llm_bytes_received);
    cJSON_AddStringToObject(d, "stop", stop);
    emit(job, "done", d);
}

const ui_sink ui_page_sink = {
    .start = on_start, .token = on_token, .text = on_text, .warning = on_warning,
    .error = on_error, .done = on_done,   .free = free,
};
