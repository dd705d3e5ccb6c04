/* test_train_collect.c — tr_collect on the real model pair (../shared/models, TinyStories): an interrupted collect
 * (stopped by its progress callback, or cut mid-example as by a crash) resumes to files identical to an
 * uninterrupted one; a resume with other settings is refused; stored rollout counts equal a greedy continuation
 * recomputed here; stored features score exactly as the router scores the SLM's live logits; LLM sampling is
 * reproducible for a seed; question-answering examples store only their answer's positions; hostile data files
 * are rejected. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/fixtures.h"
#include "eval/dataset.h"
#include "router/router_internal.h"
#include "train/train_internal.h"
#include "train/train_fixture.h"
#include "tokroute.h"

static tr_model *slm, *llm;

static int load_models(void **state) {
    (void)state;
    tr_model_params mp = tr_model_default_params();
    if (tr_model_load(shared_path("models/stories-student.gguf"), &mp, &slm) != TR_OK) return -1;
    if (tr_model_load(shared_path("models/stories260K.gguf"), &mp, &llm) != TR_OK) return -1;
    return 0;
}

static int free_models(void **state) {
    (void)state;
    tr_model_free(slm);
    tr_model_free(llm);
    return 0;
}

static tr_collect_params small_params(void) {
    tr_collect_params p = tr_collect_default_params();
    p.first = 2;
    p.last = 6;
    p.max_tokens = 40;
    p.topk = 4;
    p.rollouts = 3;
    p.n_threads = 1;
    return p;
}

static char *fresh_dir(void) { return strdup(temp_path("")); }

static char *folder_file(const char *dir, const char *name, size_t *n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return read_file(path, n);
}

static void assert_same_folders(const char *a, const char *b) {
    const char *names[3] = {COLLECT_DATA_FILE, COLLECT_INDEX_FILE, COLLECT_TOKENS_FILE};
    for (int k = 0; k < 3; k++) {
        size_t na, nb;
        char *x = folder_file(a, names[k], &na), *y = folder_file(b, names[k], &nb);
        assert_non_null(x);
        assert_non_null(y);
        assert_int_equal(na, nb);
        assert_memory_equal(x, y, na);
        free(x);
        free(y);
    }
}

static const char *stories(void) { return shared_path("data/tinystories/tinystories_val.txt"); }

static bool stop_after_two(void *user, int64_t done, int64_t total) {
    (void)total;
    int *calls = user;
    ++*calls;
    return done < 2;
}

static void test_resume_gives_identical_files(void **state) {
    (void)state;
    char *whole = fresh_dir(), *parts = fresh_dir(), *cut = fresh_dir();
    tr_collect_params p = small_params();
    tr_collect_stats st;
    assert_int_equal(tr_collect(slm, llm, stories(), whole, &p, &st), TR_OK);
    assert_int_equal(st.n_examples, 4);
    assert_int_equal(st.n_resumed, 0);
    assert_int_equal(st.n_positions, 4 * 39); /* every story has more than 40 tokens */

    int calls = 0;
    p.progress = stop_after_two;
    p.progress_user = &calls;
    assert_int_equal(tr_collect(slm, llm, stories(), parts, &p, &st), TR_ERR_STATE);
    assert_non_null(strstr(tr_last_error(), "resume"));
    assert_int_equal(st.n_examples, 2);
    p.progress = NULL;
    assert_int_equal(tr_collect(slm, llm, stories(), parts, &p, &st), TR_OK);
    assert_int_equal(st.n_resumed, 2);
    assert_int_equal(st.n_examples, 4);
    assert_int_equal(st.n_positions, 4 * 39);
    assert_same_folders(whole, parts);

    /* A crash mid-example: positions.bin ends inside the third example, index.bin inside its entry. */
    assert_int_equal(tr_collect(slm, llm, stories(), cut, &p, &st), TR_OK);
    char path[4096];
    const uint32_t rec = collect_record_bytes(32, 4);
    snprintf(path, sizeof path, "%s/%s", cut, COLLECT_DATA_FILE);
    assert_int_equal(truncate(path, COLLECT_HEADER_BYTES + (off_t)rec * (2 * 39 + 10)), 0);
    snprintf(path, sizeof path, "%s/%s", cut, COLLECT_INDEX_FILE);
    assert_int_equal(truncate(path, 8 + 2 * COLLECT_INDEX_ENTRY + 5), 0);
    /* tokens.bin is written before the index entry: it still holds the third example whole and part of the
     * fourth (each entry 8 + 4 * 40 bytes): a resume cuts both. */
    snprintf(path, sizeof path, "%s/%s", cut, COLLECT_TOKENS_FILE);
    assert_int_equal(truncate(path, 8 + 3 * (8 + 4 * 40) + 13), 0);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(cut, &d), TR_OK); /* readable as far as it is complete */
    assert_int_equal(tr_train_data_get_info(d).n_positions, 2 * 39);
    tr_train_data_free(d);
    assert_int_equal(tr_collect(slm, llm, stories(), cut, &p, &st), TR_OK);
    assert_int_equal(st.n_resumed, 2);
    assert_same_folders(whole, cut);

    /* Resuming with other settings is refused; a longer range continues; restart starts over. */
    p.topk = 5;
    assert_int_equal(tr_collect(slm, llm, stories(), parts, &p, &st), TR_ERR_STATE);
    assert_non_null(strstr(tr_last_error(), "cannot be resumed: the SLM's top-k: 4 there, 5 here"));
    p.topk = 4;
    p.last = 7;
    assert_int_equal(tr_collect(slm, llm, stories(), parts, &p, &st), TR_OK);
    assert_int_equal(st.n_resumed, 4);
    assert_int_equal(st.n_examples, 5);
    p.resume = false;
    p.last = 6;
    assert_int_equal(tr_collect(slm, llm, stories(), parts, &p, &st), TR_OK);
    assert_int_equal(st.n_resumed, 0);
    assert_same_folders(whole, parts);
    toy_remove(whole);
    toy_remove(parts);
    toy_remove(cut);
    free(whole);
    free(parts);
    free(cut);
}

