/* chat_completions.c — POST /v1/chat/completions, OpenAI's chat subset: `messages` (roles system, developer (as
 * system), user, assistant; content a string or an array of text parts) rendered with the server's chat template
 * (tr_server_params.chat_template: the model's own, or `serve --chat-template NAME`) and tokenized so control tokens
 * come only from the template (tr_chat_tokenize: a message holding "<|im_end|>" cannot close its turn);
 * `max_completion_tokens` / `max_tokens` (default: what the context leaves), `temperature`, `top_p`, `top_k`
 * (vLLM's), `seed`, `stop` (up to 4 strings, never part of the content), `logit_bias`, `n` (only 1), `logprobs` +
 * `top_logprobs` (0-20), `stream` + `stream_options.include_usage`, the penalties at 0; `model` and `user` are
 * accepted and ignored. Any other field is a 400 naming it: an unsupported OpenAI field is refused rather than
 * silently ignored, and a misspelt one is never taken for a default. A model without a template is a 400, never a
 * guess.
 *
 * The reply is OpenAI's chat.completion: choices[0].message {role: "assistant", content}, finish_reason ("stop" at
 * the end-of-generation token — <|im_end|>, <|eot_id|>, EOS — which is not part of the content, "length" at the
 * limit), logprobs {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}, usage; plus
 * choices[0].token_ids and prompt_token_ids as /v1/completions has them. Streamed: chat.completion.chunk events — the
 * role first, then content deltas (a token whose bytes do not yet complete a character waits for the next), then an
 * empty delta with the finish_reason, then the usage chunk with `choices: []` when asked, then `data: [DONE]`.
 * Generation itself is generation.c's, as for /v1/completions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "common/openai_api.h"
#include "server/server_internal.h"

typedef struct chat {
    generation g;
    bool logprobs;          /* "logprobs": true */
    char *content;          /* the whole answer (non-streamed) */
    size_t content_len, content_cap;
    cJSON *lp_content;      /* logprobs.content entries not yet sent */
    bool role_sent, final_sent;
} chat;

static void chat_free(chat *c) {
    if (!c) return;
    generation_release(&c->g);
    free(c->content);
    cJSON_Delete(c->lp_content);
    free(c);
}

static bool append_content(chat *c, const char *s, size_t n) {
    if (c->content_len + n + 1 > c->content_cap) {
        const size_t cap = (c->content_len + n + 1) * 2;
        char *p = realloc(c->content, cap);
        if (!p) return false;
        c->content = p;
        c->content_cap = cap;
    }
    memcpy(c->content + c->content_len, s, n);
    c->content_len += n;
    c->content[c->content_len] = 0;
    return true;
}

/* ---------------------------------------------------------------- the request */

static const char *const accepted_fields[] = {
    "messages", "model", "max_completion_tokens", "max_tokens", "temperature", "top_p", "top_k", "seed", "n",
    "stream", "stream_options", "stop", "logit_bias", "logprobs", "top_logprobs", "user", "presence_penalty",
    "frequency_penalty", NULL};
/* OpenAI fields this server does not implement: refused by name, not ignored. */
static const char *const unsupported_fields[] = {
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "response_format", "modalities",
    "audio", "prediction", "reasoning_effort", "service_tier", "store", "metadata", "web_search_options",
    "verbosity", "prompt_cache_key", "safety_identifier", NULL};

/* One message's content: a string, or an array of {"type": "text", "text": ...} parts joined (*owned set when the
 * text was joined and must be freed). */
static bool message_content(const cJSON *content, int i, const char **text, char **owned, api_error *err) {
    char field[32];
    snprintf(field, sizeof field, "messages[%d].content", i);
    *owned = NULL;
    if (cJSON_IsString(content)) {
        *text = content->valuestring;
        return true;
    }
    if (!cJSON_IsArray(content)) {
        api_error_set(err, 400, "bad_request", field, "%s must be a string or an array of text parts", field);
        return false;
    }
    size_t len = 0;
    for (const cJSON *part = content->child; part; part = part->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type"),
                    *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 ||
            !cJSON_IsString(t)) {
            api_error_set(err, 400, "bad_request", field, "%s: only text parts ({\"type\": \"text\", \"text\": "
                          "\"...\"}) are supported", field);
            return false;
        }
        len += strlen(t->valuestring);
    }
    char *joined = malloc(len + 1);
    if (!joined) {
        api_error_set(err, 503, "busy", "", "out of memory");
        return false;
    }
    size_t at = 0;
    for (const cJSON *part = content->child; part; part = part->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        const size_t n = strlen(t);
        memcpy(joined + at, t, n);
        at += n;
    }
    joined[at] = 0;
    *text = *owned = joined;
    return true;
}

