/* cli_common.h — argument parsing and output helpers shared by the subcommands. Errors go to stderr as
 * "tokroute: <message>"; usage errors exit 2, runtime errors exit 1. */
#ifndef TR_CLI_COMMON_H
#define TR_CLI_COMMON_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

/* Matches argv[*i] against "-s"/"--long" (either may be NULL). With a value: accepts "--long VALUE" and
 * "--long=VALUE", advancing *i; a missing value is a usage error (returns true with *value NULL). */
bool cli_flag(int argc, char **argv, int *i, const char *short_name, const char *long_name);
bool cli_option(int argc, char **argv, int *i, const char *short_name, const char *long_name, const char **value);

/* Parsers print "tokroute: bad value for NAME: TEXT" and return false on error. */
bool cli_int(const char *name, const char *text, long lo, long hi, long *out);
bool cli_float(const char *name, const char *text, double *out);
/* "1,2,3" → malloc'ed ids. */
bool cli_token_list(const char *text, int32_t **ids, int32_t *n);

int cli_usage_error(const char *usage, const char *fmt, ...);
int cli_fail(tr_status st);         /* prints tr_last_error(), returns 1 */
double cli_now_ms(void);
long cli_peak_rss_kib(void);

/* Progress bar on stderr (only when stderr is a terminal, or always when forced). */
void cli_progress(void *user, double fraction);

/* Shared model-related options. */
typedef struct cli_model_opts {
    const char *model;
    int32_t n_threads, n_ctx;
    tr_kv_type kv_type;  /* --kv-type (TR_KV_DEFAULT when not given: F16) */
} cli_model_opts;
/* Consumes -m/--model, -t/--threads, -c/--ctx, --kv-type; returns 1 if consumed, 0 if not, -1 on a bad value. */
int cli_model_option(int argc, char **argv, int *i, cli_model_opts *o);
/* Consumes --kv-type f16|f32|q8_0 alone (commands with their own -t/-c parsing): 1 consumed, 0 not, -1 bad value
 * (message printed). Its help line, newline-terminated: */
int cli_kv_type_option(int argc, char **argv, int *i, tr_kv_type *out);
extern const char cli_kv_type_usage[];



/* One warning line on stderr when -c asks for more than the model was trained on (text past it degrades). */
void cli_warn_ctx(const tr_model *model, int32_t n_ctx);
/* Loads opts->model (with opts->kv_type for its caches) and creates a context on it (warning as cli_warn_ctx);
 * prints the error and returns false on failure. */
bool cli_load_model(const cli_model_opts *o, tr_model **model, tr_context **ctx);
/* Tokenizes a prompt with the model's vocabulary (BOS as the vocabulary asks unless no_bos). */
bool cli_tokenize_prompt(const tr_model *model, const char *text, bool no_bos, bool parse_special, int32_t **ids,
                         int32_t *n);
/* Servers: blocks SIGINT and SIGTERM in the calling thread (threads started afterwards inherit the mask, so sigwait
 * on *set gets them on the main thread and shutdown never runs in a signal handler) and ignores SIGPIPE. */
void cli_block_shutdown_signals(sigset_t *set);
/* mkdir -p of the folders above path (path itself is left to its writer); false with the message printed. */
bool cli_make_parents(const char *path);
/* Servers' --ready-file: the base URL without a trailing slash (http://127.0.0.1:41234), so "$(cat FILE)/path" works
 * for serve and ui alike; written to FILE.tmp and renamed, so a reader never sees it half written. */
bool cli_write_ready(const char *path, const char *url);
#endif /* TR_CLI_COMMON_H */
