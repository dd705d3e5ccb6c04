/* tok_internal.h — the loaded vocabulary and the pieces the tokenizer stages share: a string→id hash map, token
 * attributes (llama.cpp's numbering), Unicode helpers, the pre-tokenizer and the two merge algorithms.
 *
 * Everything here mirrors what llama.cpp (src/llama-vocab.cpp, src/unicode.cpp) does, because token ids must match
 * it exactly; where we follow one of its quirks the comment at the use says so. */
#ifndef TR_TOK_INTERNAL_H
#define TR_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

/* Token attributes, as llama.cpp's llama_token_attr bits. GGUF tokenizer.ggml.token_type values map onto them:
 * 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (0 undefined). */
enum {
    ATTR_UNDEFINED = 0,
    ATTR_UNKNOWN = 1 << 0,
    ATTR_UNUSED = 1 << 1,
    ATTR_NORMAL = 1 << 2,
    ATTR_CONTROL = 1 << 3,
    ATTR_USER_DEFINED = 1 << 4,
    ATTR_BYTE = 1 << 5,
    ATTR_LSTRIP = 1 << 7,
    ATTR_RSTRIP = 1 << 8,
};

/* ---------------------------------------------------------------- string → int32 map (open addressing) */

typedef struct strmap_slot {
    const char *key;  /* NULL = empty; points into storage owned elsewhere */
    uint32_t len;
    uint32_t hash;
    int32_t value;
} strmap_slot;

typedef struct strmap {
    strmap_slot *slots;
    uint32_t cap;  /* power of two */
    uint32_t n;
} strmap;

uint32_t strmap_hash(const char *s, size_t len);
bool strmap_init(strmap *m, size_t expected);
void strmap_free(strmap *m);
/* Inserts key→value unless the key exists; returns false only on allocation failure. *existing (optional) gets
 * the value already stored, or -1 when the key was new. */
bool strmap_put(strmap *m, const char *key, size_t len, int32_t value, int32_t *existing);
/* The value for key, or -1. */
int32_t strmap_get(const strmap *m, const char *key, size_t len);
/* The value for the key "a b" (a, one space, b) without building it, or -1. */
int32_t strmap_get_pair(const strmap *m, const char *a, size_t alen, const char *b, size_t blen);

/* ---------------------------------------------------------------- Unicode helpers (unicode.c) */

/* Codepoint classes as llama.cpp's unicode_cpt_flags sees them. */
enum {
    CPT_UNDEFINED = 0,  /* unassigned (Cn) */
    CPT_NUMBER,
    CPT_LETTER,
    CPT_PUNCT,
    CPT_MARK,
    CPT_SYMBOL,
    CPT_OTHER,          /* separators that are not White_Space, controls, format, private use */
};
int cpt_class(uint32_t cpt);
bool cpt_is_whitespace(uint32_t cpt);

/* Byte length of the UTF-8 sequence a lead byte announces (llama.cpp's unicode_len_utf8: 1 for stray bytes). */
size_t utf8_len_from_lead(unsigned char c);
/* Decodes len bytes into codepoints; an invalid sequence consumes one byte and yields U+FFFD (as llama.cpp).
 * cpts must hold len entries; returns the count. */
size_t utf8_decode_all(const char *s, size_t len, uint32_t *cpts);
/* Encodes one codepoint; returns bytes written (1..4) into out[4]. */
int utf8_encode(uint32_t cpt, char *out);

/* GPT-2 byte-level mapping: every byte has a printable codepoint (bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to
 * themselves, the other 68 to U+0100 onwards in byte order). */
uint32_t gpt2_byte_to_cpt(uint8_t b);
/* The byte for a mapped codepoint, or -1 when cpt is not one of the 256. */
int gpt2_cpt_to_byte(uint32_t cpt);

/* ---------------------------------------------------------------- the vocabulary */

typedef struct pretok pretok;  /* compiled pre-tokenizer (pretokenize.c) */

struct tr_vocab {
    tr_vocab_kind kind;
    char *pre;  /* tokenizer.ggml.pre as given, or "" */

