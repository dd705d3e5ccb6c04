/* tokroute/route.h — part of tokroute's public API: LLM backends (embedded, remote, your own) and routed generation.
 * Included by tokroute.h (include that, not this file); the conventions and thread-safety notes are there. */
#ifndef TOKROUTE_ROUTE_H
#define TOKROUTE_ROUTE_H
#ifndef TOKROUTE_H
#error "include tokroute.h, which includes this file"
#endif

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- LLM backends */

/* Where the LLM's tokens come from. Every backend keeps its own KV cache (in this process or on a server): it is
 * handed the whole sequence and evaluates only the tokens it has not seen since its last call (rolling back to the
 * common prefix if the sequence changed), then returns the LLM's next token. A backend is used by one thread at a
 * time (one per conversation); distinct backends may run in parallel. */
typedef struct tr_llm_backend tr_llm_backend;

typedef struct tr_llm_stats {
    int64_t calls;            /* next-token requests */
    int64_t tokens_evaluated; /* tokens the LLM evaluated (prefill + catch-up), as far as the backend can tell */
    double time_ms;           /* wall time inside the backend, transport and simulated delay included */
    int64_t failures;         /* calls that failed (after the backend's own retries) */
    int64_t short_circuited;  /* calls refused at once because the circuit breaker was open */
    int64_t lookahead_tokens; /* lookahead tokens returned (part of tokens_evaluated) */
    int64_t draft_tokens_sent;     /* draft tokens sent with calls (all branches) */
    int64_t draft_tokens_verified; /* of those, evaluated by the LLM along the walk (part of tokens_evaluated) */
    int64_t bytes_sent;       /* request bodies sent (counted by the --server backend; 0 where not counted) */
    int64_t bytes_received;   /* reply bodies received */
} tr_llm_stats;

/* Polled during long work (prefill chunks, blocking network calls); return true to abort (TR_ERR_STATE). */
typedef bool (*tr_abort_fn)(void *user);

/* The LLM loaded in this process. The backend does not own the model. */
tr_status tr_llm_backend_embedded(const tr_model *llm, const tr_context_params *params,
                                  const tr_sampler_params *sampling, tr_llm_backend **out);

/* Remote backends. timeout_ms bounds one next-token call as a whole, retries and backoff included; a call never
 * waits longer. One connection is kept alive and reused. https:// URLs verify the server's certificate (against
 * cacert when given, else the system store); there is no switch that turns verification off. Failures: TR_ERR_TIMEOUT
 * and TR_ERR_NETWORK (unreachable, 5xx: routing may fall back to the SLM), TR_ERR_ARG (401/403, a certificate that
 * does not verify), TR_ERR_FORMAT (other 4xx, a reply without a usable token), TR_ERR_STATE (aborted). */
typedef struct tr_remote_params {
    const char *url;            /* base URL, e.g. "http://127.0.0.1:8080" (no trailing path needed) */
    const char *api_key;        /* sent as "Authorization: Bearer KEY" (NULL: none) */
    const char *cacert;         /* PEM file of a private CA for https (NULL: system store) */
    const char *model;          /* "model" field of OpenAI-compatible requests (NULL: omitted) */
    int32_t timeout_ms;         /* whole call, retries included (default 10000) */
    int32_t connect_timeout_ms; /* one connection attempt (default 2000, capped by timeout_ms) */
    int32_t retries;            /* further attempts after a failed one, with exponential backoff (default 2) */
    int32_t top_logprobs;       /* alternatives to ask for (default 0; the chosen token's logprob always) */
    tr_sampler_params sampling; /* --server only: temperature > 0 samples on the server, the draw at a position
                                   depending only on (seed, position); default greedy. OpenAI-compatible and
                                   llama.cpp requests are always greedy (temperature 0). */
} tr_remote_params;

tr_remote_params tr_remote_default_params(void);
/* tokroute serve's session protocol (docs/protocol.md): sends only the tokens appended since the last call, resyncs
 * transparently on 409, picks a random session id, deletes the session when freed. */