/* Reads messages into msgs[n] (texts owned by root, or listed in owned[n] when joined from parts). */
static bool read_messages(const cJSON *root, tr_chat_message **msgs, char ***owned, int *n_out, api_error *err) {
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const int n = cJSON_GetArraySize(messages);
    if (!cJSON_IsArray(messages) || n == 0) {
        api_error_set(err, 400, "bad_request", "messages", "'messages' must be a non-empty array of messages");
        return false;
    }
    *msgs = calloc((size_t)n, sizeof **msgs);
    *owned = calloc((size_t)n, sizeof **owned);
    *n_out = n;
    if (!*msgs || !*owned) {
        api_error_set(err, 503, "busy", "", "out of memory");
        return false;
    }
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        char field[32];
        snprintf(field, sizeof field, "messages[%d]", i);
        if (!cJSON_IsObject(m)) {
            api_error_set(err, 400, "bad_request", field, "%s must be an object {\"role\", \"content\"}", field);
            return false;
        }
        for (const cJSON *f = m->child; f; f = f->next)
            if (strcmp(f->string, "role") != 0 && strcmp(f->string, "content") != 0 && strcmp(f->string, "name") != 0) {
                snprintf(field, sizeof field, "messages[%d].%s", i, f->string);
                api_error_set(err, 400, "unsupported_field", field, "%s is not supported (a message has role, "
                              "content and name)", field);
                return false;
            }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "developer") == 0) r = "system"; /* OpenAI's newer name for the system message */
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
            snprintf(field, sizeof field, "messages[%d].role", i);
            api_error_set(err, 400, "bad_request", field, "%s must be system, developer, user or assistant (tool "
                          "messages are not supported)", field);
            return false;
        }
        (*msgs)[i].role = r;
        if (!message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &(*msgs)[i].content, &(*owned)[i],
                             err))
            return false;
    }
    return true;
}

/* The messages rendered with the template and tokenized into c->g.ids. */
static bool tokenize_messages(tr_server *srv, const cJSON *root, chat *c, api_error *err) {
    tr_chat_message *msgs = NULL;
    char **owned = NULL;
    int n = 0;
    bool ok = read_messages(root, &msgs, &owned, &n, err);
    const tr_vocab *vocab = tr_model_vocab(srv->model);
    const int32_t n_ctx = scheduler_n_ctx(srv->sched);
    int32_t n_tokens = 0;
    if (ok) { /* counted first (the ids do not fit: TR_ERR_RANGE) */
        const tr_status st = tr_chat_tokenize(vocab, srv->params.chat_template, msgs, (size_t)n, true, true, NULL,
                                              0, &n_tokens);
        if (st != TR_OK && st != TR_ERR_RANGE) {
            api_error_set(err, 400, "bad_request", "messages", "the messages cannot be rendered: %s", tr_last_error());
            ok = false;
        } else if (n_tokens > n_ctx) {
            api_error_set(err, 400, "bad_request", "messages",
                          "the rendered messages' %d tokens exceed the context of %d tokens", n_tokens, n_ctx);
            ok = false;
        }
    }
    ok = ok && generation_alloc_ids(&c->g, n_tokens, err);
    if (ok && tr_chat_tokenize(vocab, srv->params.chat_template, msgs, (size_t)n, true, true, c->g.ids, n_tokens,
                               &c->g.n_prompt) != TR_OK) {
        api_error_set(err, 500, "internal", "", "the messages could not be tokenized: %s", tr_last_error());
        ok = false;
    }
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return ok;
}

