/* openai_api.c — the OpenAI API's shapes shared by tokroute's HTTP servers (see openai_api.h). */
#include "common/openai_api.h"

#include "common/platform.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

void oai_error_set(oai_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

const char *oai_error_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 403) return "permission_error";
    if (status == 404) return "not_found_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

cJSON *oai_error_object(const oai_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", oai_error_type(e->status));
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    cJSON_AddStringToObject(o, "code", e->code);
    return o;
}

char *oai_error_json(const oai_error *e) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", oai_error_object(e));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

bool oai_random_id(const char *prefix, char *out, size_t cap) {
    unsigned char rnd[12];
    if (!tr_platform_random(rnd, sizeof rnd)) return false;
    const size_t plen = strlen(prefix);
    if (cap < plen + 2 * sizeof rnd + 1) return false;
    memcpy(out, prefix, plen);
    for (size_t i = 0; i < sizeof rnd; i++) snprintf(out + plen + 2 * i, 3, "%02x", rnd[i]);
    return true;
}

char *oai_sse_data(cJSON *root) {
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return NULL;
    const size_t n = strlen(json) + 9;
    char *out = malloc(n);
    if (out) snprintf(out, n, "data: %s\n\n", json);
    cJSON_free(json);
    return out;
}

cJSON *oai_add_usage(cJSON *root, int32_t prompt_tokens, int32_t completion_tokens) {
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)prompt_tokens + completion_tokens);
    return u;
}

double oai_finite_logprob(float logprob) { return logprob > -9999.0f ? (double)logprob : -9999.0; }

cJSON *oai_reply_head(const char *id, const char *object, double created, const char *model, uint64_t seed) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", created);
    cJSON_AddStringToObject(root, "model", model);
    oai_add_seed(root, seed);
    return root;
}

void oai_add_seed(cJSON *root, uint64_t seed) {
    /* Written as the integer it is: cJSON prints a number it thinks close enough in 15 digits ("8.12345678901235e+15"),
     * and a seed off by a few units replays nothing. */
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)seed);
    cJSON_AddRawToObject(root, "seed", digits);
}

cJSON *oai_add_choice(cJSON *root) {
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "choices"), choice);
    cJSON_AddNumberToObject(choice, "index", 0);
    return choice;
}

void oai_end_choice(cJSON *choice, bool chat, cJSON *logprobs, const char *finish_reason) {
    if (chat) oai_chat_add_logprobs(choice, logprobs);
    else if (logprobs) cJSON_AddItemToObject(choice, "logprobs", logprobs);
    else cJSON_AddNullToObject(choice, "logprobs");
    if (finish_reason) cJSON_AddStringToObject(choice, "finish_reason", finish_reason);
    else cJSON_AddNullToObject(choice, "finish_reason");
}

void oai_add_text(cJSON *obj, const char *name, const char *text, size_t n) {
    char *copy = strndup(text ? text : "", n);
    cJSON_AddStringToObject(obj, name, copy ? copy : "");
    free(copy);
}

void oai_add_message(cJSON *choice, const char *content, size_t n) {
    cJSON *msg = cJSON_AddObjectToObject(choice, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    oai_add_text(msg, "content", content, n);
    cJSON_AddNullToObject(msg, "refusal");
}

void oai_add_delta(cJSON *choice, bool role, const char *content, size_t n) {
    cJSON *delta = cJSON_AddObjectToObject(choice, "delta");
    if (role) cJSON_AddStringToObject(delta, "role", "assistant");
    if (role || n > 0) oai_add_text(delta, "content", content, n);
}

static cJSON *logprob_number(float logprob) {
    return isnan(logprob) ? cJSON_CreateNull() : cJSON_CreateNumber(oai_finite_logprob(logprob));
}

cJSON *oai_token_logprob(const char *piece, size_t n, float logprob) {
    cJSON *e = cJSON_CreateObject();
    oai_add_text(e, "token", piece, n);
    cJSON_AddItemToObject(e, "logprob", logprob_number(logprob));
    cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
    for (size_t i = 0; piece && i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    return e;
}

void oai_chat_add_logprobs(cJSON *choice, cJSON *entries) {
    if (!entries) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON *lp = cJSON_AddObjectToObject(choice, "logprobs");
    cJSON_AddItemToObject(lp, "content", entries);
    cJSON_AddNullToObject(lp, "refusal");
}

cJSON *oai_text_logprobs_new(void) {
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddArrayToObject(lp, "tokens");
    cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON_AddArrayToObject(lp, "text_offset");
    return lp;
}

void oai_text_logprobs_add(cJSON *lp, const char *token, float logprob, cJSON *top, size_t text_offset) {
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_CreateString(token ? token : ""));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), logprob_number(logprob));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), top ? top : cJSON_CreateNull());
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)text_offset));
}

const char *oai_unknown_field(const cJSON *root, const char *const *known) {
    for (const cJSON *f = root ? root->child : NULL; f; f = f->next) {
        bool found = false;
        for (const char *const *k = known; *k && !found; k++) found = f->string && strcmp(f->string, *k) == 0;
        if (!found) return f->string ? f->string : "";
    }
    return NULL;
}

void oai_stop_free(char **stop, int32_t n) {
    for (int32_t i = 0; i < n; i++) free(stop[i]);
}