tr_status tr_llm_backend_server(const tr_remote_params *params, tr_llm_backend **out);
/* Any OpenAI-compatible POST /v1/completions: token-id prompt, max_tokens 1, temperature 0, logprobs. The
 * generated id is read back exactly: choices[0].token_ids (tokroute serve; vLLM with return_token_ids),
 * choices[0].logprobs.content[0].id (llama.cpp), or "token_id:N" logprob tokens (vLLM/SGLang with
 * return_tokens_as_token_ids); a reply carrying none of them is an error, never re-tokenized text. */
tr_status tr_llm_backend_openai(const tr_remote_params *params, tr_llm_backend **out);
/* llama.cpp's server: POST /completion with a token-id prompt, n_predict 1, cache_prompt true, n_probs. */
tr_status tr_llm_backend_llamacpp(const tr_remote_params *params, tr_llm_backend **out);
/* SGLang's native API: POST /generate with input_ids, max_new_tokens 1, greedy, the id from meta_info; scoring
 * with return_logprob, logprob_start_len 0 and top_logprobs_num K in one request per sequence. */
tr_status tr_llm_backend_sglang(const tr_remote_params *params, tr_llm_backend **out);

void tr_llm_backend_free(tr_llm_backend *b);
/* Simulates a network round trip of rtt_ms on every call: half of it before the LLM computes (the request's trip;
 * the LLM may still be busy with the previous call's lookahead meanwhile), half before anything it returns can be
 * seen (the answer, then each streamed lookahead token, half a round trip after it was computed). */
void tr_llm_backend_set_rtt(tr_llm_backend *b, double rtt_ms);
/* Restricts the LLM's choice to ids < n_allowed (a padded LLM vocabulary shared with a smaller SLM; 0 = no
 * restriction). Backends apply it where their API allows (argmax over the first ids, the server's n_vocab, a
 * logit bias); a returned id outside the range is an error (TR_ERR_RANGE) either way, never passed on. */
void tr_llm_backend_set_allowed(tr_llm_backend *b, int32_t n_allowed);
/* The id that ends the text (the end-of-sequence token both models share; -1, the default: unknown): what a call
 * answers when the LLM's reply says it ended the text without naming a token — tokroute serve's OpenAI endpoint
 * leaves the end of sequence out of token_ids and logprobs and answers finish_reason "stop" with no token. Without
 * it such a reply is an error (TR_ERR_FORMAT) saying so. tr_route_generate and tr_collect set it from the SLM. */
void tr_llm_backend_set_end_id(tr_llm_backend *b, int32_t end_id);
/* Circuit breaker: after a call fails with a network or timeout error, calls fail at once (TR_ERR_NETWORK,
 * counted in short_circuited) for cooldown_ms, then one call probes the server again; each further failure doubles
 * the cooldown up to max_cooldown_ms. Defaults 1000 / 16000; cooldown_ms 0 turns the breaker off. */
void tr_llm_backend_set_breaker(tr_llm_backend *b, int32_t cooldown_ms, int32_t max_cooldown_ms);
/* Polled by blocking calls (remote backends check it while waiting on the network). */
void tr_llm_backend_set_abort(tr_llm_backend *b, tr_abort_fn abort_fn, void *user);
/* Vocabulary size the LLM reports (the local model's, /health n_vocab, llama.cpp's /v1/models meta.n_vocab);
 * 0 when the backend cannot tell, and then tr_last_error() says why if the server could not be reached or refused
 * the key ("" when it simply does not report a size). May contact the server. */
int32_t tr_llm_backend_n_vocab(tr_llm_backend *b);
/* Longest sequence the LLM takes, prompt and generated tokens together (tokroute serve's /health n_ctx: its -c); 0
 * when the backend cannot tell. May contact the server. */
