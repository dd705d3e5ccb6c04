/* cli_backend.h — the LLM-backend options every command that routes shares (generate, ui): parsing the flags
 * (--llm FILE | --server URL | --openai URL [--openai-model NAME] | --llamacpp URL, --api-key, --timeout-ms, --retries,
 * --cacert, --on-llm-failure, --simulate-rtt, and hiding the round trip: --sync, --speculate-depth, --lookahead,
 * --draft...) and opening the backend, including the SLM/LLM vocabulary check and
 * its one start-up line on stderr. */
#ifndef TR_CLI_BACKEND_H
#define TR_CLI_BACKEND_H

#include <stdbool.h>

#include "tokroute.h"

typedef struct cli_backend_opts {
    const char *llm;        /* --llm FILE: embedded */
    const char *server;     /* --server URL: tokroute serve's session protocol */
    const char *openai;     /* --openai URL: OpenAI-compatible /v1/completions */
    const char *llamacpp;   /* --llamacpp URL: llama.cpp's /completion */
    const char *sglang;     /* --sglang URL: SGLang's native /generate */
    tr_remote_params remote;/* --openai-model, --api-key (or TOKROUTE_API_KEY), --cacert, --timeout-ms, --retries */
    tr_llm_failure on_failure; /* --on-llm-failure fallback|error */
    double rtt_ms;          /* --simulate-rtt MS */
    /* hiding the round trip: --sync, --speculate-depth, --lookahead, --draft, --draft-width, --draft-span (-1: the
     * default), --draft-fixed */
    bool sync, draft_fixed;
    long depth, lookahead, draft, draft_width, draft_span;
    double target_routed, max_routed; /* --target-routed P, --max-routed P (0: off) */
} cli_backend_opts;

/* Help lines: where the LLM is (--llm ... --cacert), for every command that needs an LLM; and the routing ones
 * (--on-llm-failure, --simulate-rtt, hiding the round trip), for the commands that route. Each line ends in a
 * newline; commands that route print both. */
extern const char cli_llm_usage[];
extern const char cli_backend_usage[];

/* Defaults (reads TOKROUTE_API_KEY). */
void cli_backend_init(cli_backend_opts *o);
/* Consumes one backend flag at argv[*i] (advancing *i past its value): 1 consumed, 0 not a backend flag, -1 bad
 * value (message printed). */
int cli_backend_option(int argc, char **argv, int *i, cli_backend_opts *o);
/* Only the flags of cli_llm_usage (collect, eval: commands that read the LLM but do not route live). */
int cli_llm_option(int argc, char **argv, int *i, cli_backend_opts *o);
/* True when an LLM is given (any of --llm, --server, --openai, --llamacpp, --sglang). */
bool cli_backend_given(const cli_backend_opts *o);
/* Checks the combination after parsing; NULL when fine, else a message for cli_usage_error. */
const char *cli_backend_check(const cli_backend_opts *o);
/* The speculation, lookahead and drafting settings of tr_route_params: the flags given, else on (depth 8,
 * lookahead 8 — only for --server and --llm —, draft 96 × width 3 over 32 positions) for a remote LLM or a
 * simulated delay, off otherwise; and the budget (--target-routed, --max-routed). */
void cli_backend_hiding(const cli_backend_opts *o, tr_route_params *rp);
/* Opens the backend: loads --llm (returned in *llm_model, which the caller frees; NULL for remote backends),
 * checks the vocabulary against the SLM's (tr_vocab_compatible / _size), prints one line saying which case applies,
 * restricts the LLM to the shared ids, sets the simulated delay. cp is for the embedded backend, sp the LLM's
 * sampling (embedded and --server; OpenAI-compatible and llama.cpp requests are greedy). Prints the
 * error and returns false on failure. */
bool cli_backend_open(const cli_backend_opts *o, const tr_model *slm, const tr_context_params *cp,
                      const tr_sampler_params *sp, tr_model **llm_model, tr_llm_backend **out);

#endif /* TR_CLI_BACKEND_H */