/* Greedy SLM continuation after prefix + choice, counted against the reference, as the label rule needs. */
static int32_t continuation_matches(const int32_t *ref, int32_t n_ref, int32_t pos, int32_t choice, int32_t k) {
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(slm, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, ref, pos, TR_EVAL_LOGITS_NONE), TR_OK);
    int32_t next = choice, matches = 0;
    for (int32_t j = 0; j < k && pos + 1 + j < n_ref; j++) {
        assert_int_equal(tr_context_eval(ctx, &next, 1, TR_EVAL_LOGITS_LAST), TR_OK);
        next = tr_argmax(tr_context_logits(ctx, -1), 512);
        matches += next == ref[pos + 1 + j];
    }
    tr_context_free(ctx);
    return matches;
}

/* The SLM's file is recorded (train-router reads its token table from it); a resume after the file moved is not
 * refused for that, and keeps the first path. Paths too long for the header are not recorded. */
static void test_slm_path_recorded(void **state) {
    (void)state;
    char *dir = fresh_dir();
    tr_collect_params p = small_params();
    p.last = 4; /* examples 2 and 3 */
    p.slm_path = "/models/stories-student.gguf";
    assert_int_equal(tr_collect(slm, llm, stories(), dir, &p, NULL), TR_OK);
    p.slm_path = "/moved/stories-student.gguf";
    p.last = 6;
    tr_collect_stats st;
    assert_int_equal(tr_collect(slm, llm, stories(), dir, &p, &st), TR_OK);
    assert_int_equal(st.n_resumed, 2);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    assert_string_equal(tr_train_data_get_info(d).slm_path, "/models/stories-student.gguf");
    tr_train_data_free(d);
    char long_path[300];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    p.slm_path = long_path;
    p.resume = false;
    assert_int_equal(tr_collect(slm, llm, stories(), dir, &p, NULL), TR_OK);
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    assert_string_equal(tr_train_data_get_info(d).slm_path, "");
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

static void test_rollouts_and_features_match_a_recomputation(void **state) {
    (void)state;
    char *dir = fresh_dir();
    tr_collect_params p = small_params();
    p.last = 4;
    assert_int_equal(tr_collect(slm, llm, stories(), dir, &p, NULL), TR_OK);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    assert_int_equal(d->n, 2 * 39);
    /* Rebuild example 2's tokens: BOS, then the reference of each position. */
    int32_t ref[40];
    ref[0] = 1;
    for (int32_t i = 0; i < 39; i++) ref[i + 1] = d->truth[i];
    int both_wrong = 0;
    for (int32_t i = 0; i < 39; i++) {
        const int32_t pos = i + 1;
        if (d->slm_top1[i] == d->truth[i] || d->llm_top1[i] == d->truth[i]) {
            assert_int_equal(d->rollout_slm[i], -1);
            continue;
        }
        both_wrong++;
        assert_int_equal(d->rollout_slm[i], continuation_matches(ref, 40, pos, d->slm_top1[i], 3));
        assert_int_equal(d->rollout_llm[i], continuation_matches(ref, 40, pos, d->llm_top1[i], 3));
    }
    assert_true(both_wrong >= 3);

    /* A router over every feature scores the stored positions as it scores the SLM's live state. */
    const int32_t n_in = 32 + 3 + 4, sizes[3] = {n_in, 8, 1};
    float w0[39 * 8], b0[8], w1[8], b1[1] = {0.1f};
    for (int i = 0; i < n_in * 8; i++) w0[i] = 0.05f * (float)((i * 37) % 11 - 5);
    for (int i = 0; i < 8; i++) b0[i] = 0.01f * (float)i, w1[i] = 0.3f * (float)(i % 3 - 1);
    const float *ws[2] = {w0, w1}, *bs[2] = {b0, b1};
    const tr_mlp_router_desc desc = {.n_layers = 2, .sizes = sizes, .weights = ws, .biases = bs,
                                     .features = TR_FEATURE_MAXPROB | TR_FEATURE_ENTROPY | TR_FEATURE_MARGIN |
                                                 TR_FEATURE_TOPK_LOGPROBS,
                                     .tau = 0.5f, .slm_n_embd = 32, .slm_n_vocab = 512, .topk = 4};
    const char *path = temp_path(".gguf");
    assert_int_equal(tr_router_write_mlp(&desc, path), TR_OK);
    tr_router *r = NULL;
    assert_int_equal(tr_router_load(path, tr_model_get_info(slm), &r), TR_OK);
    float *stored = malloc((size_t)d->n * sizeof(float));
    assert_int_equal(tr_train_data_scores(d, r, stored), TR_OK);
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(slm, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, ref, 40, TR_EVAL_LOGITS_ALL), TR_OK);
    for (int32_t i = 0; i < 39; i++) {
        float live = -1;
        assert_int_equal(tr_router_score(r, tr_context_hidden(ctx, i), 32, tr_context_logits(ctx, i), 512, &live),
                         TR_OK);
        assert_float_equal(live, stored[i], 1e-6);
    }
    tr_router_free(r);
    unlink(path);

    /* With the token embedding too (input 39 + 32): it needs the SLM, then scores stored and live alike. */
    const int32_t sizes2[2] = {n_in + 32, 1};
    float w2[71], b2[1] = {-0.2f};
    for (int i = 0; i < 71; i++) w2[i] = 0.04f * (float)((i * 13) % 9 - 4);
    const float *ws2[1] = {w2}, *bs2[1] = {b2};
    tr_mlp_router_desc desc2 = desc;
    desc2.n_layers = 1;
    desc2.sizes = sizes2;
    desc2.weights = ws2;
    desc2.biases = bs2;
    desc2.features |= TR_FEATURE_TOKEN_EMBEDDING;
    assert_int_equal(tr_router_write_mlp(&desc2, path), TR_OK);
    assert_int_equal(tr_router_load(path, tr_model_get_info(slm), &r), TR_OK);
    unlink(path);
    float live = -1;
    assert_int_equal(tr_router_score(r, tr_context_hidden(ctx, 0), 32, tr_context_logits(ctx, 0), 512, &live),
                     TR_ERR_STATE);
    assert_non_null(strstr(tr_last_error(), "tr_router_set_slm"));
    assert_int_equal(tr_train_data_scores(d, r, stored), TR_ERR_STATE);
    assert_int_equal(tr_router_set_slm(r, llm), TR_ERR_ARG); /* another hidden size */
    assert_int_equal(tr_router_set_slm(r, slm), TR_OK);
    assert_int_equal(tr_train_data_scores(d, r, stored), TR_OK);
    for (int32_t i = 0; i < 39; i++) {
        assert_int_equal(tr_router_score(r, tr_context_hidden(ctx, i), 32, tr_context_logits(ctx, i), 512, &live),
                         TR_OK);
        assert_float_equal(live, stored[i], 1e-6);
    }
    /* The embedding read is the top-1 token's row of the SLM's table: a hand dot product agrees. */
    const float *h0 = tr_context_hidden(ctx, 0), *l0 = tr_context_logits(ctx, 0);
    float row[32];
    assert_int_equal(slm_token_embedding(slm, tr_argmax(l0, 512), row), TR_OK);
    double z = b2[0];
    for (int k = 0; k < 32; k++) z += w2[k] * h0[k];
    for (int k = 0; k < 7; k++) z += w2[32 + k] * d->feats[k]; /* stored maxprob, entropy, margin, top-4 */
    for (int k = 0; k < 32; k++) z += w2[39 + k] * row[k];
    assert_int_equal(tr_router_score(r, h0, 32, l0, 512, &live), TR_OK);
    assert_float_equal(live, 1.0 / (1.0 + exp(-z)), 1e-5);
    tr_router_free(r);

    /* Training with it needs the SLM. */
    tr_train_params tp = tr_train_default_params();
    tp.features |= TR_FEATURE_TOKEN_EMBEDDING;
    tp.topk = 4;
    tp.epochs = 1;
    tp.n_threads = 1;
    assert_int_equal(tr_train_router(d, &tp, path, NULL), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "reads the SLM's token table: set params.slm"));
    tp.slm = llm;
    assert_int_equal(tr_train_router(d, &tp, path, NULL), TR_ERR_ARG);
    tp.slm = slm;
    assert_int_equal(tr_train_router(d, &tp, path, NULL), TR_OK);
    unlink(path);
    tr_context_free(ctx);
    free(stored);
    tr_train_data_free(d);
    toy_remove(dir);
    free(dir);
}