int32_t tr_llm_backend_n_ctx(tr_llm_backend *b);
/* Test hook: adds a random extra delay in [0, max_ms) to every call and to the arrival of every streamed lookahead
 * token (seeded; the stream stays in order), so tests can vary when answers arrive relative to the routed loop's
 * own work. 0 turns it off. */
void tr_llm_backend_set_jitter(tr_llm_backend *b, double max_ms, uint64_t seed);

tr_status tr_llm_next_token(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t *next);
/* The same, also giving the LLM's log-probability of the token (NAN when the backend does not report it). */
tr_status tr_llm_next_token_ex(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t *next,
                               float *logprob);
tr_llm_stats tr_llm_backend_stats(const tr_llm_backend *b);

/* Scoring a given sequence (teacher forcing: training data and evaluation). For each position p in [first, end),
 * 1 <= first < end <= n_tokens + 1, out[p - first] gets the LLM's distribution over the token at p given
 * tokens[0..p): its top_k most likely ids with their log-probabilities (most likely first) and the log-probability
 * of tokens[p] itself (NAN for p == n_tokens: the position after the sequence, what the next token would be).
 * Backends answer it in as few requests as their engine allows: the embedded LLM and tokroute serve in one forward
 * pass; vLLM (--openai, prompt_logprobs) and SGLang (--sglang, input logprobs) in one request; llama.cpp's server,
 * which has no prompt log-probabilities, one request per position. Log-probabilities are normalized over the
 * allowed ids in this process (tr_llm_backend_set_allowed) and over the engine's whole vocabulary on a server.
 * Failures as for next-token calls; TR_ERR_FORMAT for a reply that does not hold every position asked for, ids out
 * of range or repeated, log-probabilities that are not finite, positive or out of order; TR_ERR_UNSUPPORTED for a
 * backend without scoring. */
#define TR_SCORE_TOPK_MAX 64
typedef struct tr_llm_position {
    float logprob;                          /* of the actual token tokens[p] (NAN after the sequence) */
    int32_t n_top;                          /* entries below: top_k, fewer where ids outside the allowed range
                                               (tr_llm_backend_set_allowed) were dropped from a server's list */
    int32_t top_ids[TR_SCORE_TOPK_MAX];
    float top_logprobs[TR_SCORE_TOPK_MAX];
} tr_llm_position;
tr_status tr_llm_score(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t first, int32_t end,
                       int32_t top_k, tr_llm_position *out);
/* Scoring statistics (separate from next-token calls): calls, requests sent over the network (0 in process),
 * positions scored, wall time. */
typedef struct tr_llm_score_stats {
    int64_t calls, requests, positions, tokens_evaluated;
    double time_ms;
    int64_t bytes_sent, bytes_received;
} tr_llm_score_stats;
tr_llm_score_stats tr_llm_backend_score_stats(const tr_llm_backend *b);
/* How later next-token calls choose: greedy (temperature 0, every backend) or drawn at temperature > 0 from a
 * generator seeded by (seed, position) where the backend can (embedded, --server; the OpenAI-compatible, SGLang and
 * llama.cpp backends send temperature, top-k/top-p and a per-position seed). TR_ERR_UNSUPPORTED where it cannot. */
tr_status tr_llm_backend_set_sampling(tr_llm_backend *b, const tr_sampler_params *sampling);

/* Asynchronous calls: the same request as tr_llm_next_token_ex, run on a helper thread the backend owns, so the
 * caller keeps working while the answer travels. One request at a time per backend; while it is in flight the
 * caller must not use the backend otherwise (abort_fn is then polled from the helper thread). lookahead asks for up
 * to that many further greedy tokens after the answer (backends that cannot give them return none; a sampled LLM
 * returns none). */
