/* cmd_generate.c — `tokroute generate`: one model, or an SLM and an LLM with token-level routing. Streams the
 * generated text (LLM tokens in red on a terminal) or ids to stdout and nothing else; the latency summary goes
 * to stderr, the per-token trace to a JSONL file. Single-model generation is the routed loop in `slm` mode. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cli/cli_backend.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage_head =
    "usage: tokroute generate (-m MODEL | --slm SLM [--llm LLM | --server URL | --openai URL | --llamacpp URL])\n"
    "                         (-p PROMPT | --tokens 1,2,3) [options]\n"
    "  -m, --model FILE       one model (same as --slm without an LLM)\n"
    "  --slm FILE             the small model (on the device)\n";
static const char *usage =
    "usage: tokroute generate (-m MODEL | --slm SLM [LLM]) (-p PROMPT | --tokens 1,2,3) [options]; --help for all\n";
static const char *usage_rest =
    "  --router FILE          trained router file (CITER MLP)\n"
    "  --policy NAME          training-free router: maxprob (default), margin, entropy\n"
    "  --threshold T          route a token when its confidence < T (default: router file's, else 0.5)\n"
    "  --mode M               joint (default with an LLM), slm (small only), llm (large only)\n"
    "  -p, --prompt TEXT      prompt text;  --chat applies the model's chat template (--chat-template NAME)\n"
    "  --tokens IDS           prompt as comma-separated token ids (used as given)\n"
    "  -n, --n-predict N      most tokens to generate (default 128)\n"
    "  --stop STR             stop when STR appears (repeatable; not printed);  --ignore-eos\n"
    "  --echo                 print the prompt before the generated text\n"
    "  --ids                  print generated token ids instead of text\n"
    "  --no-color             never color LLM tokens (default: red when stdout is a terminal)\n"
    "  --trace FILE.jsonl     one JSON object per token (index, id, text, source, score, tau, slm_ms, llm_ms, slm_id,\n"
    "                         logprob; llm_unavailable when the LLM failed and the SLM's token was used)\n"
    "  --no-summary           no latency summary on stderr;  --summary-json: the summary as JSON on stderr\n"
    "  --temp T, --top-k K, --top-p P, --seed S   sampling (default greedy); with --temp > 0 and no --seed a fresh\n"
    "                         seed is drawn each run and printed on stderr (and as \"seed\" in --summary-json):\n"
    "                         --seed with that number replays the run\n"
    "  --no-bos               do not add BOS to a text prompt\n"
    "  -t, --threads N        threads per model (default: physical cores);  -c, --ctx N  context length\n";

typedef struct gen_opts {
    cli_model_opts mo;
    cli_backend_opts bo;
    const char *router, *policy, *prompt, *tokens, *trace, *chat_template;
    double tau;
    bool tau_set, mode_set, chat, echo, ids, no_color, no_bos, no_summary, summary_json, seed_set;
    tr_route_params rp;
    const char **stop;
    int32_t n_stop;
} gen_opts;

static int parse_sampling(int argc, char **argv, int *i, tr_sampler_params *sp, bool *seed_set) {
    const char *v;
    double f;
    long x;
    if (cli_option(argc, argv, i, NULL, "--temp", &v)) {
        if (!cli_float("--temp", v, &f)) return -1;
        if (!(f >= 0 && isfinite(f))) return fprintf(stderr, "tokroute: --temp must be >= 0 (0 is greedy)\n"), -1;
        sp->temperature = (float)f;
    } else if (cli_option(argc, argv, i, NULL, "--top-k", &v)) {
        if (!cli_int("--top-k", v, 0, 1 << 24, &x)) return -1;
        sp->top_k = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--top-p", &v)) {
        if (!cli_float("--top-p", v, &f)) return -1;
        if (!(f > 0 && f <= 1)) return fprintf(stderr, "tokroute: --top-p must be in (0, 1]\n"), -1;
        sp->top_p = (float)f;
    } else if (cli_option(argc, argv, i, NULL, "--seed", &v)) {
        if (!cli_int("--seed", v, 0, 9007199254740992L, &x)) return -1; /* 2^53, as the HTTP servers take */
        sp->seed = (uint64_t)x;
        *seed_set = true;
    } else {
        return 0;
    }
    return 1;
}

