/* json_scan.c — a request body read before it is trusted, without building a tree (json_scan.h). A 1 MiB body of
 * "1," repeated is 524k values: as a cJSON tree that is ~40 MB, so the server surveys the text first (one pass, no
 * allocation), refuses bodies holding more values than a request of its kind may, and reads token-id arrays
 * straight from the text once their length is known to fit the context. The survey is lenient (cJSON still
 * validates what it parses); the id reader is strict JSON. */
#include "server/json_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* JSON's whitespace, what the id reader allows. */
static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
/* What cJSON skips as whitespace (every byte up to ' ', NUL included): the survey counts as cJSON parses. */
static bool is_skipped(char c) { return (unsigned char)c <= ' '; }
static bool is_delim(char c) {
    return is_skipped(c) || c == ',' || c == ':' || c == '[' || c == ']' || c == '{' || c == '}' || c == '"';
}

/* Skips the string starting at text[i] == '"': the index after its closing quote (len when it never closes). */
static size_t skip_string(const char *text, size_t len, size_t i) {
    for (i++; i < len; i++) {
        if (text[i] == '\\') i++;
        else if (text[i] == '"') return i + 1;
    }
    return len;
}

#define DEPTH_BITS 1024 /* cJSON refuses deeper nesting (CJSON_NESTING_LIMIT 1000) */

void json_survey_text(const char *text, size_t len, const char *want, json_survey *out) {
    memset(out, 0, sizeof *out);
    size_t i = 0;
    while (i < len && is_skipped(text[i])) i++;
    out->is_object = i < len && text[i] == '{';
    uint64_t is_obj[DEPTH_BITS / 64] = {0}; /* bit d: the container at depth d is an object */
    int32_t depth = 0;
    bool expect_key = false;
    const char *member = NULL; /* the top-level member whose value is being read: its name, where its value lies */
    size_t member_len = 0, value_at = 0, value_end = 0;
    bool value_pending = false;
    int64_t member_from = 0;
    bool want_done = false;
    const size_t want_len = want ? strlen(want) : 0;
    for (; i <= len; i++) {
        const char c = i < len ? text[i] : '}'; /* the end closes the top-level member */
        if (member && (depth == 1 || i == len) && (c == ',' || c == '}')) { /* the member's value ends here */
            const int64_t n = out->n_values - member_from;
            if (n > out->biggest_values) {
                out->biggest_values = n;
                const size_t k = member_len < sizeof out->biggest - 1 ? member_len : sizeof out->biggest - 1;
                memcpy(out->biggest, member, k);
                out->biggest[k] = 0;
            }
            if (!want_done && want && member_len == want_len && memcmp(member, want, want_len) == 0) {
                want_done = true;
                out->want_at = value_pending ? NULL : text + value_at;
                out->want_len = value_end - value_at;
                out->want_values = n;
            }
            member = NULL;
        }
        if (i == len) break;
        if (is_skipped(c) || c == ':') continue;
        if (member && value_pending) {
            value_pending = false;
            value_at = i;
        }
        if (c == '"') {
            const size_t end = skip_string(text, len, i);
            if (expect_key && depth == 1) {
                member = text + i + 1;
                member_len = end - i >= 2 ? end - i - 2 : 0;
                member_from = out->n_values;
                value_pending = true;
            } else if (!expect_key) {
                out->n_values++;
            }
            expect_key = false;
            i = end - 1;
        } else if (c == '{' || c == '[') {
            out->n_values++;
            depth++;
            if (depth < DEPTH_BITS) {
                if (c == '{') is_obj[depth / 64] |= (uint64_t)1 << (depth % 64);
                else is_obj[depth / 64] &= ~((uint64_t)1 << (depth % 64));
            }
            expect_key = c == '{';
        } else if (c == '}' || c == ']') {
            if (depth > 0) depth--;
            expect_key = false;
        } else if (c == ',') {
            expect_key = depth > 0 && depth < DEPTH_BITS && (is_obj[depth / 64] >> (depth % 64) & 1);
        } else { /* a number or a literal: one value */
            while (i + 1 < len && !is_delim(text[i + 1])) i++;
            out->n_values++;
        }
        if (member && !value_pending) value_end = i + 1;
    }
}

