/* cmd_collect.c — `tokroute collect`: runs a dataset through the SLM and the LLM and stores per position what a
 * router trains on (tr_collect, or tr_collect_backend for an LLM behind a server; file format in docs/train.md).
 * Interrupted runs resume in the same folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_backend.h"
#include "cli/cli_common.h"
#include "cli/cli_train.h"
#include "cli/commands.h"

static const char *usage_head =
    "usage: tokroute collect --slm SLM.gguf LLM --data FILE --format FORMAT --out DIR [options]\n"
    "  teacher-forces each example through both models and stores, per predicted position, the SLM's hidden\n"
    "  state and logit features and both models' top-1 tokens and probabilities (DIR/positions.bin + index.bin)\n"
    "  LLM is one of (the LLM scores each example in one request where its engine allows; llama.cpp: one per\n"
    "  position):\n";
static const char *usage_rest =
    "  --format F           text (examples separated by <|endoftext|> lines), llm-sample (no --data: example i\n"
    "                       is sampled from the LLM at temperature 1 with seed + i), csqa|gsm8k|arc|mmlu (the\n"
    "                       answer's positions after the prompt; templates as `tokroute eval`), text-continue\n"
    "                       (a text file: each story's first half, not stored, continued by the LLM as llm-sample)\n"
    "  --chat-template NAME question prompts as a user turn: chatml, llama2, llama3, gemma, gemma4, none (default: the SLM's)\n"
    "  --range A:B          examples A..B-1 (default: all; llm-sample needs it)\n"
    "  --max-tokens N       tokens per example, BOS included (default 256)\n"
    "  --topk K             top-k log-probs of the SLM stored per position (default 16, at most 64)\n"
    "  --llm-topk K         the LLM's top ids read per position (default 20, vLLM's default limit; at most 64):\n"
    "                       its probability of the SLM's top-1 counts as 0 outside them\n"
    "  --rollouts K         where both models are wrong, continue K tokens with the SLM after each model's token\n"
    "                       and store how many match the reference (labels: --labels rollout) (default 0)\n"
    "  --round 2 --router R round 2: the prefix after --prompt-tokens N (default 16) is generated with router R at\n"
    "                       --tau T (default: the router's); the reference is the LLM's greedy token\n"
    "  --seed S             llm-sample and text-continue seed (default 1)\n"
    "  -t, --threads N      threads per model (default: physical cores)\n"
    "  --kv-type T          KV caches: f16 (default), q8_0 (about half the memory), f32\n"
    "  --restart            start over instead of resuming what DIR holds\n"
    "  --progress           draw the progress bar even when stderr is not a terminal\n"
    "  --json               print the summary as JSON on stdout\n";
static char usage[4096];

typedef struct collect_opts {
    const char *slm, *data, *out, *router, *chat_template;
    cli_backend_opts bo;
    bool json, progress;
    long round;
    double tau;
    bool tau_set;
    tr_kv_type kv_type; /* --kv-type */
} collect_opts;

typedef struct collect_progress {
    cli_eta eta;
    tr_llm_backend *llm;
    double t0_ms;
} collect_progress;

/* The bar, with the LLM's scoring rate: positions per second and requests sent. */
static bool on_progress(void *user, int64_t done, int64_t total) {
    collect_progress *cp = user;
    const tr_llm_score_stats s = tr_llm_backend_score_stats(cp->llm);
    const double secs = (cli_now_ms() - cp->t0_ms) / 1e3;
    snprintf(cp->eta.extra, sizeof cp->eta.extra, "| %.0f positions/s, %lld LLM requests",
             secs > 0 ? (double)s.positions / secs : 0.0, (long long)s.requests);
    cli_eta_update(&cp->eta, done, total);
    return true;
}

static bool parse_range(const char *text, int32_t *first, int32_t *last) {
    char *end;
    const long a = text ? strtol(text, &end, 10) : -1;
    if (!text || end == text || *end != ':' || a < 0 || a > INT32_MAX) goto bad;
    const char *b_text = end + 1;
    const long b = strtol(b_text, &end, 10);
    if (end == b_text || *end || b < a || b > INT32_MAX) goto bad;
    *first = (int32_t)a;
    *last = (int32_t)b;
    return true;
bad:
    fprintf(stderr, "tokroute: bad value for --range: '%s' (expected A:B with 0 <= A <= B)\n", text ? text : "");
    return false;
}