static void test_llm_samples_are_reproducible(void **state) {
    (void)state;
    char *a = fresh_dir(), *b = fresh_dir(), *c = fresh_dir();
    tr_collect_params p = small_params();
    p.format = TR_DATA_LLM_SAMPLE;
    p.first = 0;
    p.last = 3;
    p.rollouts = 0;
    p.max_tokens = 64;
    assert_int_equal(tr_collect(slm, llm, NULL, a, &p, NULL), TR_OK);
    assert_int_equal(tr_collect(slm, llm, NULL, b, &p, NULL), TR_OK);
    assert_same_folders(a, b);
    p.seed = 2;
    tr_collect_stats st;
    assert_int_equal(tr_collect(slm, llm, NULL, c, &p, &st), TR_OK);
    assert_true(st.n_positions > 3 * 10);
    size_t na, nc;
    char *x = folder_file(a, COLLECT_DATA_FILE, &na), *y = folder_file(c, COLLECT_DATA_FILE, &nc);
    assert_true(na != nc || memcmp(x, y, na) != 0);
    free(x);
    free(y);
    p.last = -1; /* sampling needs a count */
    assert_int_equal(tr_collect(slm, llm, NULL, c, &p, NULL), TR_ERR_ARG);
    p.format = TR_DATA_GSM8K; /* a data file is needed */
    p.last = 2;
    assert_int_equal(tr_collect(slm, llm, NULL, c, &p, NULL), TR_ERR_ARG);
    toy_remove(a);
    toy_remove(b);
    toy_remove(c);
    free(a);
    free(b);
    free(c);
}

