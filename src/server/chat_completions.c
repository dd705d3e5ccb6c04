/* chat_completions.c — POST /v1/chat/completions, read by the OpenAI layer both servers share
 * (src/common/openai_request.c): `messages` (roles system, developer (as system), user, assistant; content a string
 * or an array of text parts; name accepted, not rendered) rendered with the server's chat template
 * (tr_server_params.chat_template: the model's own, or `serve --chat-template NAME`) and tokenized so control tokens
 * come only from the template (tr_chat_tokenize: a message holding "<|im_end|>" cannot close its turn);
 * `max_completion_tokens` / `max_tokens` (one limit; default: what the context leaves), `temperature`, `top_p`,
 * `top_k` (vLLM's), `seed` (none: a fresh draw, reported as the reply's `seed`), `stop` (up to 4 strings, never part
 * of the content), `logit_bias`, `n` (only 1), `logprobs` + `top_logprobs` (0-20), `stream` +
 * `stream_options.include_usage`, the penalties at 0; `model` and `user` are accepted and ignored. Any other field
 * is a 400 naming it: an unsupported OpenAI field is refused rather than silently ignored, and a misspelt one is
 * never taken for a default. A model without a template is a 400, never a guess.
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

/* The messages rendered with the template and tokenized into c->g.ids. */
static bool tokenize_messages(tr_server *srv, const oai_chat *conv, chat *c, api_error *err) {
    const tr_chat_message *msgs = conv->messages;
    const size_t n = conv->n;
    bool ok = true;
    const tr_vocab *vocab = tr_model_vocab(srv->model);
    const int32_t n_ctx = scheduler_n_ctx(srv->sched);
    int32_t n_tokens = 0;
    { /* counted first (the ids do not fit: TR_ERR_RANGE) */
        const tr_status st = tr_chat_tokenize(vocab, srv->params.chat_template, msgs, n, true, true, NULL,
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
    if (ok && tr_chat_tokenize(vocab, srv->params.chat_template, msgs, n, true, true, c->g.ids, n_tokens,
                               &c->g.n_prompt) != TR_OK) {
        api_error_set(err, 500, "internal", "", "the messages could not be tokenized: %s", tr_last_error());
        ok = false;
    }
    return ok;
}

static bool parse(tr_server *srv, const char *body, size_t len, chat *c, api_error *err) {
    if (srv->params.chat_template == TR_CHAT_NONE) {
        oai_error oe;
        oai_no_chat_template(&oe, "tokroute serve", server_model_name(srv));
        api_error_from_oai(err, &oe);
        return false;
    }
    const oai_endpoint ep = {.chat = true, .server = "tokroute serve", .extra_fields = NULL,
                             .n_vocab = tr_model_get_info(srv->model)->n_vocab, .min_max_tokens = 1};
    static const generation_limits limits = {.default_max_tokens = -1, .may_score = false, .prompt_field = "messages"};
    oai_request r;
    oai_error oe;
    bool ok = oai_request_parse(body, len, &ep, &r, &oe);
    if (!ok) api_error_from_oai(err, &oe);
    c->logprobs = r.logprobs;
    c->g.n_logprobs = r.top_logprobs;
    ok = ok && tokenize_messages(srv, &r.chat, c, err) && generation_apply(&c->g, &r, &limits, err);
    oai_request_free(&r);
    return ok;
}

/* ---------------------------------------------------------------- the reply */

static cJSON *reply_head(const chat *c, const char *object) {
    return oai_reply_head(c->g.id + 1, object, (double)time(NULL), server_model_name(c->g.srv), c->g.samp.seed);
}

/* {token, logprob, bytes} for one id. */
static cJSON *token_logprob(const chat *c, int32_t id, float logprob) {
    size_t n = 0;
    char *piece = token_piece(c->g.srv, id, &n);
    cJSON *e = oai_token_logprob(piece, n, logprob);
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

/* choices[0].logprobs: the pending entries (taken); NULL (null) without "logprobs": true, and in a chunk without
 * tokens (as OpenAI's role and finish chunks). */
static cJSON *take_logprobs(chat *c) {
    if (!c->logprobs || (c->g.stream && !c->lp_content)) return NULL;
    cJSON *entries = c->lp_content ? c->lp_content : cJSON_CreateArray();
    c->lp_content = NULL;
    return entries;
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
    cJSON *root = reply_head(c, "chat.completion"), *choice = oai_add_choice(root);
    oai_add_message(choice, c->content, c->content_len);
    oai_end_choice(choice, true, take_logprobs(c), c->g.finish_reason);
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

/* A chunk with one choice: its delta (the role, or n bytes of content), finish_reason (NULL: null), the pending
 * logprobs. */
static char *chunk(chat *c, bool role, const char *text, size_t n, const char *finish_reason, bool with_usage) {
    cJSON *root = reply_head(c, "chat.completion.chunk"), *choice = oai_add_choice(root);
    oai_add_delta(choice, role, text, n);
    /* a token whose text is still held back still has its log-probability: it goes with an empty content */
    if (!role && n == 0 && c->lp_content) cJSON_AddStringToObject(cJSON_GetObjectItem(choice, "delta"), "content", "");
    oai_end_choice(choice, true, take_logprobs(c), finish_reason);
    if (with_usage) generation_add_usage(&c->g, root);
    else if (c->g.include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI: usage comes in its own chunk */
    return sse_event(root);
}

/* The next event (http_send_stream's producer): the role, a content delta per token that completes text, the
 * finish_reason, the usage chunk when asked, [DONE]. */
static char *next_event(void *cls, bool *last) {
    chat *c = cls;
    if (!c->role_sent) {
        c->role_sent = true;
        return chunk(c, true, "", 0, NULL, false);
    }
    const char *t;
    size_t n;
    while (!c->g.finished) {
        route_result res;
        api_error err = {0};
        if (generation_step(&c->g, &res, &err) != 200) {
            c->g.finished = c->final_sent = c->g.usage_sent = true;
            *last = true; /* the error event ends the stream */
            generation_stream_failed(&c->g, &err);
            return sse_error_event(&err);
        }
        if (!generation_take(&c->g, &res, &t, &n)) break;
        add_logprob_entry(c, &res);
        if (n > 0) return chunk(c, false, t, n, NULL, false);
    }
    if (!c->final_sent) {
        c->final_sent = true;
        generation_flush(&c->g, &t, &n);
        return chunk(c, false, t, n, c->g.finish_reason, !c->g.include_usage); /* with the held-back bytes */
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
    generation_stream_closed(&c->g, client_gone);
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
