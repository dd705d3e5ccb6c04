/* main.c — the tokroute command line: dispatches to one subcommand per file in src/cli. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "tokroute.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"generate", cmd_generate, "generate text or token ids from a prompt"},
    {"tokenize", cmd_tokenize, "turn text into token ids with a model's vocabulary"},
    {"logits", cmd_logits, "evaluate tokens in one batch; write logits and hidden states (f32)"},
    {"bench", cmd_bench, "measure prefill and decode tokens/s and peak memory"},
    {"inspect", cmd_inspect, "show a GGUF file's metadata and tensors"},
    {"synth", cmd_synth, "write a random-weight model at a real model's shape"},
    {"ui", cmd_ui, "serve the web UI: prompt, threshold slider, live tokens (LLM in red), profiling"},
    {"serve", cmd_serve, "serve the LLM over HTTP (session protocol, OpenAI completions)"},
    {"collect", cmd_collect, "run a dataset through both models and store router training data"},
    {"train-router", cmd_train_router, "train an MLP router file on collected data"},
    {"calibrate", cmd_calibrate, "print the threshold that routes a given share of collected positions"},
    {"eval", cmd_eval, "evaluate routing on a dataset: accuracy vs routed share per policy, plots, latency"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tokroute <command> [options]   (tokroute <command> --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tokroute %s\n", tr_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tokroute: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
