/* ui_openai.c — the device's OpenAI-compatible API, answered by the routed system (the SLM here, the LLM through
 * the server's backend): POST /v1/chat/completions, POST /v1/completions and GET /v1/models.
 *
 * Requests are read by the OpenAI layer both servers share (src/common/openai_request.c: the same fields, rules
 * and error texts as tokroute serve; a request without `seed` draws a fresh one, reported as the reply's `seed`).
 * This server adds the routing fields `mode` (joint|slm|llm), `threshold` (τ), `policy` (maxprob|margin|entropy,
 * or router: the server's router file), `target_routed`, `max_routed`, whose defaults are the command line's, and
 * refuses by name what the routed system cannot do: `logit_bias`, alternatives (`top_logprobs` / completions'
 * `logprobs` above 0), and serve's own fields (`echo`, `prompt_logprobs`, ...). `max_tokens` is at most the
 * command line's --max-tokens.
 *
 * Log-probabilities are each token's under the model that chose it (the SLM, or the LLM for a routed token; null
 * when a remote LLM does not report it). The routed loop knows no alternatives, so top_logprobs is 0.
 *
 * Replies: chat.completion / text_completion objects, streamed as chat.completion.chunk / text_completion events
 * ending with `data: [DONE]`; `usage` adds the routed figures: routed_tokens (positions the LLM decided, as generate
 * counts them), fallback_tokens (routed while the LLM was unavailable: the SLM's kept), llm_calls (requests sent to
 * the LLM) and llm_wait_ms (time the generation waited on the LLM). The end-of-sequence token is not text and is not
 * counted in completion_tokens. */
#include <cjson/cJSON.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/openai_api.h"
#include "common/openai_request.h"
#include "ui/ui_internal.h"

#define COMPLETIONS_DEFAULT_MAX_TOKENS 16 /* OpenAI's */
_Static_assert(UI_STOP_MAX == OAI_STOP_MAX, "a request's stop strings move from the OpenAI layer unchanged");

typedef struct oa_state {
    tr_ui *ui;
    bool chat, stream, include_usage, logprobs;
    uint64_t seed;         /* the draws' seed (given or drawn), reported in every reply */
    char id[48];
    double created;
    char *text;            /* the whole reply's text (not streamed) */
    size_t text_len, text_cap;
    size_t shown;          /* bytes of text given to the client so far (completions' text_offset) */
    cJSON *lp;             /* log-probabilities not yet sent: chat, an array of entries; completions, an object */
} oa_state;

static void state_free(void *p) {
    oa_state *s = p;
    if (!s) return;
    free(s->text);
    cJSON_Delete(s->lp);
    free(s);
}

/* ---------------------------------------------------------------- request */

/* Tokenizes into r->prompt: the chat's messages through the template, or the completion's prompt (text or ids). */
static bool prompt_tokens(tr_ui *ui, oai_request *q, bool chat, ui_request *r, oai_error *e) {
    const tr_vocab *vocab = tr_model_vocab(ui->p.slm);
    const int32_t n_ctx = tr_context_n_ctx(ui->slots[0].ctx);
    const char *what = chat ? "messages" : "prompt";
    if (!chat && !q->prompt_text) { /* token ids, checked by the shared layer */
        r->prompt = q->prompt_ids;
        r->n_prompt = q->n_prompt_ids;
        q->prompt_ids = NULL;
    } else {
        int32_t cap = chat ? 256 : (int32_t)strlen(q->prompt_text) + 8, n = 0;
        tr_status st = TR_ERR_NOMEM;
        for (int attempt = 0; attempt < 2; attempt++) { /* the second with the exact count */
            free(r->prompt);
            if (!(r->prompt = malloc((size_t)cap * sizeof *r->prompt))) break;
            if (chat) {
                st = tr_chat_tokenize(vocab, ui->p.chat_template, q->chat.messages, q->chat.n, true, true, r->prompt,
                                      cap, &n);
            } else {
                const tr_tokenize_params tp = tr_tokenize_default_params(); /* as `tokroute generate -p` */
                st = tr_tokenize(vocab, q->prompt_text, strlen(q->prompt_text), &tp, r->prompt, cap, &n);
            }
            if (st != TR_ERR_RANGE || n <= cap) break;
            cap = n;
        }
        if (st != TR_OK) {
            oai_error_set(e, 400, "bad_request", what, "cannot tokenize the %s: %s", what, tr_last_error());
            return false;
        }
        r->n_prompt = n;
    }
    if (r->n_prompt == 0) {
        oai_error_set(e, 400, "bad_request", what, "the prompt is empty");
        return false;
    }
    if (r->n_prompt >= n_ctx) {
        oai_error_set(e, 400, "context_length_exceeded", what,
                      "the prompt's %d tokens fill the context of %d tokens: nothing can be generated", r->n_prompt,
                      n_ctx);
        return false;
    }
    return true;
}