static int parse_args(int argc, char **argv, collect_opts *o, tr_collect_params *p) {
    const char *v;
    long x;
    for (int i = 1; i < argc; i++) {
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        const int r = cli_llm_option(argc, argv, &i, &o->bo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_option(argc, argv, &i, NULL, "--slm", &v)) o->slm = v;
        else if (cli_option(argc, argv, &i, NULL, "--data", &v)) o->data = v;
        else if (cli_option(argc, argv, &i, NULL, "--out", &v)) o->out = v;
        else if (cli_option(argc, argv, &i, NULL, "--router", &v)) o->router = v;
        else if (cli_option(argc, argv, &i, NULL, "--chat-template", &v)) o->chat_template = v;
        else if (cli_option(argc, argv, &i, NULL, "--format", &v)) {
            if (!v || tr_data_format_from_name(v, &p->format) != TR_OK)
                return cli_usage_error(usage, "bad --format '%s'", v ? v : "");
        } else if (cli_option(argc, argv, &i, NULL, "--range", &v)) {
            if (!parse_range(v, &p->first, &p->last)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--max-tokens", &v)) {
            if (!cli_int("--max-tokens", v, 2, 1 << 20, &x)) return 2;
            p->max_tokens = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--topk", &v)) {
            if (!cli_int("--topk", v, 1, TR_ROUTER_TOPK_MAX, &x)) return 2;
            p->topk = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--llm-topk", &v)) {
            if (!cli_int("--llm-topk", v, 1, TR_SCORE_TOPK_MAX, &x)) return 2;
            p->llm_topk = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--rollouts", &v)) {
            if (!cli_int("--rollouts", v, 0, 4096, &x)) return 2;
            p->rollouts = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--round", &v)) {
            if (!cli_int("--round", v, 1, 2, &o->round)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--tau", &v)) {
            if (!cli_float("--tau", v, &o->tau)) return 2;
            if (!(o->tau >= 0 && o->tau <= 1)) return cli_usage_error(usage, "--tau must be in [0, 1], as scores are");
            o->tau_set = true;
        } else if (cli_option(argc, argv, &i, NULL, "--prompt-tokens", &v)) {
            if (!cli_int("--prompt-tokens", v, 1, 1 << 20, &x)) return 2;
            p->prompt_tokens = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--seed", &v)) {
            if (!cli_int("--seed", v, 0, 0x7fffffffL, &x)) return 2;
            p->seed = (uint64_t)x;
        } else if (cli_option(argc, argv, &i, "-t", "--threads", &v)) {
            if (!cli_int("--threads", v, 0, 512, &x)) return 2;
            p->n_threads = (int32_t)x;
        } else if ((x = cli_kv_type_option(argc, argv, &i, &o->kv_type)) != 0) {
            if (x < 0) return 2;
        } else if (cli_flag(argc, argv, &i, NULL, "--restart")) p->resume = false;
        else if (cli_flag(argc, argv, &i, NULL, "--progress")) o->progress = true;
        else if (cli_flag(argc, argv, &i, NULL, "--json")) o->json = true;
        else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    const char *bad = cli_backend_check(&o->bo);
    if (bad) return cli_usage_error(usage, "%s", bad);
    if (!o->slm || !cli_backend_given(&o->bo) || !o->out)
        return cli_usage_error(usage, "need --slm, an LLM (--llm FILE or a server) and --out");
    if (p->format != TR_DATA_LLM_SAMPLE && !o->data) return cli_usage_error(usage, "need --data FILE");
    if (o->round == 2 && !o->router) return cli_usage_error(usage, "--round 2 needs --router FILE");
    if (o->router && o->round != 2) return cli_usage_error(usage, "--router is for --round 2");
    if (o->chat_template) {
        if (tr_chat_template_from_name(o->chat_template, &p->chat_template) != TR_OK)
            return cli_usage_error(usage, "%s", tr_last_error());
    } else if (p->format != TR_DATA_TEXT && p->format != TR_DATA_LLM_SAMPLE && p->format != TR_DATA_TEXT_CONTINUE) {
        tr_gguf *g = NULL;
        if (tr_gguf_open(o->slm, &g) == TR_OK) {
            p->chat_template = tr_chat_template_detect(g);
            tr_gguf_close(g);
        }
    }
    return -1;
}

/* The LLM as the data's header names it (a resume checks it): the kind of backend and, for --openai, the model
 * asked for. Not the address: a resume may reach the same LLM at another one (a restarted server, a new port). */
static void remote_name(const cli_backend_opts *bo, char *out, size_t n) {
    const char *kind = bo->server ? "server" : bo->openai ? "openai" : bo->llamacpp ? "llamacpp" : "sglang";
    snprintf(out, n, "%s%s%s", kind, bo->remote.model ? ":" : "", bo->remote.model ? bo->remote.model : "");
}

static int run(collect_opts *o, tr_collect_params *p) {
    tr_model_params mp = tr_model_default_params();
    mp.kv_type = o->kv_type;
    tr_model *slm = NULL, *llm = NULL;
    tr_llm_backend *backend = NULL;
    tr_router *router = NULL;
    tr_status st = tr_model_load(o->slm, &mp, &slm);
    if (st != TR_OK) return cli_fail(st);
    /* The LLM's context holds one example and the position after it. */
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = p->max_tokens + 1;
    cp.n_batch = cp.n_ctx;
    cp.n_threads = p->n_threads;
    cp.kv_type = o->kv_type;
    if (!cli_backend_open(&o->bo, slm, &cp, NULL, &llm, &backend)) {
        tr_model_free(slm);
        return 1;
    }
    if (o->router) {
        st = tr_router_load(o->router, tr_model_get_info(slm), &router);
        if (st == TR_OK) st = tr_router_set_slm(router, slm); /* token-embedding feature */
        p->router = router;
        p->tau = o->tau_set ? (float)o->tau : tr_router_default_tau(router);
    }
    if (st != TR_OK) {
        tr_llm_backend_free(backend);
        tr_model_free(slm);
        tr_model_free(llm);
        return cli_fail(st);
    }
    collect_progress prog = {.llm = backend, .t0_ms = cli_now_ms()};
    cli_eta_start(&prog.eta, "collect", o->progress);
    p->progress = on_progress;
    p->progress_user = &prog;
    tr_collect_stats stats;
    const double t0 = cli_now_ms();
    char name[64];
    if (llm) {
        const tr_model_info *li = tr_model_get_info(llm);
        snprintf(name, sizeof name, "%s", li->name ? li->name : ""); /* as tr_collect names it */
    } else {
        remote_name(&o->bo, name, sizeof name);
    }
    /* Recorded in the data, so that train-router finds the SLM's token table (token_embedding) by itself. */
    char *slm_path = realpath(o->slm, NULL);
    p->slm_path = slm_path;
    st = cli_make_parents(o->out) ? tr_collect_backend(slm, backend, name, o->data, o->out, p, &stats) : TR_ERR_IO;
    free(slm_path);
    p->slm_path = NULL;
    const double seconds = (cli_now_ms() - t0) / 1e3;
    cli_eta_finish(&prog.eta);
    const tr_llm_score_stats ss = tr_llm_backend_score_stats(backend);
    int rc = st == TR_OK ? 0 : cli_fail(st);
    const int64_t n_new = stats.n_examples - stats.n_resumed;
    if (rc == 0 && o->json) {
        printf("{\"examples\": %d, \"resumed\": %d, \"positions\": %lld, \"new_examples\": %lld, \"seconds\": %.3f,"
               " \"slm_correct\": %lld, \"llm_correct\": %lld, \"llm_requests\": %lld, \"llm_positions\": %lld}\n",
               (int)stats.n_examples, (int)stats.n_resumed, (long long)stats.n_positions, (long long)n_new, seconds,
               (long long)stats.slm_correct, (long long)stats.llm_correct, (long long)ss.requests,
               (long long)ss.positions);
    } else if (rc == 0) {
        fprintf(stderr, "collected %d examples (%d resumed), %lld positions in %s, %.1f s\n", (int)stats.n_examples,
                (int)stats.n_resumed, (long long)stats.n_positions, o->out, seconds);
        if (ss.requests > 0)
            fprintf(stderr, "LLM (%s): %lld positions scored in %lld requests, %.0f positions/s\n",
                    tr_llm_backend_name(backend), (long long)ss.positions, (long long)ss.requests,
                    seconds > 0 ? (double)ss.positions / seconds : 0.0);
        const int64_t n_fresh = stats.n_positions; /* of this run only when nothing was resumed */
        if (stats.n_resumed == 0 && n_fresh > 0)
            fprintf(stderr, "top-1 accuracy against the reference: SLM %.4f, LLM %.4f\n",
                    (double)stats.slm_correct / (double)n_fresh, (double)stats.llm_correct / (double)n_fresh);
    }
    tr_router_free(router);
    tr_llm_backend_free(backend);
    tr_model_free(slm);
    tr_model_free(llm);
    return rc;
}

int cmd_collect(int argc, char **argv) {
    collect_opts o = {0};
    o.round = 1;
    cli_backend_init(&o.bo);
    snprintf(usage, sizeof usage, "%s%s%s", usage_head, cli_llm_usage, usage_rest);
    tr_collect_params p = tr_collect_default_params();
    const int rc = parse_args(argc, argv, &o, &p);
    if (rc >= 0) return rc;
    return run(&o, &p);
}