#define TR_LOOKAHEAD_MAX 16
/* A draft tree (draft verification in the same round trip): guesses of how the sequence goes on after the
 * requested position, each branch a run of tokens. A branch whose parent is -1 starts at the requested position
 * (its first token is a candidate for the answer); a branch whose parent is b starts right after branch b's last
 * token. The backend walks the tree: after each answer it enters the child of the current node whose first token
 * equals the answer, evaluates that branch (one batch) and answers the position after it; the walk stops where no
 * child matches. So one call answers a whole chain of positions, each one exactly what a separate call with that
 * prefix would answer (greedy, or drawn from (seed, position)). Branches must come after their parent. */
#define TR_DRAFT_TOKENS_MAX 256
#define TR_DRAFT_BRANCHES_MAX 64
typedef struct tr_llm_draft {
    int32_t n_branches;
    int32_t parent[TR_DRAFT_BRANCHES_MAX];    /* -1: starts at the requested position; else an earlier branch */
    int32_t start[TR_DRAFT_BRANCHES_MAX + 1]; /* branch b is tokens[start[b] .. start[b+1]) (not empty) */
    int32_t tokens[TR_DRAFT_TOKENS_MAX];
} tr_llm_draft;
typedef struct tr_llm_reply {
    tr_status status;       /* the call's outcome; on failure tr_llm_finish also sets the message */
    int32_t id;
    float logprob;
    int32_t lookahead[TR_LOOKAHEAD_MAX]; /* greedy tokens after the last answer (id, or verify[n_verify-1]) */
    int32_t n_lookahead;
    /* The draft walk: verify[i] answers the position after the (i+1)-th branch entered (the branch whose first
     * token equals the previous answer). Consistent with the draft (checked): a reply never claims a branch that
     * the previous answer does not select. */
    int32_t verify[TR_DRAFT_BRANCHES_MAX];
    int32_t n_verify;
    double lookahead_ms;    /* the LLM's time spent computing the lookahead (0 when unknown, and when it streams:
                             * it is still being computed when the answer is returned) */
} tr_llm_reply;
/* Copies tokens and starts the call. TR_ERR_STATE when a request is already in flight. */
tr_status tr_llm_start(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t lookahead);
/* The same with a draft tree to verify in the same call (NULL: none; backends that cannot verify answer none).
 * TR_ERR_ARG for a malformed draft. */
tr_status tr_llm_start_draft(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, const tr_llm_draft *draft,
                             int32_t lookahead);
/* True when no request is in flight or its answer has arrived (tr_llm_finish will not block). */
bool tr_llm_ready(tr_llm_backend *b);
/* Waits for the answer of the request in flight and returns its status (also in reply->status). With a streaming
 * backend the answer comes before the lookahead: reply->lookahead holds what had arrived; the rest arrives later
 * (tr_llm_lookahead). */
tr_status tr_llm_finish(tr_llm_backend *b, tr_llm_reply *reply);
/* The lookahead of the last finished request as far as it has arrived: copies it (from its first token) into ids
 * (room for TR_LOOKAHEAD_MAX) and returns the count; *complete (may be NULL) tells whether more can still come. */
int32_t tr_llm_lookahead(tr_llm_backend *b, int32_t *ids, bool *complete);
/* The same, first waiting until more than n_have tokens have arrived or the stream has ended. */
int32_t tr_llm_lookahead_wait(tr_llm_backend *b, int32_t n_have, int32_t *ids, bool *complete);
const char *tr_llm_backend_name(const tr_llm_backend *b);

/* Writing your own backend: fill a tr_llm_backend_ops (static storage; it must outlive the backend) and wrap your
 * state with tr_llm_backend_create. The wrapper adds argument checks, timing, statistics, the simulated delay, the
 * allowed-id check and the circuit breaker, so next_token only computes. */