/* 53 random bits: a seed --seed takes back, as the HTTP servers' replies report theirs. */
static bool fresh_seed(uint64_t *seed) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) return false;
    *seed = v & ((UINT64_C(1) << 53) - 1);
    return true;
}

static int parse(int argc, char **argv, gen_opts *o) {
    const char *v;
    long x;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &o->mo);
        if (r == 0) r = parse_sampling(argc, argv, &i, &o->rp.sampling, &o->seed_set);
        if (r == 0) r = cli_backend_option(argc, argv, &i, &o->bo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help"))
            return fputs(usage_head, stdout), fputs(cli_llm_usage, stdout), fputs(cli_backend_usage, stdout), fputs(usage_rest, stdout), fputs(cli_kv_type_usage, stdout), -1;
        if (cli_option(argc, argv, &i, NULL, "--slm", &v)) o->mo.model = v;
        else if (cli_option(argc, argv, &i, NULL, "--router", &v)) o->router = v;
        else if (cli_option(argc, argv, &i, NULL, "--policy", &v)) o->policy = v;
        else if (cli_option(argc, argv, &i, NULL, "--threshold", &v) || cli_option(argc, argv, &i, NULL, "--tau", &v)) {
            if (!cli_float("--threshold", v, &o->tau)) return 2;
            if (!(o->tau >= 0 && o->tau <= 1)) /* NaN too */
                return cli_usage_error(usage, "--threshold must be in [0, 1], as scores are (1 routes every token "
                                              "the router is not sure of; --mode llm routes all)");
            o->tau_set = true;
        } else if (cli_option(argc, argv, &i, NULL, "--mode", &v)) {
            if (tr_route_mode_from_name(v, &o->rp.mode) != TR_OK) return cli_usage_error(usage, "%s", tr_last_error());
            o->mode_set = true;
        } else if (cli_option(argc, argv, &i, "-p", "--prompt", &v)) o->prompt = v;
        else if (cli_option(argc, argv, &i, NULL, "--tokens", &v)) o->tokens = v;
        else if (cli_option(argc, argv, &i, "-n", "--n-predict", &v)) {
            if (!cli_int("--n-predict", v, 0, 1 << 24, &x)) return 2;
            o->rp.n_predict = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--stop", &v)) {
            if (!v || !*v) return cli_usage_error(usage, "--stop needs a non-empty string");
            o->stop[o->n_stop++] = v;
        } else if (cli_option(argc, argv, &i, NULL, "--trace", &v)) o->trace = v;
        else if (cli_option(argc, argv, &i, NULL, "--chat-template", &v)) {
            o->chat_template = v;
            o->chat = true;
        } else if (cli_flag(argc, argv, &i, NULL, "--chat")) o->chat = true;
        else if (cli_flag(argc, argv, &i, NULL, "--echo")) o->echo = true;
        else if (cli_flag(argc, argv, &i, NULL, "--ids")) o->ids = true;
        else if (cli_flag(argc, argv, &i, NULL, "--no-color")) o->no_color = true;
        else if (cli_flag(argc, argv, &i, NULL, "--no-bos")) o->no_bos = true;
        else if (cli_flag(argc, argv, &i, NULL, "--ignore-eos")) o->rp.stop_at_eog = false;
        else if (cli_flag(argc, argv, &i, NULL, "--no-summary")) o->no_summary = true;
        else if (cli_flag(argc, argv, &i, NULL, "--summary-json")) o->summary_json = true;
        else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!o->mo.model) return cli_usage_error(usage, "no model given (-m MODEL or --slm SLM)");
    if (!o->prompt == !o->tokens) return cli_usage_error(usage, "give exactly one of --prompt and --tokens");
    if (o->router && o->policy) return cli_usage_error(usage, "give --router or --policy, not both");
    const char *bad = cli_backend_check(&o->bo);
    if (bad) return cli_usage_error(usage, "%s", bad);
    const bool has_llm = cli_backend_given(&o->bo);
    if (!has_llm && o->mode_set && o->rp.mode != TR_MODE_SLM)
        return cli_usage_error(usage, "mode %s needs an LLM (--llm, --server, --openai or --llamacpp)", tr_route_mode_name(o->rp.mode));
    if (!o->mode_set) o->rp.mode = has_llm ? TR_MODE_JOINT : TR_MODE_SLM;
    /* Routing options with nothing to route would be silently ignored: refuse them. */
    const char *routing_flag = o->router ? "--router" : o->policy ? "--policy" : o->tau_set ? "--threshold" : NULL;
    if (routing_flag && o->rp.mode != TR_MODE_JOINT)
        return cli_usage_error(usage, has_llm ? "%s applies to routed generation; mode %s routes nothing"
                                              : "%s applies to routed generation: give an LLM too (--slm SLM --llm LLM, "
                                                "or --server/--openai/--llamacpp/--sglang URL)",
                               routing_flag, tr_route_mode_name(o->rp.mode));
    tr_policy policy;
    if (o->policy && (tr_policy_from_name(o->policy, &policy) != TR_OK || policy == TR_POLICY_MLP))
        return cli_usage_error(usage, "unknown --policy '%s' (maxprob, margin or entropy; a trained router: --router FILE)",
                               o->policy);
    o->rp.on_llm_failure = o->bo.on_failure;
    cli_backend_hiding(&o->bo, &o->rp);
    if (o->chat && o->tokens) return cli_usage_error(usage, "--chat applies to a text prompt");
    o->rp.stop = o->stop;
    o->rp.n_stop = o->n_stop;
    /* Sampling without a seed: a fresh one each run (the library's default seed would repeat the same text). */
    if (o->rp.sampling.temperature > 0 && !o->seed_set) {
        if (!fresh_seed(&o->rp.sampling.seed)) return fprintf(stderr, "tokroute: no random bytes for a seed\n"), 1;
        fprintf(stderr, "tokroute: seed %llu (drawn; --seed %llu replays this run)\n",
                (unsigned long long)o->rp.sampling.seed, (unsigned long long)o->rp.sampling.seed);
    }
    return 0;
}

