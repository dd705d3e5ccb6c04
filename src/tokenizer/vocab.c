/* vocab.c — loading a tokenizer from GGUF metadata (tokenizer.ggml.*) and the read-only accessors.
 *
 * The defaults and overrides follow llama.cpp's llama_vocab::impl::load: SPM ("llama") defaults to BOS 1, EOS 2,
 * UNK 0, add BOS, dummy space prefix; byte-level BPE ("gpt2") defaults to BOS = EOS = 11, no prefix; Gemma 4's
 * BPE over SentencePiece-style pieces ("gemma4") has no default ids and always adds BOS. Special ids
 * out of range are ignored. Which tokens are special beyond their declared types (end of turn, end of generation, the
 * special-token cache) is vocab_special.c. Token strings are copied: the vocabulary does not keep the GGUF open. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

static uint32_t attr_from_type(int64_t t) {
    switch (t) {
    case 1: return ATTR_NORMAL;
    case 2: return ATTR_UNKNOWN;
    case 3: return ATTR_CONTROL;
    case 4: return ATTR_USER_DEFINED;
    case 5: return ATTR_UNUSED;
    case 6: return ATTR_BYTE;
    default: return ATTR_UNDEFINED;
    }
}

static int32_t find_text(const tr_vocab *v, const char *s) { return strmap_get(&v->token_ids, s, strlen(s)); }

/* Reads an optional special id; values outside the vocabulary (e.g. 4294967295 for "none") keep *id. */
static void read_special(const tr_gguf *g, const char *key, const tr_vocab *v, int32_t *id) {
    if (*id >= v->n_tokens) *id = -1;
    int64_t x;
    if (tr_gguf_get_int(g, key, &x) && x >= 0 && x < v->n_tokens) *id = (int32_t)x;
}

static tr_status load_tokens(const tr_gguf *g, tr_vocab *v) {
    int64_t kt = tr_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (kt < 0 || tr_gguf_kv_type(g, kt) != TR_GGUF_ARRAY || tr_gguf_kv_array_type(g, kt) != TR_GGUF_STRING)
        return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.tokens missing or not a string array");
    uint64_t n = tr_gguf_kv_array_len(g, kt);
    if (n == 0 || n > INT32_MAX / 2) return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.tokens: bad count %llu",
                                                    (unsigned long long)n);
    v->n_tokens = (int32_t)n;

    int64_t ks = tr_gguf_find_kv(g, "tokenizer.ggml.scores");
    int64_t ky = tr_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (ks >= 0 && tr_gguf_kv_array_len(g, ks) < n) return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.scores too short");
    if (ky >= 0 && tr_gguf_kv_array_len(g, ky) < n)
        return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.token_type too short");

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 0;
        if (!tr_gguf_arr_str(g, kt, i, &len)) return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.tokens[%llu] unreadable",
                                                             (unsigned long long)i);
        total += (len ? len : 24) + 1;
    }
    v->text = malloc(n * sizeof *v->text);
    v->len = malloc(n * sizeof *v->len);
    v->score = calloc(n, sizeof *v->score);
    v->attr = malloc(n * sizeof *v->attr);
    v->arena = malloc(total);
    if (!v->text || !v->len || !v->score || !v->attr || !v->arena || !strmap_init(&v->token_ids, n))
        return tr_fail(TR_ERR_NOMEM, "vocabulary of %llu tokens", (unsigned long long)n);

    char *p = v->arena;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = tr_gguf_arr_str(g, kt, i, &len);
        v->text[i] = p;
        if (len == 0) {
            /* llama.cpp renames empty tokens so that the text → id map stays one-to-one */
            len = (size_t)sprintf(p, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            memcpy(p, s, len);
            p[len] = '\0';
        }
        v->len[i] = (uint32_t)len;
        p += len + 1;
        int32_t prev;
        if (!strmap_put(&v->token_ids, v->text[i], len, (int32_t)i, &prev)) return tr_fail(TR_ERR_NOMEM, "token map");
        if (prev >= 0)
            return tr_fail(TR_ERR_FORMAT, "duplicate token in vocabulary: '%s' has ids %d and %llu", v->text[i], prev,
                           (unsigned long long)i);
        double sc = 0;
        int64_t si;
        if (ks >= 0 && tr_gguf_arr_float(g, ks, i, &sc)) v->score[i] = (float)sc;
        else if (ks >= 0 && tr_gguf_arr_int(g, ks, i, &si)) v->score[i] = (float)si;
        int64_t ty = 1;
        v->attr[i] = ATTR_NORMAL;
        if (ky >= 0 && tr_gguf_arr_int(g, ky, i, &ty)) v->attr[i] = attr_from_type(ty);
    }
    return TR_OK;
}

