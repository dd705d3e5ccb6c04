/* cli_backend.c — LLM-backend flags (hiding the round trip included) and backend construction shared by the
 * commands that route (see cli_backend.h). The vocabulary check is the library's (tr_vocab_compatible); this file only reports it. */
#include "cli/cli_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"

const char cli_llm_usage[] =
    "  --llm FILE             the large model, loaded in this process (embedded backend)\n"
    "  --server URL           the LLM on a `tokroute serve` (session protocol: only new tokens are sent)\n"
    "  --openai URL           any OpenAI-compatible /v1/completions (vLLM, SGLang, llama.cpp, tokroute serve);\n"
    "                         URL is the server's root or the base apps use (http://host:8000/v1)\n"
    "  --openai-model NAME    \"model\" of --openai requests (-m/--model names the local model file)\n"
    "  --llamacpp URL         llama.cpp's server (POST /completion with cache_prompt)\n"
    "  --sglang URL           SGLang's native server (POST /generate with input_ids)\n"
    "  --api-key KEY          Bearer key for the LLM server (default: env TOKROUTE_API_KEY)\n"
    "  --timeout-ms MS        most time one LLM call may take, retries included (default 10000)\n"
    "  --retries N            further attempts after a failed request, with backoff (default 2)\n"
    "  --cacert FILE          PEM CA certificate for https:// URLs (certificates are always verified)\n";

const char cli_backend_usage[] =
    "  --on-llm-failure P     fallback (default: the SLM's token, marked in the trace) or error\n"
    "  --simulate-rtt MS      add a network delay to every LLM call\n"
    "  --sync                 wait for every routed token (no speculation, lookahead or draft)\n"
    "  --speculate-depth D    keep decoding up to D SLM tokens while a routed request is in flight, while the SLM's\n"
    "                         proposals have been agreeing with the LLM (default 8 for a remote LLM or\n"
    "                         --simulate-rtt, else 0); shown only once confirmed, same tokens as --sync\n"
    "  --lookahead K          ask each routed call for up to K further greedy LLM tokens (streamed after the answer),\n"
    "                         used without a round trip while the text still follows them; fewer while they earn\n"
    "                         nothing (default 8 for --server, or --llm with --simulate-rtt; else 0; --llamacpp\n"
    "                         streams it from llama.cpp when asked: exact but for llama.cpp's rounding; --openai: none)\n"
    "  --draft N              send up to N SLM-drafted tokens with each routed call; the LLM verifies them in the same\n"
    "                         call and answers every routed position along the branch it agrees with; drafting\n"
    "                         before sending is scaled by what drafts have been earning (default 96 for a remote\n"
    "                         LLM or --simulate-rtt, else 0)\n"
    "  --draft-width W        SLM candidates drafted at the routed position (default 3; 2 at later routed ones)\n"
    "  --draft-span S         positions the draft covers (default 32)\n"
    "  --draft-fixed          draft all N tokens before every routed call, whatever the round trip and earnings\n"
    "                         (pairs known to agree; measurements independent of the machine's speed)\n"
    "  --target-routed P      keep the routed share near P (0..1): tau starts at --threshold (default: the router\n"
    "                         file's) and follows the routed count; each token's tau is in the trace\n"
    "  --max-routed P         never route more than ceil(P·n) of the first n tokens (P in 0..1)\n";

void cli_backend_init(cli_backend_opts *o) {
    memset(o, 0, sizeof *o);
    o->depth = o->lookahead = o->draft = o->draft_width = o->draft_span = -1;
    o->remote = tr_remote_default_params();
    const char *key = getenv("TOKROUTE_API_KEY");
    if (key && *key) o->remote.api_key = key;
    o->on_failure = TR_LLM_FAILURE_FALLBACK;
}

