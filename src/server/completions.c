/* completions.c — POST /v1/completions, the OpenAI-compatible subset: `prompt` (text, or an array of token ids, or
 * a one-element array of either), `max_tokens` (default 16, as OpenAI), `temperature`, `top_p`, `top_k` (vLLM's),
 * `seed`, `stop` (up to 4 strings), `logit_bias`, `logprobs` (0-20 alternatives per token), `stream` (server-sent
 * events ending with `data: [DONE]`); `model`, `user`, `n` (only 1) and `return_token_ids` are accepted (the ids
 * always come back). OpenAI's fields not implemented (`suffix`, `best_of`, penalties other than 0) and unknown
 * fields are a 400 naming them. The response follows OpenAI's
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

/* Parses the request into c; false with err filled on bad input. */
static bool parse(tr_server *srv, const char *body, size_t len, cmpl *c, api_error *err) {
    const tr_vocab *vocab = tr_model_vocab(srv->model);
    const int32_t n_vocab = tr_model_get_info(srv->model)->n_vocab, n_ctx = scheduler_n_ctx(srv->sched);
    /* As in the session protocol: cJSON would decode \u0000 into a NUL that silently cuts the prompt short. */
    if (memmem(body, len, "\\u0000", 6)) {
        api_error_set(err, 400, "bad_request", "prompt", "strings must not contain \\u0000");
        return false;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool ok = false;
    if (!root || !cJSON_IsObject(root)) {
        api_error_set(err, 400, "bad_request", "", "the body is not a JSON object");
        goto done;
    }
    static const char *const accepted[] = {
        "prompt", "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stream", "stream_options",
        "stop", "logit_bias", "logprobs", "echo", "prompt_logprobs", "return_token_ids", "return_tokens_as_token_ids",
        "user", "presence_penalty", "frequency_penalty", NULL};
    static const char *const unsupported[] = {"suffix", "best_of", NULL};
    if (!generation_check_fields(root, accepted, unsupported, "completions", err)) goto done;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(prompt) && prompt->child && (cJSON_IsString(prompt->child) || cJSON_IsArray(prompt->child))) {
        if (cJSON_GetArraySize(prompt) > 1) {
            api_error_set(err, 400, "bad_request", "prompt",
                          "a batch of %d prompts: batches are not supported, send one prompt per request",
                          cJSON_GetArraySize(prompt));
            goto done;
        }
        prompt = prompt->child; /* a batch of one prompt */
    }
    if (cJSON_IsString(prompt)) {
        if (!vocab) {
            api_error_set(err, 400, "bad_request", "prompt", "this model has no vocabulary: send token ids");
            goto done;
        }
        const size_t n_text = strlen(prompt->valuestring);
        const int32_t cap = (int32_t)(n_text + 8 < (size_t)n_ctx + 8 ? n_text + 8 : (size_t)n_ctx + 8);
        if (!generation_alloc_ids(&c->g, cap, err)) goto done;
        int32_t n = 0;
        tr_tokenize_params tp = tr_tokenize_default_params();
        if (tr_tokenize(vocab, prompt->valuestring, n_text, &tp, c->g.ids, cap, &n) != TR_OK) {
            api_error_set(err, 400, "bad_request", "prompt", "the prompt does not fit the context of %d tokens", n_ctx);
            goto done;
        }
        c->g.n_prompt = n;
        if (!(c->prompt_text = strdup(prompt->valuestring))) {
            api_error_set(err, 503, "busy", "", "out of memory");
            goto done;
        }
    } else if (cJSON_IsArray(prompt)) {
        const int n = cJSON_GetArraySize(prompt);
        if (n > n_ctx) {
            api_error_set(err, 400, "bad_request", "prompt", "the prompt's %d tokens exceed the context of %d tokens", n,
                          n_ctx);
            goto done;
        }
        if (!generation_alloc_ids(&c->g, n, err)) goto done;
        int i = 0;
        for (const cJSON *t = prompt->child; t; t = t->next, i++) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                t->valuedouble >= n_vocab) {
                api_error_set(err, 400, "bad_request", "prompt", "prompt[%d] is not a token id in [0, %d)", i, n_vocab);
                goto done;
            }
            c->g.ids[i] = (int32_t)t->valuedouble;
        }
        c->g.n_prompt = n;
    } else {
        api_error_set(err, 400, "bad_request", "prompt", "'prompt' must be a string or an array of token ids");
        goto done;
    }
    if (c->g.n_prompt == 0) {
        api_error_set(err, 400, "bad_request", "prompt", "the prompt is empty");
        goto done;
    }
    if (c->g.n_prompt > n_ctx) {
        api_error_set(err, 400, "bad_request", "prompt", "the prompt's %d tokens exceed the context of %d tokens",
                      c->g.n_prompt, n_ctx);
        goto done;
    }
    double logprobs = 0;
    const cJSON *lpf = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (lpf && !cJSON_IsNull(lpf) &&
        (!cJSON_IsNumber(lpf) || lpf->valuedouble != floor(lpf->valuedouble) || lpf->valuedouble < 0 ||
         lpf->valuedouble > TOP_LOGPROBS_MAX)) {
        api_error_set(err, 400, "bad_request", "logprobs", "'logprobs' must be a number in [0, %d] (an integer)",
                      TOP_LOGPROBS_MAX);
        goto done;
    }
    if (lpf && cJSON_IsNumber(lpf)) logprobs = lpf->valuedouble;
    static const generation_limits limits = {{"max_tokens", NULL}, 16, 0, "prompt"};
    if (!generation_parse_options(&c->g, root, &limits, err)) goto done;
    const char *flags[] = {"echo", "return_tokens_as_token_ids", "return_token_ids"};
    for (int k = 0; k < 3; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, flags[k]);
        if (f && !cJSON_IsBool(f) && !cJSON_IsNull(f)) {
            api_error_set(err, 400, "bad_request", flags[k], "'%s' must be true or false", flags[k]);
            goto done;
        }
    }
    c->echo = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "echo"));
    c->ids_as_tokens = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "return_tokens_as_token_ids"));
    c->prompt_k = -1;
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(root, "prompt_logprobs");
    if (pk && !cJSON_IsNull(pk)) {
        if (!cJSON_IsNumber(pk) || !isfinite(pk->valuedouble) || pk->valuedouble != floor(pk->valuedouble) ||
            pk->valuedouble < 0) {
            api_error_set(err, 400, "bad_request", "prompt_logprobs",
                          "'prompt_logprobs' must be an integer in [0, %d] (the ids listed per prompt token besides "
                          "the token itself)", SCORE_TOP_MAX);
            goto done;
        }
        if (pk->valuedouble > SCORE_TOP_MAX) { /* vLLM's words for its max_logprobs limit */
            api_error_set(err, 400, "bad_request", "prompt_logprobs",
                          "Requested prompt logprobs of %.0f, which is greater than max allowed: %d",
                          pk->valuedouble, SCORE_TOP_MAX);
            goto done;
        }
        c->prompt_k = (int32_t)pk->valuedouble;
    }
    if (c->g.stream && (c->echo || c->prompt_k >= 0)) {
        api_error_set(err, 400, "bad_request", c->echo ? "echo" : "prompt_logprobs",
                      "'%s' is not supported with \"stream\": true", c->echo ? "echo" : "prompt_logprobs");
        goto done;
    }
    c->g.n_logprobs = (int32_t)logprobs;
    /* vLLM: echo with logprobs lists the prompt's tokens too, so it asks for their log-probabilities */
    if (c->echo && c->g.n_logprobs > 0 && c->prompt_k < 0) c->prompt_k = c->g.n_logprobs;
    ok = true;