typedef struct tr_llm_call {
    const int32_t *tokens;   /* the whole sequence so far (prompt + generated) */
    int32_t n_tokens;
    int32_t n_allowed;       /* choose among ids < n_allowed (0: any) */
    int32_t end_id;          /* the id that ends the text (tr_llm_backend_set_end_id; -1: unknown) */
    tr_abort_fn abort_fn;    /* may be NULL */
    void *abort_user;
    int32_t id;              /* out: the next token */
    float logprob;           /* out: its log-probability (preset to NAN: unknown); else a number <= 0 or -inf,
                              * checked by the wrapper as scoring replies are */
    int64_t n_evaluated;     /* out: tokens the LLM evaluated for this call (preset to 0) */
    int32_t lookahead;       /* in: further greedy tokens wanted after id (0: none; at most TR_LOOKAHEAD_MAX) */
    int32_t *lookahead_ids;  /* out: room for lookahead ids */
    int32_t n_lookahead;     /* out: how many were given (preset to 0; may be fewer, or none) */
    int64_t bytes_sent, bytes_received; /* out: request and reply body bytes (remote backends) */
    const tr_llm_draft *draft; /* in: a draft tree to walk after id (NULL: none; see tr_llm_draft) */
    int32_t *verify_ids;     /* out: room for TR_DRAFT_BRANCHES_MAX answers along the walk */
    int32_t n_verify;        /* out: how many (preset to 0); lookahead then follows the last of them */
    double lookahead_ms;     /* out: time spent computing the lookahead (preset to 0: unknown) */
    void *internal;          /* the wrapper's (streaming); leave it as given */
} tr_llm_call;

/* Streaming the lookahead (optional, for backends that can): the answer should not wait for the lookahead. Call
 * tr_llm_call_answered once id, logprob and the draft walk (verify_ids, n_verify) are final — the caller of
 * tr_llm_finish gets them at once — then tr_llm_call_push_lookahead for each further token as it is computed
 * (instead of filling lookahead_ids). push returns false when no more are wanted (the caller has moved on: a newer
 * request waits, or the backend is being freed): stop computing and return TR_OK. lookahead_ms still reports the
 * time spent. A backend that calls neither fills lookahead_ids and n_lookahead before returning, as before. */
void tr_llm_call_answered(tr_llm_call *call);
bool tr_llm_call_push_lookahead(tr_llm_call *call, int32_t id);
/* Whether further lookahead tokens are still wanted (what the next push would say, without a token). */
bool tr_llm_call_wanted(const tr_llm_call *call);

/* A scoring request (tr_llm_score) as an implementation sees it. out has end - first entries, preset to
 * logprob NAN and n_top 0; fill each position's top ids (most likely first) and the actual token's log-probability.
 * The wrapper checks the result (every position filled, ids in range and distinct, log-probabilities finite, <= 0
 * and in order), so an implementation may copy what the network says and let the check refuse it. */
typedef struct tr_llm_score_call {
    const int32_t *tokens;
    int32_t n_tokens;
    int32_t first, end;      /* positions [first, end); end may be n_tokens + 1 (the position after the sequence) */
    int32_t top_k;           /* ids wanted per position (1..TR_SCORE_TOPK_MAX) */
    int32_t n_allowed;       /* ids < n_allowed only (0: any) */
    tr_abort_fn abort_fn;    /* may be NULL */
    void *abort_user;
    struct tr_llm_position *out;
    int64_t n_evaluated;     /* out: tokens the LLM evaluated (preset to 0) */
    int64_t n_requests;      /* out: requests sent (remote; preset to 0) */
    int64_t bytes_sent, bytes_received; /* out: request and reply body bytes (remote backends) */
} tr_llm_score_call;