    int32_t n_tokens;
    char **text;      /* NUL-terminated, into arena */
    uint32_t *len;
    float *score;
    uint32_t *attr;
    char *arena;
    strmap token_ids;

    /* Byte-level BPE: merges keyed by "left right", value = rank (position in tokenizer.ggml.merges). */
    strmap merge_ranks;
    char *merge_arena;

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos;
    bool add_space_prefix;  /* SPM dummy prefix (tokenizer.ggml.add_space_prefix, default true) */
    bool ignore_merges;     /* llama3-style BPE: a pre-token that is a whole token is taken as is */
    bool spm_bpe;           /* gemma4 ("gemma4" model): BPE merges on raw UTF-8 with spaces escaped to U+2581, bytes
                             * as <0xNN> tokens, a run of newlines taken whole when it is a token (llama.cpp's
                             * LLAMA_VOCAB_PRE_TYPE_GEMMA4) */

    int32_t *eog;
    int32_t n_eog;

    /* Control, user-defined and unknown tokens, longest text first (llama.cpp's cache_special_tokens). */
    int32_t *special;
    int32_t n_special;

    int32_t byte_token[256];  /* token for a raw byte: SPM <0xNN>, BPE the mapped character; -1 if none */

    pretok *pretok;  /* BPE only */
};

/* After the token list and the declared ids are read: end-of-turn/end-of-generation tokens, the types llama.cpp forces
 * by text, and the special-token cache (vocab_special.c). */
tr_status vocab_find_special(const tr_gguf *g, tr_vocab *v);

/* ---------------------------------------------------------------- stages */

/* tr_tokenize with control/unknown tokens recognized only where special_ok[i] is set for every byte of their text
 * (NULL: as params->parse_special says). Chat prompts use it so markers come from the template, never from a
 * message (chat.c). */
tr_status tokenize_masked(const tr_vocab *v, const char *text, size_t len, const tr_tokenize_params *params,
                          const uint8_t *special_ok, int32_t *tokens, int32_t cap, int32_t *n_tokens);

/* Growable id buffer used while tokenizing. */
typedef struct idbuf {
    int32_t *ids;
    size_t n, cap;
} idbuf;
bool idbuf_push(idbuf *b, int32_t id);

/* Merge queue shared by both algorithms: the entry with the smallest (priority, left) comes out first. SPM uses
 * priority = -score (highest score first), BPE uses the merge rank. Ties go to the leftmost pair. */
typedef struct merge_cand {
    double priority;
    int32_t left, right;
    uint32_t size;  /* bytes of left + right when queued: a changed size means the entry is stale */
} merge_cand;
typedef struct merge_heap {
    merge_cand *a;
    size_t n, cap;
} merge_heap;
bool heap_push(merge_heap *h, merge_cand c);
merge_cand heap_pop(merge_heap *h);

/* A symbol during merging: a byte span of the text in a doubly linked list. */
typedef struct merge_sym {
    int32_t prev, next;
    uint32_t start, n;  /* n = 0 once merged into its left neighbour */
} merge_sym;

/* SentencePiece BPE over already-escaped text (spaces as U+2581). */
tr_status spm_tokenize(const tr_vocab *v, const char *text, size_t len, idbuf *out);

/* Byte-level BPE over one raw text fragment: pre-tokenize, byte-encode, merge. */
tr_status bpe_tokenize(const tr_vocab *v, const char *text, size_t len, idbuf *out);

/* Pre-tokenizer for a tokenizer.ggml.pre value ("" = default). Fails with TR_ERR_UNSUPPORTED naming an unknown
 * value. *ignore_merges / *add_bos_default report the flags llama.cpp ties to that pre type. */
tr_status pretok_create(const char *pre, pretok **out, bool *ignore_merges, bool *add_bos_default);
void pretok_free(pretok *p);
/* Splits cpts[0..n) into words; word i spans cpts [bounds[i], bounds[i+1]). *bounds is malloc'ed. */
tr_status pretok_split(const pretok *p, const uint32_t *cpts, size_t n, size_t **bounds, size_t *n_words);

#endif /* TR_TOK_INTERNAL_H */
