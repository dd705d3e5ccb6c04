/* tokroute.h — the public C API of tokroute: token-level routing between a small model on the device and a
 * large model on a server.
 *
 * Conventions (as in llama.cpp and libcurl): opaque handles; parameter structs filled by *_default_params();
 * paired create/free (or load/free, open/close); every fallible call returns a tr_status and keeps a readable
 * message for the calling thread in tr_last_error(). The library never prints to stdout, never exits and never
 * aborts on input it was handed.
 *
 * The order of this file follows a token's path: status → tensor types → GGUF files → models and contexts →
 * sampling → vocabularies and tokenizing → chat templates → routers → LLM backends → routed generation →
 * evaluation → LLM server → synthetic models.
 *
 * Thread safety. The library keeps no global state beyond tables built once (pthread_once) and the instruction
 * set chosen at first use. Objects that are read-only once created may be shared by any number of threads:
 * models (tr_model, with the vocabulary they loaded), vocabularies (tr_vocab: tokenizing, detokenizing and chat
 * rendering only read them) and open GGUF files (tr_gguf). Everything else holds per-call state and must be used
 * by one thread at a time (different objects in different threads are fine): contexts (KV cache, activations,
 * their thread pool), samplers (the random state), routers (scratch buffers), LLM backends (their own context and
 * counters), streaming detokenizers and GGUF writers. A context or backend may be used while other threads use
 * other contexts over the same model. tr_last_error() is per thread: it reports the calling thread's last failure.
 *
 * Symbols: everything declared here is exported from the shared library (libtokroute.so) and nothing else is;
 * TR_VERSION_* give the version this header belongs to, tr_version() the one of the library actually linked.
 */
#ifndef TOKROUTE_H
#define TOKROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TR_VERSION_MAJOR 0
#define TR_VERSION_MINOR 1
#define TR_VERSION_PATCH 0
#define TR_STRINGIFY_(x) #x
#define TR_STRINGIFY(x) TR_STRINGIFY_(x)
/* "MAJOR.MINOR.PATCH", equal to what tr_version() returns. */
#define TR_VERSION TR_STRINGIFY(TR_VERSION_MAJOR) "." TR_STRINGIFY(TR_VERSION_MINOR) "." TR_STRINGIFY(TR_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden; the declarations below are its public, exported API. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- status */

typedef enum tr_status {
    TR_OK = 0,
    TR_ERR_ARG,         /* the caller passed an invalid argument */
    TR_ERR_IO,          /* a file could not be opened, read, written or mapped */
    TR_ERR_FORMAT,      /* malformed or truncated file or message */
    TR_ERR_UNSUPPORTED, /* well-formed, but a feature we do not support (architecture, tensor type, ...) */
    TR_ERR_NOMEM,       /* an allocation failed */
    TR_ERR_RANGE,       /* a value out of range: token id, context full, position */
    TR_ERR_NETWORK,     /* a remote backend could not be reached or answered wrongly */
    TR_ERR_TIMEOUT,     /* a remote backend did not answer in time */
    TR_ERR_STATE,       /* the call is not valid in the object's current state */
} tr_status;

/* Short stable name of a status ("ok", "format", ...). */
const char *tr_status_name(tr_status status);

/* Message of the last failure in the calling thread ("" if none). Valid until the next failing call. */
const char *tr_last_error(void);

/* Version string of the library, e.g. "0.1.0" (TR_VERSION of the header it was built with). */
const char *tr_version(void);

/* ---------------------------------------------------------------- tensor types (ggml numbering) */

typedef enum tr_type {
    TR_TYPE_F32 = 0,
    TR_TYPE_F16 = 1,
    TR_TYPE_Q4_0 = 2,
    TR_TYPE_Q4_1 = 3,
    TR_TYPE_Q5_0 = 6,
    TR_TYPE_Q5_1 = 7,
    TR_TYPE_Q8_0 = 8,
    TR_TYPE_Q8_1 = 9,
    TR_TYPE_Q2_K = 10,
    TR_TYPE_Q3_K = 11,
    TR_TYPE_Q4_K = 12,
    TR_TYPE_Q5_K = 13,
    TR_TYPE_Q6_K = 14,
    TR_TYPE_Q8_K = 15,
    TR_TYPE_BF16 = 30,
    TR_TYPE_COUNT = 40 /* upper bound of known ids; not a type */
} tr_type;

/* Lower-case name ("q4_k"), or NULL for an id no block layout is known for. */
const char *tr_type_name(tr_type type);
/* Parses a name as printed by tr_type_name (case-insensitive). */
tr_status tr_type_from_name(const char *name, tr_type *out);
/* Elements per block and bytes per block; 0 for unknown types. */
int64_t tr_type_block_elems(tr_type type);
size_t tr_type_block_bytes(tr_type type);
/* True when the engine can multiply with weights of this type. */
bool tr_type_supported(tr_type type);

/* ---------------------------------------------------------------- GGUF files */

typedef struct tr_gguf tr_gguf;

typedef enum tr_gguf_value_type {
    TR_GGUF_UINT8 = 0,
    TR_GGUF_INT8 = 1,
    TR_GGUF_UINT16 = 2,
    TR_GGUF_INT16 = 3,
    TR_GGUF_UINT32 = 4,
    TR_GGUF_INT32 = 5,
    TR_GGUF_FLOAT32 = 6,
    TR_GGUF_BOOL = 7,
    TR_GGUF_STRING = 8,
    TR_GGUF_ARRAY = 9,
    TR_GGUF_UINT64 = 10,
    TR_GGUF_INT64 = 11,
    TR_GGUF_FLOAT64 = 12,
} tr_gguf_value_type;

typedef struct tr_gguf_tensor {
    const char *name;
    tr_type type;
    int n_dims;
    int64_t ne[4];      /* ne[0] is the row length (contiguous), unused dimensions are 1 */
    uint64_t offset;    /* from the start of the data section */
    uint64_t n_bytes;
    const void *data;   /* into the mapping; valid while the file is open */
} tr_gguf_tensor;

/* Opens and validates a GGUF v2/v3 file: every count, length, dimension, offset and size is checked against the
 * file before use. Tensor data is memory-mapped, not copied. */
tr_status tr_gguf_open(const char *path, tr_gguf **out);
/* The same over a caller's buffer (not copied; must outlive the handle). */
tr_status tr_gguf_open_memory(const void *data, size_t size, tr_gguf **out);
void tr_gguf_close(tr_gguf *gguf);

uint32_t tr_gguf_version(const tr_gguf *gguf);
uint64_t tr_gguf_file_size(const tr_gguf *gguf);
uint32_t tr_gguf_alignment(const tr_gguf *gguf);

