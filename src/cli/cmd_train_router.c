/* cmd_train_router.c — `tokroute train-router`: fits an MLP router file to collected data (tr_train_router) and,
 * with --eval-data, stores the τ that routes --target-routed of that held-out folder's positions in the file and
 * reports the share of the SLM-to-LLM gap it closes there. Ctrl-C stops at the next mini-batch and still writes the
 * best epoch so far (a second Ctrl-C kills). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/cli_train.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute train-router --data DIR[,DIR...] --out ROUTER.gguf [options]\n"
    "  trains the CITER MLP router (class-weighted BCE, Adam, validation split with early stopping)\n"
    "  the defaults are the recipe that closes the most of the SLM-to-LLM gap (README, \"Router training\")\n"
    "  --hidden W,W         hidden widths; 'h' is the SLM's hidden size (default 256,128; 'none': no hidden layer)\n"
    "  --features LIST      maxprob,entropy,margin,topk,token_embedding,induction,ngram or none (default all\n"
    "                       seven; induction: the token just read's latest earlier occurrence, from the examples'\n"
    "                       tokens; ngram: what the training data's counts of the last 1-6 tokens say follows,\n"
    "                       a table the router file keeps)\n"
    "  --ngram-data DIR[,DIR...]  more collect folders of the same SLM counted into the ngram table only (their\n"
    "                       tokens and expected gains), not trained on: counting is cheap, training rows are not\n"
    "  --slm SLM.gguf       the SLM the data was collected with, for token_embedding (default: the file collect\n"
    "                       recorded in the data)\n"
    "  --topk K             top-k log-probs as features (default 8, at most what collect stored)\n"
    "  --context K          also read the K previous positions' hidden states and logit features (default 1;\n"
    "                       0: this position only, as routers before version 2)\n"
    "  --labels MODE        expected (default: soft, the accuracy routing gains in expectation), gain, mixed;\n"
    "                       hard: drop (CITER: both wrong left out), slm, llm, rollout\n"
    "  --loss L             bce (default), pairwise (a ranking loss within chunks of 64 positions: the higher expected\n"
    "                       gain scores lower, by how much it matters), pairwise+bce (both)\n"
    "  --select-by-gain     keep the epoch whose validation split's lowest-scored 10% / 20% capture the most of the\n"
    "                       labels' gain (always so for the pairwise losses; default: the lowest validation BCE)\n"
    "  --epochs N           most epochs (default 30)      --patience N  early stopping (default 4)\n"
    "  --batch N            mini-batch (default 256)      --lr X        Adam learning rate (default 0.001)\n"
    "  --weight-decay X     L2 on weights (default 0)     --val-fraction F  held-out examples (default 0.1)\n"
    "  --ema D              score, keep and write a moving average of the weights over the steps, decay D per step\n"
    "                       (default 0.9999; 0: the raw weights)\n"
    "  --lr-schedule S      constant (default) or cosine (from --lr down to 0 over the epochs)\n"
    "  --warmup E           epochs of linear learning-rate warm-up from 0 (fractions allowed; default 0)\n"
    "  --dropout P          drop the hidden layers' outputs at rate P while training (default 0)\n"
    "  --aux-weight X       also fit, as extra outputs weighted X in the loss, what the LLM said at each position\n"
    "                       (its p(top-1), its p of the SLM's top-1, the SLM's p of its top-1, top-1s agree); the\n"
    "                       file keeps only the routing output (default 0: off)\n"
    "  --no-class-weights   plain BCE                     --tau T       threshold stored in the file (default 0.5,\n"
    "                                                     or calibrated with --eval-data)\n"
    "  --seed S             initialization, shuffling, split (default 1)\n"
    "  -t, --threads N      threads (default: physical cores; results do not depend on it)\n"
    "  --eval-data DIR      held-out data: the threshold stored is the one that routes --target-routed R of its\n"
    "                       positions (default 0.1), and the gap closed at --routed shares (default 0.05,0.1,0.2)\n"
    "                       is reported on it\n"
    "  Ctrl-C stops training and still writes the best epoch so far (exit 130)\n"
    "  --progress           draw the progress bar even when stderr is not a terminal\n"
    "  --json               print the result (and the evaluation) as JSON on stdout\n";

typedef struct train_opts {
    const char *data, *out, *eval_data, *ngram_data, *hidden, *slm;
    bool json, progress, tau_set;
    double target_routed;
    double routed[16];
    int n_routed;
    cli_eta eta;
    char label[32];
} train_opts;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static bool on_batch(void *user, int64_t done, int64_t total) {
    cli_eta_update(&((train_opts *)user)->eta, done, total);
    return !interrupted;
}

static bool on_epoch(void *user, const tr_train_epoch *e) {
    train_opts *o = user;
    cli_eta_finish(&o->eta);
    fprintf(stderr, "epoch %3d  train loss %.5f  val loss %.5f  val accuracy %.4f  val gain share %.4f%s\n",
            (int)e->epoch, e->train_loss, e->val_loss, e->val_accuracy, e->val_gain_share, e->best ? "  (best)" : "");
    snprintf(o->label, sizeof o->label, "epoch %d", (int)e->epoch + 1);
    cli_eta_start(&o->eta, o->label, o->progress);
    return true;
}

/* "256,128", "2h,h", "none". */
static bool parse_hidden(const char *text, int32_t n_embd, int32_t *hidden) {
    memset(hidden, 0, 8 * sizeof *hidden);
    if (strcmp(text, "none") == 0) {
        hidden[0] = -1;
        return true;
    }
    const char *p = text;
    for (int i = 0; *p; i++) {
        if (i == 8) goto bad;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) v = 1;
        if (*end == 'h') {
            v *= n_embd;
            end++;
        } else if (end == p) {
            goto bad;
        }
        if (v < 1 || v > 65536 || (*end && *end != ',')) goto bad;
        hidden[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    return true;
bad:
    fprintf(stderr, "tokroute: bad value for --hidden: '%s' (expected widths like 256,128 or 2h,h)\n", text);
    return false;
}

static bool parse_shares(const char *text, double *out, int *n) {
    *n = 0;
    const char *p = text;
    while (p && *p && *n < 16) {
        char *end;
        const double v = strtod(p, &end);
        if (end == p || !(v >= 0 && v <= 1) || (*end && *end != ',')) {
            fprintf(stderr, "tokroute: bad value for --routed: '%s' (shares in [0, 1], comma-separated)\n", text);
            return false;
        }
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    return *n > 0;
}

static int parse_args(int argc, char **argv, train_opts *o, tr_train_params *p) {
    const char *v;
    long x;
    double f;
    for (int i = 1; i < argc; i++) {
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_option(argc, argv, &i, NULL, "--data", &v)) o->data = v;
        else if (cli_option(argc, argv, &i, NULL, "--out", &v)) o->out = v;
        else if (cli_option(argc, argv, &i, NULL, "--eval-data", &v)) o->eval_data = v;
        else if (cli_option(argc, argv, &i, NULL, "--ngram-data", &v)) {
            if (!v) return cli_usage_error(usage, "--ngram-data needs a value");
            o->ngram_data = v;
        }
        else if (cli_option(argc, argv, &i, NULL, "--slm", &v)) o->slm = v;
        else if (cli_option(argc, argv, &i, NULL, "--hidden", &v)) {
            if (!v) return cli_usage_error(usage, "--hidden needs a value");
            o->hidden = v;
        } else if (cli_option(argc, argv, &i, NULL, "--features", &v)) {
            if (!v || tr_router_features_parse(v, &p->features) != TR_OK) return cli_fail(TR_ERR_ARG), 2;
        } else if (cli_option(argc, argv, &i, NULL, "--labels", &v)) {
            if (!v || tr_label_mode_from_name(v, &p->labels) != TR_OK) return cli_fail(TR_ERR_ARG), 2;
        } else if (cli_option(argc, argv, &i, NULL, "--loss", &v)) {
            if (!v || tr_train_loss_from_name(v, &p->loss) != TR_OK) return cli_fail(TR_ERR_ARG), 2;
        } else if (cli_flag(argc, argv, &i, NULL, "--select-by-gain")) {
            p->select_by_gain = true;
        } else if (cli_option(argc, argv, &i, NULL, "--topk", &v)) {
            if (!cli_int("--topk", v, 1, TR_ROUTER_TOPK_MAX, &x)) return 2;
            p->topk = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--context", &v)) {
            if (!cli_int("--context", v, 0, TR_ROUTER_CONTEXT_MAX, &x)) return 2;
            p->context = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--epochs", &v)) {
            if (!cli_int("--epochs", v, 1, 100000, &x)) return 2;
            p->epochs = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--patience", &v)) {
            if (!cli_int("--patience", v, 1, 100000, &x)) return 2;
            p->patience = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--batch", &v)) {
            if (!cli_int("--batch", v, 1, 1 << 20, &x)) return 2;
            p->batch = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--seed", &v)) {
            if (!cli_int("--seed", v, 0, 0x7fffffffL, &x)) return 2;
            p->seed = (uint64_t)x;
        } else if (cli_option(argc, argv, &i, "-t", "--threads", &v)) {
            if (!cli_int("--threads", v, 0, 512, &x)) return 2;
            p->n_threads = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--lr", &v)) {
            if (!cli_float("--lr", v, &f) || !(f > 0)) return cli_usage_error(usage, "--lr must be > 0");
            p->learning_rate = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--weight-decay", &v)) {
            if (!cli_float("--weight-decay", v, &f) || !(f >= 0)) return cli_usage_error(usage, "--weight-decay must be >= 0");
            p->weight_decay = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--ema", &v)) {
            if (!cli_float("--ema", v, &f) || !(f >= 0 && f < 1)) return cli_usage_error(usage, "--ema must be in [0, 1)");
            p->ema_decay = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--lr-schedule", &v)) {
            if (v && strcmp(v, "cosine") == 0) p->lr_cosine = true;
            else if (v && strcmp(v, "constant") == 0) p->lr_cosine = false;
            else return cli_usage_error(usage, "--lr-schedule is constant or cosine");
        } else if (cli_option(argc, argv, &i, NULL, "--dropout", &v)) {
            if (!cli_float("--dropout", v, &f) || !(f >= 0 && f <= 0.9)) return cli_usage_error(usage, "--dropout must be in [0, 0.9]");
            p->dropout = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--warmup", &v)) {
            if (!cli_float("--warmup", v, &f) || !(f >= 0)) return cli_usage_error(usage, "--warmup must be >= 0");
            p->lr_warmup = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--aux-weight", &v)) {
            if (!cli_float("--aux-weight", v, &f) || !(f >= 0 && f <= 100))
                return cli_usage_error(usage, "--aux-weight must be in [0, 100]");
            p->aux_weight = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--val-fraction", &v)) {
            if (!cli_float("--val-fraction", v, &f) || !(f >= 0 && f < 1))
                return cli_usage_error(usage, "--val-fraction must be in [0, 1)");
            p->val_fraction = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--tau", &v)) {
            if (!cli_float("--tau", v, &f) || !(f >= 0 && f <= 1)) return cli_usage_error(usage, "--tau must be in [0, 1]");
            p->tau = (float)f;
            o->tau_set = true;
        } else if (cli_option(argc, argv, &i, NULL, "--target-routed", &v)) {
            if (!cli_float("--target-routed", v, &f) || !(f >= 0 && f <= 1))
                return cli_usage_error(usage, "--target-routed must be in [0, 1]");
            o->target_routed = f;
        } else if (cli_option(argc, argv, &i, NULL, "--routed", &v)) {
            if (!v || !parse_shares(v, o->routed, &o->n_routed)) return 2;
        } else if (cli_flag(argc, argv, &i, NULL, "--no-class-weights")) p->class_weights = false;
        else if (cli_flag(argc, argv, &i, NULL, "--progress")) o->progress = true;
        else if (cli_flag(argc, argv, &i, NULL, "--json")) o->json = true;
        else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!o->data || !o->out) return cli_usage_error(usage, "need --data and --out");
    if (o->target_routed >= 0 && !o->eval_data)
        return cli_usage_error(usage, "--target-routed calibrates on held-out data: give --eval-data DIR");
    if (o->target_routed >= 0 && o->tau_set) return cli_usage_error(usage, "give --tau or --target-routed, not both");
    return -1;
}

/* Opens every folder of a comma-separated list (table_only: what --ngram-data's table reads, no hidden states). */
static tr_status open_data(const char *list, bool table_only, tr_train_data **out) {
    *out = NULL;
    char *copy = strdup(list);
    if (!copy) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    char *save = NULL;
    for (char *dir = strtok_r(copy, ",", &save); dir && st == TR_OK; dir = strtok_r(NULL, ",", &save))
        st = *out ? tr_train_data_add(*out, dir)
                  : table_only ? tr_train_data_open_table_only(dir, out) : tr_train_data_open(dir, out);
    free(copy);
    return st;
}

/* Frees what run opened (any may be NULL) and passes rc on. */
static int release(int rc, tr_train_data *data, tr_train_data *eval, tr_train_data *ngram_data, tr_model *slm) {
    tr_train_data_free(data);
    tr_train_data_free(eval);
    tr_train_data_free(ngram_data);
    tr_model_free(slm);
    return rc;
}

static int run(train_opts *o, tr_train_params *p) {
    tr_train_data *data = NULL, *eval = NULL, *ngram_data = NULL;
    tr_model *slm = NULL;
    tr_status st = open_data(o->data, false, &data);
    if (st == TR_OK && o->eval_data) st = open_data(o->eval_data, false, &eval);
    if (st == TR_OK && o->ngram_data) st = open_data(o->ngram_data, true, &ngram_data);
    p->ngram_data = ngram_data;
    const tr_train_data_info info = tr_train_data_get_info(data);
    if (st == TR_OK && (p->features & TR_FEATURE_TOKEN_EMBEDDING)) {
        const char *path = cli_train_slm_path(o->slm, &info, "train-router");
        if (!path) return release(2, data, eval, ngram_data, NULL);
        tr_model_params mp = tr_model_default_params();
        mp.load_vocab = false;
        st = tr_model_load(path, &mp, &slm);
        p->slm = slm;
    }
    if (st != TR_OK) return release(cli_fail(st), data, eval, ngram_data, slm);
    if (o->hidden && !parse_hidden(o->hidden, info.n_embd, p->hidden)) return release(2, data, eval, ngram_data, slm);
    if (!o->json)
        fprintf(stderr, "training on %lld positions of %d examples (SLM right %.4f, LLM right %.4f, both wrong %.4f)\n",
                (long long)info.n_positions, (int)info.n_examples, (double)info.slm_correct / (double)info.n_positions,
                (double)info.llm_correct / (double)info.n_positions, (double)info.both_wrong / (double)info.n_positions);
    snprintf(o->label, sizeof o->label, "epoch 1");
    cli_eta_start(&o->eta, o->label, o->progress);
    p->progress = on_batch;
    p->progress_user = o;
    p->on_epoch = on_epoch;
    p->epoch_user = o;
    if (eval && !o->tau_set) {
        p->calibration = eval;
        if (o->target_routed >= 0) p->target_routed = o->target_routed;
    }
    /* Ctrl-C: stop at the next mini-batch and write the best epoch so far; a second one kills. */
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = (int)SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    tr_train_result res;
    const double t0 = cli_now_ms();
    st = tr_train_router(data, p, o->out, &res);
    const double seconds = (cli_now_ms() - t0) / 1e3;
    cli_eta_finish(&o->eta);
    signal(SIGINT, SIG_DFL);
    /* Interrupted after an epoch completed: the file holds the best epoch so far; say so, and exit 130 after the
     * report like any interrupted command. */
    const bool stopped = interrupted && res.best_epoch > 0 && st == TR_ERR_STATE;
    if (stopped) fprintf(stderr, "tokroute: interrupted: %s\n", tr_last_error());
    int rc = st == TR_OK || stopped ? 0 : cli_fail(st);
    if (rc == 0 && !o->json)
        fprintf(stderr, "wrote %s: best epoch %d of %d, val loss %.5f, val accuracy %.4f; %lld train / %lld val "
                "positions (%lld dropped), mean label %.3f (1 = keep the SLM's token); %.1f s\n", o->out, (int)res.best_epoch,
                (int)res.epochs_run, res.best_val_loss, res.best_val_accuracy, (long long)res.n_train,
                (long long)res.n_val, (long long)res.n_dropped, res.positive_share, seconds);
    if (rc == 0 && !o->json && (p->features & TR_FEATURE_NGRAM))
        fprintf(stderr, "ngram table: %lld contexts, %.1f MB of the router file, from %lld tokens counted%s; built "
                "with the training positions' leave-one-example-out values in %.2f s\n", (long long)res.ngram_contexts,
                (double)res.ngram_bytes / 1e6, (long long)res.ngram_tokens,
                ngram_data ? " (--ngram-data's included)" : "", res.ngram_seconds);
    if (rc == 0 && !o->json && p->calibration)
        fprintf(stderr, "stored tau %.6g: routes %.4f of the %s positions (target %.4f)\n", res.tau,
                res.calibration_routed, o->eval_data, p->target_routed);
    if (rc == 0 && o->json) {
        printf("{\"router\": \"");
        for (const char *s = o->out; *s; s++) { /* a JSON string: quote, backslash and controls escaped */
            if (*s == '"' || *s == '\\') printf("\\%c", *s);
            else if ((unsigned char)*s < 0x20) printf("\\u%04x", (unsigned char)*s);
            else putchar(*s);
        }
        printf("\", \"best_epoch\": %d, \"epochs\": %d, \"val_loss\": %.6f, \"val_accuracy\": %.6f, "
               "\"n_train\": %lld, \"n_val\": %lld, \"n_dropped\": %lld, \"seconds\": %.3f, \"tau\": %.9g",
               (int)res.best_epoch, (int)res.epochs_run, res.best_val_loss, res.best_val_accuracy,
               (long long)res.n_train, (long long)res.n_val, (long long)res.n_dropped, seconds, res.tau);
        if (p->calibration)
            printf(", \"target_routed\": %.6f, \"routed\": %.6f", p->target_routed, res.calibration_routed);
        if (p->features & TR_FEATURE_NGRAM)
            printf(", \"ngram\": {\"contexts\": %lld, \"bytes\": %lld, \"tokens\": %lld, \"seconds\": %.3f}",
                   (long long)res.ngram_contexts, (long long)res.ngram_bytes, (long long)res.ngram_tokens,
                   res.ngram_seconds);
        if (stopped) printf(", \"interrupted\": true");
        printf(eval ? ", \"eval\": " : "}\n");
    }
    if (rc == 0 && eval) {
        tr_router *router = NULL;
        st = tr_router_load(o->out, NULL, &router);
        if (st == TR_OK && slm) st = tr_router_set_slm(router, slm);
        if (st != TR_OK) rc = cli_fail(st);
        else if (!cli_gap_report(eval, router, o->routed, o->n_routed, o->json)) rc = 1;
        if (o->json) printf("}\n");
        tr_router_free(router);
    }
    return release(rc == 0 && stopped ? 130 : rc, data, eval, ngram_data, slm);
}

int cmd_train_router(int argc, char **argv) {
    train_opts o;
    memset(&o, 0, sizeof o);
    o.routed[0] = 0.05;
    o.routed[1] = 0.10;
    o.routed[2] = 0.20;
    o.n_routed = 3;
    o.target_routed = -1;
    tr_train_params p = tr_train_default_params();
    const int rc = parse_args(argc, argv, &o, &p);
    if (rc >= 0) return rc;
    return run(&o, &p);
}