done:
    cJSON_Delete(root);
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

static cJSON *logprobs_object(void) {
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddArrayToObject(lp, "tokens");
    cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON_AddArrayToObject(lp, "text_offset");
    return lp;
}

/* Appends one token to a logprobs object: its name, log-probability and the alternatives (the top entries, plus
 * the token itself when it is not among them: up to n_top + 1, as OpenAI and vLLM); no log-probability (the
 * prompt's first token) writes null for both. Names that collide keep the first (top) entry. */
static void logprobs_add(const cmpl *c, cJSON *lp, int32_t id, bool has_lp, float logprob, const top_entry *top,
                         int32_t n_top, size_t offset) {
    char *name = token_name(c, id);
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_CreateString(name ? name : ""));
    free(name);
    if (!has_lp) {
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNull());
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), cJSON_CreateNull());
    } else {
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(oai_finite_logprob(logprob)));
        cJSON *alt = cJSON_CreateObject();
        bool listed = false;
        for (int32_t i = 0; i <= n_top; i++) {
            if (i == n_top && listed) break;
            const int32_t tid = i < n_top ? top[i].id : id;
            const float tlp = i < n_top ? top[i].logprob : logprob;
            listed = listed || tid == id;
            char *q = token_name(c, tid);
            if (q && !cJSON_GetObjectItemCaseSensitive(alt, q)) cJSON_AddNumberToObject(alt, q, oai_finite_logprob(tlp));
            free(q);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), alt);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)offset));
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
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", c->g.id + 1);
    cJSON_AddStringToObject(root, "object", "text_completion");
    cJSON_AddNumberToObject(root, "created", (double)time(NULL));
    cJSON_AddStringToObject(root, "model", server_model_name(c->g.srv));
    return root;
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
    if (c->g.n_logprobs > 0) c->lp = logprobs_object();
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
    cJSON *root = response_head(c), *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddStringToObject(ch, "text", c->text ? c->text : "");
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->lp) {
        cJSON_AddItemToObject(ch, "logprobs", c->lp);
        c->lp = NULL;
    } else {
        cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", c->g.finish_reason);
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
    cJSON *root = response_head(c), *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    if (c->g.max_tokens == 0) {
        c->g.finished = true;
        c->g.finish_reason = "length";
        cJSON_AddStringToObject(ch, "text", "");
    } else {
        const int status = generation_step(&c->g, &res, &err);
        if (status != 200) {
            cJSON_Delete(root);
            c->g.finished = true;
            *last = true; /* the error event ends the stream */
            return sse_error_event(&err);
        }
        const size_t offset = c->text_len;
        const char *t;
        size_t n;
        const bool generated = generation_take(&c->g, &res, &t, &n);
        append_text(c, t, n);
        char *piece = malloc(n + 1);
        if (piece) {
            memcpy(piece, t, n);
            piece[n] = 0;
        }
        if (c->g.finished) {
            const char *ft;
            size_t fn;
            generation_flush(&c->g, &ft, &fn);
            if (fn > 0 && piece) {
                char *p2 = realloc(piece, n + fn + 1);
                if (p2) {
                    memcpy(p2 + n, ft, fn);
                    p2[n + fn] = 0;
                    piece = p2;
                }
            }
        }
        cJSON_AddStringToObject(ch, "text", piece ? piece : "");
        free(piece);
        if (c->g.n_logprobs > 0 && generated) {
            cJSON *lp = logprobs_object();
            logprobs_add(c, lp, res.token, true, res.logprob, res.top, res.n_top, offset);
            cJSON_AddItemToObject(ch, "logprobs", lp);
        } else if (c->g.n_logprobs > 0) {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON *ids = cJSON_AddArrayToObject(ch, "token_ids");
        if (generated) cJSON_AddItemToArray(ids, cJSON_CreateNumber(res.token));
    }
    cJSON_AddNumberToObject(ch, "index", 0);
    if (c->g.n_logprobs == 0) cJSON_AddNullToObject(ch, "logprobs");
    if (c->g.finished) {
        cJSON_AddStringToObject(ch, "finish_reason", c->g.finish_reason);
        if (c->g.include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI: usage comes in its own chunk */
        else generation_add_usage(&c->g, root);
    } else {
        cJSON_AddNullToObject(ch, "finish_reason");
        if (c->g.include_usage) cJSON_AddNullToObject(root, "usage");
    }
    return sse_event(root);
}

static void stream_free(void *cls, bool client_gone) {
    cmpl *c = cls;
    if (client_gone) generation_client_gone(&c->g);
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
