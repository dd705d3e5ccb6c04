/* cmd_bench.c — `tokroute bench`: prefill tokens/s for a P-token prompt evaluated as one batch, decode tokens/s
 * over N tokens generated one at a time from an empty cache (as llama-bench's pp/tg tests), and peak RSS. One
 * warm-up pass first, so the mapping is paged in; then R repetitions, reporting the mean and the best, and
 * decode's weight-read rate (tr_model_info.token_read_bytes × tokens/s: lookup tables count one row). Then the
 * cost of picking a token from the last logits at the model's vocabulary size: sampling (temperature 0.8, top-k
 * 40, top-p 0.95; and top-p alone) and greedy, in µs per token. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute bench -m MODEL [-t THREADS] [--prompt P] [--gen N] [--depth D] [--kv-type T] [--reps R] [--json]\n"
    "  prefill: P-token prompt in one batch (default 256); decode: N tokens one at a time (default 128) after D\n"
    "  cached tokens (default 0); --kv-type f16|q8_0|f32: the KV cache (default f16)\n";

typedef struct bench_result {
    double pp_mean, pp_best, tg_mean, tg_best;
    double sample_us, sample_top_p_us, argmax_us; /* per token, at the model's n_vocab */
} bench_result;

static tr_status time_prefill(tr_context *ctx, const int32_t *ids, int32_t n, double *tps) {
    tr_context_clear(ctx);
    double t0 = cli_now_ms();
    tr_status st = tr_context_eval(ctx, ids, n, TR_EVAL_LOGITS_LAST);
    *tps = n / ((cli_now_ms() - t0) / 1e3);
    return st;
}

/* n tokens one at a time after the first `depth` of ids (evaluated untimed). */
static tr_status time_decode(tr_context *ctx, const int32_t *ids, int32_t depth, int32_t n, int32_t n_vocab,
                             double *tps) {
    tr_context_clear(ctx);
    tr_status st = depth > 0 ? tr_context_eval(ctx, ids, depth, TR_EVAL_LOGITS_NONE) : TR_OK;
    int32_t id = ids[depth];
    double t0 = cli_now_ms();
    for (int32_t i = 0; i < n && st == TR_OK; i++) {
        st = tr_context_eval(ctx, &id, 1, TR_EVAL_LOGITS_LAST);
        if (st == TR_OK) id = tr_argmax(tr_context_logits(ctx, -1), n_vocab);
    }
    *tps = n / ((cli_now_ms() - t0) / 1e3);
    return st;
}

/* Mean µs per token of picking from one row of logits, over ~50 ms of calls (the sampler's state advances, so
 * every call draws anew). top_k < 0: greedy through tr_argmax. */
static double time_sampling(const float *logits, int32_t n_vocab, int32_t top_k, float top_p) {
    tr_sampler_params sp = tr_sampler_default_params();
    sp.temperature = 0.8f;
    sp.top_k = top_k < 0 ? 0 : top_k;
    sp.top_p = top_p;
    tr_sampler *s = NULL;
    if (tr_sampler_create(&sp, &s) != TR_OK) return -1.0;
    volatile int32_t sink = 0;
    int64_t n = 0;
    const double t0 = cli_now_ms();
    do {
        sink += top_k < 0 ? tr_argmax(logits, n_vocab) : tr_sampler_sample(s, logits, n_vocab);
        n++;
    } while (cli_now_ms() - t0 < 50.0);
    const double us = (cli_now_ms() - t0) * 1e3 / (double)n;
    tr_sampler_free(s);
    return us;
}

static tr_status run(tr_context *ctx, int32_t n_prompt, int32_t n_gen, int32_t depth, int reps, bench_result *r) {
    const tr_model_info *in = tr_model_get_info(tr_context_model(ctx));
    const int32_t n_ids = n_prompt > depth ? n_prompt : depth + 1;
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    if (!ids) return TR_ERR_NOMEM;
    uint32_t x = 12345;
    for (int32_t i = 0; i < n_ids; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)(3 + (x >> 8) % (uint32_t)(in->n_vocab - 3));
    }
    double tps;
    tr_status st = time_prefill(ctx, ids, n_prompt, &tps); /* warm-up */
    *r = (bench_result){0};
    for (int i = 0; st == TR_OK && i < reps; i++) {
        if ((st = time_prefill(ctx, ids, n_prompt, &tps)) != TR_OK) break;
        r->pp_mean += tps / reps;
        if (tps > r->pp_best) r->pp_best = tps;
        if ((st = time_decode(ctx, ids, depth, n_gen, in->n_vocab, &tps)) != TR_OK) break;
        r->tg_mean += tps / reps;
        if (tps > r->tg_best) r->tg_best = tps;
    }
    const float *logits = st == TR_OK ? tr_context_logits(ctx, -1) : NULL;
    if (logits) {
        r->sample_us = time_sampling(logits, in->n_vocab, 40, 0.95f);
        r->sample_top_p_us = time_sampling(logits, in->n_vocab, 0, 0.95f);
        r->argmax_us = time_sampling(logits, in->n_vocab, -1, 1.0f);
    }
    free(ids);
    return st;
}

