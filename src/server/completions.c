/* completions.c — POST /v1/completions. The body is read by the OpenAI layer both servers share
 * (src/common/openai_request.c: `prompt` as text, token ids or a one-element array of either, `max_tokens` (default
 * 16, as OpenAI), `temperature`, `top_p`, `top_k`, `seed` (none: a fresh draw, reported as the reply's `seed`),
 * `stop`, `logit_bias`, `logprobs` (0-20 alternatives per token), `stream`, `stream_options`, `model`, `user`, `n`
 * (only 1), penalties (only 0); unknown fields and OpenAI's unimplemented ones refused by name); this server adds
 * `echo`, `prompt_logprobs`, `return_token_ids` (the ids always come back) and `return_tokens_as_token_ids`.
 * The response follows OpenAI's
 * text_completion object and adds `choices[0].token_ids` (the generated ids) and `prompt_token_ids`, so clients
 * never re-tokenize text.
 *
 * Scoring a sequence, as vLLM exposes it: `prompt_logprobs: K` (0-64) answers, per choice, `prompt_logprobs`: null
 * for the first prompt token, then per token an object keyed by token id (a decimal string) holding {logprob, rank,
 * decoded_token} for the prompt token itself and the K most likely ids (K or K + 1 keys); `echo` puts the prompt
 * before the text and, with `logprobs`, its tokens before the generated ones in the logprobs object (asking for
 * prompt log-probabilities with K = logprobs when prompt_logprobs is absent); `return_tokens_as_token_ids` writes
 * the logprobs object's tokens and top_logprobs keys as "token_id:N". See vLLM's
 * vllm/entrypoints/openai/serving_completion.py (request_output_to_completion_response, _create_completion_logprobs)
 * and serving_engine.py (clamp_prompt_logprobs: -inf becomes -9999.0), vllm/v1/engine/logprobs.py (the prompt
 * token's entry beside the top K) and the engine's input validation (_validate_logprobs: "Requested prompt
 * logprobs of N, which is greater than max allowed: M").
 * `max_tokens: 0` generates nothing. Neither echo nor prompt_logprobs combine with stream (vLLM drops
 * prompt_logprobs from streamed chunks; here it is refused).
 *
 * The prompt is scored in one forward pass keeping every position's logits (scheduler_score; score.c), and with
 * max_tokens > 0 the first token is chosen from that pass's last row. Generation otherwise runs as generation.c
 * does it for chat completions too: on a private session, one scheduler job per token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "common/openai_api.h"
#include "server/server_internal.h"

typedef struct cmpl {
    generation g;          /* ids, sampling, the private session, the detokenizer, finish_reason */
    int32_t prompt_k;      /* prompt_logprobs (-1: not asked) */
    bool echo, ids_as_tokens;
    bool logprobs;         /* "logprobs" given: the logprobs object, with g.n_logprobs alternatives per token */
    char *prompt_text;     /* the prompt as text (echo) */
    score_result score;    /* with prompt_k >= 0 */
    /* accumulated text and logprobs (non-streaming) */
    char *text;
    size_t text_len, text_cap;
    cJSON *lp;             /* the logprobs object (tokens, token_logprobs, top_logprobs, text_offset) */
} cmpl;

static bool append_text(cmpl *c, const char *s, size_t n) {
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = (c->text_len + n + 1) * 2;
        char *p = realloc(c->text, cap);
        if (!p) return false;
        c->text = p;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
    return true;
}

static void cmpl_free(cmpl *c) {
    if (!c) return;
    generation_release(&c->g);
    free(c->text);
    free(c->prompt_text);
    score_result_free(&c->score);
    cJSON_Delete(c->lp);
    free(c);
}

