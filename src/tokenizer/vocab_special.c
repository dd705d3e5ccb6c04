/* vocab_special.c — which tokens are special, as llama.cpp's llama_vocab::impl::load decides after reading the token
 * list: the end-of-turn, end-of-message and fill-in-the-middle tokens it recognises by text when the file names no id
 * (each such token is forced to control type), control tokens whose text says "unused" (marked unused too), the
 * end-of-generation list (more texts, each forced to control), two model-specific removals from that list, and the
 * special-token cache (control, user-defined and unknown tokens, longest text first) that tokenizing cuts out first.
 *
 * Forcing a type matters for tokenizing: without parse_special a control token's text stays plain text. Gemma 3's
 * "</s>" (an HTML tag there, user-defined in the file) is on llama.cpp's end-of-generation list, so it becomes control
 * and is tokenized as "</", "s", ">" unless special tokens are parsed. Lists as in llama.cpp of 2026-09. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

#define END_OF_LIST NULL

/* Recognised by text when tokenizer.ggml.<key> is absent; the first text of the list the vocabulary has wins. */
static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                        "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                                        "<end_of_utterance>", END_OF_LIST};
static const char *const eom_texts[] = {"<|eom_id|>", END_OF_LIST};
static const char *const fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                            "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                            "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", END_OF_LIST};
static const char *const fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                            "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
                                            "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", END_OF_LIST};
static const char *const fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                            "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                            "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", END_OF_LIST};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", END_OF_LIST};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                                            END_OF_LIST};
static const char *const fim_sep_texts[] = {"<|file_sep|>", END_OF_LIST};

/* Every token with one of these texts ends generation (and is forced to control type). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~[", END_OF_LIST};

static int32_t find_text(const tr_vocab *v, const char *s) { return strmap_get(&v->token_ids, s, strlen(s)); }

static bool in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return true;
    return false;
}

/* The id of the GGUF key if it names a token, else the first listed text the vocabulary has (forced to control). */
static int32_t special_by_key_or_text(const tr_gguf *g, tr_vocab *v, const char *key, const char *old_key,
                                      const char *const *texts) {
    int64_t x;
    int32_t id = -1;
    if (tr_gguf_get_int(g, key, &x) && x >= 0 && x < v->n_tokens) id = (int32_t)x;
    if (old_key && tr_gguf_get_int(g, old_key, &x) && x >= 0 && x < v->n_tokens) id = (int32_t)x;
    if (id >= 0) return id;
    for (; *texts && id < 0; texts++) id = find_text(v, *texts);
    if (id >= 0) v->attr[id] |= ATTR_CONTROL;
    return id;
}

static void eog_add(tr_vocab *v, int32_t id) {
    if (id < 0) return;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return;
    v->eog[v->n_eog++] = id;
}

static void eog_remove(tr_vocab *v, int32_t id) {
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            v->eog[i] = v->eog[--v->n_eog];
            return;
        }
}

/* The end-of-generation list, with llama.cpp's two corrections: gpt-oss and Solar Open end a message with <|end|>
 * but keep generating (their <|return|>/<|call|> or <|calls|>/<|flush|> end it), and Gemma 4's "</s>" is text. */
