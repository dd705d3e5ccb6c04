/* cmd_synth.c — `tokroute synth`: writes a random-weight model at a real model's exact shape (for measuring speed
 * at real sizes), with a progress bar. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static void print_usage(FILE *f) {
    fprintf(f, "usage: tokroute synth --shape NAME --type TYPE -o FILE [--seed N]\n  shapes:");
    for (const char *const *s = tr_synth_shapes(); *s; s++) fprintf(f, " %s", *s);
    fprintf(f, "\n  types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs, and q4_k_m (Q4_K"
               " with Q6_K where a stock Q4_K_M file has it)\n  quantizers as ggml's, without an importance matrix;"
               " rows whose length is not a multiple of 256 fall back as\n  llama.cpp's quantizer does (q2_k, q3_k→q4_0,"
               " q4_k→q5_0, q5_k→q5_1, q6_k→q8_0, iq4_xs→iq4_nl)\n");
}

int cmd_synth(int argc, char **argv) {
    tr_synth_params p = tr_synth_default_params();
    const char *type = "q8_0", *out = NULL, *v;
    p.shape = NULL;
    for (int i = 1; i < argc; i++) {
        long x;
        if (cli_flag(argc, argv, &i, "-h", "--help")) return print_usage(stdout), 0;
        if (cli_option(argc, argv, &i, NULL, "--shape", &v)) p.shape = v;
        else if (cli_option(argc, argv, &i, NULL, "--type", &v)) type = v;
        else if (cli_option(argc, argv, &i, "-o", "--output", &v)) out = v;
        else if (cli_option(argc, argv, &i, NULL, "--seed", &v)) {
            if (!cli_int("--seed", v, 0, 0x7fffffffL, &x)) return 2;
            p.seed = (uint64_t)x;
        } else {
            print_usage(stderr);
            return fprintf(stderr, "tokroute: unknown option '%s'\n", argv[i]), 2;
        }
    }
    if (!p.shape || !type || !out) return print_usage(stderr), fprintf(stderr, "tokroute: need --shape, --type and -o\n"), 2;
    if (strcasecmp(type, "q4_k_m") == 0) {
        p.type = TR_TYPE_Q4_K;
        p.mixed_q4_k_m = true;
    } else if (tr_type_from_name(type, &p.type) != TR_OK) {
        return fprintf(stderr, "tokroute: unknown type '%s'\n", type), 2;
    }
    p.progress = cli_progress;
    double t0 = cli_now_ms();
    tr_status st = tr_synth_write(&p, out);
    if (st != TR_OK) return cli_fail(st);
    fprintf(stderr, "tokroute: wrote %s (%s, %s) in %.1f s\n", out, p.shape, type, (cli_now_ms() - t0) / 1e3);
    return 0;
}
