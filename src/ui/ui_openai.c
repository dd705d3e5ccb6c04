/* ui_openai.c — the device's OpenAI-compatible API, answered by the routed system (the SLM here, the LLM through
 * the server's backend): POST /v1/chat/completions, POST /v1/completions and GET /v1/models.
 *
 * Requests: OpenAI's fields `model` (any name; replies name the one /v1/models lists), `messages` (rendered with
 * the SLM's chat template, or the server's --chat-template; none is a 400) or `prompt` (text, or token ids; one
 * prompt), `stream`, `stream_options.include_usage`, `max_tokens` / `max_completion_tokens`, `temperature` (0..2;
 * 0 greedy), `top_p`, `seed`, `stop` (up to 4 strings, never part of the text), `logprobs` (chat: true/false;
 * completions: 0) and `top_logprobs` (0), `n` (1); and the routing fields `mode` (joint|slm|llm), `threshold` (τ),
 * `policy` (maxprob|margin|entropy, or router: the server's router file), `target_routed`, `max_routed`, whose
 * defaults are the command line's. Any other field is a 400 naming it: nothing is silently ignored.
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
#include "ui/ui_internal.h"

#define COMPLETIONS_DEFAULT_MAX_TOKENS 16 /* OpenAI's */

typedef struct oa_state {
    tr_ui *ui;
    bool chat, stream, include_usage, logprobs;
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

static const char *const chat_fields[] = {
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p",
    "seed", "stop", "logprobs", "top_logprobs", "n", "mode", "threshold", "policy", "target_routed", "max_routed", NULL};
static const char *const completion_fields[] = {
    "model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p", "seed", "stop", "logprobs",
    "n", "mode", "threshold", "policy", "target_routed", "max_routed", NULL};

/* A number field in [lo, hi] (integer when asked); absent or null leaves *out. */
static bool number(const cJSON *root, const char *name, double lo, double hi, bool integer, double *out, oai_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble < lo || f->valuedouble > hi ||
        (integer && f->valuedouble != floor(f->valuedouble))) {
        oai_error_set(e, 400, "bad_request", name, "'%s' must be %s in [%g, %g]", name, integer ? "an integer" : "a number",
                      lo, hi);
        return false;
    }
    *out = f->valuedouble;
    return true;
}

static bool boolean(const cJSON *root, const char *name, bool *out, oai_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsBool(f)) {
        oai_error_set(e, 400, "bad_request", name, "'%s' must be true or false", name);
        return false;
    }
    *out = cJSON_IsTrue(f);
    return true;
}