bool ui_budget_fields(const tr_ui *ui, const cJSON *root, ui_request *r, oai_error *e) {
    double target = ui->p.target_routed, cap = ui->p.max_routed;
    if (!oai_number_field(root, "target_routed", 0, 1, false, &target, e) ||
        !oai_number_field(root, "max_routed", 0, 1, false, &cap, e))
        return false;
    if (target > 0 && cap > 0 && cap < target) { /* as the command line refuses --max-routed below --target-routed */
        oai_error_set(e, 400, "bad_request", "max_routed",
                      "'max_routed' (%g) is below 'target_routed' (%g): the target could never be reached", cap, target);
        return false;
    }
    r->target_routed = target;
    r->max_routed = cap;
    return true;
}

/* The routing fields: mode, threshold, policy, target_routed, max_routed (the command line's values as defaults). */
static bool routing(tr_ui *ui, const cJSON *root, ui_request *r, oai_error *e) {
    r->mode = ui->p.open_backend ? TR_MODE_JOINT : TR_MODE_SLM;
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(root, "mode");
    if (mode && !cJSON_IsNull(mode) && (!cJSON_IsString(mode) || tr_route_mode_from_name(mode->valuestring, &r->mode) != TR_OK)) {
        oai_error_set(e, 400, "bad_request", "mode", "'mode' must be \"joint\", \"slm\" or \"llm\"");
        return false;
    }
    if (r->mode != TR_MODE_SLM && !ui->p.open_backend) {
        oai_error_set(e, 400, "bad_request", "mode", "this server has no LLM: only mode \"slm\" is possible");
        return false;
    }
    double tau = ui->p.default_tau;
    if (!oai_number_field(root, "threshold", 0, 1, false, &tau, e) || !ui_budget_fields(ui, root, r, e)) return false;
    r->tau = (float)tau;
    r->router_file = ui->router_path != NULL;
    r->policy = ui->p.policy;
    const cJSON *policy = cJSON_GetObjectItemCaseSensitive(root, "policy");
    if (policy && !cJSON_IsNull(policy)) {
        const char *name = cJSON_IsString(policy) ? policy->valuestring : "";
        if (strcmp(name, "router") == 0 || strcmp(name, "mlp") == 0) {
            if (!ui->router_path) {
                oai_error_set(e, 400, "bad_request", "policy",
                              "'policy' \"router\" needs a router file: this server has none (--router FILE)");
                return false;
            }
        } else if (tr_policy_from_name(name, &r->policy) != TR_OK || r->policy == TR_POLICY_MLP) {
            oai_error_set(e, 400, "bad_request", "policy",
                          "'policy' must be \"maxprob\", \"margin\", \"entropy\" or \"router\" (the router file)");
            return false;
        } else {
            r->router_file = false;
        }
    }
    return true;
}

/* What the routed system cannot do, refused by name: logit_bias, and log-probabilities of alternatives. */
static bool refuse_unsupported(const oai_request *q, bool chat, oai_error *e) {
    if (oai_has(q->root, "logit_bias")) {
        oai_refuse(e, "logit_bias", "tokroute ui",
                   "a routed token is drawn by the SLM or the LLM, and the LLM's backends take no bias");
        return false;
    }
    if (q->top_logprobs > 0) {
        oai_refuse(e, chat ? "top_logprobs" : "logprobs", "tokroute ui",
                   "only 0: the routed system knows only the chosen token's log-probability (under the model that "
                   "chose it), no alternatives");
        return false;
    }
    return true;
}