/* ---------------------------------------------------------------- output */

typedef struct sink {
    const gen_opts *o;
    bool color;
    FILE *trace;
    bool wrote_id, wrote_text;
    bool falling_back;    /* the last routed token fell back to the SLM's (the LLM did not answer) */
    int32_t n_fell_back;  /* routed tokens that fell back since the warning */
} sink;

/* One line on stderr when routed tokens start falling back to the SLM's (the LLM did not answer) and one when the
 * LLM answers again, so a dead server is noticed before the summary. On a terminal the line starts on its own. */
static void note_llm_state(sink *k, const tr_route_token *t) {
    const bool fell_back = t->llm_unavailable, answered = t->source == TR_SOURCE_LLM;
    if (!fell_back && !answered) return;
    if (fell_back) k->n_fell_back++;
    if (fell_back == k->falling_back) return;
    k->falling_back = fell_back;
    const char *nl = k->wrote_text && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) ? "\n" : "";
    fflush(stdout);
    if (fell_back)
        fprintf(stderr, "%stokroute: warning: the LLM did not answer at token %d; routed tokens are the SLM's own until it "
                "does (--on-llm-failure error stops instead)\n", nl, t->index);
    else
        fprintf(stderr, "%stokroute: the LLM answers again at token %d (%d routed tokens fell back meanwhile)\n", nl,
                t->index, k->n_fell_back);
    if (!fell_back) k->n_fell_back = 0;
}

/* Rounded so the JSON shows 0.4, not 0.40000000596046448. */
static double rounded(double x, double scale) { return (double)(long long)(x * scale + (x < 0 ? -0.5 : 0.5)) / scale; }

/* Six significant digits: scores of a large vocabulary can be ~1e-4, where fixed decimals would tie them. */
static double significant(double x) {
    if (x == 0 || !isfinite(x)) return x;
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", x);
    return strtod(buf, NULL);
}

