/* openai_api.h — the OpenAI API's shapes that both HTTP servers (tokroute serve, src/server/, and the
 * device's `tokroute ui`, src/ui/) write or read: the error object {"error": {message, type, param, code}}, ids that
 * are unique across restarts, server-sent-event framing, the replies' parts (head with the seed, choices, messages,
 * deltas, usage, both logprobs shapes), log-probabilities JSON can hold, unknown fields refused by name, `stop`
 * strings and chat `messages`. Whole request bodies are read in openai_request.h. */
#ifndef TR_OPENAI_API_H
#define TR_OPENAI_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

struct cJSON;

/* An error reply: HTTP status, a stable code ("bad_request", "invalid_api_key", ...), the request field at fault
 * ("" for none) and a message for people. */
typedef struct oai_error {
    int status;
    char code[32];
    char param[96];
    char message[640]; /* room for the longest message (an unknown field's, listing those accepted) */
} oai_error;

void oai_error_set(oai_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* OpenAI's error type for an HTTP status: invalid_request_error, authentication_error, permission_error,
 * not_found_error, rate_limit_error, server_error. The SDKs pick their exception class from the status. */
const char *oai_error_type(int status);
/* {"message", "type", "param" (null when none), "code"}. */
struct cJSON *oai_error_object(const oai_error *e);
/* The whole body {"error": {...}}, malloc'ed (NULL when out of memory). */
char *oai_error_json(const oai_error *e);

/* prefix followed by 24 random hex digits (96 bits from getrandom: unique across restarts). False when the system
 * has no random bytes to give. cap >= strlen(prefix) + 25. */
bool oai_random_id(const char *prefix, char *out, size_t cap);
/* One server-sent event "data: JSON\n\n" (malloc'ed); takes root. */
char *oai_sse_data(struct cJSON *root);
/* usage: {prompt_tokens, completion_tokens, total_tokens} added to root; returns the object for extra fields. */
struct cJSON *oai_add_usage(struct cJSON *root, int32_t prompt_tokens, int32_t completion_tokens);
/* JSON has no infinity: -inf becomes -9999.0, as OpenAI and vLLM write it. */
double oai_finite_logprob(float logprob);

/* Replies, built alike by both servers. The head of every reply and chunk: id, object, created, model and seed
 * (the seed the draws used, given or drawn: sent back, it replays the run). */
struct cJSON *oai_reply_head(const char *id, const char *object, double created, const char *model, uint64_t seed);
/* "seed": the integer, exactly (never in cJSON's 15-digit exponent form). */
void oai_add_seed(struct cJSON *root, uint64_t seed);
/* choices: [{"index": 0}] added to root; the caller adds the choice's text, message or delta, then ends it with
 * oai_end_choice: "logprobs" (taken; NULL: null; chat entries go into {content, refusal}) and "finish_reason"
 * (NULL: null). */
struct cJSON *oai_add_choice(struct cJSON *root);
void oai_end_choice(struct cJSON *choice, bool chat, struct cJSON *logprobs, const char *finish_reason);
/* A chat reply's choice.message {role: "assistant", content (n bytes), refusal: null}. A chunk's choice.delta: the
 * first names the role (role "assistant", content ""), later ones carry content (none: an empty delta). */
void oai_add_message(struct cJSON *choice, const char *content, size_t n);
void oai_add_delta(struct cJSON *choice, bool role, const char *content, size_t n);
/* A string member from n bytes (not NUL-terminated; an empty string when out of memory). */
void oai_add_text(struct cJSON *obj, const char *name, const char *text, size_t n);
/* {token, logprob, bytes} for a token's text (n bytes); a NaN log-probability (not known) is null. A chat
 * logprobs.content entry is this plus "top_logprobs": [such objects]. */
struct cJSON *oai_token_logprob(const char *piece, size_t n, float logprob);
/* choice.logprobs of a chat reply: {content: entries (taken), refusal: null}; entries NULL: "logprobs": null. */
void oai_chat_add_logprobs(struct cJSON *choice, struct cJSON *entries);
/* A completion's logprobs object {tokens, token_logprobs, top_logprobs, text_offset}, and one token added to it: its
 * name, log-probability (NaN: null — the prompt's first token, a remote LLM that does not report it), alternatives
 * (an object {name: logprob}, taken; NULL: null) and where its text starts in the reply's text. */
struct cJSON *oai_text_logprobs_new(void);
void oai_text_logprobs_add(struct cJSON *lp, const char *token, float logprob, struct cJSON *top, size_t text_offset);

/* The first member of the object root whose name is not in known (NULL-terminated), or NULL. */
const char *oai_unknown_field(const struct cJSON *root, const char *const *known);

/* `stop`: absent/null, a string, or an array of 1..max non-empty strings. Copies them (malloc'ed; oai_stop_free)
 * into out[max]; false with e filled (400, param "stop") otherwise. */
bool oai_stop_parse(const struct cJSON *stop, int32_t max, char **out, int32_t *n, oai_error *e);
void oai_stop_free(char **stop, int32_t n);

/* Chat `messages`: a non-empty array of {"role": system|developer|user|assistant, "content": a string or an array
 * of {"type": "text", "text": ...} parts, "name": optional, accepted and not rendered}; developer is rendered as
 * system. Other roles, other members and other part types are refused by name (400, param "messages[i]...."). */
typedef struct oai_chat {
    tr_chat_message *messages; /* role and content malloc'ed */
    size_t n;
} oai_chat;
bool oai_chat_parse(const struct cJSON *messages, oai_chat *out, oai_error *e);
void oai_chat_free(oai_chat *c);

#endif /* TR_OPENAI_API_H */
