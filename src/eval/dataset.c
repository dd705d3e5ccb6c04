/* dataset.c — splits a dataset file into examples (stories, jsonl lines, CSV records), parses the selected range
 * into prompt/target/answer with the templates documented in dataset.h, and tokenizes an example for a model.
 *
 * The file is read whole and split into records first (cheap: a scan for separators), so the example count is
 * known before anything is parsed and a range past the end is refused with that count. Only records in the range
 * are parsed; every field is checked for presence and type, and failures name the file and the record's line. */
#include "eval/dataset.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

enum { MAX_FILE_BYTES = 1 << 30 };
static const char story_separator[] = "<|endoftext|>";

struct dataset {
    dataset_format fmt;
    int64_t n;
    dataset_example *ex;
};

typedef struct record {
    const char *p;
    size_t len;
    int64_t line;
} record;

typedef struct record_list {
    record *r;
    int64_t n, cap;
} record_list;

/* ---------------------------------------------------------------- names and ranges */

tr_status dataset_format_from_name(const char *name, dataset_format *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "dataset format: NULL argument");
    if (strcmp(name, "text") == 0) *out = DATASET_TEXT;
    else if (strcmp(name, "csqa") == 0 || strcmp(name, "commonsenseqa") == 0) *out = DATASET_CSQA;
    else if (strcmp(name, "gsm8k") == 0) *out = DATASET_GSM8K;
    else if (strcmp(name, "arc") == 0 || strcmp(name, "arc_challenge") == 0) *out = DATASET_ARC;
    else if (strcmp(name, "mmlu") == 0) *out = DATASET_MMLU;
    else return tr_fail(TR_ERR_ARG, "unknown dataset format '%s' (known: text, csqa, gsm8k, arc, mmlu)", name);
    return TR_OK;
}

const char *dataset_format_name(dataset_format fmt) {
    switch (fmt) {
    case DATASET_TEXT: return "text";
    case DATASET_CSQA: return "csqa";
    case DATASET_GSM8K: return "gsm8k";
    case DATASET_ARC: return "arc";
    case DATASET_MMLU: return "mmlu";
    }
    return "unknown";
}

bool dataset_format_has_answer(dataset_format fmt) { return fmt != DATASET_TEXT; }

static bool parse_index(const char *s, size_t n, int64_t *out) {
    if (n == 0 || n > 18) return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

tr_status dataset_parse_range(const char *text, int64_t *first, int64_t *end) {
    if (!text || !first || !end) return tr_fail(TR_ERR_ARG, "range: NULL argument");
    const char *colon = strchr(text, ':');
    int64_t a = 0, b = -1;
    bool ok;
    if (!colon) {
        ok = parse_index(text, strlen(text), &a);
        b = a + 1;
    } else {
        size_t na = (size_t)(colon - text), nb = strlen(colon + 1);
        ok = (na == 0 || parse_index(text, na, &a)) && (nb == 0 || parse_index(colon + 1, nb, &b));
    }
    if (!ok) return tr_fail(TR_ERR_ARG, "bad range '%s' (expected A:B, A:, :B or A with non-negative integers)", text);
    if (b >= 0 && b < a) return tr_fail(TR_ERR_ARG, "bad range '%s': the end is before the start", text);
    *first = a;
    *end = b;
    return TR_OK;
}

/* ---------------------------------------------------------------- splitting into records */

static bool records_push(record_list *l, const char *p, size_t len, int64_t line) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 256;
        record *r = realloc(l->r, (size_t)cap * sizeof *r);
        if (!r) return false;
        l->r = r;
        l->cap = cap;
    }
    l->r[l->n++] = (record){p, len, line};
    return true;
}

static bool is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)p[i])) return false;
    return true;
}

/* Trims white space on both sides, advancing *line past leading newlines. */
static void trim(const char **p, size_t *n, int64_t *line) {
    while (*n > 0 && isspace((unsigned char)**p)) {
        if (**p == '\n') ++*line;
        ++*p;
        --*n;
    }
    while (*n > 0 && isspace((unsigned char)(*p)[*n - 1])) --*n;
}

