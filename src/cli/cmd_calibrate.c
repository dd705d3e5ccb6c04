/* cmd_calibrate.c — `tokroute calibrate`: the threshold tau at which a router routes a given share of collected
 * positions (tr_calibrate), and with --gap the share of the SLM-to-LLM gap it closes there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/cli_train.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute calibrate --router ROUTER.gguf|maxprob|margin|entropy --data DIR --target-routed R [--json]\n"
    "  prints the tau that routes share R (0..1) of the positions collected in DIR (routing: score < tau)\n"
    "  --slm SLM.gguf       the SLM, for routers with the token_embedding feature (default: the file collect\n"
    "                       recorded in DIR)\n"
    "  --gap                also report the accuracy and the share of the SLM-to-LLM gap closed at R\n"
    "                       (and for the training-free policies and the oracle)\n"
    "  --json               {\"tau\", \"target_routed\", \"routed\", \"positions\"} on stdout\n";

int cmd_calibrate(int argc, char **argv) {
    const char *router_arg = NULL, *dir = NULL, *slm_path = NULL, *v;
    double target = -1;
    bool json = false, gap = false;
    for (int i = 1; i < argc; i++) {
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_option(argc, argv, &i, NULL, "--router", &v)) router_arg = v;
        else if (cli_option(argc, argv, &i, NULL, "--data", &v)) dir = v;
        else if (cli_option(argc, argv, &i, NULL, "--slm", &v)) slm_path = v;
        else if (cli_option(argc, argv, &i, NULL, "--target-routed", &v)) {
            if (!cli_float("--target-routed", v, &target)) return 2;
            if (!(target >= 0 && target <= 1)) return cli_usage_error(usage, "--target-routed must be in [0, 1]");
        } else if (cli_flag(argc, argv, &i, NULL, "--json")) json = true;
        else if (cli_flag(argc, argv, &i, NULL, "--gap")) gap = true;
        else return cli_usage_error(usage, "unknown option '%s'", argv[i]);
    }
    if (!router_arg || !dir || target < 0) return cli_usage_error(usage, "need --router, --data and --target-routed");
    tr_router *router = NULL;
    tr_policy policy;
    tr_status st = tr_policy_from_name(router_arg, &policy) == TR_OK && policy != TR_POLICY_MLP
                       ? tr_router_create(policy, &router)
                       : tr_router_load(router_arg, NULL, &router);
    tr_model *slm = NULL;
    tr_train_data *data = NULL;
    if (st == TR_OK) st = tr_train_data_open(dir, &data);
    if (st == TR_OK && (tr_router_features(router) & TR_FEATURE_TOKEN_EMBEDDING)) {
        const tr_train_data_info info = tr_train_data_get_info(data);
        if (!(slm_path = cli_train_slm_path(slm_path, &info, "calibrate"))) {
            tr_train_data_free(data);
            tr_router_free(router);
            return 2;
        }
        tr_model_params mp = tr_model_default_params();
        mp.load_vocab = false;
        st = tr_model_load(slm_path, &mp, &slm);
        if (st == TR_OK) st = tr_router_set_slm(router, slm);
    }
    float tau = 0;
    double routed = 0;
    if (st == TR_OK) st = tr_calibrate(router, data, target, &tau, &routed);
    int rc = st == TR_OK ? 0 : cli_fail(st);
    if (rc == 0) {
        const long long n = (long long)tr_train_data_get_info(data).n_positions;
        if (json && !gap)
            printf("{\"tau\": %.9g, \"target_routed\": %.6f, \"routed\": %.6f, \"positions\": %lld}\n", tau, target,
                   routed, n);
        else if (json)
            printf("{\"tau\": %.9g, \"target_routed\": %.6f, \"routed\": %.6f, \"positions\": %lld, \"gap\": ", tau,
                   target, routed, n);
        else
            printf("%.9g\n", tau);
        if (!json) fprintf(stderr, "tau %.6g routes %.4f of %lld positions (target %.4f)\n", tau, routed, n, target);
        if (gap && !cli_gap_report(data, router, &target, 1, json)) rc = 1;
        if (gap && json) printf("}\n");
    }
    tr_train_data_free(data);
    tr_router_free(router);
    tr_model_free(slm);
    return rc;
}