/* The prompt into c->g.ids: text tokenized, or token ids (checked by the shared layer) copied. */
static bool prompt_ids(tr_server *srv, const oai_request *r, cmpl *c, api_error *err) {
    const tr_vocab *vocab = tr_model_vocab(srv->model);
    const int32_t n_ctx = scheduler_n_ctx(srv->sched);
    if (r->prompt_text) {
        if (!vocab) {
            api_error_set(err, 400, "bad_request", "prompt", "this model has no vocabulary: send token ids");
            return false;
        }
        const size_t n_text = strlen(r->prompt_text);
        const int32_t cap = (int32_t)(n_text + 8 < (size_t)n_ctx + 8 ? n_text + 8 : (size_t)n_ctx + 8);
        if (!generation_alloc_ids(&c->g, cap, err)) return false;
        int32_t n = 0;
        tr_tokenize_params tp = tr_tokenize_default_params();
        if (tr_tokenize(vocab, r->prompt_text, n_text, &tp, c->g.ids, cap, &n) != TR_OK) {
            api_error_set(err, 400, "bad_request", "prompt", "the prompt does not fit the context of %d tokens", n_ctx);
            return false;
        }
        c->g.n_prompt = n;
        if (!(c->prompt_text = strdup(r->prompt_text))) {
            api_error_set(err, 503, "busy", "", "out of memory");
            return false;
        }
    } else {
        if (r->n_prompt_ids > n_ctx) {
            api_error_set(err, 400, "bad_request", "prompt", "the prompt's %d tokens exceed the context of %d tokens",
                          r->n_prompt_ids, n_ctx);
            return false;
        }
        if (!generation_alloc_ids(&c->g, r->n_prompt_ids, err)) return false;
        memcpy(c->g.ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *c->g.ids);
        c->g.n_prompt = r->n_prompt_ids;
    }
    if (c->g.n_prompt == 0) {
        api_error_set(err, 400, "bad_request", "prompt", "the prompt is empty");
        return false;
    }
    if (c->g.n_prompt > n_ctx) {
        api_error_set(err, 400, "bad_request", "prompt", "the prompt's %d tokens exceed the context of %d tokens",
                      c->g.n_prompt, n_ctx);
        return false;
    }
    return true;
}

/* This server's own fields: echo, prompt_logprobs, return_token_ids, return_tokens_as_token_ids. */
static bool own_fields(const cJSON *root, cmpl *c, api_error *err) {
    oai_error oe;
    bool return_ids = true;
    if (!oai_bool_field(root, "echo", &c->echo, &oe) ||
        !oai_bool_field(root, "return_tokens_as_token_ids", &c->ids_as_tokens, &oe) ||
        !oai_bool_field(root, "return_token_ids", &return_ids, &oe)) {
        api_error_from_oai(err, &oe);
        return false;
    }
    c->prompt_k = -1;
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(root, "prompt_logprobs");
    if (pk && !cJSON_IsNull(pk)) {
        if (!cJSON_IsNumber(pk) || !isfinite(pk->valuedouble) || pk->valuedouble != floor(pk->valuedouble) ||
            pk->valuedouble < 0) {
            api_error_set(err, 400, "bad_request", "prompt_logprobs",
                          "'prompt_logprobs' must be an integer from 0 to %d (the ids listed per prompt token besides "
                          "the token itself)", SCORE_TOP_MAX);
            return false;
        }
        if (pk->valuedouble > SCORE_TOP_MAX) { /* vLLM's words for its max_logprobs limit */
            api_error_set(err, 400, "bad_request", "prompt_logprobs",
                          "Requested prompt logprobs of %.0f, which is greater than max allowed: %d",
                          pk->valuedouble, SCORE_TOP_MAX);
            return false;
        }
        c->prompt_k = (int32_t)pk->valuedouble;
    }
    if (c->g.stream && (c->echo || c->prompt_k >= 0)) {
        api_error_set(err, 400, "bad_request", c->echo ? "echo" : "prompt_logprobs",
                      "'%s' is not supported with \"stream\": true", c->echo ? "echo" : "prompt_logprobs");
        return false;
    }
    return true;
}