int cmd_bench(int argc, char **argv) {
    cli_model_opts mo = {0};
    long n_prompt = 256, n_gen = 128, reps = 3, depth = 0;
    bool json = false;
    const char *v;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &mo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_flag(argc, argv, &i, NULL, "--json")) json = true;
        else if (cli_option(argc, argv, &i, NULL, "--prompt", &v)) {
            if (!cli_int("--prompt", v, 1, 1 << 16, &n_prompt)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--gen", &v)) {
            if (!cli_int("--gen", v, 1, 1 << 16, &n_gen)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--depth", &v)) {
            if (!cli_int("--depth", v, 0, 1 << 16, &depth)) return 2;
        } else if (cli_option(argc, argv, &i, NULL, "--reps", &v)) {
            if (!cli_int("--reps", v, 1, 1000, &reps)) return 2;
        } else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!mo.model) return cli_usage_error(usage, "no model given (-m MODEL)");
    if (mo.n_ctx == 0) mo.n_ctx = (int32_t)(n_prompt > depth + n_gen ? n_prompt : depth + n_gen);
    tr_model *model;
    tr_context *ctx;
    if (!cli_load_model(&mo, &model, &ctx)) return 1;
    bench_result r = {0};
    tr_status st = run(ctx, (int32_t)n_prompt, (int32_t)n_gen, (int32_t)depth, (int)reps, &r);
    const tr_model_info *in = tr_model_get_info(model);
    const double rss_mib = cli_peak_rss_kib() / 1024.0, weights_mib = in->weight_bytes / (1024.0 * 1024.0);
    const double kv_mib = (double)tr_context_kv_bytes(ctx) / (1024.0 * 1024.0);
    if (st == TR_OK && json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", mo.model);
        cJSON_AddStringToObject(o, "type", tr_type_name(in->main_type));
        cJSON_AddNumberToObject(o, "threads", tr_context_n_threads(ctx));
        cJSON_AddStringToObject(o, "isa", tr_kernels_isa());
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)n_prompt);
        cJSON_AddNumberToObject(o, "gen_tokens", (double)n_gen);
        cJSON_AddNumberToObject(o, "depth", (double)depth);
        cJSON_AddStringToObject(o, "kv_type", tr_kv_type_name(tr_context_kv_type(ctx)));
        cJSON_AddNumberToObject(o, "prefill_tps", r.pp_mean);
        cJSON_AddNumberToObject(o, "prefill_tps_best", r.pp_best);
        cJSON_AddNumberToObject(o, "decode_tps", r.tg_mean);
        cJSON_AddNumberToObject(o, "decode_tps_best", r.tg_best);
        cJSON_AddNumberToObject(o, "token_read_bytes", (double)in->token_read_bytes);
        cJSON_AddNumberToObject(o, "decode_gbps", r.tg_mean * (double)in->token_read_bytes / 1e9);
        cJSON_AddNumberToObject(o, "n_vocab", in->n_vocab);
        cJSON_AddNumberToObject(o, "sample_us", r.sample_us);
        cJSON_AddNumberToObject(o, "sample_top_p_us", r.sample_top_p_us);
        cJSON_AddNumberToObject(o, "argmax_us", r.argmax_us);
        cJSON_AddNumberToObject(o, "peak_rss_mib", rss_mib);
        cJSON_AddNumberToObject(o, "weights_mib", weights_mib);
        cJSON_AddNumberToObject(o, "kv_cache_mib", kv_mib);
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else if (st == TR_OK) {
        printf("model    %s (%s, %s, %.1f MiB of weights)\n", mo.model, in->arch_name, tr_type_name(in->main_type),
               weights_mib);
        printf("threads  %d, kernels %s\n", tr_context_n_threads(ctx), tr_kernels_isa());
        printf("prefill  %7.1f tokens/s (best %.1f)  [%ld-token prompt, one batch]\n", r.pp_mean, r.pp_best, n_prompt);
        printf("decode   %7.1f tokens/s (best %.1f)  [%ld tokens, one at a time, after %ld]; %.1f GB/s of weights "
               "(%.1f MiB a token reads)\n", r.tg_mean, r.tg_best, n_gen, depth,
               r.tg_mean * (double)in->token_read_bytes / 1e9, in->token_read_bytes / (1024.0 * 1024.0));
        printf("sampling %7.1f µs/token (temperature 0.8, top-k 40, top-p 0.95); top-p 0.95 alone %.1f µs; greedy "
               "%.1f µs  [vocabulary %d]\n", r.sample_us, r.sample_top_p_us, r.argmax_us, in->n_vocab);
        printf("peak RSS %7.1f MiB (weights %.1f + KV cache %.1f in %s + %.1f other)\n", rss_mib, weights_mib, kv_mib,
               tr_kv_type_name(tr_context_kv_type(ctx)), rss_mib - weights_mib - kv_mib);
    }
    tr_context_free(ctx);
    tr_model_free(model);
    return st == TR_OK ? 0 : cli_fail(st);
}