/* max_tokens / max_completion_tokens: at most --max-tokens and what the context leaves; the default is cut to fit,
 * a value asked for that does not fit is a 400 (as OpenAI and vLLM). */
static bool token_budget(tr_ui *ui, const oai_request *q, bool chat, ui_request *r, oai_error *e) {
    const int32_t n_ctx = tr_context_n_ctx(ui->slots[0].ctx), room = n_ctx - r->n_prompt;
    const char *name = q->max_tokens_field;
    const int64_t asked = q->max_tokens;
    if (asked > ui->p.max_tokens) {
        oai_error_set(e, 400, "bad_request", name, "'%s' must be at most %d (the server's --max-tokens), not %lld",
                      name, (int)ui->p.max_tokens, (long long)asked);
        return false;
    }
    if (asked > room) {
        oai_error_set(e, 400, "context_length_exceeded", name,
                      "the prompt's %d tokens + %s %lld exceed the context of %d tokens (at most %d can be generated)",
                      r->n_prompt, name, (long long)asked, n_ctx, room);
        return false;
    }
    int32_t n = asked > 0 ? (int32_t)asked : chat ? ui->p.max_tokens : COMPLETIONS_DEFAULT_MAX_TOKENS;
    if (n > ui->p.max_tokens) n = ui->p.max_tokens;
    r->max_tokens = n < room ? n : room;
    return true;
}

static bool parse(tr_ui *ui, bool chat, const char *body, size_t len, ui_request *r, oa_state *s, oai_error *e) {
    static const char *const routing_fields[] = {"mode", "threshold", "policy", "target_routed", "max_routed", NULL};
    const oai_endpoint ep = {.chat = chat, .server = "tokroute ui", .extra_fields = routing_fields,
                             .n_vocab = tr_model_get_info(ui->p.slm)->n_vocab, .min_max_tokens = 1};
    if (chat && ui->p.chat_template == TR_CHAT_NONE) {
        oai_no_chat_template(e, "tokroute ui", ui->slm_name);
        return false;
    }
    oai_request q;
    bool ok = oai_request_parse(body, len, &ep, &q, e) && refuse_unsupported(&q, chat, e) &&
              routing(ui, q.root, r, e) && prompt_tokens(ui, &q, chat, r, e) && token_budget(ui, &q, chat, r, e);
    if (ok) {
        r->sampling = tr_sampler_default_params();
        r->sampling.temperature = q.temperature;
        r->sampling.top_k = q.top_k;
        r->sampling.top_p = q.top_p;
        r->sampling.seed = s->seed = q.seed; /* given, or a fresh draw: the replies report it */
        memcpy(r->stop, q.stop, sizeof r->stop);
        r->n_stop = q.n_stop;
        q.n_stop = 0;
        s->stream = q.stream;
        s->include_usage = q.include_usage;
        s->logprobs = q.logprobs;
    }
    oai_request_free(&q);
    return ok;
}

/* ---------------------------------------------------------------- replies */

static cJSON *reply_head(const oa_state *s, const char *object) {
    return oai_reply_head(s->id, object, s->created, ui_model_id(s->ui), s->seed);
}

static void append_sse(ui_job *job, cJSON *root) {
    char *ev = oai_sse_data(root);
    if (ev) ui_job_append(job, ev, strlen(ev));
    free(ev);
}

