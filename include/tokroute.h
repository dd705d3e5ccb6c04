/* tokroute.h — the public C API of tokroute: token-level routing between a small model on the device and a
 * large model on a server.
 *
 * Conventions (as in llama.cpp and libcurl): opaque handles; parameter structs filled by *_default_params();
 * paired create/free (or load/free, open/close); every fallible call returns a tr_status and keeps a readable
 * message for the calling thread in tr_last_error(). The library never prints to stdout, never exits and never
 * aborts on input it was handed.
 *
 * The order follows a token's path: here status → tensor types → GGUF files → models and contexts → sampling →
 * vocabularies and tokenizing → chat templates → routers → synthetic models; then, in files this one includes,
 * tokroute/route.h (LLM backends → routed generation), tokroute/train.h (router training → evaluation) and
 * tokroute/serve.h (LLM server → web UI). Include this file only.
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
    TR_TYPE_IQ4_NL = 20,
    TR_TYPE_IQ4_XS = 23,
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
/* An array of GGUF bools (one byte each, 0 or 1), as llama.cpp's converter writes per-layer flags. */
tr_status tr_gguf_writer_set_arr_bool(tr_gguf_writer *w, const char *key, const bool *v, uint64_t n);
/* Copies every key of src (used to re-type a model while keeping its metadata). */
tr_status tr_gguf_writer_copy_kv(tr_gguf_writer *w, const tr_gguf *src);
/* data may be NULL: the fill callback given to tr_gguf_writer_write produces it. Returns the tensor's index. */
tr_status tr_gguf_writer_add_tensor(tr_gguf_writer *w, const char *name, tr_type type, int n_dims,
                                    const int64_t *ne, const void *data, int64_t *index);
tr_status tr_gguf_writer_write(tr_gguf_writer *w, const char *path, tr_gguf_fill_fn fill, void *user);

/* ---------------------------------------------------------------- models and contexts */

typedef struct tr_model tr_model;
typedef struct tr_context tr_context;

/* How a context keeps its K and V cache. Q8_0 takes about half the memory of F16 and computes what llama.cpp's
 * q8_0 cache does: blocks of 32 values along head_dim, each an F16 scale d = amax/127 and int8 values rounded to
 * nearest, K and V turned by llama.cpp's Walsh-Hadamard rotation first where head_dim is a multiple of 64. Heads
 * whose width is not a multiple of 32 use blocks of 16 or 8 values (head_dim must be a multiple of 8). */
typedef enum tr_kv_type {
    TR_KV_DEFAULT = 0, /* tr_context_params: the model's kv_type; tr_model_params: F16 */
    TR_KV_F16 = 1,
    TR_KV_F32 = 2,
    TR_KV_Q8_0 = 3,
} tr_kv_type;

/* "f16", "f32", "q8_0" ("default" for TR_KV_DEFAULT); NULL for a value outside the enum. */
const char *tr_kv_type_name(tr_kv_type type);

typedef struct tr_model_params {
    bool use_mmap;        /* map weights from the file instead of reading them (default true) */
    bool load_vocab;      /* also load the tokenizer vocabulary when the file has one (default true) */
    tr_kv_type kv_type;   /* KV cache of every context and server session on this model unless a context's params
                           * name another (default TR_KV_DEFAULT: F16) */
} tr_model_params;

typedef enum tr_arch {
    TR_ARCH_LLAMA = 0, TR_ARCH_QWEN2, TR_ARCH_QWEN3, TR_ARCH_QWEN35, TR_ARCH_GEMMA3, TR_ARCH_SMOLLM3, TR_ARCH_LFM2,
    TR_ARCH_GEMMA4
} tr_arch;