static bool is_separator_line(const char *p, size_t n) {
    while (n > 0 && isspace((unsigned char)p[n - 1])) n--;
    while (n > 0 && isspace((unsigned char)*p)) p++, n--;
    return n == sizeof story_separator - 1 && memcmp(p, story_separator, n) == 0;
}

static tr_status split_stories(const char *data, size_t size, record_list *l) {
    size_t start = 0;
    int64_t line = 1, start_line = 1;
    for (size_t pos = 0; pos <= size;) {
        const char *nl = pos < size ? memchr(data + pos, '\n', size - pos) : NULL;
        size_t line_end = nl ? (size_t)(nl - data) : size;
        bool last = !nl;
        if (is_separator_line(data + pos, line_end - pos) || last) {
            size_t story_end = is_separator_line(data + pos, line_end - pos) ? pos : size;
            const char *p = data + start;
            size_t n = story_end - start;
            int64_t at = start_line;
            trim(&p, &n, &at);
            if (n > 0 && !records_push(l, p, n, at)) return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
            start = line_end + 1;
            start_line = line + 1;
        }
        if (last) break;
        pos = line_end + 1;
        line++;
    }
    return TR_OK;
}

static tr_status split_lines(const char *data, size_t size, record_list *l) {
    int64_t line = 1;
    for (size_t pos = 0; pos < size; line++) {
        const char *nl = memchr(data + pos, '\n', size - pos);
        size_t end = nl ? (size_t)(nl - data) : size;
        if (!is_blank(data + pos, end - pos) && !records_push(l, data + pos, end - pos, line))
            return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        pos = end + 1;
    }
    return TR_OK;
}

/* CSV records end at a newline outside quotes (quoted fields may hold newlines). Lines are set afterwards. */
static tr_status split_csv(const char *data, size_t size, record_list *l) {
    size_t start = 0;
    bool quoted = false;
    for (size_t pos = 0; pos <= size; pos++) {
        char c = pos < size ? data[pos] : '\n';
        if (c == '"') quoted = !quoted;
        if (c != '\n' || (quoted && pos < size)) continue;
        size_t end = pos;
        if (end > start && data[end - 1] == '\r') end--;
        if (!is_blank(data + start, end - start) && !records_push(l, data + start, end - start, 0))
            return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        start = pos + 1;
    }
    return TR_OK;
}

/* Each record's starting line, counted from the text (quoted fields may span lines). */
static void csv_set_lines(const char *data, record_list *l) {
    int64_t line = 1;
    const char *at = data;
    for (int64_t i = 0; i < l->n; i++) {
        for (; at < l->r[i].p; at++)
            if (*at == '\n') line++;
        l->r[i].line = line;
    }
}

/* ---------------------------------------------------------------- building strings */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_adds(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static char *dup_s(const char *s) { return dup_n(s, strlen(s)); }

/* ---------------------------------------------------------------- per-format parsing */

typedef struct parse_ctx {
    const char *name;
    int64_t line;
} parse_ctx;

static tr_status bad(const parse_ctx *c, const char *fmt, ...) TR_PRINTF(2, 3);
static tr_status bad(const parse_ctx *c, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_FORMAT, "%s:%lld: %s", c->name, (long long)c->line, msg);
}

static const char *json_string(const cJSON *obj, const char *key) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(f) && f->valuestring ? f->valuestring : NULL;
}

/* The multiple-choice question, plain prompt and target from a question and its choices. */
static tr_status build_choice_example(dataset_example *e, const char *q, int32_t gold) {
    sbuf b = {0};
    sb_adds(&b, "Question: ");
    sb_adds(&b, q);
    for (int32_t i = 0; i < e->n_choices; i++) {
        char head[8];
        snprintf(head, sizeof head, "\n%c. ", 'A' + i);
        sb_adds(&b, head);
        sb_adds(&b, e->choices[i]);
    }
    sb_adds(&b, "\nAnswer with the letter of the correct choice.");
    if (b.oom) return free(b.s), tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
    e->question = b.s;
    char t[32];
    snprintf(t, sizeof t, "The answer is %c.", 'A' + gold);
    e->target = dup_s(t);
    e->answer = dup_n(t + 14, 1);
    return e->target && e->answer ? TR_OK : tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
}