/* A streamed chunk carrying text (or, with finish, the end); the log-probabilities gathered go with it. */
static void send_chunk(ui_job *job, const char *text, size_t len, const char *finish) {
    oa_state *s = job->state;
    cJSON *root = reply_head(s, s->chat ? "chat.completion.chunk" : "text_completion"), *ch = oai_add_choice(root);
    if (s->chat) oai_add_delta(ch, false, text, len);
    else oai_add_text(ch, "text", text, len);
    oai_end_choice(ch, s->chat, s->lp, finish);
    s->lp = NULL;
    if (s->include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI: usage comes in its own last chunk */
    append_sse(job, root);
}

static cJSON *lp_container(bool chat) { return chat ? cJSON_CreateArray() : oai_text_logprobs_new(); }

static void on_start(ui_job *job) {
    oa_state *s = job->state;
    if (!s->stream || !s->chat) return;
    /* OpenAI's first chat chunk names the role. */
    cJSON *root = reply_head(s, "chat.completion.chunk"), *ch = oai_add_choice(root);
    oai_add_delta(ch, true, "", 0);
    oai_end_choice(ch, true, NULL, NULL);
    if (s->include_usage) cJSON_AddNullToObject(root, "usage");
    append_sse(job, root);
}

static void on_token(ui_job *job, const tr_route_token *t) {
    oa_state *s = job->state;
    const tr_vocab *vocab = tr_model_vocab(job->ui->p.slm);
    if (!s->logprobs || tr_vocab_is_eog(vocab, t->id)) return; /* the end-of-sequence token is not text */
    char piece[256];
    int32_t n = tr_token_to_piece(vocab, t->id, true, piece, (int32_t)sizeof piece - 1);
    n = n < 0 ? 0 : n < (int32_t)sizeof piece ? n : (int32_t)sizeof piece - 1;
    piece[n] = 0;
    if (!s->lp) s->lp = lp_container(s->chat);
    if (!s->lp) return;
    if (s->chat) {
        cJSON *entry = oai_token_logprob(piece, (size_t)n, t->logprob);
        cJSON_AddArrayToObject(entry, "top_logprobs");
        cJSON_AddItemToArray(s->lp, entry);
    } else {
        oai_text_logprobs_add(s->lp, piece, t->logprob, NULL, s->shown);
    }
}

static void on_text(ui_job *job, const char *text, size_t len, const tr_route_token *t) {
    oa_state *s = job->state;
    s->shown += len;
    if (s->stream) {
        send_chunk(job, text, len, NULL);
        return;
    }
    if (s->text_len + len + 1 > s->text_cap) {
        size_t cap = (s->text_len + len + 1) * 2;
        char *p = realloc(s->text, cap);
        if (!p) return;
        s->text = p;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, text, len);
    s->text_len += len;
    s->text[s->text_len] = 0;
}

static void on_error(ui_job *job, tr_status st, const char *message) {
    oa_state *s = job->state;
    oai_error e;
    if (st == TR_ERR_NETWORK || st == TR_ERR_TIMEOUT)
        oai_error_set(&e, 502, "llm_unavailable", NULL, "the LLM could not answer: %s", message);
    else if (st == TR_ERR_RANGE) oai_error_set(&e, 400, "context_length_exceeded", NULL, "%s", message);
    else if (st == TR_ERR_ARG || st == TR_ERR_UNSUPPORTED) oai_error_set(&e, 400, "bad_request", NULL, "%s", message);
    else oai_error_set(&e, 500, "server_error", NULL, "generation failed: %s", message);
    job->http_status = e.status;
    if (s->stream) { /* the stream is already 200: an error event ends it (the SDKs raise it) */
        cJSON *root = cJSON_CreateObject();
        cJSON_AddItemToObject(root, "error", oai_error_object(&e));
        append_sse(job, root);
        return;
    }
    char *json = oai_error_json(&e);
    if (json) ui_job_append(job, json, strlen(json));
    cJSON_free(json);
}

static void add_routed_usage(cJSON *root, const tr_route_stats *st, const tr_llm_stats *llm) {
    cJSON *u = oai_add_usage(root, st->n_prompt, st->n_tokens - (st->stopped_by_eog ? 1 : 0));
    cJSON_AddNumberToObject(u, "routed_tokens", st->n_routed);
    cJSON_AddNumberToObject(u, "fallback_tokens", st->n_fallback);
    cJSON_AddNumberToObject(u, "llm_calls", (double)llm->calls);
    cJSON_AddNumberToObject(u, "llm_wait_ms", floor(st->llm_wait_ms * 1000 + 0.5) / 1000);
}

static void on_done(ui_job *job, const tr_route_stats *st, const tr_llm_stats *llm, const char *stop) {
    oa_state *s = job->state;
    const char *finish = strcmp(stop, "length") == 0 ? "length" : "stop";
    job->http_status = 200;
    if (s->stream) {
        send_chunk(job, "", 0, finish);
        if (s->include_usage) {
            cJSON *root = reply_head(s, s->chat ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(root, "choices");
            add_routed_usage(root, st, llm);
            append_sse(job, root);
        }
        static const char done[] = "data: [DONE]\n\n";
        ui_job_append(job, done, sizeof done - 1);
        return;
    }
    cJSON *root = reply_head(s, s->chat ? "chat.completion" : "text_completion"), *ch = oai_add_choice(root);
    if (s->chat) oai_add_message(ch, s->text, s->text_len);
    else oai_add_text(ch, "text", s->text, s->text_len);
    cJSON *lp = s->logprobs ? (s->lp ? s->lp : lp_container(s->chat)) : NULL;
    s->lp = NULL;
    oai_end_choice(ch, s->chat, lp, finish);
    add_routed_usage(root, st, llm);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (json) ui_job_append(job, json, strlen(json));
    else job->http_status = 500;
    cJSON_free(json);
}

static const ui_sink openai_sink = {
    .start = on_start, .token = on_token, .text = on_text, .warning = NULL,
    .error = on_error, .done = on_done,   .free = state_free,
};

/* ---------------------------------------------------------------- endpoints */

int ui_openai_generate(tr_ui *ui, struct MHD_Connection *c, bool chat, const char *body, size_t len) {
    oa_state *s = calloc(1, sizeof *s);
    if (!s) return ui_send_error(c, 500, NULL, NULL, "out of memory", 0);
    s->ui = ui;
    s->chat = chat;
    s->created = (double)time(NULL);
    ui_request r = {0};
    oai_error e;
    if (!parse(ui, chat, body, len, &r, s, &e)) {
        ui_request_free(&r);
        state_free(s);
        return ui_send_error(c, (unsigned)e.status, e.code, e.param, e.message, 0);
    }
    if (!oai_random_id(chat ? "chatcmpl-" : "cmpl-", s->id, sizeof s->id)) {
        ui_request_free(&r);
        state_free(s);
        return ui_send_error(c, 503, NULL, NULL, "no random bytes for the completion id", 0);
    }
    const bool stream = s->stream;
    int status = 0, retry_after = 0;
    ui_job *job = ui_job_start(ui, &r, &openai_sink, s, ui_client_gone, c, &status, &retry_after);
    if (!job) return status ? ui_send_error(c, (unsigned)status, NULL, NULL, tr_last_error(), retry_after) : MHD_NO;
    if (stream) return ui_send_stream(ui, c, job, NULL);
    if (!ui_job_wait(job, ui_client_gone, c)) { /* the client went: its generation was cancelled */
        ui_job_release(job);
        return MHD_NO;
    }
    /* Finished: the worker no longer writes the buffer. */
    const int ret = ui_send_json_text(c, job->http_status ? (unsigned)job->http_status : 500, job->buf, 0);
    ui_job_release(job);
    return ret;
}

int ui_openai_models(tr_ui *ui, struct MHD_Connection *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), m);
    cJSON_AddStringToObject(m, "id", ui_model_id(ui));
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)ui->started);
    cJSON_AddStringToObject(m, "owned_by", "tokroute");
    /* What answers: the SLM here, the LLM behind it, how tokens are routed. */
    cJSON_AddStringToObject(m, "slm", ui->slm_name);
    if (ui->p.open_backend) cJSON_AddStringToObject(m, "llm", ui->llm_name ? ui->llm_name : "LLM");
    else cJSON_AddNullToObject(m, "llm");
    if (ui->router_path) cJSON_AddStringToObject(m, "router", ui->router_path);
    else cJSON_AddStringToObject(m, "router", tr_policy_name(ui->p.policy));
    if (ui->p.chat_template != TR_CHAT_NONE)
        cJSON_AddStringToObject(m, "chat_template", tr_chat_template_name(ui->p.chat_template));
    else cJSON_AddNullToObject(m, "chat_template");
    cJSON_AddNumberToObject(m, "context_length", tr_context_n_ctx(ui->slots[0].ctx));
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    const int ret = ui_send_json_text(c, 200, json, 0);
    cJSON_free(json);
    return ret;
}