/* Tokenizes into r->prompt: the chat's messages through the template, or the completion's prompt. */
static bool prompt_tokens(tr_ui *ui, const cJSON *root, bool chat, ui_request *r, oai_error *e) {
    const tr_vocab *vocab = tr_model_vocab(ui->p.slm);
    const int32_t n_vocab = tr_model_get_info(ui->p.slm)->n_vocab, n_ctx = tr_context_n_ctx(ui->slots[0].ctx);
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, chat ? "messages" : "prompt");
    oai_chat conv = {0};
    if (chat) {
        if (ui->p.chat_template == TR_CHAT_NONE) {
            oai_error_set(e, 400, "no_chat_template", "messages",
                          "the SLM (%s) has no chat template in its GGUF: start the server with --chat-template NAME "
                          "(chatml, llama2, llama3, gemma), or use /v1/completions", ui->slm_name);
            return false;
        }
        if (!oai_chat_parse(prompt, &conv, e)) return false;
    } else {
        if (cJSON_IsArray(prompt) && prompt->child && (cJSON_IsString(prompt->child) || cJSON_IsArray(prompt->child))) {
            if (cJSON_GetArraySize(prompt) > 1) {
                oai_error_set(e, 400, "bad_request", "prompt",
                              "a batch of %d prompts: batches are not supported, send one prompt per request",
                              cJSON_GetArraySize(prompt));
                return false;
            }
            prompt = prompt->child;
        }
        if (cJSON_IsArray(prompt)) { /* token ids */
            const int n = cJSON_GetArraySize(prompt);
            if (n > n_ctx || !(r->prompt = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->prompt))) {
                oai_error_set(e, 400, "context_length_exceeded", "prompt",
                              "the prompt's %d tokens exceed the context of %d tokens", n, n_ctx);
                return false;
            }
            int i = 0;
            for (const cJSON *t = prompt->child; t; t = t->next, i++) {
                if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                    t->valuedouble >= n_vocab) {
                    oai_error_set(e, 400, "bad_request", "prompt", "prompt[%d] is not a token id in [0, %d)", i, n_vocab);
                    return false;
                }
                r->prompt[i] = (int32_t)t->valuedouble;
            }
            r->n_prompt = n;
            goto check;
        }
        if (!cJSON_IsString(prompt)) {
            oai_error_set(e, 400, "bad_request", "prompt", "'prompt' must be a string or an array of token ids");
            return false;
        }
    }
    int32_t cap = chat ? 256 : (int32_t)strlen(prompt->valuestring) + 8, n = 0;
    tr_status st = TR_ERR_NOMEM;
    for (int attempt = 0; attempt < 2; attempt++) { /* the second with the exact count */
        free(r->prompt);
        if (!(r->prompt = malloc((size_t)cap * sizeof *r->prompt))) break;
        if (chat) {
            st = tr_chat_tokenize(vocab, ui->p.chat_template, conv.messages, conv.n, true, true, r->prompt, cap, &n);
        } else {
            const tr_tokenize_params tp = tr_tokenize_default_params(); /* as `tokroute generate -p` */
            st = tr_tokenize(vocab, prompt->valuestring, strlen(prompt->valuestring), &tp, r->prompt, cap, &n);
        }
        if (st != TR_ERR_RANGE || n <= cap) break;
        cap = n;
    }
    oai_chat_free(&conv);
    if (st != TR_OK) {
        oai_error_set(e, 400, "bad_request", chat ? "messages" : "prompt", "cannot tokenize the %s: %s",
                      chat ? "messages" : "prompt", tr_last_error());
        return false;
    }
    r->n_prompt = n;
check:
    if (r->n_prompt == 0) {
        oai_error_set(e, 400, "bad_request", chat ? "messages" : "prompt", "the prompt is empty");
        return false;
    }
    if (r->n_prompt >= n_ctx) {
        oai_error_set(e, 400, "context_length_exceeded", chat ? "messages" : "prompt",
                      "the prompt's %d tokens fill the context of %d tokens: nothing can be generated", r->n_prompt,
                      n_ctx);
        return false;
    }
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
    double tau = ui->p.default_tau, target = ui->p.target_routed, cap = ui->p.max_routed;
    if (!number(root, "threshold", 0, 1, false, &tau, e) || !number(root, "target_routed", 0, 1, false, &target, e) ||
        !number(root, "max_routed", 0, 1, false, &cap, e))
        return false;
    r->tau = (float)tau;
    r->target_routed = target;
    r->max_routed = cap;
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