bool oai_stop_parse(const cJSON *stop, int32_t max, char **out, int32_t *n, oai_error *e) {
    *n = 0;
    if (!stop || cJSON_IsNull(stop)) return true;
    const cJSON *items = stop;
    if (cJSON_IsString(stop)) items = NULL;
    else if (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) < 1 || cJSON_GetArraySize(stop) > max) goto bad;
    for (const cJSON *s = items ? items->child : stop; s; s = items ? s->next : NULL) {
        if (!cJSON_IsString(s) || !s->valuestring[0]) goto bad;
        if (!(out[*n] = strdup(s->valuestring))) {
            oai_stop_free(out, *n);
            *n = 0;
            oai_error_set(e, 500, "server_error", "stop", "out of memory");
            return false;
        }
        (*n)++;
    }
    return true;
bad:
    oai_stop_free(out, *n);
    *n = 0;
    oai_error_set(e, 400, "bad_request", "stop", "'stop' must be a non-empty string or an array of 1 to %d of them",
                  (int)max);
    return false;
}

void oai_chat_free(oai_chat *c) {
    for (size_t i = 0; c->messages && i < c->n; i++) {
        free((char *)c->messages[i].role);
        free((char *)c->messages[i].content);
    }
    free(c->messages);
    c->messages = NULL;
    c->n = 0;
}

/* A message's content: a string, or the text parts of an array joined. malloc'ed; NULL with e filled. */
static char *chat_content(const cJSON *content, size_t i, oai_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (cJSON_IsString(content)) {
        char *copy = strdup(content->valuestring);
        if (!copy) oai_error_set(e, 500, "server_error", param, "out of memory");
        return copy;
    }
    if (!cJSON_IsArray(content)) {
        oai_error_set(e, 400, "bad_request", param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    size_t len = 0;
    for (const cJSON *p = content->child; p; p = p->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type"), *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        static const char *const part_fields[] = {"type", "text", NULL};
        if (!cJSON_IsObject(p) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 ||
            !cJSON_IsString(text) || oai_unknown_field(p, part_fields)) {
            oai_error_set(e, 400, "bad_request", param,
                          "'%s' parts must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)", param);
            return NULL;
        }
        len += strlen(text->valuestring);
    }
    char *out = malloc(len + 1);
    if (!out) {
        oai_error_set(e, 500, "server_error", param, "out of memory");
        return NULL;
    }
    out[0] = 0;
    size_t at = 0;
    for (const cJSON *p = content->child; p; p = p->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        const size_t n = strlen(t);
        memcpy(out + at, t, n + 1);
        at += n;
    }
    return out;
}

bool oai_chat_parse(const cJSON *messages, oai_chat *out, oai_error *e) {
    memset(out, 0, sizeof *out);
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) < 1) {
        oai_error_set(e, 400, "bad_request", "messages", "'messages' must be a non-empty array of {role, content}");
        return false;
    }
    const size_t n = (size_t)cJSON_GetArraySize(messages);
    if (!(out->messages = calloc(n, sizeof *out->messages))) {
        oai_error_set(e, 500, "server_error", "messages", "out of memory");
        return false;
    }
    /* name (a participant's name) is accepted and not rendered: no chat template here has a place for it. */
    static const char *const fields[] = {"role", "content", "name", NULL};
    size_t i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        out->n = i;
        char param[64];
        if (!cJSON_IsObject(m)) {
            snprintf(param, sizeof param, "messages[%zu]", i);
            oai_error_set(e, 400, "bad_request", param, "'%s' must be an object {role, content}", param);
            goto fail;
        }
        const char *unknown = oai_unknown_field(m, fields);
        if (unknown) {
            snprintf(param, sizeof param, "messages[%zu].%.32s", i, unknown);
            /* OpenAI's other message members (tool calls, audio, ...) are not implemented; anything else is unknown */
            static const char *const openai_members[] = {"tool_calls", "tool_call_id", "function_call", "refusal",
                                                         "audio", NULL};
            bool known = false;
            for (const char *const *k = openai_members; *k && !known; k++) known = strcmp(*k, unknown) == 0;
            oai_error_set(e, 400, known ? "unsupported_field" : "unknown_field", param,
                          "%s '%s' (a message has role, content and name; tool messages and tool calls are not "
                          "supported)", known ? "unsupported field" : "unknown field", param);
            goto fail;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        if (name && !cJSON_IsString(name) && !cJSON_IsNull(name)) {
            snprintf(param, sizeof param, "messages[%zu].name", i);
            oai_error_set(e, 400, "bad_request", param, "'%s' must be a string", param);
            goto fail;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "developer") == 0) r = "system";
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            oai_error_set(e, 400, "bad_request", param,
                          "'%s' must be \"system\", \"developer\", \"user\" or \"assistant\"", param);
            goto fail;
        }
        char *content = chat_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, e);
        char *role_copy = content ? strdup(r) : NULL;
        if (!content || !role_copy) {
            if (content && !role_copy) oai_error_set(e, 500, "server_error", "messages", "out of memory");
            free(content);
            goto fail;
        }
        out->messages[i].role = role_copy;
        out->messages[i].content = content;
    }
    out->n = n;
    return true;
fail:
    oai_chat_free(out);
    return false;
}