/* text-continue: example i keeps the first half of story i (BOS included) as its prompt, not stored, and the LLM
 * samples the rest: the first stored position is that half's length, the stored text is not the story's, and a
 * seed reproduces the files. */
static void test_story_continuations(void **state) {
    (void)state;
    char *a = fresh_dir(), *b = fresh_dir();
    tr_collect_params p = small_params();
    p.format = TR_DATA_TEXT_CONTINUE;
    p.first = 2;
    p.last = 5;
    p.rollouts = 0;
    p.max_tokens = 64;
    tr_collect_stats st;
    assert_int_equal(tr_collect(slm, llm, stories(), a, &p, &st), TR_OK);
    assert_int_equal(st.n_examples, 3);
    assert_int_equal(tr_collect(slm, llm, stories(), b, &p, NULL), TR_OK);
    assert_same_folders(a, b);
    dataset *ds = NULL;
    assert_int_equal(dataset_load(stories(), DATASET_TEXT, 2, 5, &ds), TR_OK);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(a, &d), TR_OK);
    int64_t i = 0, differs = 0;
    for (int32_t e = 0; e < 3; e++) {
        dataset_tokens t;
        assert_int_equal(dataset_tokenize(dataset_get(ds, e), DATASET_TEXT, tr_model_vocab(slm), TR_CHAT_NONE, 0, &t),
                         TR_OK);
        const int32_t n = t.n_ids < p.max_tokens ? t.n_ids : p.max_tokens, half = (n + 1) / 2;
        assert_true(half > 5);
        assert_true(i < d->n);
        assert_int_equal(d->example[i], 2 + e);
        assert_int_equal(d->position[i], half); /* the first stored position follows the kept half */
        for (; i < d->n && d->example[i] == 2 + e; i++)
            differs += d->position[i] < n && d->truth[i] != t.ids[d->position[i]];
        dataset_tokens_free(&t);
    }
    assert_int_equal(i, d->n);
    assert_true(differs > 0); /* sampled, not the story's own second half */
    tr_train_data_free(d);
    dataset_free(ds);
    toy_remove(a);
    toy_remove(b);
    free(a);
    free(b);
}

static void remove_tokens_file(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_TOKENS_FILE);
    assert_int_equal(unlink(path), 0);
}

/* Every position's input row with the induction feature (and context 1). */
static float *induction_rows(const tr_train_data *d, unsigned features, int32_t *width) {
    *width = tr_router_input_width(features, 0, d->n_embd, 1);
    float *rows = malloc((size_t)d->n * (size_t)*width * sizeof *rows);
    for (int64_t i = 0; i < d->n; i++)
        assert_int_equal(train_input_row(d, i, features, 0, 1, NULL, NULL, rows + i * *width), TR_OK);
    return rows;
}