static tr_status parse_csqa(const parse_ctx *c, const cJSON *root, dataset_example *e) {
    const char *key = json_string(root, "answerKey");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "question");
    if (!key) return bad(c, "no \"answerKey\" string (the test split has no answers)");
    if (!cJSON_IsObject(q)) return bad(c, "no \"question\" object");
    const char *stem = json_string(q, "stem");
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(q, "choices");
    if (!stem) return bad(c, "no \"question.stem\" string");
    if (!cJSON_IsArray(choices)) return bad(c, "no \"question.choices\" array");
    int n = cJSON_GetArraySize(choices);
    if (n < 2 || n > DATASET_MAX_CHOICES) return bad(c, "%d choices (expected 2 to %d)", n, DATASET_MAX_CHOICES);
    int32_t gold = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *ch = cJSON_GetArrayItem(choices, i);
        const char *label = json_string(ch, "label"), *text = json_string(ch, "text");
        if (!label || !text) return bad(c, "choice %d has no \"label\" and \"text\" strings", i);
        if (label[0] != 'A' + i || label[1] != '\0') return bad(c, "choice %d has label '%s' (expected %c)", i, label, 'A' + i);
        if (strcmp(label, key) == 0) gold = i;
        if (!(e->choices[i] = dup_s(text))) return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        e->n_choices = i + 1;
    }
    if (gold < 0) return bad(c, "answerKey '%s' is not one of the choices' labels", key);
    return build_choice_example(e, stem, gold);
}

static tr_status parse_arc(const parse_ctx *c, const cJSON *root, dataset_example *e) {
    const char *query = json_string(root, "query");
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *gold = cJSON_GetObjectItemCaseSensitive(root, "gold");
    if (!query) return bad(c, "no \"query\" string");
    if (!cJSON_IsArray(choices)) return bad(c, "no \"choices\" array");
    int n = cJSON_GetArraySize(choices);
    if (n < 2 || n > DATASET_MAX_CHOICES) return bad(c, "%d choices (expected 2 to %d)", n, DATASET_MAX_CHOICES);
    if (!cJSON_IsNumber(gold) || gold->valuedouble != (double)(int)gold->valuedouble || gold->valuedouble < 0 ||
        gold->valuedouble >= n)
        return bad(c, "\"gold\" is not a choice index in [0, %d)", n);
    for (int i = 0; i < n; i++) {
        const cJSON *ch = cJSON_GetArrayItem(choices, i);
        if (!cJSON_IsString(ch) || !ch->valuestring) return bad(c, "choice %d is not a string", i);
        if (!(e->choices[i] = dup_s(ch->valuestring))) return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        e->n_choices = i + 1;
    }
    /* The packaged query already starts with "Question: "; the template adds it back. */
    if (strncmp(query, "Question: ", 10) == 0) query += 10;
    return build_choice_example(e, query, (int32_t)gold->valuedouble);
}

/* Keeps digits, '.', '-' of a number, dropping commas, '$' and spaces; false when nothing numeric is left. */
static bool normalize_number(const char *s, char *out, size_t cap) {
    size_t n = 0;
    for (; *s; s++) {
        if (*s == ',' || *s == '$' || isspace((unsigned char)*s)) continue;
        if (n + 1 >= cap) return false;
        out[n++] = *s;
    }
    while (n > 0 && out[n - 1] == '.') n--;
    out[n] = '\0';
    if (n == 0) return false;
    char *end;
    strtod(out, &end);
    return *end == '\0';
}