/* Sampling, stop strings, log-probabilities, streaming. */
static bool generation(const cJSON *root, bool chat, ui_request *r, oa_state *s, oai_error *e) {
    double temperature = 1, top_p = 1, seed = 0, n = 1;
    if (!number(root, "temperature", 0, 2, false, &temperature, e) || !number(root, "top_p", 0, 1, false, &top_p, e) ||
        !number(root, "seed", 0, 9007199254740992.0, true, &seed, e) || !number(root, "n", 1, 1, true, &n, e))
        return false;
    r->sampling = tr_sampler_default_params();
    r->sampling.temperature = (float)temperature;
    r->sampling.top_k = 0;
    r->sampling.top_p = top_p > 0 ? (float)top_p : 1.0f;
    r->sampling.seed = (uint64_t)seed;
    if (!oai_stop_parse(cJSON_GetObjectItemCaseSensitive(root, "stop"), UI_STOP_MAX, r->stop, &r->n_stop, e))
        return false;
    if (chat) {
        double top = 0;
        if (!boolean(root, "logprobs", &s->logprobs, e) || !number(root, "top_logprobs", 0, 20, true, &top, e))
            return false;
        const cJSON *tl = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
        if (tl && !cJSON_IsNull(tl) && !s->logprobs) {
            oai_error_set(e, 400, "bad_request", "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
            return false;
        }
        if (top > 0) {
            oai_error_set(e, 400, "bad_request", "top_logprobs",
                          "'top_logprobs' must be 0: the routed system knows only the chosen token's log-probability "
                          "(under the model that chose it), no alternatives");
            return false;
        }
    } else {
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        double k = 0;
        if (!number(root, "logprobs", 0, 5, true, &k, e)) return false;
        if (k > 0) {
            oai_error_set(e, 400, "bad_request", "logprobs",
                          "'logprobs' must be 0: the routed system knows only the chosen token's log-probability "
                          "(under the model that chose it), no alternatives");
            return false;
        }
        s->logprobs = lp && !cJSON_IsNull(lp);
    }
    if (!boolean(root, "stream", &s->stream, e)) return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        static const char *const so_fields[] = {"include_usage", NULL};
        if (!s->stream) { /* OpenAI's rule */
            oai_error_set(e, 400, "bad_request", "stream_options", "'stream_options' is only allowed with \"stream\": true");
            return false;
        }
        const char *unknown = cJSON_IsObject(so) ? oai_unknown_field(so, so_fields) : "";
        if (unknown) {
            oai_error_set(e, 400, "bad_request", "stream_options",
                          "'stream_options' must be an object {\"include_usage\": true or false}%s%s%s",
                          *unknown ? " (unknown field '" : "", unknown, *unknown ? "')" : "");
            return false;
        }
        if (!boolean(so, "include_usage", &s->include_usage, e)) return false;
    }
    return true;
}

/* max_tokens / max_completion_tokens: at most --max-tokens and what the context leaves; the default is cut to fit,
 * a value asked for that does not fit is a 400 (as OpenAI and vLLM). */
static bool token_budget(tr_ui *ui, const cJSON *root, bool chat, ui_request *r, oai_error *e) {
    const int32_t n_ctx = tr_context_n_ctx(ui->slots[0].ctx), room = n_ctx - r->n_prompt;
    double a = -1, b = -1;
    if (!number(root, "max_tokens", 1, 1 << 30, true, &a, e) ||
        (chat && !number(root, "max_completion_tokens", 1, 1 << 30, true, &b, e)))
        return false;
    if (a > 0 && b > 0 && a != b) {
        oai_error_set(e, 400, "bad_request", "max_completion_tokens",
                      "'max_tokens' and 'max_completion_tokens' differ: give one");
        return false;
    }
    const char *name = b > 0 ? "max_completion_tokens" : "max_tokens";
    const double asked = b > 0 ? b : a;
    if (asked > ui->p.max_tokens) {
        oai_error_set(e, 400, "bad_request", name, "'%s' must be at most %d (the server's --max-tokens)", name,
                      (int)ui->p.max_tokens);
        return false;
    }
    if (asked > room) {
        oai_error_set(e, 400, "context_length_exceeded", name,
                      "the prompt's %d tokens + %s %.0f exceed the context of %d tokens (at most %d can be generated)",
                      r->n_prompt, name, asked, n_ctx, room);
        return false;
    }
    int32_t n = asked > 0 ? (int32_t)asked : chat ? ui->p.max_tokens : COMPLETIONS_DEFAULT_MAX_TOKENS;
    if (n > ui->p.max_tokens) n = ui->p.max_tokens;
    r->max_tokens = n < room ? n : room;
    return true;
}