static tr_status train_small(const tr_train_data *d, unsigned features) {
    tr_train_params tp = tr_train_default_params();
    tp.features = features;
    tp.hidden[0] = 8;
    tp.hidden[1] = 0;
    tp.epochs = 1;
    tp.n_threads = 1;
    const char *out = temp_path(".gguf");
    const tr_status st = tr_train_router(d, &tp, out, NULL);
    unlink(out);
    return st;
}

/* tokens.bin (the induction and ngram features, issue 32) holds each example's tokens, BOS and the prompt included:
 * for text the records' references after BOS, for text-continue the kept half first. A text folder without it
 * (collected before it) gives the same input rows and the same n-gram table and values from its records; a
 * text-continue folder without it, whose prompt is not stored, refuses both features by name and still trains
 * without them. */
static void test_tokens_stored(void **state) {
    (void)state;
    char *text = fresh_dir(), *cont = fresh_dir();
    tr_collect_params p = small_params();
    p.rollouts = 0;
    p.first = 2;
    p.last = 8;
    assert_int_equal(tr_collect(slm, llm, stories(), text, &p, NULL), TR_OK);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(text, &d), TR_OK);
    const int32_t bos = tr_vocab_bos(tr_model_vocab(slm));
    for (int64_t i = 0; i < d->n; i++) {
        const int32_t g = d->group[i];
        assert_true(d->group_tokens[g] >= 0);
        assert_int_equal(d->group_n_tokens[g], p.max_tokens);
        assert_int_equal(d->tokens[d->group_tokens[g]], bos);
        assert_int_equal(d->tokens[d->group_tokens[g] + d->position[i]], d->truth[i]);
    }
    const unsigned f = TR_FEATURE_MAXPROB | TR_FEATURE_INDUCTION;
    int32_t width;
    float *with = induction_rows(d, f, &width);
    int64_t found = 0;
    for (int64_t i = 0; i < d->n; i++) found += with[i * width + width - TR_ROUTER_INDUCTION_VALUES] == 1.0f;
    assert_true(found > d->n / 10); /* stories repeat tokens */
    tr_ngram_table *t_bos = NULL;
    float *loo_bos = NULL;
    assert_int_equal(ngram_train_build(d, NULL, &t_bos, &loo_bos, NULL), TR_OK);
    tr_train_data_free(d);
    remove_tokens_file(text);
    assert_int_equal(tr_train_data_open(text, &d), TR_OK);
    assert_int_equal(d->tokens[d->group_tokens[0]], -1); /* from the records: BOS not stored, never read */
    float *without = induction_rows(d, f, &width);
    assert_memory_equal(with, without, (size_t)d->n * (size_t)width * sizeof *with);
    free(with);
    free(without);
    /* ngram reads position 0 as START: the table and the leave-one-out values are the same with tokens.bin's BOS
     * and with the records' -1 (t_bos, loo_bos: built before tokens.bin was removed). */
    tr_ngram_table *t_records = NULL;
    float *loo_records = NULL;
    assert_int_equal(ngram_train_build(d, NULL, &t_records, &loo_records, NULL), TR_OK);
    assert_true(ngram_table_contexts(t_records) > 0);
    assert_memory_equal(loo_records, loo_bos, (size_t)d->n * TR_ROUTER_NGRAM_VALUES * sizeof(float));
    assert_int_equal(ngram_table_contexts(t_records), ngram_table_contexts(t_bos));
    for (int k = 1; k <= NGRAM_ORDER; k++)
        assert_memory_equal(t_records->orders[k - 1].context, t_bos->orders[k - 1].context,
                            (size_t)t_bos->orders[k - 1].n * (size_t)k * sizeof(int32_t));
    ngram_table_free(t_records);
    ngram_table_free(t_bos);
    free(loo_records);
    free(loo_bos);
    tr_train_data_free(d);
    /* A hostile tokens.bin is refused: too few tokens for the records, an id outside the vocabulary, a bad magic;
     * an unfinished tail entry is ignored (as a resume would cut it). */
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", text, COLLECT_TOKENS_FILE);
    const struct {
        uint32_t words[4];
        size_t n_bytes;
        tr_status st;
        const char *msg;
    } hostile[] = {
        {{2, 2, 1, 5}, 16, TR_ERR_FORMAT, "holds 2 tokens of example 2"},
        {{2, 1, 99999, 0}, 12, TR_ERR_FORMAT, "outside the vocabulary"},
        {{2, 1000, 1, 5}, 16, TR_OK, NULL},
    };
    for (size_t k = 0; k < sizeof hostile / sizeof hostile[0]; k++) {
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        fwrite(COLLECT_TOKENS_MAGIC, 1, 8, fp);
        fwrite(hostile[k].words, 1, hostile[k].n_bytes, fp);
        fclose(fp);
        tr_train_data *h = NULL;
        assert_int_equal(tr_train_data_open(text, &h), hostile[k].st);
        if (hostile[k].msg) assert_non_null(strstr(tr_last_error(), hostile[k].msg));
        tr_train_data_free(h);
        h = NULL; /* the same table-only (train-router --ngram-data reads tokens.bin the same way) */
        assert_int_equal(tr_train_data_open_table_only(text, &h), hostile[k].st);
        if (hostile[k].msg) assert_non_null(strstr(tr_last_error(), hostile[k].msg));
        tr_train_data_free(h);
    }
    FILE *fp = fopen(path, "wb");
    fwrite("TRCXXXXX", 1, 8, fp);
    fclose(fp);
    tr_train_data *bad = NULL;
    assert_int_equal(tr_train_data_open(text, &bad), TR_ERR_FORMAT);
    assert_int_equal(tr_train_data_open_table_only(text, &bad), TR_ERR_FORMAT);
    remove_tokens_file(text);

    p.format = TR_DATA_TEXT_CONTINUE;
    p.max_tokens = 64;
    assert_int_equal(tr_collect(slm, llm, stories(), cont, &p, NULL), TR_OK);
    assert_int_equal(tr_train_data_open(cont, &d), TR_OK);
    assert_true(d->position[0] > 5); /* the prompt (the kept half) is not stored as records */
    assert_int_equal(d->tokens[d->group_tokens[0]], bos);
    assert_int_equal(d->tokens[d->group_tokens[0] + d->position[0]], d->truth[0]);
    assert_int_equal(train_small(d, f), TR_OK);
    tr_train_data_free(d);
    remove_tokens_file(cont);
    assert_int_equal(tr_train_data_open(cont, &d), TR_OK);
    assert_int_equal(train_small(d, f), TR_ERR_ARG);
    assert_non_null(strstr(tr_last_error(), "collect this data again, or drop the feature"));
    assert_int_equal(train_small(d, TR_FEATURE_MAXPROB | TR_FEATURE_NGRAM), TR_ERR_ARG); /* the same refusal */
    assert_non_null(strstr(tr_last_error(), "the induction and ngram features read each example's tokens"));
    assert_int_equal(train_small(d, TR_FEATURE_MAXPROB), TR_OK);
    tr_train_data_free(d);
    toy_remove(text);
    toy_remove(cont);
    free(text);
    free(cont);
}