typedef struct tr_llm_backend_ops {
    const char *name;
    tr_status (*next_token)(void *impl, tr_llm_call *call);
    int32_t (*n_vocab)(void *impl);  /* optional (NULL: unknown) */
    void (*free)(void *impl);        /* optional */
    /* optional: called from another thread (the caller's) when the running call's remaining lookahead stops
     * being wanted, so an implementation waiting on the network can wake up, see tr_llm_call_wanted return false
     * and return. It must not block or call back into the backend. */
    void (*interrupt)(void *impl);
    /* optional (NULL: tr_llm_score is TR_ERR_UNSUPPORTED): scores a given sequence, see tr_llm_score */
    tr_status (*score)(void *impl, tr_llm_score_call *call);
    /* optional (NULL: the backend cannot sample; tr_llm_backend_set_sampling is TR_ERR_UNSUPPORTED for
     * temperature > 0): how later next-token calls choose (greedy, or drawn from (seed, position)) */
    tr_status (*set_sampling)(void *impl, const tr_sampler_params *sampling);
    int32_t (*n_ctx)(void *impl);    /* optional (NULL: unknown): see tr_llm_backend_n_ctx */
} tr_llm_backend_ops;

/* Wraps impl; ownership passes to the backend (ops->free runs on it even when this call fails). */
tr_status tr_llm_backend_create(const tr_llm_backend_ops *ops, void *impl, tr_llm_backend **out);

/* Whether an SLM/LLM pair can route: the LLM's vocabulary must agree with every entry the SLM has; extra LLM
 * entries are accepted only when they are padding (type UNUSED, or "[PAD…]" / "<|PAD…" texts). */
typedef enum tr_vocab_match {
    TR_VOCAB_SAME = 0,     /* identical vocabularies */
    TR_VOCAB_PADDED,       /* the LLM's has n_shared equal entries plus padding */
    TR_VOCAB_SIZE_ONLY,    /* only sizes known (remote LLM): n_shared = the SLM's size <= the LLM's */
} tr_vocab_match;
/* TR_OK and the case (with n_shared, the ids both share) when compatible, else TR_ERR_UNSUPPORTED with a message
 * naming the first differing entry. */
tr_status tr_vocab_compatible(const tr_vocab *slm, const tr_vocab *llm, tr_vocab_match *match, int32_t *n_shared);
/* For a remote LLM that reports only its vocabulary size (0 = unknown: accepted as SIZE_ONLY with the SLM's). */
tr_status tr_vocab_compatible_size(const tr_vocab *slm, int32_t llm_n_vocab, tr_vocab_match *match,
                                   int32_t *n_shared);
const char *tr_vocab_match_name(tr_vocab_match m);

/* ---------------------------------------------------------------- routed generation */

typedef enum tr_route_mode {
    TR_MODE_JOINT = 0, /* route low-confidence tokens to the LLM */
    TR_MODE_SLM,       /* small model only */
    TR_MODE_LLM,       /* large model only (the quality ceiling) */
} tr_route_mode;

const char *tr_route_mode_name(tr_route_mode m);
tr_status tr_route_mode_from_name(const char *name, tr_route_mode *out);

typedef enum tr_token_source { TR_SOURCE_SLM = 0, TR_SOURCE_LLM = 1 } tr_token_source;

/* One generated token, as reported to the callback and written to traces. */
typedef struct tr_route_token {
    int32_t index;        /* 0 for the first generated token */
    int32_t id;
    tr_token_source source;
    int32_t slm_id;       /* the SLM's own proposal (-1 in llm mode) */
    float score;          /* router confidence (-1 when not scored) */
    float tau;            /* the threshold this position was decided with (moves with target_routed) */
    double slm_ms;        /* SLM forward + router for this token */
    double llm_ms;        /* LLM call incl. transport and simulated delay (0 when not routed) */
    const char *text;     /* text completed by this token (UTF-8 safe, stop strings held back); NUL-terminated */
    size_t text_len;
    float logprob;        /* log-probability of id under the model that produced it (NAN when unknown) */
    bool llm_unavailable; /* routed, but the LLM failed: the SLM's proposal was used (source is TR_SOURCE_SLM) */
    bool lookahead_hit;   /* routed, and answered by an earlier call (its lookahead or draft walk): no round trip */
    double wait_ms;       /* time the loop blocked on the LLM before this token was confirmed */
} tr_route_token;