static tr_status parse_gsm8k(const parse_ctx *c, const cJSON *root, dataset_example *e) {
    const char *q = json_string(root, "question"), *a = json_string(root, "answer");
    if (!q) return bad(c, "no \"question\" string");
    if (!a) return bad(c, "no \"answer\" string");
    const char *mark = strstr(a, "####");
    if (!mark) return bad(c, "the answer has no \"####\" line with the final number");
    char num[64];
    if (!normalize_number(mark + 4, num, sizeof num)) return bad(c, "the text after \"####\" is not a number");
    sbuf b = {0};
    sb_adds(&b, "Question: ");
    sb_adds(&b, q);
    sb_adds(&b, "\nSolve it step by step and end with \"#### \" and the final number.");
    if (b.oom) return free(b.s), tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
    e->question = b.s;
    e->target = dup_s(a);
    e->answer = dup_s(num);
    return e->target && e->answer ? TR_OK : tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
}

static tr_status parse_json_record(const parse_ctx *c, dataset_format fmt, const record *r, dataset_example *e) {
    cJSON *root = cJSON_ParseWithLength(r->p, r->len);
    if (!root) return bad(c, "not valid JSON");
    tr_status st;
    if (!cJSON_IsObject(root)) st = bad(c, "not a JSON object");
    else if (fmt == DATASET_CSQA) st = parse_csqa(c, root, e);
    else if (fmt == DATASET_ARC) st = parse_arc(c, root, e);
    else st = parse_gsm8k(c, root, e);
    cJSON_Delete(root);
    return st;
}

/* RFC 4180 fields: "a ""quoted"" field", plain fields, separated by commas. */
static tr_status parse_csv_fields(const parse_ctx *c, const record *r, char **fields, int max, int *n_fields) {
    const char *p = r->p, *end = r->p + r->len;
    int n = 0;
    for (;;) {
        if (n == max) return bad(c, "more than %d fields", max);
        sbuf b = {0};
        sb_add(&b, "", 0);
        if (p < end && *p == '"') {
            p++;
            for (;;) {
                if (p >= end) return free(b.s), bad(c, "unterminated quoted field %d", n + 1);
                if (*p == '"') {
                    if (p + 1 < end && p[1] == '"') sb_add(&b, "\"", 1), p += 2;
                    else break;
                } else {
                    sb_add(&b, p++, 1);
                }
            }
            p++;
            if (p < end && *p != ',') return free(b.s), bad(c, "unexpected text after quoted field %d", n + 1);
        } else {
            const char *s = p;
            while (p < end && *p != ',') {
                if (*p == '"') return free(b.s), bad(c, "quote inside unquoted field %d", n + 1);
                p++;
            }
            sb_add(&b, s, (size_t)(p - s));
        }
        if (b.oom) return free(b.s), tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        fields[n++] = b.s;
        if (p >= end) break;
        p++; /* the comma */
    }
    *n_fields = n;
    return TR_OK;
}

static tr_status parse_mmlu(const parse_ctx *c, const record *r, dataset_example *e) {
    char *f[7] = {0};
    int n = 0;
    tr_status st = parse_csv_fields(c, r, f, 7, &n);
    if (st == TR_OK && n != 6) st = bad(c, "%d fields (expected 6: question, A, B, C, D, answer)", n);
    if (st == TR_OK && (strlen(f[5]) != 1 || f[5][0] < 'A' || f[5][0] > 'D'))
        st = bad(c, "answer '%.16s' is not one of A, B, C, D", f[5]);
    if (st == TR_OK) {
        for (int i = 0; i < 4; i++) {
            e->choices[i] = f[i + 1];
            f[i + 1] = NULL;
        }
        e->n_choices = 4;
        st = build_choice_example(e, f[0], f[5][0] - 'A');
    }
    for (int i = 0; i < 7; i++) free(f[i]);
    return st;
}

