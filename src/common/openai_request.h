/* openai_request.h — one reading of the bodies of POST /v1/completions and /v1/chat/completions, for both HTTP
 * servers (tokroute serve, src/server/completions.c and chat_completions.c; the device's tokroute ui,
 * src/ui/ui_openai.c): the same fields, the same rules and the same error texts on both. Each server then maps
 * the request to what it runs and refuses by name (oai_refuse) only what it cannot do; docs/protocol.md, "One
 * OpenAI layer", lists where they differ.
 *
 * The rules: a field not known is a 400 "unknown_field" naming it; a field OpenAI (or vLLM, or the other tokroute
 * server) has but this endpoint does not implement is a 400 "unsupported_field" naming it. Numbers are checked
 * for type and range, integers printed as integers. `max_tokens` and (chat) `max_completion_tokens` are one limit:
 * give either, or both with the same value. `stream_options` needs "stream": true and holds only include_usage.
 * Messages hold role, content and optionally name (accepted and not rendered: no template here has a place for
 * it). Without a `seed` a fresh one is drawn (53 random bits, so JSON can carry it back): replies report the seed
 * used, so any run can be replayed. */
#ifndef TR_OPENAI_REQUEST_H
#define TR_OPENAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/openai_api.h"

#define OAI_STOP_MAX 4          /* stop strings, as OpenAI */
#define OAI_TOP_LOGPROBS_MAX 20 /* alternatives per token, as OpenAI */
#define OAI_SEED_MAX 9007199254740992.0 /* 2^53: the largest integer a JSON number holds exactly */

typedef struct oai_logit_bias {
    int32_t id;
    float bias;
} oai_logit_bias;

/* What one endpoint of one server takes. */
typedef struct oai_endpoint {
    bool chat;                        /* /v1/chat/completions (messages), else /v1/completions (prompt) */
    const char *server;               /* "tokroute serve", "tokroute ui": named in refusals */
    const char *const *extra_fields;  /* the server's own fields besides OpenAI's (NULL-terminated; NULL: none) */
    int32_t n_vocab;                  /* token ids (a prompt of ids, logit_bias) are in [0, n_vocab) */
    int32_t min_max_tokens;           /* 0 where max_tokens 0 means "only score the prompt", else 1 */
} oai_endpoint;

typedef struct oai_request {
    struct cJSON *root;               /* the body: the server's own fields are read from it */
    const char *prompt_text;          /* completions: the prompt as text (in root), or NULL */
    int32_t *prompt_ids;              /* completions: the prompt as token ids (malloc'ed), or NULL */
    int32_t n_prompt_ids;
    oai_chat chat;                    /* chat: the messages */
    int64_t max_tokens;               /* the limit on generated tokens; -1: not given */
    const char *max_tokens_field;     /* the name it was given under (errors about it name that) */
    float temperature, top_p;         /* 1, 1 when absent (OpenAI's defaults) */
    int32_t top_k;                    /* vLLM's; 0 (or -1): off */
    uint64_t seed;                    /* the seed given, or a fresh draw */
    bool seed_given;
    char *stop[OAI_STOP_MAX];         /* malloc'ed */
    int32_t n_stop;
    bool stream, include_usage;
    bool logprobs;                    /* asked: chat "logprobs": true; completions "logprobs": N (N may be 0) */
    int32_t top_logprobs;             /* alternatives per token: chat top_logprobs, completions logprobs */
    oai_logit_bias *bias;             /* malloc'ed, each id once */
    int32_t n_bias;
} oai_request;

/* Parses body into out (zeroed first; oai_request_free it either way). False with e filled (400; 500 when out of
 * memory or without random bytes for a seed). */
bool oai_request_parse(const char *body, size_t len, const oai_endpoint *ep, oai_request *out, oai_error *e);
void oai_request_free(oai_request *r);

/* Whether root has the field with a value other than null. */
bool oai_has(const struct cJSON *root, const char *name);
/* A number field in [lo, hi] (hi INFINITY: no upper bound; an integer when integer): absent or null leaves *out;
 * otherwise false with e filled: "'max_tokens' must be an integer of at least 1, not -1". */
bool oai_number_field(const struct cJSON *root, const char *name, double lo, double hi, bool integer, double *out,
                      oai_error *e);
/* true / false; absent or null leaves *out. */
bool oai_bool_field(const struct cJSON *root, const char *name, bool *out, oai_error *e);
/* A 400 "unsupported_field": "'FIELD' is not supported by SERVER: WHY". */
void oai_refuse(oai_error *e, const char *field, const char *server, const char *why);
/* The 400 "no_chat_template" of a chat request to a model without one: what to start SERVER with instead. */
void oai_no_chat_template(oai_error *e, const char *server, const char *model);
/* 53 random bits (a seed JSON carries exactly). False when the system has no random bytes. */
bool oai_fresh_seed(uint64_t *seed);

#endif /* TR_OPENAI_REQUEST_H */