static tr_status load_merges(const tr_gguf *g, tr_vocab *v) {
    int64_t km = tr_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (km < 0) return tr_fail(TR_ERR_FORMAT, "byte-level BPE vocabulary without tokenizer.ggml.merges");
    if (tr_gguf_kv_type(g, km) != TR_GGUF_ARRAY || tr_gguf_kv_array_type(g, km) != TR_GGUF_STRING)
        return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.merges is not a string array");
    uint64_t n = tr_gguf_kv_array_len(g, km);
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 0;
        if (!tr_gguf_arr_str(g, km, i, &len)) return tr_fail(TR_ERR_FORMAT, "tokenizer.ggml.merges unreadable");
        total += len + 2;
    }
    v->merge_arena = malloc(total + 1);
    if (!v->merge_arena || !strmap_init(&v->merge_ranks, n)) return tr_fail(TR_ERR_NOMEM, "%llu merges",
                                                                            (unsigned long long)n);
    char *p = v->merge_arena;
    for (uint64_t i = 0; i < n && i < INT32_MAX; i++) {
        size_t len = 0;
        const char *s = tr_gguf_arr_str(g, km, i, &len);
        /* llama.cpp splits "left right" at the first space after position 0; a line without one becomes the
         * empty pair, which no lookup can hit. The first occurrence of a pair keeps its rank. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        memcpy(p, s, len);
        p[len] = '\0';
        if (!strmap_put(&v->merge_ranks, p, len, (int32_t)i, NULL)) return tr_fail(TR_ERR_NOMEM, "merge map");
        p += len + 1;
    }
    return TR_OK;
}

static void find_byte_tokens(tr_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id = -1;
        if (v->spm_bpe) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = find_text(v, buf);
        } else if (v->kind == TR_VOCAB_SPM) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = find_text(v, buf);
            if (id < 0) { /* llama.cpp falls back to the byte itself as a one-character token */
                buf[0] = (char)b;
                id = strmap_get(&v->token_ids, buf, 1);
            }
        } else {
            int n = utf8_encode(gpt2_byte_to_cpt((uint8_t)b), buf);
            id = strmap_get(&v->token_ids, buf, (size_t)n);
        }
        v->byte_token[b] = id;
    }
}