/* Return false to stop generating. */
typedef bool (*tr_route_callback)(void *user, const tr_route_token *token);
/* All shown text, in order: each token's completed text right after its on_token (token points at it), then the
 * text held back until the end (an incomplete UTF-8 character, a possible stop-string start) with token NULL.
 * Return false to stop generating. */
typedef bool (*tr_route_text_callback)(void *user, const char *text, size_t len, const tr_route_token *token);

/* What a routed token gets when the LLM backend fails (after its retries, or at once while its breaker is open). */
typedef enum tr_llm_failure {
    TR_LLM_FAILURE_FALLBACK = 0, /* use the SLM's own proposal, mark the token llm_unavailable (joint mode) */
    TR_LLM_FAILURE_ERROR,        /* stop with the backend's error */
} tr_llm_failure;

typedef struct tr_route_params {
    tr_route_mode mode;
    float tau;                     /* route when score < tau */
    int32_t n_predict;             /* most tokens to generate (default 128) */
    tr_sampler_params sampling;    /* for the SLM's proposals (the LLM backend has its own) */
    bool stop_at_eog;              /* stop at end-of-generation tokens (default true) */
    const char *const *stop;       /* stop strings (optional) */
    int32_t n_stop;
    tr_route_callback on_token;    /* optional streaming callback */
    void *user;
    tr_route_text_callback on_text; /* optional; gets user too */
    tr_llm_failure on_llm_failure; /* default TR_LLM_FAILURE_FALLBACK (llm mode has no SLM proposal: error) */
    tr_abort_fn abort_fn;          /* optional: polled between prefill chunks, tokens and inside LLM calls */
    void *abort_user;
    /* Hiding the round trip (joint mode; all 0 = the synchronous loop, the default). While a routed request is in
     * flight the SLM keeps decoding up to speculate_depth tokens (or draft_span, if larger) on its own proposals,
     * as long as its proposals have been agreeing with the LLM's answers; tokens are shown only once confirmed, and
     * a differing LLM answer rolls the SLM back. Each routed call also asks for up to lookahead further greedy LLM
     * tokens after its last answer (streamed after it; fewer while they answer little); a later routed position
     * whose prefix still equals what a reply assumed takes its token from it without a call, waiting for the
     * stream when it is the stream's next token. The tokens are identical to the synchronous loop's (greedy LLM,
     * or one drawing from (seed, position)). */
    int32_t speculate_depth;       /* 0..1024 */
    int32_t lookahead;             /* 0..TR_LOOKAHEAD_MAX */
    /* Draft verification: a routed request carries a tree of up to draft_tokens SLM-drafted tokens covering the
     * next draft_span positions (the SLM's own continuation, plus draft_width - 1 alternatives at the requested
     * position and 1 at later routed ones), and the LLM answers every routed position along the branch it agrees
     * with in the same call. Drafting before a request leaves is capped at 30% of the observed round trip, scaled
     * by what draft walks have been answering, so a slow SLM, or one the LLM rarely agrees with, drafts fewer
     * tokens. 0: off. */
    int32_t draft_tokens;          /* 0..TR_DRAFT_TOKENS_MAX */
    int32_t draft_span;            /* 0..TR_DRAFT_TOKENS_MAX (0: draft_tokens) */
    int32_t draft_width;           /* 1..8 candidates at the requested position (0: 1) */
    /* Draft the full draft_tokens before every request, however long it takes and whatever drafts have earned
     * (a pair known to agree, or a measurement whose draft sizes must not depend on the machine's speed).
     * Default false: the adaptive cap above. */
    bool draft_fixed;
    /* Keeping the budget (joint mode). target_routed P in (0, 1]: τ follows the routed count so that the share of
     * routed positions stays near P over the generation (within ±1.5 points over 200 tokens on the demo pair for
     * every policy; README "Keeping the budget"), starting from tau (give the calibrated τ for P: the CLI's default
     * is the router file's), and differing from an oracle that routes the lowest-scoring P of the same generation
     * on as few positions as measured controllers allow. The count never leaves P·i ± 2.5 tokens (10 tokens at
     * 0.1: 0 to 3 routed, about 1 on average), and the mean share of many short generations is P (100 × 64 tokens:
     * within ±0.5 points). max_routed C in
     * (0, 1]: a hard cap: never more than ⌈C·n⌉ of the first n positions routed (200 at 0.1: at most 20); a
     * cap below the target wins (the target is then not reached: the CLI refuses that combination as a mistake).
     * Both count routing decisions (a fallback token counts), which depend only on the text, so the hiding loop's
     * tokens still equal the synchronous loop's; each token's τ is in tr_route_token.tau. 0 = off (default). */
    double target_routed;
    double max_routed;
} tr_route_params;

