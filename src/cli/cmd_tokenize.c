/* cmd_tokenize.c — `tokroute tokenize`: text to token ids with a GGUF file's vocabulary (a model or a vocab-only
 * file). One text prints one line per token ("id 'piece'"), or just the ids (--ids), or JSON (--json). With --inp
 * it reads the tokenizer fixtures' .inp format and prints, per text, one line of ids each preceded by a space: the
 * .out format (no BOS/EOS, special-token text as plain text, as the fixtures were made). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute tokenize -m MODEL.gguf [options] \"TEXT\"\n"
    "       tokroute tokenize -m MODEL.gguf -f FILE        tokenize a file's contents\n"
    "       tokroute tokenize -m MODEL.gguf --inp FILE     fixture mode: texts separated by __ggml_vocab_test__,\n"
    "                                                      one line of ids per text (the .out format)\n"
    "  -m, --model PATH     GGUF file with tokenizer.ggml.* metadata\n"
    "      --ids            print only the ids, space-separated\n"
    "      --json           print {\"n_tokens\": N, \"tokens\": [{\"id\": .., \"piece\": \"..\"}, ...]}\n"
    "      --no-bos         do not add BOS/EOS even when the vocabulary asks for them\n"
    "      --parse-special  text such as <|im_start|> becomes the special token\n"
    "  -h, --help           this text\n";

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n < cap ? n : cap - 1] = '\0';
    *len = n;
    return buf;
}

/* Tokenizes into a malloc'ed array (retrying with the size the first call reports). */
static tr_status tokenize_alloc(const tr_vocab *v, const char *text, size_t len, const tr_tokenize_params *p,
                                int32_t **ids, int32_t *n) {
    int32_t cap = (int32_t)(len < 1 << 20 ? len : 1 << 20) + 8;
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) return TR_ERR_NOMEM;
    tr_status st = tr_tokenize(v, text, len, p, *ids, cap, n);
    if (st == TR_ERR_RANGE && *n > cap) {
        free(*ids);
        *ids = malloc((size_t)*n * sizeof **ids);
        if (!*ids) return TR_ERR_NOMEM;
        st = tr_tokenize(v, text, len, p, *ids, *n, n);
    }
    return st;
}

static void print_piece_quoted(const tr_vocab *v, int32_t id) {
    char buf[256];
    int32_t n = tr_token_to_piece(v, id, true, buf, sizeof buf);
    putchar('\'');
    for (int32_t i = 0; i < n && i < (int32_t)sizeof buf; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7F || (n == 1 && c >= 0x80)) printf("\\x%02x", c); /* lone byte token */
        else putchar(c);
    }
    putchar('\'');
}

static int print_tokens(const tr_vocab *v, const int32_t *ids, int32_t n, bool only_ids, bool json) {
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr;
        cJSON_AddNumberToObject(root, "n_tokens", n);
        arr = cJSON_AddArrayToObject(root, "tokens");
        char buf[256];
        for (int32_t i = 0; i < n; i++) {
            cJSON *t = cJSON_CreateObject();
            int32_t len = tr_token_to_piece(v, ids[i], true, buf, sizeof buf - 1);
            buf[len < 0 ? 0 : len < (int32_t)sizeof buf ? len : (int32_t)sizeof buf - 1] = '\0';
            cJSON_AddNumberToObject(t, "id", ids[i]);
            cJSON_AddStringToObject(t, "piece", buf);
            cJSON_AddItemToArray(arr, t);
        }
        char *s = cJSON_PrintUnformatted(root);
        if (s) puts(s);
        free(s);
        cJSON_Delete(root);
    } else if (only_ids) {
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        for (int32_t i = 0; i < n; i++) {
            printf("%8d ", ids[i]);
            print_piece_quoted(v, ids[i]);
            putchar('\n');
        }
    }
    return 0;
}

/* Fixture mode: every text followed by "\n__ggml_vocab_test__\n". */
static int run_inp(const tr_vocab *v, const char *path) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t len = 0, sl = sizeof sep - 1;
    char *buf = read_all(path, &len);
    if (!buf) {
        fprintf(stderr, "tokroute: cannot read %s\n", path);
        return 1;
    }
    tr_tokenize_params p = {.add_special = false, .parse_special = false};
    for (size_t off = 0; off < len;) {
        const char *m = memmem(buf + off, len - off, sep, sl);
        size_t end = m ? (size_t)(m - buf) : len;
        int32_t *ids = NULL, n = 0;
        tr_status st = tokenize_alloc(v, buf + off, end - off, &p, &ids, &n);
        if (st != TR_OK) {
            free(ids);
            free(buf);
            return cli_fail(st);
        }
        for (int32_t i = 0; i < n; i++) printf(" %d", ids[i]);
        putchar('\n');
        free(ids);
        off = m ? end + sl : len;
    }
    free(buf);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *inp = NULL, *file = NULL, *text = NULL;
    bool only_ids = false, json = false, no_bos = false, parse_special = false;
    for (int i = 1; i < argc; i++) { /* argv[0] is the command name */
        const char *val = NULL;
        if (cli_flag(argc, argv, &i, "-h", "--help")) {
            fputs(usage, stdout);
            return 0;
        } else if (cli_option(argc, argv, &i, "-m", "--model", &val)) {
            if (!val) return cli_usage_error(usage, "--model needs a value");
            model = val;
        } else if (cli_option(argc, argv, &i, NULL, "--inp", &val)) {
            if (!val) return cli_usage_error(usage, "--inp needs a value");
            inp = val;
        } else if (cli_option(argc, argv, &i, "-f", "--file", &val)) {
            if (!val) return cli_usage_error(usage, "--file needs a value");
            file = val;
        } else if (cli_flag(argc, argv, &i, NULL, "--ids")) {
            only_ids = true;
        } else if (cli_flag(argc, argv, &i, NULL, "--json")) {
            json = true;
        } else if (cli_flag(argc, argv, &i, NULL, "--no-bos")) {
            no_bos = true;
        } else if (cli_flag(argc, argv, &i, NULL, "--parse-special")) {
            parse_special = true;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return cli_usage_error(usage, "unknown option '%s'", argv[i]);
        } else if (!text) {
            text = argv[i];
        } else {
            return cli_usage_error(usage, "more than one text given (quote it)");
        }
    }
    if (!model) return cli_usage_error(usage, "no model given (-m MODEL.gguf)");
    if (!!inp + !!file + !!text != 1) return cli_usage_error(usage, "give exactly one of TEXT, -f FILE, --inp FILE");

    tr_vocab *v = NULL;
    tr_status st = tr_vocab_load(model, &v);
    if (st != TR_OK) return cli_fail(st);
    int rc;
    if (inp) {
        rc = run_inp(v, inp);
    } else {
        size_t len = text ? strlen(text) : 0;
        char *owned = NULL;
        if (file && !(owned = read_all(file, &len))) {
            fprintf(stderr, "tokroute: cannot read %s\n", file);
            tr_vocab_free(v);
            return 1;
        }
        tr_tokenize_params p = {.add_special = !no_bos, .parse_special = parse_special};
        int32_t *ids = NULL, n = 0;
        st = tokenize_alloc(v, owned ? owned : text, len, &p, &ids, &n);
        rc = st == TR_OK ? print_tokens(v, ids, n, only_ids, json) : cli_fail(st);
        free(ids);
        free(owned);
    }
    tr_vocab_free(v);
    return rc;
}