tr_status tr_vocab_from_gguf(const tr_gguf *g, tr_vocab **out) {
    if (!g || !out) return tr_fail(TR_ERR_ARG, "tr_vocab_from_gguf: NULL argument");
    *out = NULL;
    const char *model = tr_gguf_get_str(g, "tokenizer.ggml.model", NULL);
    if (!model) return tr_fail(TR_ERR_FORMAT, "no tokenizer.ggml.model in file");
    tr_vocab *v = calloc(1, sizeof *v);
    if (!v) return tr_fail(TR_ERR_NOMEM, "vocabulary");
    const char *pre = tr_gguf_get_str(g, "tokenizer.ggml.pre", NULL);
    v->pre = strdup(pre ? pre : "");
    tr_status st = v->pre ? TR_OK : tr_fail(TR_ERR_NOMEM, "vocabulary");

    bool add_bos_default = false;
    if (st == TR_OK) {
        if (strcmp(model, "llama") == 0) {
            v->kind = TR_VOCAB_SPM;
            v->bos = 1, v->eos = 2, v->unk = 0;
            v->add_bos = true;
            v->add_space_prefix = true;
        } else if (strcmp(model, "gpt2") == 0) {
            v->kind = TR_VOCAB_BPE;
            v->bos = 11, v->eos = 11, v->unk = -1;
            /* a missing pre-tokenizer name means "default", as in llama.cpp */
            st = pretok_create(v->pre, &v->pretok, &v->ignore_merges, &add_bos_default);
            v->add_bos = add_bos_default;
        } else if (strcmp(model, "gemma4") == 0) { /* llama.cpp takes its pre-tokenizer whatever the file says */
            v->kind = TR_VOCAB_BPE;
            v->spm_bpe = true;
            v->bos = v->eos = v->unk = -1;
            st = pretok_create("gemma4", &v->pretok, &v->ignore_merges, &add_bos_default);
            v->add_bos = add_bos_default;
        } else {
            st = tr_fail(TR_ERR_UNSUPPORTED, "unsupported tokenizer model '%s' (known: llama, gpt2, gemma4)", model);
        }
    }
    v->eot = v->eom = v->pad = -1;
    if (st == TR_OK) st = load_tokens(g, v);
    if (st == TR_OK && v->kind == TR_VOCAB_BPE) st = load_merges(g, v);
    if (st == TR_OK) {
        bool b;
        if (tr_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) v->add_space_prefix = b;
        read_special(g, "tokenizer.ggml.bos_token_id", v, &v->bos);
        read_special(g, "tokenizer.ggml.eos_token_id", v, &v->eos);
        read_special(g, "tokenizer.ggml.unknown_token_id", v, &v->unk);
        read_special(g, "tokenizer.ggml.padding_token_id", v, &v->pad);
        if (tr_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) v->add_bos = b;
        if (tr_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) v->add_eos = b;
        if (v->spm_bpe) v->add_bos = true; /* llama.cpp overrides a false add_bos_token for Gemma 4 */
        if (v->add_bos && v->bos < 0) st = tr_fail(TR_ERR_FORMAT, "add_bos_token is true, but bos_token_id is not set");
        else if (v->add_eos && v->eos < 0)
            st = tr_fail(TR_ERR_FORMAT, "add_eos_token is true, but eos_token_id is not set");
    }
    if (st == TR_OK) {
        find_byte_tokens(v);
        st = vocab_find_special(g, v);
    }
    if (st != TR_OK) {
        tr_vocab_free(v);
        return st;
    }
    *out = v;
    return TR_OK;
}

tr_status tr_vocab_load(const char *path, tr_vocab **out) {
    if (!path || !out) return tr_fail(TR_ERR_ARG, "tr_vocab_load: NULL argument");
    tr_gguf *g = NULL;
    tr_status st = tr_gguf_open(path, &g);
    if (st != TR_OK) return st;
    st = tr_vocab_from_gguf(g, out);
    tr_gguf_close(g);
    if (st != TR_OK) return tr_fail_prefix(st, "%s", path);
    return TR_OK;
}

void tr_vocab_free(tr_vocab *v) {
    if (!v) return;
    free(v->pre);
    free(v->text);
    free(v->len);
    free(v->score);
    free(v->attr);
    free(v->arena);
    strmap_free(&v->token_ids);
    strmap_free(&v->merge_ranks);
    free(v->merge_arena);
    free(v->eog);
    free(v->special);
    pretok_free(v->pretok);
    free(v);
}

tr_vocab_kind tr_vocab_get_kind(const tr_vocab *v) { return v ? v->kind : TR_VOCAB_SPM; }
const char *tr_vocab_pre(const tr_vocab *v) { return v ? v->pre : ""; }
int32_t tr_vocab_n_tokens(const tr_vocab *v) { return v ? v->n_tokens : 0; }
int32_t tr_vocab_bos(const tr_vocab *v) { return v ? v->bos : -1; }
int32_t tr_vocab_eos(const tr_vocab *v) { return v ? v->eos : -1; }
int32_t tr_vocab_eot(const tr_vocab *v) { return v ? v->eot : -1; }
bool tr_vocab_add_bos(const tr_vocab *v) { return v && v->add_bos; }
bool tr_vocab_add_eos(const tr_vocab *v) { return v && v->add_eos; }

bool tr_vocab_is_eog(const tr_vocab *v, int32_t id) {
    if (!v || id < 0) return false;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return true;
    return false;
}

const char *tr_vocab_token_text(const tr_vocab *v, int32_t id) {
    return v && id >= 0 && id < v->n_tokens ? v->text[id] : NULL;
}