/* Parses the request into c; false with err filled on bad input. */
static bool parse(tr_server *srv, const char *body, size_t len, cmpl *c, api_error *err) {
    static const char *const own[] = {"echo", "prompt_logprobs", "return_token_ids", "return_tokens_as_token_ids",
                                      NULL};
    const oai_endpoint ep = {.chat = false, .server = "tokroute serve", .extra_fields = own,
                             .n_vocab = tr_model_get_info(srv->model)->n_vocab, .min_max_tokens = 0};
    static const generation_limits limits = {.default_max_tokens = 16, .may_score = true, .prompt_field = "prompt"};
    oai_request r;
    oai_error oe;
    bool ok = oai_request_parse(body, len, &ep, &r, &oe);
    if (!ok) api_error_from_oai(err, &oe);
    ok = ok && prompt_ids(srv, &r, c, err) && generation_apply(&c->g, &r, &limits, err) && own_fields(r.root, c, err);
    c->logprobs = r.logprobs;
    c->g.n_logprobs = r.top_logprobs;
    /* vLLM: echo with logprobs lists the prompt's tokens too, so it asks for their log-probabilities */
    if (ok && c->echo && c->logprobs && c->prompt_k < 0) c->prompt_k = c->g.n_logprobs;
    oai_request_free(&r);
    return ok;
}

/* ---------------------------------------------------------------- log-probabilities in vLLM's shapes */

/* A token as the logprobs object names it: its text, or "token_id:N" with return_tokens_as_token_ids (vLLM's
 * _get_decoded_token). malloc'ed. */
static char *token_name(const cmpl *c, int32_t id) {
    if (c->ids_as_tokens) {
        char buf[32];
        snprintf(buf, sizeof buf, "token_id:%d", id);
        return strdup(buf);
    }
    return token_piece(c->g.srv, id, NULL);
}

/* Appends one token to a logprobs object: its name, log-probability and the alternatives (the top entries, plus
 * the token itself when it is not among them: up to n_top + 1, as OpenAI and vLLM); no log-probability (the
 * prompt's first token) writes null for both. Names that collide keep the first (top) entry. */
static void logprobs_add(const cmpl *c, cJSON *lp, int32_t id, bool has_lp, float logprob, const top_entry *top,
                         int32_t n_top, size_t offset) {
    cJSON *alt = has_lp ? cJSON_CreateObject() : NULL;
    bool listed = false;
    for (int32_t i = 0; alt && i <= n_top; i++) {
        if (i == n_top && listed) break;
        const int32_t tid = i < n_top ? top[i].id : id;
        const float tlp = i < n_top ? top[i].logprob : logprob;
        listed = listed || tid == id;
        char *q = token_name(c, tid);
        if (q && !cJSON_GetObjectItemCaseSensitive(alt, q)) cJSON_AddNumberToObject(alt, q, oai_finite_logprob(tlp));
        free(q);
    }
    char *name = token_name(c, id);
    oai_text_logprobs_add(lp, name, has_lp ? logprob : NAN, alt, offset);
    free(name);
}

/* The prompt's tokens in the logprobs object (echo). Each offset is where the token's text starts in the echoed
 * prompt as decoded (vLLM adds up the tokens' names instead, which drifts from the text where a name is "<s>" or
 * "token_id:N"). */
static void logprobs_add_prompt(const cmpl *c, cJSON *lp) {
    const tr_vocab *vocab = tr_model_vocab(c->g.srv->model);
    tr_detok_stream *ds = NULL;
    if (vocab && tr_detok_stream_create(vocab, true, &ds) != TR_OK) ds = NULL;
    size_t offset = 0;
    for (int32_t p = 0; p < c->g.n_prompt; p++) {
        const score_row *row = p > 0 ? &c->score.rows[p - 1] : NULL;
        const int32_t n_top = row ? (row->n_top < c->g.n_logprobs ? row->n_top : c->g.n_logprobs) : 0;
        logprobs_add(c, lp, c->g.ids[p], row != NULL, row ? row->logprob : 0, row ? row->top : NULL, n_top, offset);
        const char *t;
        size_t n = 0;
        if (ds && tr_detok_stream_push(ds, c->g.ids[p], &t, &n) == TR_OK) offset += n;
    }
    tr_detok_stream_free(ds);
}

