/* cmd_logits.c — `tokroute logits`: evaluates token ids as one batch and writes the logits (and optionally the
 * final hidden states) of every position as little-endian float32 rows, the format of the conformance goldens. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute logits -m MODEL --tokens 1,2,3 --logits OUT.f32 [--hidden OUT.f32]\n"
    "  writes [n_tokens][n_vocab] logits and [n_tokens][n_embd] hidden states (after the output norm)\n"
    "  -t, --threads N      threads (default: physical cores);  --kv-type f16|q8_0|f32  KV cache (default f16)\n";

static bool write_rows(const char *path, const tr_context *ctx, int32_t n, int32_t width, bool hidden) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "tokroute: cannot create %s\n", path);
        return false;
    }
    bool ok = true;
    for (int32_t i = 0; i < n && ok; i++) {
        const float *row = hidden ? tr_context_hidden(ctx, i) : tr_context_logits(ctx, i);
        ok = row && fwrite(row, sizeof *row, (size_t)width, f) == (size_t)width;
    }
    if (fclose(f) != 0) ok = false;
    if (!ok) fprintf(stderr, "tokroute: cannot write %s\n", path);
    return ok;
}

int cmd_logits(int argc, char **argv) {
    cli_model_opts mo = {0};
    const char *tokens = NULL, *logits_path = NULL, *hidden_path = NULL, *v;
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, &mo);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_option(argc, argv, &i, NULL, "--tokens", &v)) tokens = v;
        else if (cli_option(argc, argv, &i, NULL, "--logits", &v)) logits_path = v;
        else if (cli_option(argc, argv, &i, NULL, "--hidden", &v)) hidden_path = v;
        else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!mo.model || !tokens || !logits_path) return cli_usage_error(usage, "need -m, --tokens and --logits");
    int32_t *ids, n;
    if (!cli_token_list(tokens, &ids, &n)) return 2;
    if (mo.n_ctx == 0) mo.n_ctx = n;
    tr_model *model;
    tr_context *ctx;
    if (!cli_load_model(&mo, &model, &ctx)) {
        free(ids);
        return 1;
    }
    int rc = 0;
    tr_status st = tr_context_eval(ctx, ids, n, TR_EVAL_LOGITS_ALL);
    if (st != TR_OK) {
        rc = cli_fail(st);
    } else {
        const tr_model_info *in = tr_model_get_info(model);
        if (!write_rows(logits_path, ctx, n, in->n_vocab, false) ||
            (hidden_path && !write_rows(hidden_path, ctx, n, in->n_embd, true)))
            rc = 1;
    }
    tr_context_free(ctx);
    tr_model_free(model);
    free(ids);
    return rc;
}