int cli_backend_option(int argc, char **argv, int *i, cli_backend_opts *o) {
    const char *v;
    double f;
    /* hiding the round trip */
    bool *flag = cli_flag(argc, argv, i, NULL, "--sync")          ? &o->sync
                 : cli_flag(argc, argv, i, NULL, "--draft-fixed") ? &o->draft_fixed
                                                                   : NULL;
    if (flag) {
        *flag = true;
        return 1;
    }
    static const char *const share_names[] = {"--target-routed", "--max-routed"};
    for (int k = 0; k < 2; k++) {
        if (!cli_option(argc, argv, i, NULL, share_names[k], &v)) continue;
        double *share = k == 0 ? &o->target_routed : &o->max_routed;
        if (!cli_float(share_names[k], v, share)) return -1;
        if (!(*share > 0 && *share <= 1)) return fprintf(stderr, "tokroute: %s must be in (0, 1]\n", share_names[k]), -1;
        return 1;
    }
    if (cli_option(argc, argv, i, NULL, "--speculate-depth", &v))
        return cli_int("--speculate-depth", v, 0, 1024, &o->depth) ? 1 : -1;
    if (cli_option(argc, argv, i, NULL, "--lookahead", &v))
        return cli_int("--lookahead", v, 0, TR_LOOKAHEAD_MAX, &o->lookahead) ? 1 : -1;
    if (cli_option(argc, argv, i, NULL, "--draft", &v))
        return cli_int("--draft", v, 0, TR_DRAFT_TOKENS_MAX, &o->draft) ? 1 : -1;
    if (cli_option(argc, argv, i, NULL, "--draft-width", &v))
        return cli_int("--draft-width", v, 1, 8, &o->draft_width) ? 1 : -1;
    if (cli_option(argc, argv, i, NULL, "--draft-span", &v))
        return cli_int("--draft-span", v, 1, TR_DRAFT_TOKENS_MAX, &o->draft_span) ? 1 : -1;
    const int r = cli_llm_option(argc, argv, i, o);
    if (r != 0) return r;
    if (cli_option(argc, argv, i, NULL, "--on-llm-failure", &v)) {
        if (v && strcmp(v, "fallback") == 0) o->on_failure = TR_LLM_FAILURE_FALLBACK;
        else if (v && strcmp(v, "error") == 0) o->on_failure = TR_LLM_FAILURE_ERROR;
        else return fprintf(stderr, "tokroute: --on-llm-failure must be fallback or error\n"), -1;
    } else if (cli_option(argc, argv, i, NULL, "--simulate-rtt", &v)) {
        if (!cli_float("--simulate-rtt", v, &f)) return -1;
        if (f < 0) return fprintf(stderr, "tokroute: --simulate-rtt must not be negative\n"), -1;
        o->rtt_ms = f;
    } else {
        return 0;
    }
    return 1;
}

int cli_llm_option(int argc, char **argv, int *i, cli_backend_opts *o) {
    const char *v;
    long x;
    if (cli_option(argc, argv, i, NULL, "--llm", &v)) o->llm = v;
    else if (cli_option(argc, argv, i, NULL, "--server", &v)) o->server = v;
    else if (cli_option(argc, argv, i, NULL, "--openai", &v)) o->openai = v;
    else if (cli_option(argc, argv, i, NULL, "--llamacpp", &v)) o->llamacpp = v;
    else if (cli_option(argc, argv, i, NULL, "--sglang", &v)) o->sglang = v;
    else if (cli_option(argc, argv, i, NULL, "--openai-model", &v)) o->remote.model = v;
    else if (cli_option(argc, argv, i, NULL, "--api-key", &v)) o->remote.api_key = v;
    else if (cli_option(argc, argv, i, NULL, "--cacert", &v)) o->remote.cacert = v;
    else if (cli_option(argc, argv, i, NULL, "--timeout-ms", &v)) {
        if (!cli_int("--timeout-ms", v, 1, 3600000, &x)) return -1;
        o->remote.timeout_ms = (int32_t)x;
    } else if (cli_option(argc, argv, i, NULL, "--retries", &v)) {
        if (!cli_int("--retries", v, 0, 100, &x)) return -1;
        o->remote.retries = (int32_t)x;
    } else {
        return 0;
    }
    if (!v) return fprintf(stderr, "tokroute: %s needs a value\n", argv[*i]), -1;
    return 1;
}

bool cli_backend_given(const cli_backend_opts *o) {
    return o->llm || o->server || o->openai || o->llamacpp || o->sglang;
}

const char *cli_backend_check(const cli_backend_opts *o) {
    if ((o->llm != NULL) + (o->server != NULL) + (o->openai != NULL) + (o->llamacpp != NULL) + (o->sglang != NULL) > 1)
        return "give one LLM: --llm, --server, --openai, --llamacpp or --sglang";
    if (o->remote.model && !o->openai) return "--openai-model applies to --openai";
    if (o->sync && (o->depth >= 0 || o->lookahead >= 0 || o->draft >= 0 || o->draft_width >= 0 || o->draft_span >= 0 ||
                    o->draft_fixed))
        return "--sync turns speculation, lookahead and drafting off; give it alone";
    if (o->target_routed > 0 && o->max_routed > 0 && o->max_routed < o->target_routed)
        return "--max-routed is below --target-routed: the target could never be reached";
    return NULL;
}

void cli_backend_hiding(const cli_backend_opts *o, tr_route_params *rp) {
    /* On by default where there is a round trip to hide: a remote LLM or a simulated delay. Lookahead by default
     * only where it is exact: --server and the embedded LLM. --openai has none, and through llama.cpp it is opt-in:
     * its cache then holds tokens it decoded one at a time, which round differently from its batched passes, so a
     * near-tie can come out otherwise than under --sync. */
    const bool has_rtt = o->server || o->openai || o->llamacpp || o->sglang || o->rtt_ms > 0;
    rp->speculate_depth = rp->lookahead = rp->draft_tokens = 0;
    rp->draft_width = 3;
    rp->draft_span = 32;
    if (has_rtt && !o->sync) tr_route_params_hide_round_trip(rp, o->server || o->llm);
    if (!o->sync && o->depth >= 0) rp->speculate_depth = (int32_t)o->depth;
    if (!o->sync && o->lookahead >= 0) rp->lookahead = (int32_t)o->lookahead;
    if (!o->sync && o->draft >= 0) rp->draft_tokens = (int32_t)o->draft;
    if (o->draft_width >= 0) rp->draft_width = (int32_t)o->draft_width;
    if (o->draft_span >= 0) rp->draft_span = (int32_t)o->draft_span;
    rp->draft_fixed = o->draft_fixed;
    rp->target_routed = o->target_routed;
    rp->max_routed = o->max_routed;
}

