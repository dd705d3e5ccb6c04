/* cli_train.h — what the router-training commands (collect, train-router, calibrate) share: a progress bar with
 * elapsed time and time left (on stderr when it is a terminal, or when forced; redrawn at most ten times a
 * second), and the gap-closed report of routers and policies on collected data. */
#ifndef TR_CLI_TRAIN_H
#define TR_CLI_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "tokroute.h"

typedef struct cli_eta {
    const char *label;    /* "collect", "epoch 3" */
    double start_ms, last_draw_ms;
    int64_t start_done;   /* units already done when the bar started (a resumed collect) */
    bool enabled;
    char extra[96];       /* text after the bar (losses, positions) */
} cli_eta;

/* force: draw even when stderr is not a terminal (redrawn with carriage returns). */
void cli_eta_start(cli_eta *e, const char *label, bool force);
void cli_eta_update(cli_eta *e, int64_t done, int64_t total);
/* Ends the bar's line. */
void cli_eta_finish(cli_eta *e);

/* Prints (text on stderr, or one JSON object on stdout) SLM/LLM accuracy and, at each target share, the share of
 * the gap closed by the router (may be NULL), maxprob, margin, entropy and the oracle. Returns false on error
 * (message printed). */
bool cli_gap_report(const tr_train_data *data, tr_router *router, const double *targets, int n, bool json);

/* The SLM file whose token table the token_embedding feature reads: `given` (--slm) when set, else the one collect
 * recorded in the data, when it is still there (said on stderr). NULL with one line on stderr naming --slm and how
 * to do without it. */
const char *cli_train_slm_path(const char *given, const tr_train_data_info *info, const char *command);

#endif /* TR_CLI_TRAIN_H */