/* prompt_logprobs is the bulk of a scoring reply (K + 1 entries per position): written straight into text rather
 * than as a cJSON tree (a node and a string per entry, numbers printed and read back to check them), and put into
 * the response as a raw item. */
typedef struct text_buf {
    char *s;
    size_t len, cap;
    bool oom;
} text_buf;

static void tb_reserve(text_buf *b, size_t more) {
    if (b->oom || b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->s = p;
    b->cap = cap;
}

static void tb_add(text_buf *b, const char *s, size_t n) {
    tb_reserve(b, n);
    if (b->oom) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

/* A JSON string as cJSON writes one: quotes, backslashes and control characters escaped, other bytes as they are. */
static void tb_add_json_string(text_buf *b, const char *s, size_t n) {
    tb_reserve(b, 2 + 6 * n);
    if (b->oom) return;
    char *o = b->s + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch < 0x20) {
            static const char short_escapes[] = "btn\0fr"; /* \b \t \n, \f \r */
            if ((ch >= '\b' && ch <= '\n') || ch == '\f' || ch == '\r') {
                *o++ = '\\';
                *o++ = short_escapes[ch - '\b'];
            } else {
                o += snprintf(o, 7, "\\u%04x", ch);
            }
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->s);
    b->s[b->len] = 0;
}

/* "ID":{"logprob":L,"rank":R,"decoded_token":"..."}: L with the 9 significant digits that give the float back. */
static void tb_add_entry(text_buf *b, const tr_vocab *vocab, float logprob, int32_t rank, int32_t id, bool comma) {
    char head[96], piece[256];
    const int n = snprintf(head, sizeof head, "%s\"%d\":{\"logprob\":%.9g,\"rank\":%d,\"decoded_token\":", comma ? "," : "",
                           id, oai_finite_logprob(logprob), rank);
    tb_add(b, head, (size_t)n);
    int32_t len = vocab ? tr_token_to_piece(vocab, id, true, piece, (int32_t)sizeof piece - 1) : -1;
    if (len < 0) len = 0;
    if (len > (int32_t)sizeof piece - 1) len = (int32_t)sizeof piece - 1;
    tb_add_json_string(b, piece, (size_t)len);
    tb_add(b, "}", 1);
}

/* choices[0].prompt_logprobs: null for the first token (nothing predicts it), then per token an object keyed by
 * token id: the token itself first (with its rank in the whole vocabulary), then the top K not already there. */
static cJSON *prompt_logprobs_json(const cmpl *c) {
    const tr_vocab *vocab = tr_model_vocab(c->g.srv->model);
    text_buf b = {0};
    tb_add(&b, "[null", 5);
    for (int32_t r = 0; r < c->score.n_rows; r++) {
        const score_row *row = &c->score.rows[r];
        tb_add(&b, ",{", 2);
        tb_add_entry(&b, vocab, row->logprob, row->rank, row->token, false);
        for (int32_t i = 0; i < row->n_top; i++)
            if (row->top[i].id != row->token) tb_add_entry(&b, vocab, row->top[i].logprob, i + 1, row->top[i].id, true);
        tb_add(&b, "}", 1);
    }
    tb_add(&b, "]", 1);
    cJSON *raw = b.oom ? NULL : cJSON_CreateRaw(b.s);
    free(b.s);
    return raw;
}

static cJSON *response_head(cmpl *c) {
    return oai_reply_head(c->g.id + 1, "text_completion", (double)time(NULL), server_model_name(c->g.srv),
                          c->g.samp.seed);
}

/* ---------------------------------------------------------------- non-streaming */

/* Scores the prompt in one pass (prompt_logprobs); with max_tokens > 0 the same pass chooses the first token.
 * Returns the HTTP status. */
static int score_prompt(cmpl *c, api_error *err) {
    const score_request req = {.tokens = c->g.ids, .n_tokens = c->g.n_prompt, .top_k = c->prompt_k,
                               .next = c->g.max_tokens > 0, .samp = c->g.samp, .n_logprobs = c->g.n_logprobs};
    if (!score_result_alloc(&req, &c->score)) {
        api_error_set(err, 503, "busy", "", "out of memory for %d positions", c->g.n_prompt);
        return 503;
    }
    return scheduler_score(c->g.srv->sched, &req, &c->score, err);
}

/* Adds the generated token of res to the text and the logprobs object. */
static bool add_generated(cmpl *c, const route_result *res) {
    const size_t offset = c->text_len;
    const char *t;
    size_t n;
    if (!generation_take(&c->g, res, &t, &n)) return true;
    if (!append_text(c, t, n)) return false;
    if (c->lp) logprobs_add(c, c->lp, res->token, true, res->logprob, res->top, res->n_top, offset);
    return true;
}

static int run_whole(cmpl *c, struct MHD_Connection *conn) {
    route_result res;
    api_error err = {0};
    if (c->echo) {
        const char *prompt = c->prompt_text;
        char *decoded = NULL;
        if (!prompt) { /* token ids: decoded as vLLM does (no dummy-prefix space, no special tokens) */
            const tr_vocab *vocab = tr_model_vocab(c->g.srv->model);
            if (vocab && tr_detokenize(vocab, c->g.ids, c->g.n_prompt, true, false, &decoded) != TR_OK) decoded = NULL;
            prompt = decoded ? decoded : "";
        }
        const bool ok = append_text(c, prompt, strlen(prompt));
        free(decoded);
        if (!ok) return http_send_json(conn, 500, NULL);
    }
    if (c->logprobs) c->lp = oai_text_logprobs_new();
    if (c->g.max_tokens == 0) c->g.finished = true, c->g.finish_reason = "length";
    if (c->prompt_k >= 0) {
        const int status = score_prompt(c, &err);
        if (status != 200) return http_send_error(c->g.srv, conn, "completions", &err, c->g.t0_ms);
        if (c->lp && c->echo) logprobs_add_prompt(c, c->lp);
        if (c->g.max_tokens > 0 && !add_generated(c, &c->score.next)) return http_send_json(conn, 500, NULL);
    }
    while (!c->g.finished) {
        const int status = generation_step(&c->g, &res, &err);
        if (status != 200) return http_send_error(c->g.srv, conn, "completions", &err, c->g.t0_ms);
        if (!add_generated(c, &res)) return http_send_json(conn, 500, NULL);
    }
    const char *rest;
    size_t n_rest;
    generation_flush(&c->g, &rest, &n_rest);
    if (!append_text(c, rest, n_rest)) return http_send_json(conn, 500, NULL);
    cJSON *root = response_head(c), *ch = oai_add_choice(root);
    oai_add_text(ch, "text", c->text, c->text_len);
    oai_end_choice(ch, false, c->lp, c->g.finish_reason);
    c->lp = NULL;
    cJSON *ids = cJSON_AddArrayToObject(ch, "token_ids");
    for (int32_t i = 0; i < c->g.n_gen; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->g.ids[c->g.n_prompt + i]));
    cJSON *pids = cJSON_AddArrayToObject(ch, "prompt_token_ids");
    for (int32_t i = 0; i < c->g.n_prompt; i++) cJSON_AddItemToArray(pids, cJSON_CreateNumber(c->g.ids[i]));
    if (c->prompt_k >= 0) cJSON_AddItemToObject(ch, "prompt_logprobs", prompt_logprobs_json(c));
    else cJSON_AddNullToObject(ch, "prompt_logprobs");
    generation_add_usage(&c->g, root);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    const double ms = server_now_ms() - c->g.t0_ms;
    metrics_request(&c->g.srv->metrics, "completions", 200, ms);
    if (c->prompt_k >= 0)
        server_log(c->g.srv, "completions 200 %.2f ms prompt=%d generated=%d scored=%d (queue %.2f ms, eval %.2f ms)",
                   ms, c->g.n_prompt, c->g.n_gen, c->score.n_rows, c->score.queue_ms, c->score.eval_ms);
    else server_log(c->g.srv, "completions 200 %.2f ms prompt=%d cached=%d generated=%d", ms, c->g.n_prompt,
                    c->g.n_cached, c->g.n_gen);
    return http_send_json(conn, 200, out);
}