/* The one start-up line on which vocabulary case applies. */
static void report_vocab(tr_vocab_match m, int32_t n_shared, int32_t n_llm) {
    switch (m) {
    case TR_VOCAB_SAME: fprintf(stderr, "tokroute: vocabulary: SLM and LLM identical (%d tokens)\n", n_shared); break;
    case TR_VOCAB_PADDED:
        fprintf(stderr, "tokroute: vocabulary: LLM has %d padding entries beyond the SLM's %d; the LLM is restricted "
                "to the %d shared ids\n", n_llm - n_shared, n_shared, n_shared);
        break;
    case TR_VOCAB_SIZE_ONLY:
        /* A server sends no token texts: the sizes are what can be compared (the entries are taken to agree). */
        if (n_llm == n_shared)
            fprintf(stderr, "tokroute: vocabulary: remote LLM reports %d tokens, as many as the SLM has\n", n_llm);
        else if (n_llm > 0)
            fprintf(stderr, "tokroute: vocabulary: remote LLM reports %d tokens, the SLM has %d; the LLM is restricted "
                    "to the SLM's ids (< %d)\n", n_llm, n_shared, n_shared);
        else
            fprintf(stderr, "tokroute: vocabulary: remote LLM does not report its size; its tokens are checked against "
                    "the SLM's %d ids\n", n_shared);
        break;
    }
}

bool cli_backend_open(const cli_backend_opts *o, const tr_model *slm, const tr_context_params *cp,
                      const tr_sampler_params *sp, tr_model **llm_model, tr_llm_backend **out) {
    *llm_model = NULL;
    *out = NULL;
    tr_status st = TR_OK;
    tr_vocab_match match = TR_VOCAB_SAME;
    int32_t n_shared = tr_model_get_info(slm)->n_vocab, n_llm = 0;
    const tr_vocab *sv = tr_model_vocab(slm);
    if (o->llm) {
        tr_model_params mp = tr_model_default_params();
        mp.kv_type = cp ? cp->kv_type : TR_KV_DEFAULT; /* every context on the LLM (eval, collect make their own) */
        if ((st = tr_model_load(o->llm, &mp, llm_model)) != TR_OK) return cli_fail(st), false;
        const tr_vocab *lv = tr_model_vocab(*llm_model);
        n_llm = tr_model_get_info(*llm_model)->n_vocab;
        if (sv && lv) st = tr_vocab_compatible(sv, lv, &match, &n_shared);
        else if (n_llm != n_shared) st = TR_ERR_UNSUPPORTED, fprintf(stderr, "tokroute: the models' sizes differ\n");
        if (st == TR_OK) st = tr_llm_backend_embedded(*llm_model, cp, sp, out);
    } else {
        tr_remote_params rp = o->remote;
        if (sp) rp.sampling = *sp;
        if (o->server) rp.url = o->server, st = tr_llm_backend_server(&rp, out);
        else if (o->openai) rp.url = o->openai, st = tr_llm_backend_openai(&rp, out);
        else if (o->sglang) rp.url = o->sglang, st = tr_llm_backend_sglang(&rp, out);
        else rp.url = o->llamacpp, st = tr_llm_backend_llamacpp(&rp, out);
        if (st == TR_OK) {
            n_llm = tr_llm_backend_n_vocab(*out);
            /* Not fatal: the server may come up later (routed tokens fall back until then), but say it now. */
            if (n_llm == 0 && *tr_last_error())
                fprintf(stderr, "tokroute: warning: cannot query the LLM server now: %s\n", tr_last_error());
            st = sv ? tr_vocab_compatible_size(sv, n_llm, &match, &n_shared)
                    : (n_llm && n_llm < n_shared ? TR_ERR_UNSUPPORTED : TR_OK);
        }
    }
    if (st != TR_OK) {
        if (st == TR_ERR_UNSUPPORTED && !sv) fprintf(stderr, "tokroute: the LLM's vocabulary is smaller than the SLM's\n");
        else cli_fail(st);
        tr_llm_backend_free(*out);
        tr_model_free(*llm_model);
        *out = NULL;
        *llm_model = NULL;
        return false;
    }
    report_vocab(match, n_shared, n_llm);
    tr_llm_backend_set_allowed(*out, n_shared);
    tr_llm_backend_set_rtt(*out, o->rtt_ms);
    return true;
}