/* Round 2: after the prompt the routed system generates; the reference is the LLM's greedy token. With tau 1
 * every position is routed, so the prefix is the LLM's own greedy continuation of the prompt. */
static void test_round_two_prefix_is_generated(void **state) {
    (void)state;
    char *dir = fresh_dir();
    tr_router *r = NULL;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &r), TR_OK);
    tr_collect_params p = small_params();
    p.first = 0;
    p.last = 2;
    p.rollouts = 0;
    p.router = r;
    p.tau = 1.0f;
    p.prompt_tokens = 6;
    assert_int_equal(tr_collect(slm, llm, stories(), dir, &p, NULL), TR_OK);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    assert_true(d->n > 10);
    /* Greedy LLM continuation of example 0's first 6 tokens, computed here. */
    tr_collect_params q = small_params();
    q.first = 0;
    q.last = 1;
    q.rollouts = 0;
    char *tf = fresh_dir();
    assert_int_equal(tr_collect(slm, llm, stories(), tf, &q, NULL), TR_OK);
    tr_train_data *ref = NULL;
    assert_int_equal(tr_train_data_open(tf, &ref), TR_OK);
    int32_t seq[40];
    seq[0] = 1;
    for (int i = 0; i < 5; i++) seq[i + 1] = ref->truth[i]; /* the example's tokens 1..5 */
    tr_context_params cp = tr_context_default_params();
    cp.n_threads = 1;
    cp.n_ctx = 64;
    tr_context *ctx = NULL;
    assert_int_equal(tr_context_create(llm, &cp, &ctx), TR_OK);
    assert_int_equal(tr_context_eval(ctx, seq, 6, TR_EVAL_LOGITS_LAST), TR_OK);
    for (int32_t i = 0; i < 10; i++) {
        const int32_t next = tr_argmax(tr_context_logits(ctx, -1), 512);
        assert_int_equal(d->truth[i], next);      /* reference = the LLM's greedy token */
        assert_int_equal(d->llm_top1[i], next);
        assert_int_equal(tr_context_eval(ctx, &next, 1, TR_EVAL_LOGITS_LAST), TR_OK);
    }
    tr_context_free(ctx);
    tr_train_data_free(ref);
    tr_train_data_free(d);
    tr_router_free(r);
    toy_remove(tf);
    toy_remove(dir);
    free(tf);
    free(dir);
}

