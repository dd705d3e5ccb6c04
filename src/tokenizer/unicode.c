/* unicode.c — UTF-8 decoding as llama.cpp does it, codepoint classes (letter, number, punctuation, ...) and the
 * GPT-2 byte↔codepoint mapping.
 *
 * Classes come from PCRE2's Unicode tables (\p{L}, \p{N}, \p{P}, \p{M}, \p{S}, \p{Cn}) rather than a table of our
 * own: the Basic Multilingual Plane is classified once into a 64 KiB table, higher planes on demand. Whitespace is
 * Unicode's White_Space property (PropList.txt), the set llama.cpp's unicode_set_whitespace holds. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---------------------------------------------------------------- UTF-8 */

size_t utf8_len_from_lead(unsigned char c) {
    static const unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* One codepoint at s[*off]; mirrors unicode_cpt_from_utf8: the continuation bytes are checked, overlong forms and
 * surrogates are not rejected. Returns false for an invalid sequence. */
static bool decode_one(const unsigned char *s, size_t len, size_t *off, uint32_t *cpt) {
    size_t i = *off;
    unsigned char c = s[i];
    if (!(c & 0x80)) { *cpt = c; *off = i + 1; return true; }
    if (!(c & 0x40)) return false;
    if (!(c & 0x20)) {
        if (i + 1 >= len || (s[i + 1] & 0xC0) != 0x80) return false;
        *cpt = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
        *off = i + 2;
        return true;
    }
    if (!(c & 0x10)) {
        if (i + 2 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return false;
        *cpt = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
        *off = i + 3;
        return true;
    }
    if (!(c & 0x08)) {
        if (i + 3 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
            return false;
        *cpt = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
               ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        *off = i + 4;
        return true;
    }
    return false;
}

size_t utf8_decode_all(const char *s, size_t len, uint32_t *cpts) {
    const unsigned char *u = (const unsigned char *)s;
    size_t off = 0, n = 0;
    while (off < len) {
        uint32_t c;
        if (decode_one(u, len, &off, &c)) {
            cpts[n++] = c;
        } else {
            off++;
            cpts[n++] = 0xFFFD;
        }
    }
    return n;
}

int utf8_encode(uint32_t cpt, char *out) {
    if (cpt <= 0x7F) { out[0] = (char)cpt; return 1; }
    if (cpt <= 0x7FF) {
        out[0] = (char)(0xC0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt <= 0xFFFF) {
        out[0] = (char)(0xE0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    if (cpt > 0x10FFFF) cpt = 0xFFFD;
    if (cpt <= 0xFFFF) return utf8_encode(cpt, out);
    out[0] = (char)(0xF0 | (cpt >> 18));
    out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cpt & 0x3F));
    return 4;
}

/* ---------------------------------------------------------------- classes */

bool cpt_is_whitespace(uint32_t c) {
    /* Unicode White_Space: TAB..CR, SPACE, NEL, NBSP, OGHAM SPACE MARK, EN QUAD..HAIR SPACE, LINE SEPARATOR,
     * PARAGRAPH SEPARATOR, NARROW NBSP, MEDIUM MATHEMATICAL SPACE, IDEOGRAPHIC SPACE. */
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static pcre2_code *class_re;
static unsigned char bmp_class[0x10000];
static pthread_once_t class_once = PTHREAD_ONCE_INIT;

/* Anchored, one codepoint: which of the groups matched tells the class. */
static int classify_with_pcre(uint32_t cpt, pcre2_match_data *md) {
    if (!class_re || (cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) return CPT_OTHER;
    char buf[4];
    int n = utf8_encode(cpt, buf);
    int rc = pcre2_match(class_re, (PCRE2_SPTR)buf, (PCRE2_SIZE)n, 0, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc < 2) return CPT_OTHER;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    for (int g = 1; g < rc; g++)
        if (ov[2 * g] != PCRE2_UNSET) {
            static const int by_group[] = {0, CPT_LETTER, CPT_NUMBER, CPT_PUNCT, CPT_MARK, CPT_SYMBOL, CPT_UNDEFINED};
            return by_group[g];
        }
    return CPT_OTHER;
}

static void build_classes(void) {
    int err;
    PCRE2_SIZE erroff;
    class_re = pcre2_compile((PCRE2_SPTR) "(\\p{L})|(\\p{N})|(\\p{P})|(\\p{M})|(\\p{S})|(\\p{Cn})",
                             PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &erroff, NULL);
    if (!class_re) return;
    pcre2_jit_compile(class_re, PCRE2_JIT_COMPLETE);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(class_re, NULL);
    if (!md) return;
    for (uint32_t c = 0; c < 0x10000; c++) bmp_class[c] = (unsigned char)classify_with_pcre(c, md);
    pcre2_match_data_free(md);
}

int cpt_class(uint32_t cpt) {
    pthread_once(&class_once, build_classes);
    if (cpt < 0x10000) return bmp_class[cpt];
    pcre2_match_data *md = class_re ? pcre2_match_data_create_from_pattern(class_re, NULL) : NULL;
    if (!md) return CPT_OTHER;
    int c = classify_with_pcre(cpt, md);
    pcre2_match_data_free(md);
    return c;
}

/* ---------------------------------------------------------------- GPT-2 bytes */

static uint32_t byte_cpt[256];
static int16_t cpt_byte[324];  /* mapped codepoints are all below 0x144 */
static pthread_once_t gpt2_once = PTHREAD_ONCE_INIT;

static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void build_gpt2(void) {
    int next = 0;
    for (int i = 0; i < 324; i++) cpt_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        byte_cpt[b] = byte_is_printable(b) ? (uint32_t)b : (uint32_t)(256 + next++);
        cpt_byte[byte_cpt[b]] = (int16_t)b;
    }
}

uint32_t gpt2_byte_to_cpt(uint8_t b) {
    pthread_once(&gpt2_once, build_gpt2);
    return byte_cpt[b];
}

int gpt2_cpt_to_byte(uint32_t cpt) {
    pthread_once(&gpt2_once, build_gpt2);
    return cpt < 324 ? cpt_byte[cpt] : -1;
}