static tr_status parse_record(const char *name, dataset_format fmt, const record *r, dataset_example *e) {
    parse_ctx c = {name, r->line};
    if (memchr(r->p, '\0', r->len)) return bad(&c, "NUL byte in the text");
    tr_status st;
    if (fmt == DATASET_TEXT) {
        e->question = dup_s("");
        e->target = dup_n(r->p, r->len);
        e->answer = dup_s("");
        st = e->question && e->target && e->answer ? TR_OK : tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
    } else if (fmt == DATASET_MMLU) {
        st = parse_mmlu(&c, r, e);
    } else {
        st = parse_json_record(&c, fmt, r, e);
    }
    if (st != TR_OK) return st;
    if (fmt == DATASET_TEXT) {
        e->prompt = dup_s("");
    } else {
        sbuf b = {0};
        sb_adds(&b, e->question);
        sb_adds(&b, "\nAnswer:");
        e->prompt = b.s;
        if (b.oom) return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
    }
    return e->prompt ? TR_OK : tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
}

/* ---------------------------------------------------------------- loading */

static void example_free(dataset_example *e) {
    free(e->question);
    free(e->prompt);
    free(e->target);
    free(e->answer);
    for (int i = 0; i < DATASET_MAX_CHOICES; i++) free(e->choices[i]);
}

void dataset_free(dataset *d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) example_free(&d->ex[i]);
    free(d->ex);
    free(d);
}

tr_status dataset_parse(const char *data, size_t size, const char *name, dataset_format fmt, int64_t first,
                        int64_t end, dataset **out) {
    if (!out) return tr_fail(TR_ERR_ARG, "dataset_parse: NULL argument");
    *out = NULL;
    if ((!data && size) || fmt < DATASET_TEXT || fmt > DATASET_MMLU || first < 0 || end < -1)
        return tr_fail(TR_ERR_ARG, "dataset_parse: invalid argument");
    if (end >= 0 && end < first) return tr_fail(TR_ERR_ARG, "dataset range %lld:%lld ends before it starts",
                                                (long long)first, (long long)end);
    if (!name) name = "dataset";
    record_list l = {0};
    tr_status st = fmt == DATASET_TEXT ? split_stories(data, size, &l)
                   : fmt == DATASET_MMLU ? split_csv(data, size, &l)
                                         : split_lines(data, size, &l);
    if (st == TR_OK && fmt == DATASET_MMLU) csv_set_lines(data, &l);
    if (st == TR_OK && end < 0) end = l.n > first ? l.n : first;
    if (st == TR_OK && end > l.n)
        st = tr_fail(TR_ERR_RANGE, "%s: range %lld:%lld reaches past its %lld examples", name, (long long)first,
                     (long long)end, (long long)l.n);
    dataset *d = NULL;
    if (st == TR_OK && (d = calloc(1, sizeof *d)) == NULL) st = tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
    if (st == TR_OK) {
        d->fmt = fmt;
        if (end > first && (d->ex = calloc((size_t)(end - first), sizeof *d->ex)) == NULL)
            st = tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
    }
    for (int64_t i = first; st == TR_OK && i < end; i++) {
        dataset_example *e = &d->ex[d->n++];
        e->index = i;
        e->line = l.r[i].line;
        st = parse_record(name, fmt, &l.r[i], e);
    }
    free(l.r);
    if (st != TR_OK) {
        dataset_free(d);
        return st;
    }
    *out = d;
    return TR_OK;
}

tr_status dataset_load(const char *path, dataset_format fmt, int64_t first, int64_t end, dataset **out) {
    if (!path || !out) return tr_fail(TR_ERR_ARG, "dataset_load: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open dataset %s", path);
    char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || size > MAX_FILE_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return tr_fail(size > MAX_FILE_BYTES ? TR_ERR_RANGE : TR_ERR_IO, "cannot read dataset %s%s", path,
                       size > MAX_FILE_BYTES ? " (larger than 1 GiB)" : "");
    }
    buf = malloc((size_t)size + 1);
    if (!buf) return fclose(f), tr_fail(TR_ERR_NOMEM, "dataset %s: out of memory", path);
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) return free(buf), tr_fail(TR_ERR_IO, "cannot read dataset %s", path);
    tr_status st = dataset_parse(buf, got, path, fmt, first, end, out);
    free(buf);
    return st;
}

dataset_format dataset_get_format(const dataset *d) { return d ? d->fmt : DATASET_TEXT; }
int64_t dataset_count(const dataset *d) { return d ? d->n : 0; }