static bool parse(tr_ui *ui, bool chat, const char *body, size_t len, ui_request *r, oa_state *s, oai_error *e) {
    /* cJSON would decode \u0000 into a NUL that silently cuts a string short. */
    if (memmem(body, len, "\\u0000", 6)) {
        oai_error_set(e, 400, "bad_request", NULL, "strings must not contain \\u0000");
        return false;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool ok = false;
    if (!cJSON_IsObject(root)) {
        oai_error_set(e, 400, "bad_request", NULL, "the body is not a JSON object");
        goto done;
    }
    const char *unknown = oai_unknown_field(root, chat ? chat_fields : completion_fields);
    if (unknown) {
        oai_error_set(e, 400, "unknown_field", unknown,
                      "unknown field '%s': this server takes OpenAI's %s fields it implements and the routing "
                      "fields mode, threshold, policy, target_routed, max_routed (README \"The device's OpenAI "
                      "endpoint\")", unknown, chat ? "chat completion" : "completion");
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsString(model)) {
        oai_error_set(e, 400, "bad_request", "model", "'model' must be a string");
        goto done;
    }
    ok = routing(ui, root, r, e) && generation(root, chat, r, s, e) && prompt_tokens(ui, root, chat, r, e) &&
         token_budget(ui, root, chat, r, e);
done:
    cJSON_Delete(root);
    return ok;
}

/* ---------------------------------------------------------------- replies */

static cJSON *reply_head(const oa_state *s, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", s->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", s->created);
    cJSON_AddStringToObject(root, "model", ui_model_id(s->ui));
    return root;
}

static void append_sse(ui_job *job, cJSON *root) {
    char *ev = oai_sse_data(root);
    if (ev) ui_job_append(job, ev, strlen(ev));
    free(ev);
}

/* A streamed chunk carrying text (or, with finish, the end); the log-probabilities gathered go with it. */
static void send_chunk(ui_job *job, const char *text, size_t len, const char *finish) {
    oa_state *s = job->state;
    cJSON *root = reply_head(s, s->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    char *t = strndup(text ? text : "", len);
    if (s->chat) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (len) cJSON_AddStringToObject(delta, "content", t ? t : "");
    } else {
        cJSON_AddStringToObject(ch, "text", t ? t : "");
    }
    free(t);
    if (s->lp) {
        if (s->chat) cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content", s->lp);
        else cJSON_AddItemToObject(ch, "logprobs", s->lp);
        s->lp = NULL;
    } else {
        cJSON_AddNullToObject(ch, "logprobs");
    }
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    if (s->include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI: usage comes in its own last chunk */
    append_sse(job, root);
}

static cJSON *lp_container(bool chat) {
    if (chat) return cJSON_CreateArray();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddArrayToObject(o, "tokens");
    cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON_AddArrayToObject(o, "text_offset");
    return o;
}

static void on_start(ui_job *job) {
    oa_state *s = job->state;
    if (!s->stream || !s->chat) return;
    /* OpenAI's first chat chunk names the role. */
    cJSON *root = reply_head(s, "chat.completion.chunk");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
    cJSON_AddStringToObject(delta, "role", "assistant");
    cJSON_AddStringToObject(delta, "content", "");
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
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
    cJSON *lp = isnan(t->logprob) ? cJSON_CreateNull() : cJSON_CreateNumber(oai_finite_logprob(t->logprob));
    if (s->chat) {
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddStringToObject(entry, "token", piece);
        cJSON_AddItemToObject(entry, "logprob", lp);
        cJSON *bytes = cJSON_AddArrayToObject(entry, "bytes");
        for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
        cJSON_AddArrayToObject(entry, "top_logprobs");
        cJSON_AddItemToArray(s->lp, entry);
    } else {
        cJSON_AddItemToArray(cJSON_GetObjectItem(s->lp, "tokens"), cJSON_CreateString(piece));
        cJSON_AddItemToArray(cJSON_GetObjectItem(s->lp, "token_logprobs"), lp);
        cJSON_AddItemToArray(cJSON_GetObjectItem(s->lp, "top_logprobs"), cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_GetObjectItem(s->lp, "text_offset"), cJSON_CreateNumber((double)s->shown));
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
    cJSON *root = reply_head(s, s->chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (s->chat) {
        cJSON *msg = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", s->text ? s->text : "");
    } else {
        cJSON_AddStringToObject(ch, "text", s->text ? s->text : "");
    }
    if (s->logprobs) {
        cJSON *lp = s->lp ? s->lp : lp_container(s->chat);
        s->lp = NULL;
        if (s->chat) cJSON_AddItemToObject(cJSON_AddObjectToObject(ch, "logprobs"), "content", lp);
        else cJSON_AddItemToObject(ch, "logprobs", lp);
    } else {
        cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", finish);
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