/* Metadata. Keys are indexed 0..n_kv-1; tr_gguf_find_kv returns -1 when absent. */
int64_t tr_gguf_n_kv(const tr_gguf *gguf);
int64_t tr_gguf_find_kv(const tr_gguf *gguf, const char *key);
const char *tr_gguf_kv_key(const tr_gguf *gguf, int64_t i);
tr_gguf_value_type tr_gguf_kv_type(const tr_gguf *gguf, int64_t i);
/* For arrays: element type and count. */
tr_gguf_value_type tr_gguf_kv_array_type(const tr_gguf *gguf, int64_t i);
uint64_t tr_gguf_kv_array_len(const tr_gguf *gguf, int64_t i);

/* Typed getters by key; false when the key is absent or of an incompatible type. Integers of any width and sign
 * convert to int64 (uint64 values above INT64_MAX fail); floats of either width to double. */
bool tr_gguf_get_int(const tr_gguf *gguf, const char *key, int64_t *out);
bool tr_gguf_get_float(const tr_gguf *gguf, const char *key, double *out);
bool tr_gguf_get_bool(const tr_gguf *gguf, const char *key, bool *out);
/* NUL-terminated copy owned by the handle; *len (optional) gets the byte length (strings may contain NUL). */
const char *tr_gguf_get_str(const tr_gguf *gguf, const char *key, size_t *len);

/* Array element getters by kv index; false when out of range or of an incompatible type. */
bool tr_gguf_arr_int(const tr_gguf *gguf, int64_t kv, uint64_t i, int64_t *out);
bool tr_gguf_arr_float(const tr_gguf *gguf, int64_t kv, uint64_t i, double *out);
const char *tr_gguf_arr_str(const tr_gguf *gguf, int64_t kv, uint64_t i, size_t *len);

/* Scalar value rendered as text (for `tokroute inspect`); arrays render as "[type × n]". Writes at most cap bytes
 * including the NUL. */
void tr_gguf_kv_format(const tr_gguf *gguf, int64_t i, char *buf, size_t cap);

/* Tensors. */
int64_t tr_gguf_n_tensors(const tr_gguf *gguf);
int64_t tr_gguf_find_tensor(const tr_gguf *gguf, const char *name);
const tr_gguf_tensor *tr_gguf_tensor_at(const tr_gguf *gguf, int64_t i);

/* Writer: metadata and tensor descriptions are collected, then written in one pass. Tensor data is either given
 * (copied at add time) or produced at write time by a fill callback, so files larger than memory can be written. */
typedef struct tr_gguf_writer tr_gguf_writer;
typedef tr_status (*tr_gguf_fill_fn)(void *user, int64_t tensor_index, void *dst, size_t n_bytes);