static void write_trace(FILE *f, const tr_route_token *t) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "index", t->index);
    cJSON_AddNumberToObject(j, "id", t->id);
    cJSON_AddStringToObject(j, "text", t->text ? t->text : "");
    cJSON_AddStringToObject(j, "source", t->source == TR_SOURCE_LLM ? "llm" : "slm");
    if (t->score >= 0) cJSON_AddNumberToObject(j, "score", significant(t->score));
    else cJSON_AddNullToObject(j, "score");
    cJSON_AddNumberToObject(j, "tau", significant(t->tau));
    cJSON_AddNumberToObject(j, "slm_ms", rounded(t->slm_ms, 1e3));
    cJSON_AddNumberToObject(j, "llm_ms", rounded(t->llm_ms, 1e3));
    if (t->source == TR_SOURCE_LLM) {
        if (t->slm_id >= 0) cJSON_AddNumberToObject(j, "slm_id", t->slm_id);
        else cJSON_AddNullToObject(j, "slm_id");
    }
    if (t->logprob == t->logprob) cJSON_AddNumberToObject(j, "logprob", rounded(t->logprob, 1e4));
    if (t->llm_unavailable) cJSON_AddTrueToObject(j, "llm_unavailable");
    if (t->lookahead_hit) cJSON_AddTrueToObject(j, "lookahead");
    if (t->wait_ms > 0) cJSON_AddNumberToObject(j, "wait_ms", rounded(t->wait_ms, 1e3));
    char *s = cJSON_PrintUnformatted(j);
    if (s) fprintf(f, "%s\n", s);
    cJSON_free(s);
    cJSON_Delete(j);
}

static bool on_token(void *user, const tr_route_token *t) {
    sink *k = user;
    note_llm_state(k, t);
    if (k->trace) write_trace(k->trace, t);
    if (k->o->ids) printf(k->wrote_id ? " %d" : "%d", t->id), k->wrote_id = true, fflush(stdout);
    return true;
}

/* Text of a token (t set) or the held-back tail at the end (t NULL). */
static bool on_text(void *user, const char *text, size_t len, const tr_route_token *t) {
    sink *k = user;
    if (k->o->ids) return true;
    const bool red = k->color && t && t->source == TR_SOURCE_LLM;
    if (red) fputs("\x1b[31m", stdout);
    fwrite(text, 1, len, stdout);
    if (red) fputs("\x1b[0m", stdout);
    k->wrote_text = true;
    fflush(stdout);
    return true;
}

