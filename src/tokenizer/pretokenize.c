/* pretokenize.c — byte-level BPE pre-tokenizers: the split regexes for each tokenizer.ggml.pre value, run with
 * PCRE2 the way llama.cpp's unicode_regex_split runs them.
 *
 * A pre type is a list of regexes applied in sequence: each one splits every fragment left by the previous one,
 * and both the matches and the unmatched gaps between them become fragments (llama.cpp's unicode_regex_split_stl).
 * Regexes that use Unicode categories run, as in llama.cpp, on a "collapsed" text with one byte per codepoint:
 * ASCII stays itself, other codepoints become one byte per class (letter 0xD2, number 0xD1, punctuation 0xD3,
 * mark 0xD4, symbol 0xD5, whitespace 0x0B, anything else 0xD0) and \p{X} becomes a class of that byte plus the
 * ASCII members. That reproduces llama.cpp's results exactly, including its ASCII-only \s. Regexes without
 * categories run in UTF mode on the real text (non-ASCII whitespace again replaced by 0x0B). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tokenizer/tok_internal.h"

#define MAX_REGEX 6

/* ---------------------------------------------------------------- regexes per pre type (from llama-vocab.cpp) */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS_ANYCASE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTRACTIONS_ANYCASE "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS_ANYCASE "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen3.5: letters take their combining marks along, and marks are no longer "other" in the punctuation run */
#define RE_QWEN35 RE_CONTRACTIONS_ANYCASE "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK "[一-龥ࠀ-一가-퟿]+"
#define RE_PORO " ?[^(\\s|.,!?…。，、।۔،)]+"

typedef struct pre_def {
    const char *names;  /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[MAX_REGEX];
    bool ignore_merges, add_bos;
} pre_def;

static const pre_def pre_defs[] = {
    {"default|", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|pixtral|lfm2", {RE_LLAMA3}, true, true},
    {"dbrx|smaug-bpe", {RE_LLAMA3}, false, false},
    /* Some letters below are written as \x{..}: they are canonical singletons (Kelvin sign, Ohm sign, Greek oxia
     * forms) that text tools silently NFC-normalize into other codepoints. */
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄ"
      "ῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲"
      "𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", RE_CJK, "\\p{N}+"},
     false, false},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}, false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
    {"gpt-2|phi-2|mpt|olmo|jais|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|jina-v1-en|jina-v2-code|roberta-bpe",
     {RE_GPT2}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, false, false},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2", {RE_QWEN2}, false, false},
    {"qwen35", {RE_QWEN35}, false, false},
    {"gemma4", {"[^\\n]+|[\\n]+"}, false, true}, /* lines and runs of newlines; the merges do the rest */
    {"poro-chat|bloom|gpt3-finnish", {RE_PORO}, false, false},
    {"viking", {RE_PORO, "\\p{N}"}, false, false},
};

typedef struct compiled_re {
    pcre2_code *code;
    bool collapsed;  /* runs on the collapsed text (uses \p{..}) rather than on UTF-8 */
} compiled_re;

struct pretok {
    compiled_re re[MAX_REGEX];
    int n_re;
    bool need_collapse;
};

static bool name_in(const char *names, const char *pre) {
    size_t n = strlen(pre);
    for (const char *p = names;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && memcmp(p, pre, n) == 0) return true;
        if (!bar) return false;
        p = bar + 1;
    }
}

/* ---------------------------------------------------------------- collapsing */

static const struct {
    const char *prop;
    const char *members;  /* the collapsed byte, then the ASCII codepoints of the class */
} categories[] = {
    {"\\p{N}", "\\xD10-9"},
    {"\\p{L}", "\\xD2A-Za-z"},
    {"\\p{P}", "\\xD3!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", "\\xD4"},
    {"\\p{S}", "\\xD5\\$\\+<->\\^`\\|"},
};

static bool uses_categories(const char *re) {
    for (size_t i = 0; i < sizeof categories / sizeof *categories; i++)
        if (strstr(re, categories[i].prop)) return true;
    return false;
}

