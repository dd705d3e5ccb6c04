/* vocab_compat.c — whether an SLM and an LLM can route token by token: the LLM must understand every id the SLM
 * can produce as the same text, and every id the LLM may produce must mean something to the SLM. Real pairs differ
 * only by padding: Qwen2.5-0.5B's GGUF has 151,936 entries, 7B's 152,064, the extra ones "[PAD151936]"... of
 * type UNUSED (the converter pads the embedding matrix). Gemma 3 1B's has 262,144, 27B's 262,208: <image_soft_token>
 * (control, an image placeholder no text tokenizes to) and padding. Such pairs route with the LLM restricted to the
 * shared ids. */
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

const char *tr_vocab_match_name(tr_vocab_match m) {
    switch (m) {
    case TR_VOCAB_SAME: return "same";
    case TR_VOCAB_PADDED: return "padded";
    case TR_VOCAB_SIZE_ONLY: return "size-only";
    }
    return "?";
}

static bool is_padding(const tr_vocab *v, int32_t id) {
    const char *t = v->text[id];
    return (v->attr[id] & ATTR_UNUSED) || strncmp(t, "[PAD", 4) == 0 || strncmp(t, "<|PAD", 5) == 0 ||
           strncmp(t, "<pad", 4) == 0;
}

tr_status tr_vocab_compatible(const tr_vocab *slm, const tr_vocab *llm, tr_vocab_match *match, int32_t *n_shared) {
    if (!slm || !llm) return tr_fail(TR_ERR_ARG, "tr_vocab_compatible: NULL vocabulary");
    if (slm->kind != llm->kind)
        return tr_fail(TR_ERR_UNSUPPORTED, "the SLM and the LLM use different tokenizer kinds (%s vs %s)",
                       slm->kind == TR_VOCAB_SPM ? "SentencePiece" : "byte-level BPE",
                       llm->kind == TR_VOCAB_SPM ? "SentencePiece" : "byte-level BPE");
    if (slm->n_tokens > llm->n_tokens)
        return tr_fail(TR_ERR_UNSUPPORTED, "the SLM's vocabulary (%d) is larger than the LLM's (%d)", slm->n_tokens,
                       llm->n_tokens);
    for (int32_t i = 0; i < slm->n_tokens; i++)
        if (slm->len[i] != llm->len[i] || memcmp(slm->text[i], llm->text[i], slm->len[i]) != 0)
            return tr_fail(TR_ERR_UNSUPPORTED, "the SLM and the LLM do not share a tokenizer: token %d is '%s' vs '%s'",
                           i, slm->text[i], llm->text[i]);
    for (int32_t i = slm->n_tokens; i < llm->n_tokens; i++)
        if (!is_padding(llm, i) && !(llm->attr[i] & ATTR_CONTROL))
            return tr_fail(TR_ERR_UNSUPPORTED,
                           "the LLM's vocabulary has %d more entries than the SLM's and token %d ('%s') is not padding "
                           "(nor a control token)", llm->n_tokens - slm->n_tokens, i, llm->text[i]);
    if (match) *match = slm->n_tokens == llm->n_tokens ? TR_VOCAB_SAME : TR_VOCAB_PADDED;
    if (n_shared) *n_shared = slm->n_tokens;
    return TR_OK;
}

tr_status tr_vocab_compatible_size(const tr_vocab *slm, int32_t llm_n_vocab, tr_vocab_match *match,
                                   int32_t *n_shared) {
    if (!slm) return tr_fail(TR_ERR_ARG, "tr_vocab_compatible_size: NULL vocabulary");
    if (llm_n_vocab > 0 && llm_n_vocab < slm->n_tokens)
        return tr_fail(TR_ERR_UNSUPPORTED, "the LLM's vocabulary (%d) is smaller than the SLM's (%d)", llm_n_vocab,
                       slm->n_tokens);
    if (match) *match = TR_VOCAB_SIZE_ONLY;
    if (n_shared) *n_shared = slm->n_tokens;
    return TR_OK;
}
