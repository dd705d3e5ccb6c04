/* cmd_inspect.c — `tokroute inspect`: a GGUF file's metadata, tensors (type, shape, size) and, for models, the
 * layout the engine sees. --json prints the same as one JSON object. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"

static const char *usage =
    "usage: tokroute inspect MODEL.gguf [--json] [--no-tensors]\n"
    "  prints metadata (arrays summarized), tensors with type, shape and bytes, and the model summary\n";

static void shape_text(const tr_gguf_tensor *t, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "[");
    for (int d = 0; d < t->n_dims && n < (int)cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
    if (n < (int)cap) snprintf(buf + n, cap - (size_t)n, "]");
}

static void print_text(const tr_gguf *g, const tr_model *model, bool tensors) {
    char val[256], shape[96];
    printf("GGUF v%u, %" PRIu64 " bytes, %" PRId64 " metadata keys, %" PRId64 " tensors, alignment %u\n",
           tr_gguf_version(g), tr_gguf_file_size(g), tr_gguf_n_kv(g), tr_gguf_n_tensors(g), tr_gguf_alignment(g));
    printf("\nmetadata:\n");
    for (int64_t i = 0; i < tr_gguf_n_kv(g); i++) {
        tr_gguf_kv_format(g, i, val, sizeof val);
        printf("  %-48s %s\n", tr_gguf_kv_key(g, i), val);
    }
    if (tensors && tr_gguf_n_tensors(g) > 0) {
        printf("\ntensors:\n");
        for (int64_t i = 0; i < tr_gguf_n_tensors(g); i++) {
            const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
            shape_text(t, shape, sizeof shape);
            printf("  %-40s %-6s %-20s %12" PRIu64 " bytes\n", t->name, tr_type_name(t->type), shape, t->n_bytes);
        }
    }
    if (model) {
        const tr_model_info *in = tr_model_get_info(model);
        printf("\nmodel: %s (%s), %.1fM parameters, %.1f MiB of weights, mostly %s\n", in->name, in->arch_name,
               (double)in->n_params / 1e6, (double)in->weight_bytes / (1024.0 * 1024.0), tr_type_name(in->main_type));
        printf("  embd %d, layers %d, heads %d (kv %d, dim %d), ffn %d, vocab %d, ctx %d, rope theta %g, eps %g%s\n",
               in->n_embd, in->n_layer, in->n_head, in->n_head_kv, in->head_dim, in->n_ff, in->n_vocab,
               in->n_ctx_train, in->rope_theta, in->norm_eps, in->tied_output ? ", tied output" : "");
    }
}

static void print_json(const tr_gguf *g, const tr_model *model, bool tensors) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
    char val[256];
    cJSON_AddNumberToObject(root, "version", tr_gguf_version(g));
    cJSON_AddNumberToObject(root, "file_size", (double)tr_gguf_file_size(g));
    for (int64_t i = 0; i < tr_gguf_n_kv(g); i++) {
        const char *key = tr_gguf_kv_key(g, i);
        switch (tr_gguf_kv_type(g, i)) {
        case TR_GGUF_STRING: cJSON_AddStringToObject(meta, key, tr_gguf_get_str(g, key, NULL)); break;
        case TR_GGUF_BOOL: {
            bool b = false;
            tr_gguf_get_bool(g, key, &b);
            cJSON_AddBoolToObject(meta, key, b);
            break;
        }
        case TR_GGUF_ARRAY:
        case TR_GGUF_UINT64:
            tr_gguf_kv_format(g, i, val, sizeof val);
            cJSON_AddStringToObject(meta, key, val);
            break;
        default: {
            tr_gguf_kv_format(g, i, val, sizeof val);
            double d = 0;
            sscanf(val, "%lf", &d);
            cJSON_AddNumberToObject(meta, key, d);
        }
        }
    }
    if (tensors) {
        cJSON *arr = cJSON_AddArrayToObject(root, "tensors");
        for (int64_t i = 0; i < tr_gguf_n_tensors(g); i++) {
            const tr_gguf_tensor *t = tr_gguf_tensor_at(g, i);
            cJSON *o = cJSON_CreateObject(), *shape = cJSON_AddArrayToObject(o, "shape");
            cJSON_AddStringToObject(o, "name", t->name);
            cJSON_AddStringToObject(o, "type", tr_type_name(t->type));
            for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->ne[d]));
            cJSON_AddNumberToObject(o, "bytes", (double)t->n_bytes);
            cJSON_AddItemToArray(arr, o);
        }
    }
    if (model) {
        const tr_model_info *in = tr_model_get_info(model);
        cJSON *m = cJSON_AddObjectToObject(root, "model");
        cJSON_AddStringToObject(m, "arch", in->arch_name);
        cJSON_AddNumberToObject(m, "n_params", (double)in->n_params);
        cJSON_AddNumberToObject(m, "weight_bytes", (double)in->weight_bytes);
        cJSON_AddNumberToObject(m, "token_read_bytes", (double)in->token_read_bytes);
        cJSON_AddStringToObject(m, "main_type", tr_type_name(in->main_type));
        cJSON_AddNumberToObject(m, "n_embd", in->n_embd);
        cJSON_AddNumberToObject(m, "n_layer", in->n_layer);
        cJSON_AddNumberToObject(m, "n_head", in->n_head);
        cJSON_AddNumberToObject(m, "n_head_kv", in->n_head_kv);
        cJSON_AddNumberToObject(m, "head_dim", in->head_dim);
        cJSON_AddNumberToObject(m, "n_ff", in->n_ff);
        cJSON_AddNumberToObject(m, "n_vocab", in->n_vocab);
        cJSON_AddBoolToObject(m, "tied_output", in->tied_output);
    }
    char *s = cJSON_Print(root);
    if (s) puts(s);
    cJSON_free(s);
    cJSON_Delete(root);
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, tensors = true;
    for (int i = 1; i < argc; i++) {
        if (cli_flag(argc, argv, &i, "-h", "--help")) return fputs(usage, stdout), 0;
        if (cli_flag(argc, argv, &i, NULL, "--json")) json = true;
        else if (cli_flag(argc, argv, &i, NULL, "--no-tensors")) tensors = false;
        else if (argv[i][0] == '-' || path) return cli_usage_error(usage, "unexpected argument '%s'", argv[i]);
        else path = argv[i];
    }
    if (!path) return cli_usage_error(usage, "no file given");
    tr_gguf *g;
    tr_status st = tr_gguf_open(path, &g);
    if (st != TR_OK) return cli_fail(st);
    /* A file that is also a loadable model gets a summary; vocab-only files and other GGUFs just list. */
    tr_model *model = NULL;
    if (tr_gguf_n_tensors(g) > 0) {
        tr_model_params mp = tr_model_default_params();
        mp.load_vocab = false;
        if (tr_model_load(path, &mp, &model) != TR_OK) {
            fprintf(stderr, "tokroute: note: not loadable as a model: %s\n", tr_last_error());
            model = NULL;
        }
    }
    if (json) print_json(g, model, tensors);
    else print_text(g, model, tensors);
    tr_model_free(model);
    tr_gguf_close(g);
    return 0;
}
