/* json_scan.h — reading a request body before trusting it, without building a tree (json_scan.c): how many
 * values it holds (what a cJSON tree of it would allocate), where a top-level member's value lies, and an array of
 * token ids read straight from the text after its length was checked. */
#ifndef TR_SERVER_JSON_SCAN_H
#define TR_SERVER_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A body's shape: values counted as cJSON would make nodes of them (each string, number, literal, array and
 * object; member names not counted), the top-level member holding the most, and the value of the member `want`. */
typedef struct json_survey {
    bool is_object;        /* the text starts with '{' (after whitespace) */
    int64_t n_values;      /* in the whole text */
    char biggest[32];      /* the top-level member holding the most values ("" if none) */
    int64_t biggest_values;
    const char *want_at;   /* the first top-level `want` member's value (NULL: absent) */
    size_t want_len;
    int64_t want_values;   /* values inside it (itself included) */
} json_survey;

/* Surveys text[0 .. len). Lenient: it never fails, malformed text is counted as far as it goes (cJSON refuses it
 * afterwards); a member name is matched as written (a name spelled with escapes is another name). */
void json_survey_text(const char *text, size_t len, const char *want, json_survey *out);

/* The most values a request body may hold besides a token array read by json_read_ids (a prompt of token ids, chat
 * messages and the options): what a context of n_ctx tokens can use, with room to spare. */
static inline int64_t request_values_max(int32_t n_ctx) { return 4 * (int64_t)n_ctx + 4096; }

/* Reading an array of token ids: "[" ids separated by "," "]" with whitespace anywhere, each a JSON number with an
 * integer value in [0, n_vocab). */
typedef enum json_ids_status {
    JSON_IDS_OK,
    JSON_IDS_NOT_ARRAY,  /* the value is not an array */
    JSON_IDS_TOO_MANY,   /* more than n_max elements (*n: how many, counted without reading them) */
    JSON_IDS_BAD_ID,     /* element *n is not a token id, or the array is malformed there */
} json_ids_status;

/* Counts the elements of the array at text[0 .. len) without reading them: JSON_IDS_OK with *n, JSON_IDS_NOT_ARRAY,
 * or JSON_IDS_BAD_ID (*n: the element where the array stops being well-formed, e.g. it never closes). */
json_ids_status json_count_elements(const char *text, size_t len, int32_t *n);
/* Reads the array at text[0 .. len) into ids (room for n_max): JSON_IDS_OK with *n ids; JSON_IDS_TOO_MANY before
 * reading any id when there are more than n_max; otherwise the failure with *n the element at fault. */
json_ids_status json_read_ids(const char *text, size_t len, int32_t n_vocab, int32_t n_max, int32_t *ids, int32_t *n);

#endif /* TR_SERVER_JSON_SCAN_H */