static bool parse(tr_server *srv, const char *body, size_t len, chat *c, api_error *err) {
    if (srv->params.chat_template == TR_CHAT_NONE) {
        api_error_set(err, 400, "no_chat_template", "",
                      "this model has no chat template to render messages with: start tokroute serve with "
                      "--chat-template chatml|llama2|llama3 (the format the model was trained on), or send the "
                      "prompt as text to /v1/completions");
        return false;
    }
    /* As in /v1/completions: cJSON would decode \u0000 into a NUL that silently cuts a message short. */
    if (memmem(body, len, "\\u0000", 6)) {
        api_error_set(err, 400, "bad_request", "messages", "strings in messages must not contain \\u0000");
        return false;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool ok = false;
    if (!root || !cJSON_IsObject(root)) {
        api_error_set(err, 400, "bad_request", "", "the body is not a JSON object");
        goto done;
    }
    if (!generation_check_fields(root, accepted_fields, unsupported_fields, "chat completions", err)) goto done;
    static const char *const string_fields[] = {"model", "user"};
    for (int k = 0; k < 2; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, string_fields[k]);
        if (f && !cJSON_IsString(f) && !cJSON_IsNull(f)) {
            api_error_set(err, 400, "bad_request", string_fields[k], "'%s' must be a string", string_fields[k]);
            goto done;
        }
    }
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs"),
                *top = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    if (lp && !cJSON_IsBool(lp) && !cJSON_IsNull(lp)) {
        api_error_set(err, 400, "bad_request", "logprobs", "'logprobs' must be true or false");
        goto done;
    }
    c->logprobs = cJSON_IsTrue(lp);
    if (top && !cJSON_IsNull(top)) {
        if (!cJSON_IsNumber(top) || top->valuedouble != floor(top->valuedouble) || top->valuedouble < 0 ||
            top->valuedouble > TOP_LOGPROBS_MAX) {
            api_error_set(err, 400, "bad_request", "top_logprobs", "'top_logprobs' must be an integer in [0, %d]",
                          TOP_LOGPROBS_MAX);
            goto done;
        }
        if (!c->logprobs) { /* OpenAI's rule */
            api_error_set(err, 400, "bad_request", "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
            goto done;
        }
        c->g.n_logprobs = (int32_t)top->valuedouble;
    }
    if (!tokenize_messages(srv, root, c, err)) goto done;
    static const generation_limits limits = {{"max_completion_tokens", "max_tokens"}, -1, 1, "messages"};
    ok = generation_parse_options(&c->g, root, &limits, err);
done:
    cJSON_Delete(root);
    return ok;
}

/* ---------------------------------------------------------------- the reply */

static cJSON *reply_head(const chat *c, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", c->g.id + 1);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)time(NULL));
    cJSON_AddStringToObject(root, "model", server_model_name(c->g.srv));
    return root;
}

/* {token, logprob, bytes} for one id. */
static cJSON *token_logprob(const chat *c, int32_t id, float logprob) {
    size_t n = 0;
    char *piece = token_piece(c->g.srv, id, &n);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", piece ? piece : "");
    cJSON_AddNumberToObject(e, "logprob", oai_finite_logprob(logprob));
    cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
    for (size_t i = 0; piece && i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    free(piece);
    return e;
}

/* One logprobs.content entry: the chosen token and its top alternatives. */
static void add_logprob_entry(chat *c, const route_result *res) {
    if (!c->logprobs) return;
    if (!c->lp_content) c->lp_content = cJSON_CreateArray();
    cJSON *e = token_logprob(c, res->token, res->logprob), *alts = cJSON_AddArrayToObject(e, "top_logprobs");
    for (int32_t i = 0; i < res->n_top && i < c->g.n_logprobs; i++)
        cJSON_AddItemToArray(alts, token_logprob(c, res->top[i].id, res->top[i].logprob));
    cJSON_AddItemToArray(c->lp_content, e);
}

/* choices[0].logprobs: the pending entries (taken); null without "logprobs": true, and in a chunk without
 * tokens (as OpenAI's role and finish chunks). */
static void add_logprobs(chat *c, cJSON *choice) {
    if (!c->logprobs || (c->g.stream && !c->lp_content)) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON *lp = cJSON_AddObjectToObject(choice, "logprobs");
    cJSON_AddItemToObject(lp, "content", c->lp_content ? c->lp_content : cJSON_CreateArray());
    cJSON_AddNullToObject(lp, "refusal");
    c->lp_content = NULL;
}

static int run_whole(chat *c, struct MHD_Connection *conn) {
    route_result res;
    api_error err = {0};
    const char *t;
    size_t n;
    while (!c->g.finished) {
        if (generation_step(&c->g, &res, &err) != 200)
            return http_send_error(c->g.srv, conn, c->g.route, &err, c->g.t0_ms);
        if (!generation_take(&c->g, &res, &t, &n)) continue;
        if (!append_content(c, t, n)) return http_send_json(conn, 500, NULL);
        add_logprob_entry(c, &res);
    }
    generation_flush(&c->g, &t, &n);
    if (!append_content(c, t, n)) return http_send_json(conn, 500, NULL);
    cJSON *root = reply_head(c, "chat.completion"), *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), choice);
    cJSON_AddNumberToObject(choice, "index", 0);
    cJSON *msg = cJSON_AddObjectToObject(choice, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddStringToObject(msg, "content", c->content);
    cJSON_AddNullToObject(msg, "refusal");
    add_logprobs(c, choice);
    cJSON_AddStringToObject(choice, "finish_reason", c->g.finish_reason);
    cJSON *ids = cJSON_AddArrayToObject(choice, "token_ids");
    for (int32_t i = 0; i < c->g.n_gen; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->g.ids[c->g.n_prompt + i]));
    cJSON *pids = cJSON_AddArrayToObject(choice, "prompt_token_ids");
    for (int32_t i = 0; i < c->g.n_prompt; i++) cJSON_AddItemToArray(pids, cJSON_CreateNumber(c->g.ids[i]));
    generation_add_usage(&c->g, root);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    generation_done(&c->g, "");
    return http_send_json(conn, 200, out);
}