const dataset_example *dataset_get(const dataset *d, int64_t i) {
    return d && i >= 0 && i < d->n ? &d->ex[i] : NULL;
}

/* ---------------------------------------------------------------- tokenizing */

static tr_status tokenize_text(const tr_vocab *vocab, const char *text, int32_t **ids, int32_t *n) {
    tr_tokenize_params tp = tr_tokenize_default_params();
    size_t len = strlen(text);
    if (len > INT32_MAX / 2) return tr_fail(TR_ERR_RANGE, "dataset: text too long to tokenize");
    int32_t cap = (int32_t)len + 8;
    for (;;) {
        int32_t *buf = malloc((size_t)cap * sizeof *buf);
        if (!buf) return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        tr_status st = tr_tokenize(vocab, text, len, &tp, buf, cap, n);
        if (st == TR_OK) return *ids = buf, TR_OK;
        free(buf);
        if (st != TR_ERR_RANGE || *n <= cap) return st;
        cap = *n;
    }
}

static tr_status tokenize_chat(const tr_vocab *vocab, tr_chat_template t, const tr_chat_message *m, size_t n_m,
                               bool add_assistant, int32_t **ids, int32_t *n) {
    size_t len = 64;
    for (size_t i = 0; i < n_m; i++) len += strlen(m[i].content) + 32;
    if (len > INT32_MAX / 2) return tr_fail(TR_ERR_RANGE, "dataset: text too long to tokenize");
    int32_t cap = (int32_t)len;
    for (;;) {
        int32_t *buf = malloc((size_t)cap * sizeof *buf);
        if (!buf) return tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        tr_status st = tr_chat_tokenize(vocab, t, m, n_m, add_assistant, true, buf, cap, n);
        if (st == TR_OK) return *ids = buf, TR_OK;
        free(buf);
        if (st != TR_ERR_RANGE || *n <= cap) return st;
        cap = *n;
    }
}

tr_status dataset_tokenize(const dataset_example *ex, dataset_format fmt, const tr_vocab *vocab,
                           tr_chat_template tmpl, int32_t max_target, dataset_tokens *out) {
    if (!ex || !vocab || !out) return tr_fail(TR_ERR_ARG, "dataset_tokenize: NULL argument");
    memset(out, 0, sizeof *out);
    int32_t *prompt = NULL, *full = NULL, n_prompt = 0, n_full = 0;
    tr_status st;
    if (fmt != DATASET_TEXT && tmpl != TR_CHAT_NONE) {
        tr_chat_message m[2] = {{"user", ex->question}, {"assistant", ex->target}};
        st = tokenize_chat(vocab, tmpl, m, 1, true, &prompt, &n_prompt);
        if (st == TR_OK) st = tokenize_chat(vocab, tmpl, m, 2, false, &full, &n_full);
    } else {
        sbuf b = {0};
        sb_adds(&b, ex->prompt);
        if (fmt != DATASET_TEXT) sb_adds(&b, " ");
        sb_adds(&b, ex->target);
        if (b.oom) return free(b.s), tr_fail(TR_ERR_NOMEM, "dataset: out of memory");
        st = tokenize_text(vocab, ex->prompt, &prompt, &n_prompt);
        if (st == TR_OK) st = tokenize_text(vocab, b.s, &full, &n_full);
        free(b.s);
    }
    if (st != TR_OK) {
        free(prompt);
        free(full);
        return tr_fail_prefix(st, "example %lld", (long long)ex->index);
    }
    int32_t common = 0;
    while (common < n_prompt && common < n_full && prompt[common] == full[common]) common++;
    free(prompt);
    out->ids = full;
    out->n_prompt = common;
    out->n_ids = n_full;
    if (max_target > 0 && out->n_ids - common > max_target) out->n_ids = common + max_target;
    return TR_OK;
}

void dataset_tokens_free(dataset_tokens *t) {
    if (!t) return;
    free(t->ids);
    memset(t, 0, sizeof *t);
}