/* A JSON number (strict grammar) at text[i ..): its end, or i when there is none. */
static size_t number_end(const char *text, size_t len, size_t i) {
    size_t j = i;
    if (j < len && text[j] == '-') j++;
    if (j >= len) return i;
    if (text[j] == '0') j++;
    else if (text[j] >= '1' && text[j] <= '9') while (j < len && text[j] >= '0' && text[j] <= '9') j++;
    else return i;
    if (j < len && text[j] == '.') {
        const size_t d = ++j;
        while (j < len && text[j] >= '0' && text[j] <= '9') j++;
        if (j == d) return i;
    }
    if (j < len && (text[j] == 'e' || text[j] == 'E')) {
        j++;
        if (j < len && (text[j] == '+' || text[j] == '-')) j++;
        const size_t d = j;
        while (j < len && text[j] >= '0' && text[j] <= '9') j++;
        if (j == d) return i;
    }
    return j;
}

/* Walks the array at text[0 .. len): counts its elements and, with ids, reads them (room for n_max). */
static json_ids_status walk_array(const char *text, size_t len, int32_t n_vocab, int32_t n_max, int32_t *ids,
                                  int32_t *n) {
    size_t i = 0;
    *n = 0;
    while (i < len && is_ws(text[i])) i++;
    if (i >= len || text[i] != '[') return JSON_IDS_NOT_ARRAY;
    i++;
    while (i < len && is_ws(text[i])) i++;
    if (i < len && text[i] == ']') return JSON_IDS_OK;
    for (int32_t k = 0;; k++) {
        *n = k;
        while (i < len && is_ws(text[i])) i++;
        const size_t end = number_end(text, len, i);
        if (end == i) return JSON_IDS_BAD_ID;
        if (ids) {
            if (k >= n_max) return JSON_IDS_TOO_MANY;
            char num[40];
            if (end - i >= sizeof num) return JSON_IDS_BAD_ID;
            memcpy(num, text + i, end - i);
            num[end - i] = 0;
            const double v = strtod(num, NULL);
            if (!isfinite(v) || v != floor(v) || v < 0 || v >= n_vocab) return JSON_IDS_BAD_ID;
            ids[k] = (int32_t)v;
        }
        i = end;
        while (i < len && is_ws(text[i])) i++;
        if (i < len && text[i] == ',') {
            i++;
            continue;
        }
        if (i < len && text[i] == ']') {
            *n = k + 1;
            return JSON_IDS_OK;
        }
        *n = k;
        return JSON_IDS_BAD_ID;
    }
}

json_ids_status json_count_elements(const char *text, size_t len, int32_t *n) {
    size_t i = 0;
    *n = 0;
    while (i < len && is_ws(text[i])) i++;
    if (i >= len || text[i] != '[') return JSON_IDS_NOT_ARRAY;
    /* Counted by commas at the array's own level, strings and nested containers skipped. */
    int32_t depth = 0, count = 0;
    bool any = false;
    for (; i < len; i++) {
        const char c = text[i];
        if (c == '"') {
            i = skip_string(text, len, i) - 1;
            any = true;
        } else if (c == '[' || c == '{') {
            if (depth++ > 0) any = true;
        } else if (c == ']' || c == '}') {
            if (--depth == 0) {
                *n = any ? count + 1 : 0;
                return JSON_IDS_OK;
            }
        } else if (c == ',' && depth == 1) {
            if (count == INT32_MAX - 1) return JSON_IDS_TOO_MANY;
            count++;
        } else if (!is_ws(c)) {
            any = true;
        }
    }
    *n = count;
    return JSON_IDS_BAD_ID; /* never closed */
}

json_ids_status json_read_ids(const char *text, size_t len, int32_t n_vocab, int32_t n_max, int32_t *ids, int32_t *n) {
    int32_t count = 0;
    const json_ids_status st = json_count_elements(text, len, &count);
    if (st == JSON_IDS_NOT_ARRAY) return st;
    if (st == JSON_IDS_TOO_MANY || count > n_max) {
        *n = count;
        return JSON_IDS_TOO_MANY;
    }
    return walk_array(text, len, n_vocab, n_max, ids, n);
}