static tr_status build_eog(tr_vocab *v, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
    int32_t n_texts = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) n_texts += in_list(v->text[i], eog_texts);
    v->eog = malloc(((size_t)n_texts + 6) * sizeof *v->eog);
    if (!v->eog) return tr_fail(TR_ERR_NOMEM, "end-of-generation list");
    eog_add(v, fim_pad);
    eog_add(v, fim_rep);
    eog_add(v, fim_sep);
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (in_list(v->text[i], eog_texts)) {
            eog_add(v, i);
            v->attr[i] |= ATTR_CONTROL;
        }
    /* gpt-oss: these render as text, never as control tokens */
    static const char *const always_text[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t k = 0; k < sizeof always_text / sizeof *always_text; k++) {
        int32_t id = find_text(v, always_text[k]);
        if (id >= 0) v->attr[id] = ATTR_USER_DEFINED;
    }
    eog_add(v, v->eos);
    eog_add(v, v->eot);
    eog_add(v, v->eom);

    bool has_return = false, has_call = false, has_flush = false, has_tool_response = false;
    int32_t end_id = -1, s_id = -1;
    for (int32_t i = 0; i < v->n_eog; i++) {
        const char *t = v->text[v->eog[i]];
        has_return |= strcmp(t, "<|return|>") == 0;
        has_call |= strcmp(t, "<|call|>") == 0 || strcmp(t, "<|calls|>") == 0;
        has_flush |= strcmp(t, "<|flush|>") == 0;
        has_tool_response |= strcmp(t, "<|tool_response>") == 0;
        if (strcmp(t, "<|end|>") == 0) end_id = v->eog[i];
        if (strcmp(t, "</s>") == 0) s_id = v->eog[i];
    }
    if (end_id >= 0 && has_call && (has_return || has_flush)) {
        eog_remove(v, end_id);
        v->attr[end_id] = ATTR_USER_DEFINED;
    }
    if (s_id >= 0 && has_tool_response) {
        eog_remove(v, s_id);
        v->attr[s_id] = ATTR_NORMAL;
    }
    return TR_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Control, user-defined and unknown tokens, longest first; equal lengths by id, so the order is the same everywhere
 * (llama.cpp's std::sort leaves it unspecified). Sorted as keys (longest first, then id) with plain qsort. */
static tr_status build_special_cache(tr_vocab *v) {
    v->special = malloc((size_t)v->n_tokens * sizeof *v->special);
    uint64_t *keys = malloc((size_t)v->n_tokens * sizeof *keys);
    if (!v->special || !keys) {
        free(keys);
        return tr_fail(TR_ERR_NOMEM, "special token list");
    }
    size_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
            keys[n++] = (uint64_t)(UINT32_MAX - v->len[i]) << 32 | (uint32_t)i;
    qsort(keys, n, sizeof *keys, cmp_u64);
    for (size_t k = 0; k < n; k++) v->special[k] = (int32_t)(keys[k] & UINT32_MAX);
    v->n_special = (int32_t)n;
    free(keys);
    return TR_OK;
}

/* llama.cpp: Phi-3 models strip whitespace to the right of their special tokens, except <unk>, <s> and
 * <|endoftext|>, and also after </s>. Keyed on general.name. */
static void phi3_rstrip(const tr_gguf *g, tr_vocab *v) {
    const char *name = tr_gguf_get_str(g, "general.name", NULL);
    if (!name) return;
    char low[256];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof low; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32
                                                                                             : name[i]);
    low[i] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return;
    for (int32_t k = 0; k < v->n_special; k++) v->attr[v->special[k]] |= ATTR_RSTRIP;
    int32_t id = find_text(v, "</s>");
    if (id >= 0) v->attr[id] |= ATTR_RSTRIP;
    const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (int k = 0; k < 3; k++)
        if ((id = find_text(v, keep[k])) >= 0) v->attr[id] &= ~(uint32_t)ATTR_RSTRIP;
}

tr_status vocab_find_special(const tr_gguf *g, tr_vocab *v) {
    v->eot = special_by_key_or_text(g, v, "tokenizer.ggml.eot_token_id", NULL, eot_texts);
    v->eom = special_by_key_or_text(g, v, "tokenizer.ggml.eom_token_id", NULL, eom_texts);
    special_by_key_or_text(g, v, "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", fim_pre_texts);
    special_by_key_or_text(g, v, "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", fim_suf_texts);
    special_by_key_or_text(g, v, "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", fim_mid_texts);
    int32_t fim_pad = special_by_key_or_text(g, v, "tokenizer.ggml.fim_pad_token_id", NULL, fim_pad_texts);
    int32_t fim_rep = special_by_key_or_text(g, v, "tokenizer.ggml.fim_rep_token_id", NULL, fim_rep_texts);
    int32_t fim_sep = special_by_key_or_text(g, v, "tokenizer.ggml.fim_sep_token_id", NULL, fim_sep_texts);

    for (int32_t i = 0; i < v->n_tokens; i++) /* e.g. Gemma's <unused0>..<unused6241> */
        if ((v->attr[i] & ATTR_CONTROL) && strstr(v->text[i], "unused")) v->attr[i] |= ATTR_UNUSED;

    tr_status st = build_eog(v, fim_pad, fim_rep, fim_sep);
    if (st == TR_OK) st = build_special_cache(v);
    if (st == TR_OK) phi3_rstrip(g, v);
    return st;
}
