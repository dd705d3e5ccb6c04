/* answer.c — the answer a generated text gives to a dataset question, and whether it is right.
 *
 * Letters (csqa/arc/mmlu): the first "answer is X" / "answer: X" / "answer is (X)" (case-insensitive "answer") with X
 * among the choices' letters, else a letter opening the text ("B", "B.", "(B)", "B)"). A capital letter followed by
 * a space is taken only inside parentheses, so "A dog ..." is not read as choice A. Numbers (gsm8k): the number
 * after "####" when there is one (the format the template asks for), else the last number in the text; commas,
 * "$" and a trailing "." are dropped, and answers compare as numbers ("18.00" equals "18"). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "eval/dataset.h"

static bool valid_letter(char c, int32_t n_choices) {
    int32_t n = n_choices > 0 && n_choices <= DATASET_MAX_CHOICES ? n_choices : DATASET_MAX_CHOICES;
    return c >= 'A' && c < 'A' + n;
}

/* A letter at p (after optional spaces and "("): returns it or 0. */
static char letter_at(const char *p, int32_t n_choices) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '*') p++;
    bool paren = *p == '(';
    if (paren) p++;
    char c = p[0];
    if (!valid_letter(c, n_choices)) return 0; /* also stops at the terminating NUL */
    char next = p[1];
    if (next == '\0' || next == '.' || next == ')' || next == ':' || next == ',' || next == '\n' || next == '*')
        return c;
    if (paren && (next == ' ')) return c;
    return 0;
}

static const char *find_ci(const char *s, const char *needle) {
    size_t n = strlen(needle);
    for (; *s; s++)
        if (strncasecmp(s, needle, n) == 0) return s;
    return NULL;
}

static bool extract_letter(const char *text, int32_t n_choices, char *out) {
    static const char *const cues[] = {"answer is", "answer:"};
    for (size_t k = 0; k < sizeof cues / sizeof cues[0]; k++) {
        for (const char *p = find_ci(text, cues[k]); p; p = find_ci(p + 1, cues[k])) {
            char c = letter_at(p + strlen(cues[k]), n_choices);
            if (c) return *out = c, true;
        }
    }
    char c = letter_at(text, n_choices);
    if (c) return *out = c, true;
    return false;
}

/* The number token starting at p ("-1,234.5"), copied without commas; returns its end or NULL when none. */
static const char *scan_number(const char *p, char *buf, size_t cap) {
    size_t n = 0;
    const char *s = p;
    if (*s == '-' && isdigit((unsigned char)s[1])) buf[n++] = *s++;
    if (!isdigit((unsigned char)*s)) return NULL;
    while (isdigit((unsigned char)*s) || (*s == ',' && isdigit((unsigned char)s[1]))) {
        if (*s != ',' && n + 1 < cap) buf[n++] = *s;
        s++;
    }
    if (*s == '.' && isdigit((unsigned char)s[1])) {
        if (n + 1 < cap) buf[n++] = *s;
        s++;
        while (isdigit((unsigned char)*s)) {
            if (n + 1 < cap) buf[n++] = *s;
            s++;
        }
    }
    buf[n] = '\0';
    return s;
}

static bool extract_number(const char *text, char *buf, size_t cap) {
    char num[64];
    const char *mark = strstr(text, "####");
    if (mark) {
        const char *p = mark + 4;
        while (*p == ' ' || *p == '\t' || *p == '$') p++;
        if (scan_number(p, num, sizeof num)) {
            strncpy(buf, num, cap - 1);
            buf[cap - 1] = '\0';
            return true;
        }
    }
    bool found = false;
    for (const char *p = text; *p;) {
        /* A number starts at a digit (or '-' before one) not preceded by a letter or digit. */
        bool start = (isdigit((unsigned char)*p) || (*p == '-' && isdigit((unsigned char)p[1]))) &&
                     (p == text || !isalnum((unsigned char)p[-1]));
        const char *end = start ? scan_number(p, num, sizeof num) : NULL;
        if (end) {
            strncpy(buf, num, cap - 1);
            buf[cap - 1] = '\0';
            found = true;
            p = end;
        } else {
            p++;
        }
    }
    return found;
}

bool dataset_extract_answer(dataset_format fmt, const char *generated, int32_t n_choices, char *buf, size_t cap) {
    if (!buf || cap == 0) return false;
    buf[0] = '\0';
    if (!generated || fmt == DATASET_TEXT) return false;
    if (fmt == DATASET_GSM8K) return extract_number(generated, buf, cap);
    char c;
    if (!extract_letter(generated, n_choices, &c) || cap < 2) return false;
    buf[0] = c;
    buf[1] = '\0';
    return true;
}

bool dataset_check_answer(dataset_format fmt, const dataset_example *ex, const char *generated) {
    if (!ex || !ex->answer || !ex->answer[0] || fmt == DATASET_TEXT) return false;
    char got[64];
    if (!dataset_extract_answer(fmt, generated, ex->n_choices, got, sizeof got)) return false;
    if (fmt != DATASET_GSM8K) return strcmp(got, ex->answer) == 0;
    char *e1, *e2;
    double a = strtod(got, &e1), b = strtod(ex->answer, &e2);
    if (*e1 || *e2 || !isfinite(a) || !isfinite(b)) return strcmp(got, ex->answer) == 0;
    return fabs(a - b) <= 1e-6 * fmax(1.0, fabs(b));
}