typedef struct tr_route_stats {
    int32_t n_prompt, n_tokens, n_routed;
    double ttft_ms;           /* from start to the first generated token */
    double mean_tbt_ms;       /* mean time between tokens after the first */
    double slm_ms, llm_ms, total_ms;
    double router_ms;         /* part of slm_ms spent scoring */
    int64_t slm_evaluated;    /* tokens the SLM evaluated in this call */
    int64_t llm_evaluated;    /* tokens the LLM evaluated in this call */
    bool stopped_by_eog, stopped_by_string;
    int32_t n_fallback;       /* routed tokens the LLM could not produce (the SLM's proposal was used) */
    bool aborted;             /* abort_fn asked to stop (the call returned TR_ERR_STATE) */
    int64_t llm_calls;        /* requests sent to the LLM backend */
    int64_t llm_blocking;     /* of those, how many the loop had to wait for (blocking round trips) */
    double llm_wait_ms;       /* time the loop spent waiting on the LLM */
    int32_t n_lookahead_hits; /* routed tokens answered by an earlier call (lookahead or draft; no call) */
    int32_t n_draft_hits;     /* of those, answered by a draft verification */
    int64_t draft_tokens_sent, draft_tokens_verified; /* draft tokens sent / evaluated by the LLM */
    int32_t n_spec_kept, n_spec_discarded; /* speculative SLM tokens kept / rolled back */
    int32_t n_spec_agree, n_spec_disagree; /* answered calls whose token equaled / differed from the SLM's */
    int64_t llm_bytes_sent, llm_bytes_received;
    int32_t n_route_decisions; /* positions decided routed (n_routed + n_fallback: the share target_routed keeps) */
    float tau_mean, tau_last;  /* τ over the decided positions and at the last one (tau without a budget) */
} tr_route_stats;

tr_route_params tr_route_default_params(void);
/* Turns on the latency hiding `tokroute generate` uses for a remote LLM (a round trip to hide): speculate_depth 8,
 * draft_tokens 96 (draft_width 3, draft_span 32) and lookahead 8 where the backend's lookahead is exact (tokroute
 * serve's session protocol, an embedded LLM; exact_lookahead false: 0, as for OpenAI-compatible servers). The
 * tokens stay those of the synchronous loop. */
void tr_route_params_hide_round_trip(tr_route_params *p, bool exact_lookahead);
/* Generates after the prompt. Sampling (temperature > 0) draws at each position from a generator seeded by
 * (sampling.seed, position), so a conversation continued over several calls does not repeat its first draws. The SLM context is needed in every mode (its model's vocabulary detokenizes and
 * finds end-of-generation tokens); in llm mode it is not evaluated. router may be NULL outside joint mode, llm may
 * be NULL in slm mode. The SLM context is rolled back to the longest common prefix of its cache and the prompt
 * and extended from there, never re-prefilled. Generated ids go to out_tokens (up to cap; may be NULL). */
tr_status tr_route_generate(tr_context *slm, tr_router *router, tr_llm_backend *llm, const int32_t *prompt,
                            int32_t n_prompt, const tr_route_params *params, int32_t *out_tokens, int32_t cap,
                            tr_route_stats *stats);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* TOKROUTE_ROUTE_H */