/* A chunk with one choice: delta (taken), finish_reason (NULL: null), the pending logprobs. */
static char *chunk(chat *c, cJSON *delta, const char *finish_reason, bool with_usage) {
    cJSON *root = reply_head(c, "chat.completion.chunk"), *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), choice);
    cJSON_AddNumberToObject(choice, "index", 0);
    cJSON_AddItemToObject(choice, "delta", delta);
    add_logprobs(c, choice);
    if (finish_reason) cJSON_AddStringToObject(choice, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(choice, "finish_reason");
    if (with_usage) generation_add_usage(&c->g, root);
    else if (c->g.include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI: usage comes in its own chunk */
    return sse_event(root);
}

static cJSON *content_delta(const char *text, size_t n) {
    cJSON *delta = cJSON_CreateObject();
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, text, n);
        s[n] = 0;
    }
    cJSON_AddStringToObject(delta, "content", s ? s : "");
    free(s);
    return delta;
}

/* The next event (http_send_stream's producer): the role, a content delta per token that completes text, the
 * finish_reason, the usage chunk when asked, [DONE]. */
static char *next_event(void *cls, bool *last) {
    chat *c = cls;
    if (!c->role_sent) {
        c->role_sent = true;
        cJSON *delta = cJSON_CreateObject();
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        return chunk(c, delta, NULL, false);
    }
    const char *t;
    size_t n;
    while (!c->g.finished) {
        route_result res;
        api_error err = {0};
        if (generation_step(&c->g, &res, &err) != 200) {
            c->g.finished = c->final_sent = c->g.usage_sent = true;
            *last = true; /* the error event ends the stream */
            server_log(c->g.srv, "%s stream failed after %d tokens: %s", c->g.route, c->g.n_gen, err.code);
            return sse_error_event(&err);
        }
        if (!generation_take(&c->g, &res, &t, &n)) break;
        add_logprob_entry(c, &res);
        if (n > 0) return chunk(c, content_delta(t, n), NULL, false);
    }
    if (!c->final_sent) {
        c->final_sent = true;
        generation_flush(&c->g, &t, &n);
        cJSON *delta = n > 0 || c->lp_content ? content_delta(t, n) : cJSON_CreateObject(); /* held-back bytes */
        return chunk(c, delta, c->g.finish_reason, !c->g.include_usage);
    }
    if (c->g.include_usage && !c->g.usage_sent) {
        c->g.usage_sent = true;
        cJSON *root = reply_head(c, "chat.completion.chunk");
        cJSON_AddArrayToObject(root, "choices");
        generation_add_usage(&c->g, root);
        return sse_event(root);
    }
    *last = true;
    generation_done(&c->g, " (stream)");
    return strdup("data: [DONE]\n\n");
}

static void stream_done(void *cls, bool client_gone) {
    chat *c = cls;
    if (client_gone) generation_client_gone(&c->g);
    chat_free(c);
}

int chat_completions_handle(tr_server *srv, struct MHD_Connection *conn, const char *body, size_t len,
                            int32_t owner) {
    api_error err = {0};
    chat *c = calloc(1, sizeof *c);
    if (!c) return http_send_json(conn, 500, NULL);
    const bool started = generation_init(&c->g, srv, "chat_completions", "chatcmpl", owner, &err);
    if (started && srv->params.log_requests)
        server_log(srv, "chat_completions body: %.*s", (int)(len < 900 ? len : 900), body);
    if (!started || !parse(srv, body, len, c, &err)) {
        const double t0 = c->g.t0_ms;
        chat_free(c);
        return http_send_error(srv, conn, "chat_completions", &err, t0);
    }
    if (!c->g.stream) {
        const int ret = run_whole(c, conn);
        chat_free(c);
        return ret;
    }
    return http_send_stream(conn, "text/event-stream", next_event, c, stream_done);
}