typedef struct tr_model_info {
    tr_arch arch;
    const char *arch_name;   /* "llama", "qwen2", "qwen3", "qwen35", "gemma3", "smollm3", "lfm2" */
    const char *name;        /* general.name or "" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rope_theta, norm_eps;
    bool tied_output;
    uint64_t n_params;
    uint64_t weight_bytes;
    tr_type main_type;       /* the most common 2-D weight type */
    /* Weight bytes one decoded token reads: weight_bytes with the row-lookup tables (token_embd when the output
     * matrix is separate, gemma4's per-layer token embeddings) counted one row each; decode's bandwidth is this
     * times tokens/s. */
    uint64_t token_read_bytes;
} tr_model_info;

tr_model_params tr_model_default_params(void);
tr_status tr_model_load(const char *path, const tr_model_params *params, tr_model **out);
void tr_model_free(tr_model *model);
const tr_model_info *tr_model_get_info(const tr_model *model);

typedef struct tr_context_params {
    int32_t n_ctx;        /* KV cache length in tokens; 0 = min(model's training context, 4096) */
    int32_t n_threads;    /* 0 = number of physical cores */
    int32_t n_batch;      /* most tokens evaluated in one forward chunk (default 256) */
    tr_kv_type kv_type;   /* K and V storage (default TR_KV_DEFAULT: the model's, F16 unless loaded with another) */
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
/* The cache's storage type (never TR_KV_DEFAULT) and its bytes: K and V for all n_ctx positions of every layer. */
tr_kv_type tr_context_kv_type(const tr_context *ctx);
size_t tr_context_kv_bytes(const tr_context *ctx);

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

/* Known templates: "chatml" (also Qwen2/3/3.5), "llama2", "llama3", "gemma" (Gemma 2/3: the system text opens the
 * first user turn, the assistant's role is "model"). */
typedef enum tr_chat_template {
    TR_CHAT_NONE = 0, TR_CHAT_CHATML, TR_CHAT_LLAMA2, TR_CHAT_LLAMA3, TR_CHAT_GEMMA, TR_CHAT_GEMMA4
} tr_chat_template;

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
    TR_FEATURE_INDUCTION = 1 << 5,     /* the input token's latest earlier occurrence (TR_ROUTER_INDUCTION_VALUES
                                          values, after the context positions): scoring needs the sequence's
                                          tokens: tr_router_tokens */
    TR_FEATURE_NGRAM = 1 << 6,         /* what a count model of the training data's token sequences says follows
                                          the last 1..6 tokens (TR_ROUTER_NGRAM_VALUES values, after induction's;
                                          the table is in the router file): needs tr_router_tokens */
} tr_router_feature;
#define TR_ROUTER_INDUCTION_VALUES 7
#define TR_ROUTER_NGRAM_VALUES 7
#define TR_ROUTER_TOPK_MAX 64
#define TR_ROUTER_CONTEXT_MAX 8

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
/* Score of position `position` of the current sequence (the token at that index, predicted from those before it,
 * as collect numbers positions) from the SLM's final hidden state [n_embd] and logits [n_vocab] there. A router
 * with context (tr_router_context > 0) also reads the inputs it kept of positions position-1 .. position-context
 * (scored or observed since tr_router_reset; zeros for those it does not hold, as training reads positions before
 * an example's first) and keeps this position's. Scoring a position again, after generation rolled back to it,
 * replaces what was kept, so a score equals what training computes for the same sequence whenever every
 * position before it was scored or observed, in any order, by the latest tokens. */
tr_status tr_router_score_at(tr_router *router, int64_t position, const float *hidden, int32_t n_embd,
                             const float *logits, int32_t n_vocab, float *score);
/* tr_router_score_at at the position after the latest one scored or observed (1 after a reset). */
tr_status tr_router_score(tr_router *router, const float *hidden, int32_t n_embd, const float *logits,
                          int32_t n_vocab, float *score);
/* Keeps a position's inputs without scoring it (a prompt's last positions, for a router with context; others
 * ignore it). */
tr_status tr_router_observe(tr_router *router, int64_t position, const float *hidden, int32_t n_embd,
                            const float *logits, int32_t n_vocab);
