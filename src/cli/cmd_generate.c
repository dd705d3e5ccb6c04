/* cmd_generate.c — `tokroute generate`: decodes from a prompt with one model, streaming text (or token ids) to
 * stdout as tokens are produced. The prompt is evaluated in one batch, then one token at a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute generate -m MODEL (-p PROMPT | --tokens 1,2,3) [options]\n"
    "  -m, --model FILE     GGUF model\n"
    "  -p, --prompt TEXT    prompt text (tokenized with the model's vocabulary)\n"
    "  --tokens IDS         prompt as comma-separated token ids (no BOS is added)\n"
    "  -n, --n-predict N    tokens to generate (default 64)\n"
    "  --ids                print generated token ids instead of text\n"
    "  --no-bos             do not add BOS to a text prompt\n"
    "  --ignore-eos         keep generating after end-of-generation tokens\n"
    "  --temp T             temperature (default 0 = greedy)\n"
    "  --top-k K, --top-p P, --seed S   sampling settings (defaults 40, 0.95, 24301)\n"
    "  -t, --threads N      threads (default: physical cores)\n"
    "  -c, --ctx N          context length (default: min(model's, 4096))\n";

typedef struct gen_opts {
    cli_model_opts mo;
    const char *prompt, *tokens;
    long n_predict;
    bool ids, no_bos, ignore_eos;
    tr_sampler_params sp;
} gen_opts;

static int parse(int argc, char **argv, gen_opts *o) {
    const char *v;
    long x;
    double f;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &o->mo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help")) {
            fputs(usage, stdout);
            return -1;
        } else if (cli_option(argc, argv, &i, "-p", "--prompt", &v)) {
            if (!(o->prompt = v)) return cli_usage_error(usage, "--prompt needs text");
        } else if (cli_option(argc, argv, &i, NULL, "--tokens", &v)) {
            if (!(o->tokens = v)) return cli_usage_error(usage, "--tokens needs ids");
        } else if (cli_option(argc, argv, &i, "-n", "--n-predict", &v)) {
            if (!cli_int("--n-predict", v, 0, 1 << 24, &o->n_predict)) return 2;
        } else if (cli_flag(argc, argv, &i, NULL, "--ids")) {
            o->ids = true;
        } else if (cli_flag(argc, argv, &i, NULL, "--no-bos")) {
            o->no_bos = true;
        } else if (cli_flag(argc, argv, &i, NULL, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if (cli_option(argc, argv, &i, NULL, "--temp", &v)) {
            if (!cli_float("--temp", v, &f)) return 2;
            o->sp.temperature = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--top-k", &v)) {
            if (!cli_int("--top-k", v, 0, 1 << 24, &x)) return 2;
            o->sp.top_k = (int32_t)x;
        } else if (cli_option(argc, argv, &i, NULL, "--top-p", &v)) {
            if (!cli_float("--top-p", v, &f)) return 2;
            o->sp.top_p = (float)f;
        } else if (cli_option(argc, argv, &i, NULL, "--seed", &v)) {
            if (!cli_int("--seed", v, 0, 0x7fffffffL, &x)) return 2;
            o->sp.seed = (uint64_t)x;
        } else {
            return cli_usage_error(usage, "unknown option '%s'", argv[i]);
        }
    }
    if (!o->mo.model) return cli_usage_error(usage, "no model given (-m MODEL)");
    if (!o->prompt == !o->tokens) return cli_usage_error(usage, "give exactly one of --prompt and --tokens");
    return 0;
}

/* Streams one token: ids as numbers, text through the UTF-8-safe detokenizer. */
static bool emit(const gen_opts *o, tr_detok_stream *ds, int32_t id, int32_t index) {
    if (o->ids) {
        printf(index ? " %d" : "%d", id);
    } else if (ds) {
        const char *text;
        size_t len;
        if (tr_detok_stream_push(ds, id, &text, &len) != TR_OK) return false;
        fwrite(text, 1, len, stdout);
    }
    fflush(stdout);
    return true;
}

static int run(const gen_opts *o, tr_model *model, tr_context *ctx) {
    int32_t *prompt = NULL, n_prompt = 0;
    bool ok = o->tokens ? cli_token_list(o->tokens, &prompt, &n_prompt)
                        : cli_tokenize_prompt(model, o->prompt, o->no_bos, false, &prompt, &n_prompt);
    if (!ok) return 1;
    const tr_vocab *vocab = tr_model_vocab(model);
    tr_sampler *sampler = NULL;
    tr_detok_stream *ds = NULL;
    tr_status st = tr_sampler_create(&o->sp, &sampler);
    if (st == TR_OK && !o->ids && vocab) st = tr_detok_stream_create(vocab, false, &ds);
    if (st == TR_OK && n_prompt > 0) st = tr_context_eval(ctx, prompt, n_prompt, TR_EVAL_LOGITS_LAST);
    const int32_t n_vocab = tr_model_get_info(model)->n_vocab;
    for (long i = 0; st == TR_OK && i < o->n_predict; i++) {
        int32_t id = tr_sampler_sample(sampler, tr_context_logits(ctx, -1), n_vocab);
        if (!o->ignore_eos && vocab && tr_vocab_is_eog(vocab, id)) break;
        if (!emit(o, ds, id, (int32_t)i)) st = TR_ERR_RANGE;
        if (st == TR_OK && i + 1 < o->n_predict) st = tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST);
    }
    if (st == TR_OK && ds) {
        const char *text;
        size_t len;
        if (tr_detok_stream_flush(ds, &text, &len) == TR_OK) fwrite(text, 1, len, stdout);
    }
    putchar('\n');
    tr_detok_stream_free(ds);
    tr_sampler_free(sampler);
    free(prompt);
    return st == TR_OK ? 0 : cli_fail(st);
}

int cmd_generate(int argc, char **argv) {
    gen_opts o = {.n_predict = 64, .sp = tr_sampler_default_params()};
    int r = parse(argc, argv, &o);
    if (r != 0) return r < 0 ? 0 : r;
    tr_model *model;
    tr_context *ctx;
    if (!cli_load_model(&o.mo, &model, &ctx)) return 1;
    r = run(&o, model, ctx);
    tr_context_free(ctx);
    tr_model_free(model);
    return r;
}