/* Rewrites \p{X} as a class over the collapsed bytes (inside [...] only the members are inserted). */
static char *collapse_regex(const char *re) {
    size_t n = strlen(re);
    char *out = malloc(n * 8 + 1);
    if (!out) return NULL;
    size_t o = 0;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '\\' && i + 1 < n && re[i + 1] != 'p') { /* copy escapes whole: \[ \] are not brackets */
            out[o++] = re[i++];
            out[o++] = re[i];
            continue;
        }
        if (re[i] == '[' && !inside) inside = true;
        else if (re[i] == ']' && inside) inside = false;
        bool replaced = false;
        for (size_t c = 0; c < sizeof categories / sizeof *categories && !replaced; c++) {
            size_t pl = strlen(categories[c].prop);
            if (strncmp(re + i, categories[c].prop, pl) != 0) continue;
            if (!inside) out[o++] = '[';
            size_t ml = strlen(categories[c].members);
            memcpy(out + o, categories[c].members, ml);
            o += ml;
            if (!inside) out[o++] = ']';
            i += pl - 1;
            replaced = true;
        }
        if (!replaced) out[o++] = re[i];
    }
    out[o] = '\0';
    return out;
}

static unsigned char collapse_cpt(uint32_t c) {
    if (c < 0x80) return (unsigned char)c;
    if (cpt_is_whitespace(c)) return 0x0B;
    switch (cpt_class(c)) {
    case CPT_NUMBER: return 0xD1;
    case CPT_LETTER: return 0xD2;
    case CPT_PUNCT: return 0xD3;
    case CPT_MARK: return 0xD4;
    case CPT_SYMBOL: return 0xD5;
    default: return 0xD0;
    }
}

/* ---------------------------------------------------------------- create / free */

tr_status pretok_create(const char *pre, pretok **out, bool *ignore_merges, bool *add_bos_default) {
    *out = NULL;
    const pre_def *def = NULL;
    for (size_t i = 0; i < sizeof pre_defs / sizeof *pre_defs && !def; i++)
        if (name_in(pre_defs[i].names, pre ? pre : "")) def = &pre_defs[i];
    if (!def)
        return tr_fail(TR_ERR_UNSUPPORTED, "unknown pre-tokenizer type: '%s' (tokenizer.ggml.pre)", pre ? pre : "");
    pretok *p = calloc(1, sizeof *p);
    if (!p) return tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
    for (int i = 0; i < MAX_REGEX && def->regex[i]; i++) {
        compiled_re *r = &p->re[p->n_re++];
        r->collapsed = uses_categories(def->regex[i]);
        char *pattern = r->collapsed ? collapse_regex(def->regex[i]) : strdup(def->regex[i]);
        if (!pattern) {
            pretok_free(p);
            return tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
        }
        int err;
        PCRE2_SIZE erroff;
        uint32_t opts = PCRE2_DOLLAR_ENDONLY | (r->collapsed ? 0 : PCRE2_UTF);
        r->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &err, &erroff, NULL);
        free(pattern);
        if (!r->code) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            pretok_free(p);
            return tr_fail(TR_ERR_UNSUPPORTED, "pre-tokenizer '%s': regex %d does not compile: %s", pre, i,
                           (const char *)msg);
        }
        pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is missing */
        p->need_collapse |= r->collapsed;
    }
    *ignore_merges = def->ignore_merges;
    *add_bos_default = def->add_bos;
    *out = p;
    return TR_OK;
}

void pretok_free(pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_re; i++) pcre2_code_free(p->re[i].code);
    free(p);
}

/* ---------------------------------------------------------------- splitting */

typedef struct bounds_buf {
    size_t *b;  /* fragment start offsets in codepoints, plus the final end */
    size_t n, cap;
} bounds_buf;

static bool push_bound(bounds_buf *bb, size_t x) {
    if (bb->n == bb->cap) {
        size_t cap = bb->cap ? bb->cap * 2 : 64;
        size_t *nb = realloc(bb->b, cap * sizeof *nb);
        if (!nb) return false;
        bb->b = nb;
        bb->cap = cap;
    }
    bb->b[bb->n++] = x;
    return true;
}

/* Splits each fragment [in[i], in[i+1]) with one regex. subj holds the subject bytes; byte_of[k] is the byte
 * offset of codepoint k (NULL when one byte per codepoint), cpt_of maps a byte offset back. */