/* Question answering: only the target's positions are stored, with the dataset module's prompt and target. */
static void test_question_answering_targets(void **state) {
    (void)state;
    char *dir = fresh_dir();
    tr_collect_params p = small_params();
    p.format = TR_DATA_CSQA;
    p.first = 3;
    p.last = 6;
    p.max_tokens = 256;
    p.rollouts = 0;
    const char *path = shared_path("data/commonsenseqa/dev_rand_split.jsonl");
    tr_collect_stats st;
    assert_int_equal(tr_collect(slm, llm, path, dir, &p, &st), TR_OK);
    assert_int_equal(st.n_examples, 3);
    dataset *ds = NULL;
    assert_int_equal(dataset_load(path, DATASET_CSQA, 3, 6, &ds), TR_OK);
    int64_t expected = 0;
    int32_t first_target[3];
    for (int64_t e = 0; e < 3; e++) {
        dataset_tokens t;
        assert_int_equal(dataset_tokenize(dataset_get(ds, e), DATASET_CSQA, tr_model_vocab(slm), TR_CHAT_NONE, 0, &t),
                         TR_OK);
        assert_true(t.n_prompt > 10 && t.n_ids > t.n_prompt);
        expected += t.n_ids - t.n_prompt;
        first_target[e] = t.ids[t.n_prompt];
        dataset_tokens_free(&t);
    }
    dataset_free(ds);
    assert_int_equal(st.n_positions, expected);
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open(dir, &d), TR_OK);
    assert_int_equal(d->n, expected);
    assert_int_equal(d->truth[0], first_target[0]); /* the first stored position is the answer's first token */
    tr_train_data_free(d);
    /* A range past the file's end is refused with the count. */
    p.first = 1220;
    p.last = 1300;
    assert_int_equal(tr_collect(slm, llm, path, dir, &p, NULL), TR_ERR_RANGE);
    toy_remove(dir);
    free(dir);
}

/* ---------------------------------------------------------------- hostile files */

static void put32(char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (char)(v >> (8 * i));
}

static void write_folder(const char *dir, const char *data, size_t n_data, const char *index, size_t n_index) {
    char path[4096];
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_DATA_FILE);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n_data, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_INDEX_FILE);
    f = fopen(path, "wb");
    fwrite(index, 1, n_index, f);
    fclose(f);
}

typedef struct mutation {
    const char *what;
    size_t offset;        /* into positions.bin (or index.bin when in_index) */
    uint32_t value;
    bool in_index;
    size_t truncate_to;   /* positions.bin cut to this many bytes when nonzero */
    tr_status status;
    const char *message;
    size_t offset2;       /* a second word of positions.bin set to value2 when nonzero */
    uint32_t value2;
} mutation;