/* Forgets every position kept: call at each new sequence (a no-op for routers without context). */
void tr_router_reset(tr_router *router);
/* Tells a router the tokens of the sequence being scored: ids[q] is the token at position q (0: BOS, then the
 * prompt, then what was generated), n of them. A router with TR_FEATURE_INDUCTION or TR_FEATURE_NGRAM copies them
 * (scoring position p reads positions 0..p-1, so n must be at least p; give the tokens of the branch being scored
 * whenever the sequence rolls back or speculates); other routers ignore them. Call it before each score. */
tr_status tr_router_tokens(tr_router *router, const int32_t *ids, int64_t n);

/* An n-gram table (TR_FEATURE_NGRAM): built by the trainer, stored in the router file. */
typedef struct tr_ngram_table tr_ngram_table;

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
    int32_t context;               /* previous positions read (0..TR_ROUTER_CONTEXT_MAX; 0: this position only) */
    const tr_ngram_table *ngram;   /* the table TR_FEATURE_NGRAM reads (required with it; else unused) */
} tr_mlp_router_desc;

tr_status tr_router_write_mlp(const tr_mlp_router_desc *desc, const char *path);
/* Features a router reads (0 for policies) and the k of its top-k log-probs (0 when unused). */
unsigned tr_router_features(const tr_router *router);
int32_t tr_router_topk(const tr_router *router);
/* Number of inputs the features add after the hidden state (topk counts when TR_FEATURE_TOPK_LOGPROBS is set,
 * n_embd when TR_FEATURE_TOKEN_EMBEDDING is; TR_FEATURE_INDUCTION's and TR_FEATURE_NGRAM's values come last,
 * after the context positions, and are not counted here). */
int32_t tr_router_feature_width(unsigned features, int32_t topk, int32_t n_embd);
/* Inputs of one previous position (a router with context > 0 appends context of them after this position's
 * inputs, the nearest first): its hidden state and its logit features (token_embedding is not repeated). */
int32_t tr_router_context_width(unsigned features, int32_t topk, int32_t n_embd);
/* Every input of an MLP router: n_embd + tr_router_feature_width + context * tr_router_context_width, then
 * TR_ROUTER_INDUCTION_VALUES with TR_FEATURE_INDUCTION, then TR_ROUTER_NGRAM_VALUES with TR_FEATURE_NGRAM. */
int32_t tr_router_input_width(unsigned features, int32_t topk, int32_t n_embd, int32_t context);
/* Previous positions a router reads (0 for policies and routers without context). */
int32_t tr_router_context(const tr_router *router);
/* Gives a router the SLM whose token embeddings TR_FEATURE_TOKEN_EMBEDDING reads (the model must outlive the
 * router; checked against the router's sizes). Routers without that feature accept and ignore it. */
tr_status tr_router_set_slm(tr_router *router, const tr_model *slm);
/* Parses "maxprob,entropy,margin,topk,token_embedding,induction,ngram" (also "topk_logprobs"; "none" = no feature) into
 * bits. */
tr_status tr_router_features_parse(const char *list, unsigned *features);
/* Name of one feature bit ("maxprob", "entropy", "margin", "topk_logprobs", "token_embedding", "induction",
 * "ngram"), else NULL. */
const char *tr_router_feature_name(unsigned feature_bit);

/* ---------------------------------------------------------------- synthetic models */

typedef struct tr_synth_params {
    const char *shape;   /* one of tr_synth_shapes: "tiny", "smollm2-135m", "qwen3-0.6b", "gemma3-270m",
                          * "smollm3-3b" ... (each family's real sizes and small ones for tests) */
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

/* The rest of the API, in the token's order: LLM backends and routed generation; router training and evaluation;
 * the LLM server and the web UI. */
#include "tokroute/route.h"
#include "tokroute/train.h"
#include "tokroute/serve.h"

#endif /* TOKROUTE_H */