static tr_status split_one(const compiled_re *r, const unsigned char *subj, const size_t *byte_of,
                           const size_t *cpt_of, const size_t *in, size_t n_in, bounds_buf *out,
                           pcre2_match_data *md) {
    out->n = 0;
    for (size_t f = 0; f + 1 < n_in; f++) {
        size_t a = in[f], b = in[f + 1];
        size_t ba = byte_of ? byte_of[a] : a, bb_ = byte_of ? byte_of[b] : b;
        if (!push_bound(out, a)) return tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
        size_t last = a;  /* end of the previous match, in codepoints */
        PCRE2_SIZE start = 0;
        while (start < bb_ - ba) {
            int rc = pcre2_match(r->code, subj + ba, bb_ - ba, start, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return tr_fail(TR_ERR_STATE, "pre-tokenizer: regex match failed (%d)", rc);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ba + ov[0], me = ba + ov[1];
            size_t cs = cpt_of ? cpt_of[ms] : ms, ce = cpt_of ? cpt_of[me] : me;
            if (ce == cs) { /* empty match: move on by one codepoint */
                if (cs >= b) break;
                size_t next = cs + 1;
                start = (byte_of ? byte_of[next] : next) - ba;
                continue;
            }
            if (cs > last && !push_bound(out, cs)) return tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
            if (ce < b && !push_bound(out, ce)) return tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
            last = ce;
            start = ov[1];
        }
    }
    if (!push_bound(out, in[n_in - 1])) return tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
    return TR_OK;
}

tr_status pretok_split(const pretok *p, const uint32_t *cpts, size_t n, size_t **bounds, size_t *n_words) {
    *bounds = NULL;
    *n_words = 0;
    if (n == 0) return TR_OK;
    tr_status st = TR_OK;
    unsigned char *collapsed = NULL, *utf8 = NULL;
    size_t *byte_of = NULL, *cpt_of = NULL;
    bounds_buf cur = {0}, next = {0};
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    if (!md || !push_bound(&cur, 0) || !push_bound(&cur, n)) {
        st = tr_fail(TR_ERR_NOMEM, "pre-tokenizer");
        goto done;
    }
    for (int i = 0; i < p->n_re && st == TR_OK; i++) {
        const compiled_re *r = &p->re[i];
        if (r->collapsed && !collapsed) {
            collapsed = malloc(n);
            if (!collapsed) { st = tr_fail(TR_ERR_NOMEM, "pre-tokenizer"); break; }
            for (size_t k = 0; k < n; k++) collapsed[k] = collapse_cpt(cpts[k]);
        }
        if (!r->collapsed && !utf8) {
            utf8 = malloc(n * 4 + 1);
            byte_of = malloc((n + 1) * sizeof *byte_of);
            cpt_of = malloc((n * 4 + 1) * sizeof *cpt_of);
            if (!utf8 || !byte_of || !cpt_of) { st = tr_fail(TR_ERR_NOMEM, "pre-tokenizer"); break; }
            size_t o = 0;
            for (size_t k = 0; k < n; k++) {
                byte_of[k] = o;
                uint32_t c = cpts[k] > 0x7F && cpt_is_whitespace(cpts[k]) ? 0x0B : cpts[k];
                if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD; /* keep the subject valid UTF-8 */
                int len = utf8_encode(c, (char *)utf8 + o);
                for (int j = 0; j < len; j++) cpt_of[o + (size_t)j] = k;
                o += (size_t)len;
            }
            byte_of[n] = o;
            cpt_of[o] = n;
        }
        if (r->collapsed) st = split_one(r, collapsed, NULL, NULL, cur.b, cur.n, &next, md);
        else st = split_one(r, utf8, byte_of, cpt_of, cur.b, cur.n, &next, md);
        bounds_buf t = cur;
        cur = next;
        next = t;
    }
    if (st == TR_OK) {
        *bounds = cur.b;
        *n_words = cur.n - 1;
        cur.b = NULL;
    }
done:
    free(cur.b);
    free(next.b);
    free(collapsed);
    free(utf8);
    free(byte_of);
    free(cpt_of);
    pcre2_match_data_free(md);
    return st;
}