/* llm: the backend's statistics (requests failed, refused by the circuit breaker); zeros without an LLM. */
static void print_summary(const gen_opts *o, const tr_route_stats *s, const tr_llm_stats *llm) {
    const double pct = s->n_tokens ? 100.0 * s->n_routed / s->n_tokens : 0.0;
    if (o->summary_json) {
        fprintf(stderr, "{\"mode\":\"%s\",\"seed\":%llu,\"tau\":%g,\"n_prompt\":%d,\"n_tokens\":%d,\"n_routed\":%d,\"routed_pct\":%.2f,"
                "\"ttft_ms\":%.3f,\"mean_tbt_ms\":%.3f,\"slm_ms\":%.3f,\"router_ms\":%.3f,\"llm_ms\":%.3f,"
                "\"total_ms\":%.3f,\"slm_evaluated\":%lld,\"llm_evaluated\":%lld,\"n_fallback\":%d,"
                "\"speculate_depth\":%d,\"lookahead\":%d,\"llm_calls\":%lld,\"llm_failed\":%lld,\"llm_refused\":%lld,"
                "\"llm_blocking\":%lld,"
                "\"llm_wait_ms\":%.3f,\"lookahead_hits\":%d,\"spec_kept\":%d,\"spec_discarded\":%d,"
                "\"spec_agree\":%d,\"spec_disagree\":%d,\"llm_bytes_sent\":%lld,\"llm_bytes_received\":%lld,"
                "\"draft\":%d,\"draft_hits\":%d,\"draft_tokens_sent\":%lld,\"draft_tokens_verified\":%lld,"
                "\"target_routed\":%g,\"max_routed\":%g,\"route_decisions\":%d,\"decided_pct\":%.2f,"
                "\"tau_mean\":%g,\"tau_last\":%g}\n",
                tr_route_mode_name(o->rp.mode), (unsigned long long)o->rp.sampling.seed, o->rp.tau, s->n_prompt, s->n_tokens, s->n_routed, pct, s->ttft_ms,
                s->mean_tbt_ms, s->slm_ms, s->router_ms, s->llm_ms, s->total_ms, (long long)s->slm_evaluated,
                (long long)s->llm_evaluated, s->n_fallback, o->rp.speculate_depth, o->rp.lookahead,
                (long long)s->llm_calls, (long long)llm->failures, (long long)llm->short_circuited,
                (long long)s->llm_blocking, s->llm_wait_ms, s->n_lookahead_hits,
                s->n_spec_kept, s->n_spec_discarded, s->n_spec_agree, s->n_spec_disagree,
                (long long)s->llm_bytes_sent, (long long)s->llm_bytes_received, o->rp.draft_tokens, s->n_draft_hits,
                (long long)s->draft_tokens_sent, (long long)s->draft_tokens_verified, o->rp.target_routed,
                o->rp.max_routed, s->n_route_decisions, s->n_tokens ? 100.0 * s->n_route_decisions / s->n_tokens : 0.0,
                significant(s->tau_mean), significant(s->tau_last));
        return;
    }
    const bool budgeted = o->rp.mode == TR_MODE_JOINT && (o->rp.target_routed > 0 || o->rp.max_routed > 0);
    char target[32] = "off", cap[32] = "off", tau[96];
    if (o->rp.target_routed > 0) snprintf(target, sizeof target, "%.1f%%", 100 * o->rp.target_routed);
    if (o->rp.max_routed > 0) snprintf(cap, sizeof cap, "%.1f%%", 100 * o->rp.max_routed);
    if (budgeted)
        fprintf(stderr, "\n--- budget: target %s, cap %s; decided routed %d of %d (%.1f%%) ---", target, cap,
                s->n_route_decisions, s->n_tokens, s->n_tokens ? 100.0 * s->n_route_decisions / s->n_tokens : 0.0);
    /* A target moves tau from the one given: the summary names what was used, not where it started. */
    if (budgeted && o->rp.target_routed > 0)
        snprintf(tau, sizeof tau, "tau moved by the target from %.3g: mean %.3g, last %.3g", o->rp.tau, s->tau_mean,
                 s->tau_last);
    else snprintf(tau, sizeof tau, "tau %.3g", o->rp.tau);
    fprintf(stderr,
            "\n--- %s mode, %s ---\n"
            "time to first token        %9.2f ms\n"
            "mean time between tokens   %9.2f ms\n"
            "tokens                     %6d\n"
            "routed to the LLM          %6d (%.1f%%)\n"
            "LLM unavailable (fallback) %6d\n"
            "SLM time                   %9.2f ms (router %.2f ms)\n"
            "LLM + communication time   %9.2f ms\n"
            "LLM requests sent          %6lld (%lld failed)\n"
            "routed tokens waited for   %6lld (%lld refused at once while the LLM was down), %.2f ms in all\n"
            "lookahead hits             %6d (lookahead %d, speculation depth %d; %d from drafts)\n"
            "draft tokens sent          %6lld, verified by the LLM %lld (draft %d)\n"
            "speculative tokens kept    %6d, discarded %d\n"
            "LLM tokens evaluated       %6lld; bytes sent %lld, received %lld\n"
            "total                      %9.2f ms\n",
            tr_route_mode_name(o->rp.mode), tau, s->ttft_ms, s->mean_tbt_ms, s->n_tokens, s->n_routed, pct,
            s->n_fallback, s->slm_ms, s->router_ms, s->llm_ms, (long long)s->llm_calls, (long long)llm->failures,
            (long long)s->llm_blocking, (long long)llm->short_circuited, s->llm_wait_ms, s->n_lookahead_hits,
            o->rp.lookahead, o->rp.speculate_depth, s->n_draft_hits,
            (long long)s->draft_tokens_sent, (long long)s->draft_tokens_verified, o->rp.draft_tokens, s->n_spec_kept,
            s->n_spec_discarded, (long long)s->llm_evaluated, (long long)s->llm_bytes_sent,
            (long long)s->llm_bytes_received, s->total_ms);
}