tr_status tr_gguf_writer_create(tr_gguf_writer **out);
void tr_gguf_writer_free(tr_gguf_writer *w);
tr_status tr_gguf_writer_set_u32(tr_gguf_writer *w, const char *key, uint32_t v);
tr_status tr_gguf_writer_set_i32(tr_gguf_writer *w, const char *key, int32_t v);
tr_status tr_gguf_writer_set_u64(tr_gguf_writer *w, const char *key, uint64_t v);
tr_status tr_gguf_writer_set_f32(tr_gguf_writer *w, const char *key, float v);
tr_status tr_gguf_writer_set_bool(tr_gguf_writer *w, const char *key, bool v);
tr_status tr_gguf_writer_set_str(tr_gguf_writer *w, const char *key, const char *v);
tr_status tr_gguf_writer_set_arr_str(tr_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
tr_status tr_gguf_writer_set_arr_i32(tr_gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
tr_status tr_gguf_writer_set_arr_f32(tr_gguf_writer *w, const char *key, const float *v, uint64_t n);
/* Copies every key of src (used to re-type a model while keeping its metadata). */
tr_status tr_gguf_writer_copy_kv(tr_gguf_writer *w, const tr_gguf *src);
/* data may be NULL: the fill callback given to tr_gguf_writer_write produces it. Returns the tensor's index. */
tr_status tr_gguf_writer_add_tensor(tr_gguf_writer *w, const char *name, tr_type type, int n_dims,
                                    const int64_t *ne, const void *data, int64_t *index);
tr_status tr_gguf_writer_write(tr_gguf_writer *w, const char *path, tr_gguf_fill_fn fill, void *user);

/* ---------------------------------------------------------------- models and contexts */

typedef struct tr_model tr_model;
typedef struct tr_context tr_context;

typedef struct tr_model_params {
    bool use_mmap;    /* map weights from the file instead of reading them (default true) */
    bool load_vocab;  /* also load the tokenizer vocabulary when the file has one (default true) */
} tr_model_params;

typedef enum tr_arch { TR_ARCH_LLAMA = 0, TR_ARCH_QWEN2, TR_ARCH_QWEN3 } tr_arch;

typedef struct tr_model_info {
    tr_arch arch;
    const char *arch_name;   /* "llama", "qwen2", "qwen3" */
    const char *name;        /* general.name or "" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rope_theta, norm_eps;
    bool tied_output;
    uint64_t n_params;
    uint64_t weight_bytes;
    tr_type main_type;       /* the most common 2-D weight type */
} tr_model_info;

tr_model_params tr_model_default_params(void);
tr_status tr_model_load(const char *path, const tr_model_params *params, tr_model **out);
void tr_model_free(tr_model *model);
const tr_model_info *tr_model_get_info(const tr_model *model);

typedef struct tr_context_params {
    int32_t n_ctx;        /* KV cache length in tokens; 0 = min(model's training context, 4096) */
    int32_t n_threads;    /* 0 = number of physical cores */
    int32_t n_batch;      /* most tokens evaluated in one forward chunk (default 256) */
    bool kv_f32;          /* keep K and V in F32 instead of F16 (default false, as llama.cpp) */
} tr_context_params;

/* What tr_context_eval keeps for the caller. Hidden states (after the output norm) are always kept for every
 * position of the last call: they cost nothing extra. Logits cost a vocabulary-sized product per position. */
typedef enum tr_eval_flags {
    TR_EVAL_LOGITS_LAST = 0,  /* logits of the last position only (default) */
    TR_EVAL_LOGITS_ALL = 1,   /* logits of every position */
    TR_EVAL_LOGITS_NONE = 2,  /* no logits at all */
} tr_eval_flags;

tr_context_params tr_context_default_params(void);
tr_status tr_context_create(const tr_model *model, const tr_context_params *params, tr_context **out);
void tr_context_free(tr_context *ctx);
const tr_model *tr_context_model(const tr_context *ctx);

/* Appends tokens at positions n_past .. n_past+n-1 and evaluates them in one batched pass (chunked by n_batch).
 * Fails with TR_ERR_RANGE (and changes nothing) for an id outside the vocabulary or when the cache would overflow. */
tr_status tr_context_eval(tr_context *ctx, const int32_t *tokens, int32_t n_tokens, tr_eval_flags flags);
/* Rows of the last eval: i in [0, n_tokens) or -1 for the last. NULL when not kept. */
const float *tr_context_logits(const tr_context *ctx, int32_t i);
const float *tr_context_hidden(const tr_context *ctx, int32_t i);
int32_t tr_context_n_past(const tr_context *ctx);
int32_t tr_context_n_ctx(const tr_context *ctx);
/* Tokens currently in the cache (n_past of them). */
const int32_t *tr_context_tokens(const tr_context *ctx);
/* Keeps the first n_past positions and forgets the rest (routing rolls back). */
tr_status tr_context_truncate(tr_context *ctx, int32_t n_past);
void tr_context_clear(tr_context *ctx);
/* Total tokens this context has evaluated since creation (for counting work). */
int64_t tr_context_n_evaluated(const tr_context *ctx);
int32_t tr_context_n_threads(const tr_context *ctx);

/* Physical CPU cores this process may use (at least 1): those in its CPU affinity mask, at most its cgroup v2 CPU
 * quota. The default thread count. */
int tr_physical_cores(void);
/* Instruction set the matrix products use here: "avx512", "avx2", "neon" or "scalar" (env TOKROUTE_KERNELS
 * forces one this CPU can run; naming one it cannot makes model loads fail with TR_ERR_UNSUPPORTED). */
const char *tr_kernels_isa(void);

/* ---------------------------------------------------------------- sampling */

typedef struct tr_sampler tr_sampler;

typedef struct tr_sampler_params {
    float temperature;  /* <= 0: greedy (default 0) */
    int32_t top_k;      /* 0 = off (default 40 when sampling) */
    float top_p;        /* 1 = off (default 0.95) */
    uint64_t seed;      /* default 0x5eed */
} tr_sampler_params;

tr_sampler_params tr_sampler_default_params(void);
tr_status tr_sampler_create(const tr_sampler_params *params, tr_sampler **out);
void tr_sampler_free(tr_sampler *s);
/* Restarts the generator from seed (routing seeds each position from (seed, position)). */
void tr_sampler_reseed(tr_sampler *s, uint64_t seed);
/* Picks a token from n_vocab logits. Greedy picks the lowest id among equal maxima. Candidates are ordered by logit
 * (lowest id first on ties); only those top-k, top-p and the draw need are ever sorted, so a call costs about one
 * pass over the logits (plus one expf per logit when top_k is 0). Returns -1 for invalid arguments. */
int32_t tr_sampler_sample(tr_sampler *s, const float *logits, int32_t n_vocab);
/* Convenience: index of the largest logit (lowest id on ties; NaNs never win). Vectorized. */
int32_t tr_argmax(const float *logits, int32_t n);

/* ---------------------------------------------------------------- vocabularies and tokenizing */

typedef struct tr_vocab tr_vocab;

typedef enum tr_vocab_kind { TR_VOCAB_SPM = 0, TR_VOCAB_BPE = 1 } tr_vocab_kind;

/* Loads the tokenizer from a GGUF's tokenizer.ggml.* metadata (vocab-only files work). */
tr_status tr_vocab_load(const char *path, tr_vocab **out);
tr_status tr_vocab_from_gguf(const tr_gguf *gguf, tr_vocab **out);
void tr_vocab_free(tr_vocab *vocab);
/* The vocabulary loaded with a model (NULL if the file had none or load_vocab was false). */
const tr_vocab *tr_model_vocab(const tr_model *model);

tr_vocab_kind tr_vocab_get_kind(const tr_vocab *vocab);
const char *tr_vocab_pre(const tr_vocab *vocab);  /* tokenizer.ggml.pre or "" */
int32_t tr_vocab_n_tokens(const tr_vocab *vocab);
int32_t tr_vocab_bos(const tr_vocab *vocab);  /* -1 when none */
int32_t tr_vocab_eos(const tr_vocab *vocab);
int32_t tr_vocab_eot(const tr_vocab *vocab);
bool tr_vocab_add_bos(const tr_vocab *vocab);
bool tr_vocab_add_eos(const tr_vocab *vocab);
/* True for end-of-generation tokens (EOS, EOT, and the vocab's other end markers). */
bool tr_vocab_is_eog(const tr_vocab *vocab, int32_t id);
/* The token's stored text (SentencePiece "▁" and byte-level encodings as in the file), or NULL for a bad id. */
const char *tr_vocab_token_text(const tr_vocab *vocab, int32_t id);

typedef struct tr_tokenize_params {
    bool add_special;    /* add BOS/EOS as the vocabulary asks (default true) */
    bool parse_special;  /* text like <|im_start|> becomes the special token (default false) */
} tr_tokenize_params;

tr_tokenize_params tr_tokenize_default_params(void);
/* Tokenizes len bytes of text. Writes at most cap ids; *n_tokens gets the full count. When the count exceeds cap
 * the call returns TR_ERR_RANGE, so callers can retry with a larger buffer. */
tr_status tr_tokenize(const tr_vocab *vocab, const char *text, size_t len, const tr_tokenize_params *params,
                      int32_t *tokens, int32_t cap, int32_t *n_tokens);

/* The bytes a token stands for (byte-level and byte-fallback tokens decoded; SentencePiece "▁" → " "). Writes at
 * most cap bytes (no NUL); returns the full length, or -1 for a negative id. Ids past the token list render as
 * empty text (a model's n_vocab may exceed its token list). Special/control tokens render as their text only when
 * render_special is true. */
int32_t tr_token_to_piece(const tr_vocab *vocab, int32_t id, bool render_special, char *buf, int32_t cap);

/* Detokenizes a whole sequence into a malloc'ed NUL-terminated string (free with free()). With SentencePiece,
 * the single leading space that tokenizing added as the dummy prefix is removed when remove_leading_space. */
tr_status tr_detokenize(const tr_vocab *vocab, const int32_t *tokens, int32_t n_tokens, bool remove_leading_space,
                        bool render_special, char **out);

/* Streaming detokenizer: push tokens one by one and get back only complete UTF-8 characters; a character split
 * across tokens is held back until its last byte arrives. */
typedef struct tr_detok_stream tr_detok_stream;
tr_status tr_detok_stream_create(const tr_vocab *vocab, bool remove_leading_space, tr_detok_stream **out);
void tr_detok_stream_free(tr_detok_stream *s);
/* Appends the token; returns a pointer to the newly completed text (NUL-terminated, valid until the next call)
 * and its length in *len. Negative ids give TR_ERR_RANGE; ids past the token list add no text. */
tr_status tr_detok_stream_push(tr_detok_stream *s, int32_t id, const char **text, size_t *len);
/* Emits whatever is held back (incomplete bytes become U+FFFD). */
tr_status tr_detok_stream_flush(tr_detok_stream *s, const char **text, size_t *len);

/* ---------------------------------------------------------------- chat templates */

typedef struct tr_chat_message {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} tr_chat_message;

/* Known templates: "chatml", "llama2", "llama3". */
typedef enum tr_chat_template { TR_CHAT_NONE = 0, TR_CHAT_CHATML, TR_CHAT_LLAMA2, TR_CHAT_LLAMA3 } tr_chat_template;

/* Picks the template the vocabulary's tokenizer.chat_template matches, or TR_CHAT_NONE. */
tr_chat_template tr_chat_template_detect(const tr_gguf *gguf);
tr_status tr_chat_template_from_name(const char *name, tr_chat_template *out);
const char *tr_chat_template_name(tr_chat_template t);
/* Renders messages into a malloc'ed prompt string; add_assistant opens the assistant's turn. */
tr_status tr_chat_apply(tr_chat_template t, const tr_chat_message *messages, size_t n_messages, bool add_assistant,
                        char **out);
/* Renders messages and tokenizes the prompt so that control tokens come only from the template's own text: a
 * message (content or role) containing "<|im_end|>" or "<s>" stays plain text, as tr_tokenize with parse_special =
 * false would treat it, while the template's markers become their tokens. Text is otherwise tokenized as in the
 * whole rendered string (so a prompt whose messages hold no special-token text gets the same ids as tr_chat_apply
 * followed by tr_tokenize with parse_special). Use this, not tr_chat_apply + parse_special, for untrusted text.
 * add_special adds BOS/EOS as the vocabulary asks. Buffer contract as tr_tokenize: at most cap ids, *n_tokens gets
 * the full count, TR_ERR_RANGE when it exceeds cap. */
tr_status tr_chat_tokenize(const tr_vocab *vocab, tr_chat_template t, const tr_chat_message *messages,
                           size_t n_messages, bool add_assistant, bool add_special, int32_t *tokens, int32_t cap,
                           int32_t *n_tokens);

/* ---------------------------------------------------------------- routers */

/* A router turns the SLM's state at one position into a confidence score in [0, 1] that the SLM's own token is
 * good enough. A token is routed to the LLM when score < tau. */
typedef struct tr_router tr_router;

typedef enum tr_policy {
    TR_POLICY_MLP = 0,   /* a trained router file (CITER): MLP over the final hidden state */
    TR_POLICY_MAXPROB,   /* the SLM's top-1 probability */
    TR_POLICY_MARGIN,    /* top-1 minus top-2 probability */
    TR_POLICY_ENTROPY,   /* 1 - entropy / ln(n_vocab) */
} tr_policy;

/* Extra inputs an MLP router may append to the hidden state, in this order (each read off the SLM's softmax at
 * temperature 1). */
typedef enum tr_router_feature {
    TR_FEATURE_MAXPROB = 1 << 0,       /* top-1 probability */
    TR_FEATURE_ENTROPY = 1 << 1,       /* entropy / ln(n_vocab) */
    TR_FEATURE_MARGIN = 1 << 2,        /* top-1 minus top-2 probability */
    TR_FEATURE_TOPK_LOGPROBS = 1 << 3, /* the k largest log-probabilities, descending, floored at -50 (k values) */
    TR_FEATURE_TOKEN_EMBEDDING = 1 << 4, /* the SLM's input embedding of its top-1 token (n_embd values, R2R);
                                            scoring needs the SLM: tr_router_set_slm */
} tr_router_feature;
#define TR_ROUTER_TOPK_MAX 64

const char *tr_policy_name(tr_policy p);
tr_status tr_policy_from_name(const char *name, tr_policy *out);

/* A training-free policy (not TR_POLICY_MLP). */
tr_status tr_router_create(tr_policy policy, tr_router **out);
/* Loads a router file (GGUF, general.architecture = "tokroute-router"). When slm is given, the router's input size
 * and vocabulary size are checked against it. */
tr_status tr_router_load(const char *path, const tr_model_info *slm, tr_router **out);
void tr_router_free(tr_router *router);
tr_policy tr_router_policy(const tr_router *router);
/* The threshold stored in a router file (policies: 0.5). */
float tr_router_default_tau(const tr_router *router);
/* Lets an MLP router split its larger layers over n_threads (0 = physical cores; 1 = the caller only, the
 * default). Policies ignore it. */
tr_status tr_router_set_threads(tr_router *router, int32_t n_threads);
/* Score of one position from the SLM's final hidden state [n_embd] and logits [n_vocab]. */
tr_status tr_router_score(tr_router *router, const float *hidden, int32_t n_embd, const float *logits,
                          int32_t n_vocab, float *score);

/* Describes an MLP router for writing: layer i maps sizes[i] inputs to sizes[i+1] outputs with weights
 * [sizes[i+1]][sizes[i]] row-major and biases [sizes[i+1]]; ReLU between layers, sigmoid at the end
 * (sizes[n_layers] must be 1). sizes[0] = n_embd + number of features. */
typedef struct tr_mlp_router_desc {
    int32_t n_layers;
    const int32_t *sizes;          /* n_layers + 1 */
    const float *const *weights;   /* n_layers */
    const float *const *biases;    /* n_layers */
    unsigned features;             /* tr_router_feature bits */
    float tau;                     /* default threshold */
    const char *slm_name;
    int32_t slm_n_embd, slm_n_vocab;
    int32_t topk;                  /* k of TR_FEATURE_TOPK_LOGPROBS (1..TR_ROUTER_TOPK_MAX; else unused) */
} tr_mlp_router_desc;

tr_status tr_router_write_mlp(const tr_mlp_router_desc *desc, const char *path);
/* Features a router reads (0 for policies) and the k of its top-k log-probs (0 when unused). */
unsigned tr_router_features(const tr_router *router);
int32_t tr_router_topk(const tr_router *router);
/* Number of inputs the features add after the hidden state (topk counts when TR_FEATURE_TOPK_LOGPROBS is set,
 * n_embd when TR_FEATURE_TOKEN_EMBEDDING is). */
int32_t tr_router_feature_width(unsigned features, int32_t topk, int32_t n_embd);
/* Gives a router the SLM whose token embeddings TR_FEATURE_TOKEN_EMBEDDING reads (the model must outlive the
 * router; checked against the router's sizes). Routers without that feature accept and ignore it. */
tr_status tr_router_set_slm(tr_router *router, const tr_model *slm);
/* Parses "maxprob,entropy,margin,topk,token_embedding" (also "topk_logprobs"; "none" = no feature) into bits. */
tr_status tr_router_features_parse(const char *list, unsigned *features);
/* Name of one feature bit ("maxprob", "entropy", "margin", "topk_logprobs", "token_embedding"), else NULL. */
const char *tr_router_feature_name(unsigned feature_bit);

/* ---------------------------------------------------------------- router training (CITER)
 *
 * Three steps, each a CLI command: tr_collect runs the ground truth through both models (teacher forced) and
 * stores, per predicted position, what a router may read and both models' answers (docs/train.md has the file
 * format); tr_train_router fits an MLP router file to it; tr_calibrate picks the threshold that routes a given
 * share. tr_train_gap measures on collected data how much of the SLM-to-LLM accuracy gap a router closes. */

typedef enum tr_data_format {
    TR_DATA_TEXT = 0,      /* plain text, examples separated by lines "<|endoftext|>" (TinyStories) */
    TR_DATA_LLM_SAMPLE,    /* no file: example i is sampled from the LLM (temperature 1, seed + i) from BOS */
    TR_DATA_CSQA,
    TR_DATA_GSM8K,
    TR_DATA_ARC,
    TR_DATA_MMLU,
} tr_data_format;
const char *tr_data_format_name(tr_data_format f);
tr_status tr_data_format_from_name(const char *name, tr_data_format *out);

/* Progress of a long call: done of total units (examples, or mini-batches of an epoch); return false to stop
 * (the call then returns TR_ERR_STATE with what was done kept: a collect resumes from there). */
typedef bool (*tr_train_progress_fn)(void *user, int64_t done, int64_t total);

typedef struct tr_collect_params {
    tr_data_format format;
    int32_t first, last;        /* examples [first, last); last < 0 = to the end of the file (default 0, -1) */
    int32_t max_tokens;         /* tokens per example, BOS included (default 256); QA: prompt + answer, only the
                                   answer's positions are stored (templates: src/eval/dataset.h) */
    int32_t topk;               /* top-k log-probs stored per position (default 16, 1..TR_ROUTER_TOPK_MAX) */
    int32_t rollouts;           /* K > 0: where both models are wrong, continue K tokens greedily with the SLM
                                   after each model's token and store how many match the ground truth (default 0) */
    int32_t n_threads;          /* per model context (0 = physical cores) */
    uint64_t seed;              /* TR_DATA_LLM_SAMPLE (default 1) */
    bool resume;                /* continue an interrupted collect in the same folder (default true); false: start
                                   over */
    /* Round 2 (CITER's iteration): with a router, each example's prefix after its first prompt_tokens tokens is
     * generated by the routed system (router at tau), and the reference at each position is the LLM's greedy
     * token (see docs/train.md). NULL = round 1, teacher forcing on the ground truth. */
    tr_router *router;
    float tau;
    int32_t prompt_tokens;      /* round 2 (default 16) */
    tr_train_progress_fn progress; /* per example */
    void *progress_user;
    tr_chat_template chat_template; /* question-answering formats: the question as a user turn, the target as the
                                       assistant's reply (default TR_CHAT_NONE: "question\nAnswer: target") */
} tr_collect_params;

typedef struct tr_collect_stats {
    int32_t n_examples;         /* examples in the folder after the call */
    int32_t n_resumed;          /* of those, found already collected */
    int64_t n_positions;        /* positions in the folder */
    int64_t slm_correct, llm_correct; /* of the positions this call collected: each model's top-1 is the reference */
} tr_collect_stats;

tr_collect_params tr_collect_default_params(void);
/* data_path is the dataset file (NULL for TR_DATA_LLM_SAMPLE); out_dir is created when missing. Both models must
 * share a vocabulary. */
tr_status tr_collect(const tr_model *slm, const tr_model *llm, const char *data_path, const char *out_dir,
                     const tr_collect_params *params, tr_collect_stats *stats);

/* Collected data, loaded into memory and validated (every size, id and value checked). Several folders (of the
 * same SLM) may be added together. */
typedef struct tr_train_data tr_train_data;
tr_status tr_train_data_open(const char *dir, tr_train_data **out);
tr_status tr_train_data_add(tr_train_data *data, const char *dir);
void tr_train_data_free(tr_train_data *data);

typedef struct tr_train_data_info {
    int32_t n_embd, n_vocab, topk, rollouts;
    int32_t n_examples;
    int64_t n_positions;
    int64_t slm_correct, llm_correct, both_wrong;
    const char *slm_name;
} tr_train_data_info;
tr_train_data_info tr_train_data_get_info(const tr_train_data *data);

/* How positions become labels (1 = the SLM's token is good enough, 0 = route). CITER's shortcut first: the SLM's
 * top-1 is the reference → 1; else the LLM's is → 0; positions where both are wrong are decided by the mode. */
typedef enum tr_label_mode {
    TR_LABEL_DROP = 0,   /* both wrong: left out (CITER's default) */
    TR_LABEL_SLM,        /* both wrong: 1 (routing cannot help there) */
    TR_LABEL_ROLLOUT,    /* both wrong: the token whose K-token SLM continuation matches more of the reference
                            (ties → SLM); needs a collect with rollouts */
    TR_LABEL_LLM,        /* both wrong: 0 */
    /* Soft targets (1 - g) / 2 from the accuracy g that routing the position gains, so the router ranks positions
     * by expected gain (no class weights): */
    TR_LABEL_GAIN,       /* g = [LLM right] - [SLM right], as realized (-1, 0 or 1) */
    TR_LABEL_EXPECTED,   /* g = p(l) - p(s), the gain in expectation when the reference is drawn from the LLM's
                            distribution p (l, s: the LLM's and the SLM's top-1) */
    TR_LABEL_MIXED,      /* g = the mean of the two */
} tr_label_mode;
const char *tr_label_mode_name(tr_label_mode m);
tr_status tr_label_mode_from_name(const char *name, tr_label_mode *out);

typedef struct tr_train_epoch {
    int32_t epoch;               /* 1-based */
    double train_loss, val_loss; /* class-weighted BCE */
    double val_accuracy;         /* at score 0.5 */
    bool best;                   /* the weights kept so far come from this epoch */
} tr_train_epoch;

typedef struct tr_train_params {
    unsigned features;           /* tr_router_feature bits (default maxprob|entropy|margin|topk) */
    int32_t topk;                /* k of the top-k feature (default 8; <= the data's) */
    int32_t hidden[8];           /* hidden layer widths; hidden[i] = 0 ends the list; all 0 = {2h, h}, h = n_embd;
                                    hidden[0] < 0 = no hidden layer (logistic regression) */
    tr_label_mode labels;        /* default TR_LABEL_DROP */
    int32_t epochs;              /* most epochs (default 30) */
    int32_t patience;            /* stop after this many epochs without a better validation loss (default 4) */
    int32_t batch;               /* mini-batch size (default 256) */
    float learning_rate;         /* Adam (default 1e-3; beta1 0.9, beta2 0.999) */
    float weight_decay;          /* L2 on weights (default 0) */
    float val_fraction;          /* examples held out for validation (default 0.1) */
    bool class_weights;          /* weight each class by n / (2 n_class) (default true) */
    uint64_t seed;               /* initialization, shuffling and the split (default 1) */
    int32_t n_threads;           /* 0 = physical cores; results do not depend on it */
    float tau;                   /* threshold written to the file (default 0.5) */
    tr_train_progress_fn progress; /* mini-batches of the current epoch */
    void *progress_user;
    bool (*on_epoch)(void *user, const tr_train_epoch *epoch); /* return false to stop early */
    void *epoch_user;
    const tr_model *slm;         /* the SLM the data was collected with: needed for TR_FEATURE_TOKEN_EMBEDDING */
} tr_train_params;

typedef struct tr_train_result {
    int64_t n_train, n_val;      /* labelled positions used */
    int64_t n_dropped;           /* positions without a label */
    double positive_share;       /* mean label of the training positions (the share of 1s for hard labels) */
    int32_t epochs_run, best_epoch;
    double best_val_loss, best_val_accuracy;
} tr_train_result;

tr_train_params tr_train_default_params(void);
/* Trains and writes the router file (standardization of the inputs folded into the first layer, so the file is
 * a plain MLP over the raw features). Deterministic for a seed. */
tr_status tr_train_router(const tr_train_data *data, const tr_train_params *params, const char *out_path,
                          tr_train_result *result);

/* A router's score on every collected position (MLP routers and the logit policies; in data order). scores gets
 * n_positions entries. A router reading token embeddings needs tr_router_set_slm first. */
tr_status tr_train_data_scores(const tr_train_data *data, tr_router *router, float *scores);
/* The threshold that routes target_routed of the data's positions (score < tau), and the share it routes. */
tr_status tr_calibrate(tr_router *router, const tr_train_data *data, double target_routed, float *tau,
                       double *routed);

/* Token accuracy when routing a share of the positions: the lowest-scoring target share goes to the LLM. */
typedef struct tr_gap_point {
    double target_routed, routed; /* asked and actual share */
    float tau;
    double accuracy;              /* routed choice vs the reference */
    double gap_closed;            /* (accuracy - slm) / (llm - slm) */
} tr_gap_point;
typedef struct tr_gap_report {
    double slm_accuracy, llm_accuracy, oracle_accuracy; /* oracle: best of both per position */
} tr_gap_report;
/* n targets in [0, 1]; out gets n points. router NULL = the oracle (routes first where only the LLM is right). */
tr_status tr_train_gap(const tr_train_data *data, tr_router *router, const double *targets, int32_t n,
                       tr_gap_point *out, tr_gap_report *report);

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

void tr_llm_backend_free(tr_llm_backend *b);
/* Adds a fixed delay to every call (simulating a network round trip). */
void tr_llm_backend_set_rtt(tr_llm_backend *b, double rtt_ms);
/* Restricts the LLM's choice to ids < n_allowed (a padded LLM vocabulary shared with a smaller SLM; 0 = no
 * restriction). Backends apply it where their API allows (argmax over the first ids, the server's n_vocab, a
 * logit bias); a returned id outside the range is an error (TR_ERR_RANGE) either way, never passed on. */
void tr_llm_backend_set_allowed(tr_llm_backend *b, int32_t n_allowed);
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
/* Test hook: adds a random extra delay in [0, max_ms) to every call (seeded), so tests can vary when answers
 * arrive relative to the routed loop's own work. 0 turns it off. */
void tr_llm_backend_set_jitter(tr_llm_backend *b, double max_ms, uint64_t seed);

tr_status tr_llm_next_token(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t *next);
/* The same, also giving the LLM's log-probability of the token (NAN when the backend does not report it). */
tr_status tr_llm_next_token_ex(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t *next,
                               float *logprob);
tr_llm_stats tr_llm_backend_stats(const tr_llm_backend *b);

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
    double lookahead_ms;    /* the LLM's time spent computing the lookahead (0 when unknown) */
} tr_llm_reply;
/* Copies tokens and starts the call. TR_ERR_STATE when a request is already in flight. */
tr_status tr_llm_start(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, int32_t lookahead);
/* The same with a draft tree to verify in the same call (NULL: none; backends that cannot verify answer none).
 * TR_ERR_ARG for a malformed draft. */
tr_status tr_llm_start_draft(tr_llm_backend *b, const int32_t *tokens, int32_t n_tokens, const tr_llm_draft *draft,
                             int32_t lookahead);
/* True when no request is in flight or its answer has arrived (tr_llm_finish will not block). */
bool tr_llm_ready(tr_llm_backend *b);
/* Waits for the request in flight and returns its status (also in reply->status). */
tr_status tr_llm_finish(tr_llm_backend *b, tr_llm_reply *reply);
const char *tr_llm_backend_name(const tr_llm_backend *b);

/* Writing your own backend: fill a tr_llm_backend_ops (static storage; it must outlive the backend) and wrap your
 * state with tr_llm_backend_create. The wrapper adds argument checks, timing, statistics, the simulated delay, the
 * allowed-id check and the circuit breaker, so next_token only computes. */
typedef struct tr_llm_call {
    const int32_t *tokens;   /* the whole sequence so far (prompt + generated) */
    int32_t n_tokens;
    int32_t n_allowed;       /* choose among ids < n_allowed (0: any) */
    tr_abort_fn abort_fn;    /* may be NULL */
    void *abort_user;
    int32_t id;              /* out: the next token */
    float logprob;           /* out: its log-probability (preset to NAN) */
    int64_t n_evaluated;     /* out: tokens the LLM evaluated for this call (preset to 0) */
    int32_t lookahead;       /* in: further greedy tokens wanted after id (0: none; at most TR_LOOKAHEAD_MAX) */
    int32_t *lookahead_ids;  /* out: room for lookahead ids */
    int32_t n_lookahead;     /* out: how many were given (preset to 0; may be fewer, or none) */
    int64_t bytes_sent, bytes_received; /* out: request and reply body bytes (remote backends) */
    const tr_llm_draft *draft; /* in: a draft tree to walk after id (NULL: none; see tr_llm_draft) */
    int32_t *verify_ids;     /* out: room for TR_DRAFT_BRANCHES_MAX answers along the walk */
    int32_t n_verify;        /* out: how many (preset to 0); lookahead then follows the last of them */
    double lookahead_ms;     /* out: time spent computing the lookahead (preset to 0: unknown) */
} tr_llm_call;

typedef struct tr_llm_backend_ops {
    const char *name;
    tr_status (*next_token)(void *impl, tr_llm_call *call);
    int32_t (*n_vocab)(void *impl);  /* optional (NULL: unknown) */
    void (*free)(void *impl);        /* optional */
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
    float tau;
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
     * flight the SLM keeps decoding up to speculate_depth tokens (or draft_span, if larger) on its own proposals;
     * tokens are shown only once confirmed, and a differing LLM answer rolls the SLM back. Each routed call also
     * asks for lookahead further greedy LLM tokens after its last answer; a later routed position whose prefix
     * still equals what a reply assumed takes its token from it without a call. The tokens are identical to the
     * synchronous loop's (greedy LLM, or one drawing from (seed, position)). */
    int32_t speculate_depth;       /* 0..1024 */
    int32_t lookahead;             /* 0..TR_LOOKAHEAD_MAX */
    /* Draft verification: a routed request carries a tree of up to draft_tokens SLM-drafted tokens covering the
     * next draft_span positions (the SLM's own continuation, plus draft_width - 1 alternatives at the requested
     * position and 1 at later routed ones), and the LLM answers every routed position along the branch it agrees
     * with in the same call. Drafting before a request leaves is capped at 30% of the observed round trip, so a
     * slow SLM drafts fewer tokens. 0: off. */
    int32_t draft_tokens;          /* 0..TR_DRAFT_TOKENS_MAX */
    int32_t draft_span;            /* 0..TR_DRAFT_TOKENS_MAX (0: draft_tokens) */
    int32_t draft_width;           /* 1..8 candidates at the requested position (0: 1) */
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
} tr_route_stats;

tr_route_params tr_route_default_params(void);
/* Generates after the prompt. Sampling (temperature > 0) draws at each position from a generator seeded by
 * (sampling.seed, position), so a conversation continued over several calls does not repeat its first draws. The SLM context is needed in every mode (its model's vocabulary detokenizes and
 * finds end-of-generation tokens); in llm mode it is not evaluated. router may be NULL outside joint mode, llm may
 * be NULL in slm mode. The SLM context is rolled back to the longest common prefix of its cache and the prompt
 * and extended from there, never re-prefilled. Generated ids go to out_tokens (up to cap; may be NULL). */
tr_status tr_route_generate(tr_context *slm, tr_router *router, tr_llm_backend *llm, const int32_t *prompt,
                            int32_t n_prompt, const tr_route_params *params, int32_t *out_tokens, int32_t cap,
                            tr_route_stats *stats);

/* ---------------------------------------------------------------- evaluation */

/* `tokroute eval`: what routing buys on a dataset, per policy and routed share.
 * (a) Token level, teacher-forced over each example's target text: at every position both models' top-1 against
 *     the ground truth and each policy's score (a trained router file when given, maxprob, margin, entropy, and
 *     random as a floor). For each target share, τ is the score below which that share of this data's positions
 *     lie (a group of equal scores is routed whole or not at all; the closest achievable share wins, the smaller on
 *     a draw); the routed choice is the LLM's top-1 where score < τ and the SLM's elsewhere. The oracle routes
 *     exactly where the SLM is wrong and the LLM right, up to the budget. "Gap closed" = (routed − SLM) / (LLM − SLM).
 * (b) Task level (csqa, gsm8k, arc, mmlu): routed greedy generation from each prompt at every policy's τ (and SLM
 *     and LLM alone), the answer extracted from the text and checked.
 * (c) Free-running text (format text): routed greedy generation from each story's first tokens, and the perplexity
 *     of what was generated under the LLM.
 * Prompt templates and answer extraction are documented in README.md ("Evaluation"). */
typedef struct tr_eval tr_eval;

#define TR_EVAL_MAX_TARGETS 16

typedef struct tr_eval_params {
    const char *data_path;       /* dataset file (required) */
    const char *format;          /* "text", "csqa", "gsm8k", "arc", "mmlu" (default "text") */
    int64_t first, end;          /* examples [first, end) by index; end -1 = to the end (default 0, -1) */
    const char *router_path;     /* trained router file (optional): the policy named "router" */
    double target_routed[TR_EVAL_MAX_TARGETS]; /* routed shares in [0, 1] (default 0.05, 0.1, 0.2) */
    int32_t n_targets;
    int32_t max_target_tokens;   /* teacher-forced target tokens per example, at most (default 255: with BOS, the
                                    256-token window of ../shared/models/figures.txt) */
    int32_t n_sweep;             /* τ grid points in [0, 1] for the routed-vs-τ curves (default 101, at least 2) */
    uint64_t seed;               /* the random policy's draws (default 1234) */
    bool generate;               /* run (b) or (c) as well (default true) */
    int32_t max_new_tokens;      /* tokens generated per example; 0 = by format (text 64, gsm8k 256, others 32) */
    int32_t prompt_tokens;       /* text: tokens of the story given as the prompt, BOS included (default 16) */
    tr_chat_template chat_template; /* question-answering prompts as a user turn (default TR_CHAT_NONE: plain) */
    int32_t n_threads;           /* per model context; 0 = physical cores (default 1: the demo models are tiny) */
    void (*progress)(void *user, const char *stage, double fraction); /* optional */
    void *progress_user;
} tr_eval_params;

/* One policy at one target share (token level). */
typedef struct tr_eval_point {
    double target_routed;  /* the share asked for */
    float tau;             /* route when score < tau (NAN for the oracle) */
    double routed;         /* share routed on this data */
    double accuracy;       /* top-1 accuracy of the routed choice */
    double gap_closed;     /* (accuracy - SLM) / (LLM - SLM); NAN when the models tie */
} tr_eval_point;

typedef struct tr_eval_summary {
    int64_t n_examples;    /* examples evaluated */
    int64_t n_positions;   /* teacher-forced target positions */
    double slm_accuracy, llm_accuracy;
    double best_of_both;   /* share where either model's top-1 is right */
    double teacher_s, generate_s; /* wall time of (a) and of (b)/(c) */
} tr_eval_summary;

tr_eval_params tr_eval_default_params(void);
/* Runs the evaluation. The models are only read (LLM: an embedded backend for generation); their vocabularies
 * must be compatible (tr_vocab_compatible); the LLM's choices are restricted to the shared ids. */
tr_status tr_eval_run(const tr_model *slm, const tr_model *llm, const tr_eval_params *params, tr_eval **out);
void tr_eval_free(tr_eval *eval);
const tr_eval_summary *tr_eval_get_summary(const tr_eval *eval);
/* Policies in order: "router" (when a router file was given), "maxprob", "margin", "entropy", "random", and
 * "oracle" last. */
int32_t tr_eval_n_policies(const tr_eval *eval);
const char *tr_eval_policy_name(const tr_eval *eval, int32_t policy);
tr_status tr_eval_get_point(const tr_eval *eval, int32_t policy, int32_t target, tr_eval_point *out);
/* Writes into dir (created when missing): eval.json (everything), tokens.csv (the points), sweep.csv (τ grid and
 * share grid per policy), generate.csv and latency.csv (when generation ran), accuracy_vs_routed.svg and
 * routed_vs_tau.svg. */
tr_status tr_eval_write(const tr_eval *eval, const char *dir);
/* The result as JSON, malloc'ed (free with free()): {"slm_accuracy", "llm_accuracy", "policies": {NAME: [{
 * "target_routed", "tau", "routed", "accuracy", "gap_closed"}]}, "oracle": [...], ...}; full adds the sweeps. */
tr_status tr_eval_to_json(const tr_eval *eval, bool full, char **out);

/* ---------------------------------------------------------------- LLM server */

/* `tokroute serve`: the LLM behind HTTP (libmicrohttpd), speaking the session protocol of docs/protocol.md
 * (POST /v1/route/next, DELETE /v1/route/sessions/{id}), an OpenAI-compatible POST /v1/completions, GET /health
 * and GET /metrics. Requests waiting together from different sessions are evaluated in one forward pass. */
typedef struct tr_server tr_server;

typedef struct tr_server_params {
    const char *host;           /* address to bind (default "127.0.0.1") */
    int port;                   /* 0 = any free port (tr_server_port says which) (default 8080) */
    const char *api_key;        /* Bearer key every request must carry; NULL or "" = none */
    int32_t n_threads;          /* threads of the one pool for forward passes; 0 = physical cores */
    int32_t max_sessions;       /* live sessions at most; the least recently used is evicted (default 256) */
    int64_t kv_budget_bytes;    /* KV memory of all sessions together (default 1 GiB) */
    int32_t session_idle_s;     /* a session unused this long is freed (default 600) */
    int32_t n_ctx;              /* longest session in tokens; 0 = min(training context, 4096) */
    int32_t max_batch_tokens;   /* most tokens in one forward pass over all sessions (default 512) */
    size_t max_body_bytes;      /* larger request bodies get 413 (default 1 MiB) */
    const char *tls_cert_path;  /* PEM certificate and key: both or neither; with them the server speaks HTTPS */
    const char *tls_key_path;
    bool batch;                 /* evaluate waiting sessions together (default true; false = one per pass) */
    bool log_requests;          /* log token ids and texts of requests (default false: counts and timings only) */
    void (*log)(void *user, const char *line); /* where log lines go (NULL = nowhere) */
    void *log_user;
} tr_server_params;

tr_server_params tr_server_default_params(void);
/* Starts listening and serving on background threads; model must outlive the server. */
tr_status tr_server_start(const tr_model *model, const tr_server_params *params, tr_server **out);
/* The port actually bound (useful with port 0). */
int tr_server_port(const tr_server *server);
/* Stops accepting, finishes or fails waiting requests, joins every thread. Idempotent. */
void tr_server_stop(tr_server *server);
void tr_server_free(tr_server *server);  /* stops first when still running */

/* ---------------------------------------------------------------- web UI */

/* `tokroute ui`: an HTTP server (libmicrohttpd, its own threads) serving one page compiled into the library and
 * the generation endpoints: POST /api/generate streams server-sent events (one per token, then a summary), POST
 * /api/cancel stops a generation, GET /api/info and /api/status describe the server. Each generation runs in its own
 * worker thread on a slot of a small pool (an SLM context, an LLM backend and a router per slot; the models are
 * shared read-only), so several tabs generate at once. A generation stops when its client disconnects. */
typedef struct tr_ui tr_ui;

/* Opens one LLM backend for a slot (called at most once per slot, from a worker thread). */
typedef tr_status (*tr_ui_backend_fn)(void *user, tr_llm_backend **out);

typedef struct tr_ui_params {
    const char *host;              /* address to listen on (default "127.0.0.1") */
    int32_t port;                  /* 0 = any free port (default 8080); tr_ui_port tells which */
    const tr_model *slm;           /* required; not owned */
    const char *slm_name;          /* shown on the page (default: the model's general.name) */
    tr_ui_backend_fn open_backend; /* NULL: no LLM (small_only only) */
    void *backend_user;
    const char *llm_name;          /* shown on the page */
    const char *router_path;       /* trained router file loaded once per slot; NULL: the page picks a policy */
    tr_chat_template chat_template;/* TR_CHAT_NONE: no chat toggle on the page */
    tr_context_params context;     /* for the SLM context of each slot */
    int32_t max_generations;       /* generations running at once (default 4); more get 503 */
    int32_t max_tokens;            /* upper bound for a request's max_tokens (default 1024) */
    float default_tau;             /* the slider's initial value (default: the router file's, else 0.5) */
    tr_llm_failure on_llm_failure; /* routed tokens when the LLM fails (default: the SLM's, marked "fallback") */
} tr_ui_params;

tr_ui_params tr_ui_default_params(void);
/* Starts listening (the server runs in its own threads) and returns at once. */
tr_status tr_ui_start(const tr_ui_params *params, tr_ui **out);
/* The port actually listened on (useful with port 0). */
int32_t tr_ui_port(const tr_ui *ui);
/* Generations running now. */
int32_t tr_ui_active(const tr_ui *ui);
/* Cancels running generations, waits for their threads, closes connections and frees everything. */
void tr_ui_stop(tr_ui *ui);

/* ---------------------------------------------------------------- synthetic models */

typedef struct tr_synth_params {
    const char *shape;   /* "smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen3-0.6b", "llama-3.2-1b", "tiny" */
    tr_type type;        /* type of the 2-D weights (default Q8_0) */
    bool mixed_q4_k_m;   /* mix types as a stock Q4_K_M file does (type must be Q4_K) */
    uint64_t seed;
    void (*progress)(void *user, double fraction);  /* optional */
    void *progress_user;
} tr_synth_params;

tr_synth_params tr_synth_default_params(void);
/* Names of the known shapes, NULL-terminated. */
const char *const *tr_synth_shapes(void);
/* Writes a model with random weights at a real model's exact shape and a dummy vocabulary. */
tr_status tr_synth_write(const tr_synth_params *params, const char *path);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TOKROUTE_H */