static void test_hostile_data_files_rejected(void **state) {
    (void)state;
    char *good = fresh_dir(), *bad = fresh_dir();
    tr_collect_params p = small_params();
    p.last = 3;
    assert_int_equal(tr_collect(slm, llm, stories(), good, &p, NULL), TR_OK);
    size_t n_data, n_index;
    char *data = folder_file(good, COLLECT_DATA_FILE, &n_data), *index = folder_file(good, COLLECT_INDEX_FILE, &n_index);
    const size_t rec0 = COLLECT_HEADER_BYTES;
    const mutation cases[] = {
        {"magic", 0, 0x41414141, false, 0, TR_ERR_FORMAT, "bad magic", 0, 0},
        {"version", 8, 2, false, 0, TR_ERR_UNSUPPORTED, "version 2", 0, 0},
        {"record size", 16, 999, false, 0, TR_ERR_FORMAT, "record size 999", 0, 0},
        {"n_embd 0", 20, 0, false, 0, TR_ERR_FORMAT, "n_embd 0", 0, 0},
        {"huge n_embd", 20, 0x7fffffff, false, 0, TR_ERR_FORMAT, "n_embd", 0, 0},
        {"topk 65", 28, 65, false, 0, TR_ERR_FORMAT, "topk 65", 0, 0},
        {"format", 36, 77, false, 0, TR_ERR_FORMAT, "unknown data format", 0, 0},
        {"truth id", rec0 + 8, 512, false, 0, TR_ERR_FORMAT, "outside the vocabulary", 0, 0},
        {"negative id", rec0 + 12, 0xffffffff, false, 0, TR_ERR_FORMAT, "outside the vocabulary", 0, 0},
        {"probability", rec0 + 20, 0x3fc00000 /* 1.5f */, false, 0, TR_ERR_FORMAT, "probability", 0, 0},
        {"NaN feature", rec0 + 36, 0x7fc00000, false, 0, TR_ERR_FORMAT, "logit statistic", 0, 0},
        {"rollout count", rec0 + 48, 9, false, 0, TR_ERR_FORMAT, "rollout counts", 0, 0},
        {"one-sided rollout", rec0 + 48, 0, false, 0, TR_ERR_FORMAT, "rollout counts", rec0 + 52, 0xffffffff},
        {"positive log-prob", rec0 + 64, 0x3f800000, false, 0, TR_ERR_FORMAT, "top-k log-prob", 0, 0},
        {"NaN hidden", rec0 + 64 + 16, 0x7fc00000, false, 0, TR_ERR_FORMAT, "non-finite hidden", 0, 0},
        {"position 0", rec0 + 4, 0, false, 0, TR_ERR_FORMAT, "position 0", 0, 0},
        {"example mismatch", rec0, 7, false, 0, TR_ERR_FORMAT, "record of example 7", 0, 0},
        {"index magic", 0, 0x41414141, true, 0, TR_ERR_FORMAT, "index (bad magic)", 0, 0},
        {"index count", 8 + 4, 1u << 30, true, 0, TR_ERR_FORMAT, "runs past the end", 0, 0},
        {"index offset", 8 + 8, 1000, true, 0, TR_ERR_FORMAT, "starts at 1000", 0, 0},
        {"truncated header", 0, 0, false, 100, TR_ERR_FORMAT, "truncated header", 0, 0},
        {"records cut", 0, 0, false, COLLECT_HEADER_BYTES + 20, TR_ERR_FORMAT, "runs past the end", 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const mutation *m = &cases[c];
        char *d2 = malloc(n_data), *i2 = malloc(n_index);
        memcpy(d2, data, n_data);
        memcpy(i2, index, n_index);
        if (m->truncate_to == 0) put32(m->in_index ? i2 + m->offset : d2 + m->offset, m->value);
        if (m->offset2) put32(d2 + m->offset2, m->value2);
        write_folder(bad, d2, m->truncate_to ? m->truncate_to : n_data, i2, n_index);
        /* The table-only reader (train-router --ngram-data) checks every value the same, with the same message. */
        char message[1024] = "";
        for (int table_only = 0; table_only < 2; table_only++) {
            tr_train_data *d = (tr_train_data *)(uintptr_t)1;
            const tr_status st = table_only ? tr_train_data_open_table_only(bad, &d) : tr_train_data_open(bad, &d);
            if (st != m->status || !strstr(tr_last_error(), m->message))
                print_error("case '%s'%s: got %s '%s'\n", m->what, table_only ? " (table-only)" : "",
                            tr_status_name(st), tr_last_error());
            assert_int_equal(st, m->status);
            assert_null(d);
            assert_non_null(strstr(tr_last_error(), m->message));
            if (table_only) assert_string_equal(tr_last_error(), message);
            snprintf(message, sizeof message, "%s", tr_last_error());
        }
        free(d2);
        free(i2);
    }
    /* A missing folder is an I/O error. */
    tr_train_data *d = NULL;
    assert_int_equal(tr_train_data_open("/nonexistent/collect", &d), TR_ERR_IO);
    assert_int_equal(tr_train_data_open_table_only("/nonexistent/collect", &d), TR_ERR_IO);
    assert_null(d);
    /* And a hostile header is not resumed over. */
    char *d2 = malloc(n_data);
    memcpy(d2, data, n_data);
    put32(d2 + 20, 0);
    write_folder(bad, d2, n_data, index, n_index);
    assert_int_equal(tr_collect(slm, llm, stories(), bad, &p, NULL), TR_ERR_FORMAT);
    assert_non_null(strstr(tr_last_error(), "cannot resume"));
    free(d2);
    free(data);
    free(index);
    toy_remove(good);
    toy_remove(bad);
    free(good);
    free(bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_gives_identical_files),
        cmocka_unit_test(test_slm_path_recorded),
        cmocka_unit_test(test_rollouts_and_features_match_a_recomputation),
        cmocka_unit_test(test_llm_samples_are_reproducible),
        cmocka_unit_test(test_story_continuations),
        cmocka_unit_test(test_tokens_stored),
        cmocka_unit_test(test_round_two_prefix_is_generated),
        cmocka_unit_test(test_question_answering_targets),
        cmocka_unit_test(test_hostile_data_files_rejected),
    };
    return cmocka_run_group_tests(tests, load_models, free_models);
}