/* ---------------------------------------------------------------- Ctrl-C */

/* The first Ctrl-C stops the generation at its next token (or inside a pending LLM call) so the way out runs:
 * a --server session is deleted (tr_llm_backend_free, at most a second), the text so far is ended. A second one
 * kills as usual. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static bool was_interrupted(void *user) {
    (void)user;
    return interrupted;
}

static void catch_sigint(void) {
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = (int)SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* ---------------------------------------------------------------- set-up */

typedef struct gen_state {
    tr_model *slm, *llm;
    tr_context *ctx;
    tr_router *router;
    tr_llm_backend *backend;
    int32_t *prompt, n_prompt;
} gen_state;

/* Tokenizes the prompt as a user message in the forced or detected chat template (control tokens only from the
 * template, never from the text); prints the error and returns false on failure. */
static bool chat_tokens(const gen_opts *o, gen_state *g) {
    tr_chat_template t = TR_CHAT_NONE;
    tr_status st = TR_OK;
    if (o->chat_template) {
        st = tr_chat_template_from_name(o->chat_template, &t);
    } else {
        tr_gguf *gguf;
        if ((st = tr_gguf_open(o->mo.model, &gguf)) == TR_OK) {
            t = tr_chat_template_detect(gguf);
            tr_gguf_close(gguf);
            if (t == TR_CHAT_NONE) {
                fprintf(stderr, "tokroute: the model has no known chat template; use --chat-template NAME\n");
                return false;
            }
        }
    }
    const tr_vocab *vocab = tr_model_vocab(g->slm);
    if (!vocab) return fprintf(stderr, "tokroute: the model has no vocabulary for a chat prompt\n"), false;
    const tr_chat_message msg = {"user", o->prompt};
    int32_t n = 0;
    if (st == TR_OK) st = tr_chat_tokenize(vocab, t, &msg, 1, true, true, NULL, 0, &n); /* counts */
    if (st == TR_OK || st == TR_ERR_RANGE) {
        if (!(g->prompt = malloc((size_t)(n > 0 ? n : 1) * sizeof *g->prompt))) return cli_fail(TR_ERR_NOMEM), false;
        st = tr_chat_tokenize(vocab, t, &msg, 1, true, true, g->prompt, n, &n);
    }
    if (st != TR_OK) return cli_fail(st), false;
    if (o->no_bos && n > 0 && g->prompt[0] == tr_vocab_bos(vocab))
        memmove(g->prompt, g->prompt + 1, (size_t)--n * sizeof *g->prompt);
    g->n_prompt = n;
    return true;
}

static int setup(const gen_opts *o, gen_state *g) {
    cli_model_opts mo = o->mo;
    if (!cli_load_model(&mo, &g->slm, &g->ctx)) return 1;
    tr_status st = TR_OK;
    bool ok = o->tokens ? cli_token_list(o->tokens, &g->prompt, &g->n_prompt)
              : o->chat ? chat_tokens(o, g)
                        : cli_tokenize_prompt(g->slm, o->prompt, o->no_bos, false, &g->prompt, &g->n_prompt);
    if (!ok) return 1;
    if (g->n_prompt == 0) return fprintf(stderr, "tokroute: the prompt is empty\n"), 1;
    if (cli_backend_given(&o->bo)) {
        tr_context_params cp = tr_context_default_params();
        cp.n_threads = o->mo.n_threads;
        cp.n_ctx = tr_context_n_ctx(g->ctx);
        cp.kv_type = o->mo.kv_type; /* an embedded LLM's cache too */
        tr_sampler_params sp = o->rp.sampling;
        sp.seed += 1;
        if (!cli_backend_open(&o->bo, g->slm, &cp, &sp, &g->llm, &g->backend)) return 1;
    }
    if (o->rp.mode == TR_MODE_JOINT) {
        if (o->router) {
            st = tr_router_load(o->router, tr_model_get_info(g->slm), &g->router);
            if (st == TR_OK) st = tr_router_set_slm(g->router, g->slm); /* token-embedding feature */
            if (st == TR_OK) st = tr_router_set_threads(g->router, tr_context_n_threads(g->ctx));
        } else {
            tr_policy policy = TR_POLICY_MAXPROB;
            if (o->policy && (st = tr_policy_from_name(o->policy, &policy)) != TR_OK) return cli_fail(st);
            st = tr_router_create(policy, &g->router);
        }
        if (st != TR_OK) return cli_fail(st);
    }
    return 0;
}