/* ---------------------------------------------------------------- streaming (server-sent events) */

/* The next event (http_send_stream's producer): one per generated token, then the final one with usage, then
 * [DONE], the last. */
static char *next_event(void *cls, bool *last) {
    cmpl *c = cls;
    if (c->g.finished && c->g.include_usage && !c->g.usage_sent) {
        c->g.usage_sent = true;
        cJSON *root = response_head(c);
        cJSON_AddArrayToObject(root, "choices");
        generation_add_usage(&c->g, root);
        return sse_event(root);
    }
    if (c->g.finished) {
        *last = true;
        generation_done(&c->g, " (stream)");
        return strdup("data: [DONE]\n\n");
    }
    route_result res;
    api_error err = {0};
    cJSON *lp = NULL;
    char *piece = NULL; /* this event's text: the token's, and at the end what was held back */
    size_t n_piece = 0;
    bool generated = false;
    if (c->g.max_tokens == 0) {
        c->g.finished = true;
        c->g.finish_reason = "length";
    } else {
        const int status = generation_step(&c->g, &res, &err);
        if (status != 200) {
            c->g.finished = true;
            *last = true; /* the error event ends the stream */
            generation_stream_failed(&c->g, &err);
            return sse_error_event(&err);
        }
        const size_t offset = c->text_len;
        const char *t;
        size_t n;
        generated = generation_take(&c->g, &res, &t, &n);
        append_text(c, t, n);
        if ((piece = malloc(n + 1))) memcpy(piece, t, n_piece = n);
        if (c->g.finished && piece) {
            const char *ft;
            size_t fn;
            generation_flush(&c->g, &ft, &fn);
            char *p2 = realloc(piece, n + fn + 1);
            if (p2) {
                memcpy(p2 + n, ft, fn);
                piece = p2;
                n_piece = n + fn;
            }
        }
        if (c->logprobs && generated) {
            lp = oai_text_logprobs_new();
            logprobs_add(c, lp, res.token, true, res.logprob, res.top, res.n_top, offset);
        }
    }
    cJSON *root = response_head(c), *ch = oai_add_choice(root);
    oai_add_text(ch, "text", piece, n_piece);
    free(piece);
    cJSON *ids = cJSON_AddArrayToObject(ch, "token_ids");
    if (generated) cJSON_AddItemToArray(ids, cJSON_CreateNumber(res.token));
    oai_end_choice(ch, false, lp, c->g.finished ? c->g.finish_reason : NULL);
    if (c->g.include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI: usage comes in its own chunk */
    else if (c->g.finished) generation_add_usage(&c->g, root);
    return sse_event(root);
}

static void stream_free(void *cls, bool client_gone) {
    cmpl *c = cls;
    generation_stream_closed(&c->g, client_gone);
    cmpl_free(c);
}

int completions_handle(tr_server *srv, struct MHD_Connection *conn, const char *body, size_t len, int32_t owner) {
    api_error err = {0};
    cmpl *c = calloc(1, sizeof *c);
    if (!c) return http_send_json(conn, 500, NULL);
    if (!generation_init(&c->g, srv, "completions", "cmpl", owner, &err)) {
        const double t0 = c->g.t0_ms;
        cmpl_free(c);
        return http_send_error(srv, conn, "completions", &err, t0);
    }
    if (srv->params.log_requests) server_log(srv, "completions body: %.*s", (int)(len < 900 ? len : 900), body);
    if (!parse(srv, body, len, c, &err)) {
        const double t0 = c->g.t0_ms;
        cmpl_free(c);
        return http_send_error(srv, conn, "completions", &err, t0);
    }
    if (!c->g.stream) {
        const int ret = run_whole(c, conn);
        cmpl_free(c);
        return ret;
    }
    return http_send_stream(conn, "text/event-stream", next_event, c, stream_free);
}