/* A remote LLM that reports its context (tokroute serve's -c, from /health) shorter than the prompt and the tokens
 * asked for would refuse the routed calls past it: say so now and end the generation there instead. */
static bool fit_llm_context(gen_opts *o, const gen_state *g) {
    if (!g->backend || o->rp.mode == TR_MODE_SLM) return true;
    const int32_t n_ctx = tr_llm_backend_n_ctx(g->backend);
    if (n_ctx <= 0 || g->n_prompt + o->rp.n_predict <= n_ctx) return true;
    if (g->n_prompt >= n_ctx) {
        fprintf(stderr, "tokroute: the prompt (%d tokens) does not fit the LLM server's context of %d tokens (its -c)\n",
                g->n_prompt, n_ctx);
        return false;
    }
    fprintf(stderr, "tokroute: warning: the LLM server's context is %d tokens (its -c): generating at most %d tokens "
            "after the %d-token prompt, not %d\n", n_ctx, n_ctx - g->n_prompt, g->n_prompt, o->rp.n_predict);
    o->rp.n_predict = n_ctx - g->n_prompt;
    return true;
}

int cmd_generate(int argc, char **argv) {
    /* Every --stop takes two arguments, so argc slots always suffice. */
    const char **stop_storage = calloc((size_t)argc, sizeof *stop_storage);
    if (!stop_storage) return cli_fail(TR_ERR_NOMEM);
    gen_opts o = {.rp = tr_route_default_params(), .stop = stop_storage};
    cli_backend_init(&o.bo);
    o.rp.sampling.temperature = 0.0f;
    int rc = parse(argc, argv, &o);
    if (rc != 0) {
        free(stop_storage);
        return rc < 0 ? 0 : rc;
    }
    gen_state g = {0};
    rc = setup(&o, &g);
    if (rc == 0 && !fit_llm_context(&o, &g)) rc = 1;
    if (rc == 0) {
        o.rp.tau = o.tau_set ? (float)o.tau : g.router ? tr_router_default_tau(g.router) : 0.5f;
        sink k = {.o = &o, .color = !o.no_color && isatty(STDOUT_FILENO)};
        if (o.trace && !(k.trace = fopen(o.trace, "w"))) {
            fprintf(stderr, "tokroute: cannot create %s\n", o.trace);
            rc = 1;
        }
        if (rc == 0 && o.echo && o.prompt) fputs(o.prompt, stdout), k.wrote_text = true;
        o.rp.on_token = on_token;
        o.rp.on_text = on_text;
        o.rp.user = &k;
        o.rp.abort_fn = was_interrupted;
        catch_sigint();
        tr_route_stats stats;
        tr_status st = rc ? TR_OK : tr_route_generate(g.ctx, g.router, g.backend, g.prompt, g.n_prompt, &o.rp, NULL, 0,
                                                      &stats);
        if (rc == 0) {
            /* End the line only if something was written: on an error stdout stays empty. */
            if (k.wrote_id || k.wrote_text) putchar('\n');
            fflush(stdout);
            if (st != TR_OK && interrupted) rc = 130, fprintf(stderr, "tokroute: interrupted\n");
            else if (st != TR_OK) rc = cli_fail(st);
            else if (!o.no_summary) {
                const tr_llm_stats llm = g.backend ? tr_llm_backend_stats(g.backend) : (tr_llm_stats){0};
                print_summary(&o, &stats, &llm);
            }
        }
        if (k.trace) fclose(k.trace);
    }
    tr_router_free(g.router);
    tr_llm_backend_free(g.backend);
    tr_context_free(g.ctx);
    tr_model_free(g.slm);
    tr_model_free(g.llm);
    free(g.prompt);
    free(stop_storage);
    return rc;
}
