/* test_backends.c — the backend interface and what the routed loop does with it: a user-written backend through
 * the public tr_llm_backend_ops (ids outside the shared range are errors, failures fall back to the SLM and are
 * marked, the circuit breaker stops calling, --on-llm-failure error stops), the embedded backend restricted to the
 * shared ids of a padded vocabulary, vocabulary compatibility on hand-made vocabularies, the abort callback (in
 * the loop and inside a blocking HTTP call to a real socket that never answers), and read timeouts. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <cmocka.h>

#include "support/demo_pair.h"
#include "support/fixtures.h"
#include "tokroute.h"


static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static tr_context *new_ctx(const tr_model *m) { return demo_context(m, 2); }


/* ---------------------------------------------------------------- a user-written backend */

typedef struct scripted {
    int32_t id;           /* what it answers */
    tr_status fail;       /* TR_OK, or the status every call fails with */
    int calls;            /* calls that reached next_token */
    bool freed;
} scripted;

static tr_status scripted_next(void *impl, tr_llm_call *call) {
    scripted *s = impl;
    s->calls++;
    if (s->fail != TR_OK) return s->fail;
    call->id = s->id;
    call->logprob = -0.25f;
    call->n_evaluated = 1;
    return TR_OK;
}
static int32_t scripted_vocab(void *impl) { return 600; }
static void scripted_free(void *impl) { ((scripted *)impl)->freed = true; }
static const tr_llm_backend_ops scripted_ops = {.name = "scripted", .next_token = scripted_next,
                                                .n_vocab = scripted_vocab, .free = scripted_free};

typedef struct trace {
    int32_t n, n_unavailable;
    tr_token_source source[64];
    bool unavailable[64];
    int32_t id[64], slm_id[64];
    float logprob[64];
} trace;

static bool record(void *user, const tr_route_token *t) {
    trace *r = user;
    assert_int_equal(t->index, r->n);
    r->source[r->n] = t->source;
    r->unavailable[r->n] = t->llm_unavailable;
    r->id[r->n] = t->id;
    r->slm_id[r->n] = t->slm_id;
    r->logprob[r->n] = t->logprob;
    r->n_unavailable += t->llm_unavailable;
    r->n++;
    return true;
}

static tr_route_params all_routed(int32_t n) {
    tr_route_params rp = tr_route_default_params();
    rp.tau = 2.0f; /* every score is < 2: every token is routed */
    rp.n_predict = n;
    rp.stop_at_eog = false;
    return rp;
}

static void custom_backend_through_public_interface(void **state) {
    demo_pair *p = *state;
    scripted s = {.id = 300};
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_create(&scripted_ops, &s, &b), TR_OK);
    assert_string_equal(tr_llm_backend_name(b), "scripted");
    assert_int_equal(tr_llm_backend_n_vocab(b), 600);
    int32_t seq[3] = {1, 2, 3}, next = -1;
    float lp = 0;
    assert_int_equal(tr_llm_next_token_ex(b, seq, 3, &next, &lp), TR_OK);
    assert_int_equal(next, 300);
    assert_true(lp == -0.25f);
    /* An id beyond the allowed (shared) range is an error, never passed on. */
    tr_llm_backend_set_allowed(b, 300);
    next = -7;
    assert_int_equal(tr_llm_next_token(b, seq, 3, &next), TR_ERR_RANGE);
    assert_int_equal(next, -7);
    tr_llm_backend_set_allowed(b, 0);

    /* Routed through the loop: every token is the backend's, with its logprob. */
    tr_context *ctx = new_ctx(p->slm);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    int32_t prompt[32], out[8];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 32);
    tr_route_params rp = all_routed(8);
    trace tr = {0};
    rp.on_token = record;
    rp.user = &tr;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, out, 8, &st), TR_OK);
    for (int i = 0; i < 8; i++) assert_int_equal(out[i], 300), assert_true(tr.logprob[i] == -0.25f);
    assert_int_equal(st.n_routed, 8);
    /* A backend answering an id the SLM does not have stops generation with a range error (the allowed range
     * is the caller's to set; the loop checks against the SLM's vocabulary in any case). */
    s.id = 550;
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, out, 8, &st), TR_ERR_RANGE);
    tr_router_free(router);
    tr_context_free(ctx);
    tr_llm_backend_free(b);
    assert_true(s.freed);
}

static void failures_fall_back_and_the_breaker_stops_calling(void **state) {
    demo_pair *p = *state;
    scripted s = {.id = 300, .fail = TR_ERR_NETWORK};
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_create(&scripted_ops, &s, &b), TR_OK);
    tr_llm_backend_set_breaker(b, 60000, 60000); /* open for the whole test after the first failure */
    tr_context *ctx = new_ctx(p->slm);
    tr_router *router;
    assert_int_equal(tr_router_create(TR_POLICY_MAXPROB, &router), TR_OK);
    int32_t prompt[32], out[16], slm_alone[16];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 32);
    tr_route_params rp = all_routed(16);
    rp.mode = TR_MODE_SLM;
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, slm_alone, 16, NULL), TR_OK);
    rp.mode = TR_MODE_JOINT;
    trace tr = {0};
    rp.on_token = record;
    rp.user = &tr;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, out, 16, &st), TR_OK);
    /* Every token is the SLM's own proposal, marked; the dead backend was called once, then short-circuited. */
    assert_memory_equal(out, slm_alone, sizeof out);
    assert_int_equal(st.n_fallback, 16);
    assert_int_equal(st.n_routed, 0);
    assert_int_equal(tr.n_unavailable, 16);
    for (int i = 0; i < 16; i++) assert_int_equal(tr.source[i], TR_SOURCE_SLM), assert_int_equal(tr.slm_id[i], out[i]);
    assert_int_equal(s.calls, 1);
    assert_int_equal(tr_llm_backend_stats(b).short_circuited, 15);
    /* The breaker probes again after its cooldown: a recovered backend is used again. */
    tr_llm_backend_set_breaker(b, 1, 1);
    s.fail = TR_OK;
    tr = (trace){0};
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, out, 16, &st), TR_OK);
    assert_int_equal(st.n_fallback, 0);
    assert_int_equal(st.n_routed, 16);
    /* --on-llm-failure error: the failure stops generation with the backend's status. */
    s.fail = TR_ERR_TIMEOUT;
    rp.on_llm_failure = TR_LLM_FAILURE_ERROR;
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, out, 16, &st), TR_ERR_TIMEOUT);
    assert_int_equal(st.n_tokens, 0);
    /* Errors that are not about reachability (a protocol error) are never papered over. */
    tr_llm_backend_set_breaker(b, 0, 0);
    s.fail = TR_ERR_FORMAT;
    rp.on_llm_failure = TR_LLM_FAILURE_FALLBACK;
    assert_int_equal(tr_route_generate(ctx, router, b, prompt, n_prompt, &rp, out, 16, &st), TR_ERR_FORMAT);
    tr_router_free(router);
    tr_context_free(ctx);
    tr_llm_backend_free(b);
}

/* ---------------------------------------------------------------- padded vocabularies */

static void embedded_is_restricted_to_the_shared_ids(void **state) {
    demo_pair *p = *state;
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 64;
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_embedded(p->llm, &cp, NULL, &b), TR_OK);
    int32_t seq[32];
    const int32_t n = demo_prompt_tokens(p->llm, "Once upon a time", seq, 32);
    int32_t best = -1;
    assert_int_equal(tr_llm_next_token(b, seq, n, &best), TR_OK);
    assert_true(best > 1);
    /* Restricted to ids < best: the answer is the argmax of the first best logits. */
    tr_context *ctx = new_ctx(p->llm);
    assert_int_equal(tr_context_eval(ctx, seq, n, TR_EVAL_LOGITS_LAST), TR_OK);
    const int32_t expect = tr_argmax(tr_context_logits(ctx, -1), best);
    tr_llm_backend_set_allowed(b, best);
    int32_t got = -1;
    assert_int_equal(tr_llm_next_token(b, seq, n, &got), TR_OK);
    assert_int_equal(got, expect);
    assert_true(got < best);
    tr_context_free(ctx);
    tr_llm_backend_free(b);
}

/* A vocab-only SentencePiece GGUF: texts[i] with types[i] (1 normal, 3 control, 5 unused). */
static tr_vocab *make_vocab(const char *const *texts, const int32_t *types, int32_t n) {
    const char *path = temp_path(".gguf");
    tr_gguf_writer *w;
    float *scores = calloc((size_t)n, sizeof *scores);
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "general.architecture", "llama"), TR_OK);
    assert_int_equal(tr_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, (uint64_t)n), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n), TR_OK);
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    free(scores);
    tr_vocab *v = NULL;
    if (tr_vocab_load(path, &v) != TR_OK) fail_msg("%s", tr_last_error());
    remove(path);
    return v;
}

static void vocabulary_compatibility(void **state) {
    const char *base[] = {"<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81the"};
    const int32_t base_t[] = {2, 3, 3, 1, 1, 1};
    const char *padded[] = {"<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81the", "[PAD6]", "[PAD7]"};
    const int32_t padded_t[] = {2, 3, 3, 1, 1, 1, 5, 5};
    const char *named_pad[] = {"<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81the", "[PAD6]"};
    const int32_t named_pad_t[] = {2, 3, 3, 1, 1, 1, 1}; /* padding by name only */
    const char *extra[] = {"<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81the", "c"};
    const int32_t extra_t[] = {2, 3, 3, 1, 1, 1, 1};
    const char *differ[] = {"<unk>", "<s>", "</s>", "a", "c", "\xe2\x96\x81the"};
    tr_vocab *slm = make_vocab(base, base_t, 6), *same = make_vocab(base, base_t, 6);
    tr_vocab *pad = make_vocab(padded, padded_t, 8), *pad2 = make_vocab(named_pad, named_pad_t, 7);
    tr_vocab *ext = make_vocab(extra, extra_t, 7), *dif = make_vocab(differ, base_t, 6);
    tr_vocab_match m = TR_VOCAB_SIZE_ONLY;
    int32_t n = 0;
    assert_int_equal(tr_vocab_compatible(slm, same, &m, &n), TR_OK);
    assert_int_equal(m, TR_VOCAB_SAME);
    assert_int_equal(n, 6);
    assert_int_equal(tr_vocab_compatible(slm, pad, &m, &n), TR_OK);
    assert_int_equal(m, TR_VOCAB_PADDED);
    assert_int_equal(n, 6);
    assert_int_equal(tr_vocab_compatible(slm, pad2, &m, &n), TR_OK);
    assert_int_equal(m, TR_VOCAB_PADDED);
    assert_int_equal(tr_vocab_compatible(slm, ext, &m, &n), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), "not padding"));
    assert_int_equal(tr_vocab_compatible(slm, dif, &m, &n), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_last_error(), "token 4"));
    assert_int_equal(tr_vocab_compatible(pad, slm, &m, &n), TR_ERR_UNSUPPORTED); /* the SLM's is the larger */
    assert_int_equal(tr_vocab_compatible_size(slm, 8, &m, &n), TR_OK);
    assert_int_equal(m, TR_VOCAB_SIZE_ONLY);
    assert_int_equal(n, 6);
    assert_int_equal(tr_vocab_compatible_size(slm, 0, &m, &n), TR_OK);
    assert_int_equal(tr_vocab_compatible_size(slm, 5, &m, &n), TR_ERR_UNSUPPORTED);
    assert_string_equal(tr_vocab_match_name(TR_VOCAB_PADDED), "padded");
    tr_vocab_free(slm), tr_vocab_free(same), tr_vocab_free(pad), tr_vocab_free(pad2), tr_vocab_free(ext);
    tr_vocab_free(dif);
}


/* stories260K with N_PAD "[PADn]" entries (type UNUSED) appended, as a converter pads a larger model's vocabulary.
 * The padding rows of output.weight are 3× the rows of merge tokens 259.., so an unrestricted argmax picks padding
 * wherever a merge token would win with a positive logit: the restriction to the shared ids must be real. */
#define N_PAD 253
static const char *write_padded_llm(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s", temp_path("-padded.gguf"));
    tr_gguf *src;
    assert_int_equal(tr_gguf_open(shared_path("models/stories260K.gguf"), &src), TR_OK);
    tr_gguf_writer *w;
    assert_int_equal(tr_gguf_writer_create(&w), TR_OK);
    assert_int_equal(tr_gguf_writer_copy_kv(w, src), TR_OK);
    const int64_t kt = tr_gguf_find_kv(src, "tokenizer.ggml.tokens"), ks = tr_gguf_find_kv(src, "tokenizer.ggml.scores");
    const int64_t ky = tr_gguf_find_kv(src, "tokenizer.ggml.token_type");
    const int32_t V = 512, NV = V + N_PAD;
    const char **texts = calloc(NV, sizeof *texts);
    char (*pads)[16] = calloc(N_PAD, 16);
    float *scores = calloc(NV, sizeof *scores);
    int32_t *types = calloc(NV, sizeof *types);
    for (int32_t i = 0; i < V; i++) {
        texts[i] = tr_gguf_arr_str(src, kt, (uint64_t)i, NULL);
        double f;
        int64_t t;
        assert_true(tr_gguf_arr_float(src, ks, (uint64_t)i, &f) && tr_gguf_arr_int(src, ky, (uint64_t)i, &t));
        scores[i] = (float)f, types[i] = (int32_t)t;
    }
    for (int32_t i = 0; i < N_PAD; i++) {
        snprintf(pads[i], 16, "[PAD%d]", V + i);
        texts[V + i] = pads[i], types[V + i] = 5;
    }
    assert_int_equal(tr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, (uint64_t)NV), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)NV), TR_OK);
    assert_int_equal(tr_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)NV), TR_OK);
    for (int64_t i = 0; i < tr_gguf_n_tensors(src); i++) {
        const tr_gguf_tensor *t = tr_gguf_tensor_at(src, i);
        const bool emb = strcmp(t->name, "token_embd.weight") == 0, out = strcmp(t->name, "output.weight") == 0;
        if (!emb && !out) {
            assert_int_equal(tr_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL), TR_OK);
            continue;
        }
        assert_int_equal(t->type, TR_TYPE_F32);
        const int64_t E = t->ne[0];
        float *data = calloc((size_t)(E * NV), sizeof *data);
        memcpy(data, t->data, (size_t)(E * V) * sizeof *data);
        for (int32_t r = 0; out && r < N_PAD; r++)
            for (int64_t c = 0; c < E; c++) data[(V + r) * E + c] = 3.0f * ((const float *)t->data)[(259 + r) * E + c];
        const int64_t ne[2] = {E, NV};
        assert_int_equal(tr_gguf_writer_add_tensor(w, t->name, t->type, 2, ne, data, NULL), TR_OK);
        free(data);
    }
    assert_int_equal(tr_gguf_writer_write(w, path, NULL, NULL), TR_OK);
    tr_gguf_writer_free(w);
    tr_gguf_close(src);
    free(texts), free(pads), free(scores), free(types);
    return path;
}

static void padded_llm_vocabulary_routes_like_the_original(void **state) {
    demo_pair *p = *state;
    const char *path = write_padded_llm();
    tr_model_params mp = tr_model_default_params();
    tr_model *padded;
    assert_int_equal(tr_model_load(path, &mp, &padded), TR_OK);
    assert_int_equal(tr_model_get_info(padded)->n_vocab, 512 + N_PAD);
    tr_vocab_match m;
    int32_t n_shared = 0;
    assert_int_equal(tr_vocab_compatible(tr_model_vocab(p->slm), tr_model_vocab(padded), &m, &n_shared), TR_OK);
    assert_int_equal(m, TR_VOCAB_PADDED);
    assert_int_equal(n_shared, 512);
    /* Unrestricted, the padded LLM does pick padding; restricted, it routes exactly like the original LLM. */
    int32_t prompt[32], ref[40], out[40];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 32);
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 128;
    tr_llm_backend *orig, *pad;
    assert_int_equal(tr_llm_backend_embedded(p->llm, &cp, NULL, &orig), TR_OK);
    assert_int_equal(tr_llm_backend_embedded(padded, &cp, NULL, &pad), TR_OK);
    int32_t next = -1;
    assert_int_equal(tr_llm_next_token(pad, prompt, n_prompt, &next), TR_OK);
    assert_true(next >= 512);
    tr_llm_backend_set_allowed(pad, n_shared);
    tr_context *ctx = new_ctx(p->slm);
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_LLM;
    rp.n_predict = 40;
    rp.stop_at_eog = false;
    assert_int_equal(tr_route_generate(ctx, NULL, orig, prompt, n_prompt, &rp, ref, 40, NULL), TR_OK);
    assert_int_equal(tr_route_generate(ctx, NULL, pad, prompt, n_prompt, &rp, out, 40, NULL), TR_OK);
    assert_memory_equal(out, ref, sizeof ref);
    /* The CLI accepts the pair, says which case applies, and restricts the LLM the same way. */
    char cmd[2048], line[4096] = "", ids_pad[4096] = "", ids_ref[4096] = "", slm_path[1024];
    snprintf(slm_path, sizeof slm_path, "%s", shared_path("models/stories-student.gguf")); /* a static buffer */
    snprintf(cmd, sizeof cmd, "%s generate --slm %s --llm %s -p 'Once upon a time' -n 40 --threshold 0.7 --ids "
             "--no-summary 2>&1", TR_CLI_PATH, slm_path, path);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    assert_non_null(fgets(ids_pad, sizeof ids_pad, f));
    assert_int_equal(pclose(f), 0);
    assert_non_null(strstr(line, "253 padding entries beyond the SLM's 512"));
    snprintf(cmd, sizeof cmd, "%s generate --slm %s --llm %s -p 'Once upon a time' -n 40 --threshold 0.7 --ids "
             "--no-summary 2>/dev/null", TR_CLI_PATH, slm_path, shared_path("models/stories260K.gguf"));
    assert_non_null(f = popen(cmd, "r"));
    assert_non_null(fgets(ids_ref, sizeof ids_ref, f));
    assert_int_equal(pclose(f), 0);
    if (strcmp(ids_pad, ids_ref) != 0) fail_msg("padded: %s\nline %s\nref: %s", ids_pad, line, ids_ref);
    tr_context_free(ctx);
    tr_llm_backend_free(orig);
    tr_llm_backend_free(pad);
    tr_model_free(padded);
    remove(path);
}

/* ---------------------------------------------------------------- abort */

typedef struct abort_after {
    int polls, limit;
} abort_after;

static bool abort_when(void *user) {
    abort_after *a = user;
    return ++a->polls > a->limit;
}

static void abort_callback_stops_generation(void **state) {
    demo_pair *p = *state;
    tr_context *ctx = new_ctx(p->slm);
    int32_t prompt[32], out[32];
    const int32_t n_prompt = demo_prompt_tokens(p->slm, "Once upon a time", prompt, 32);
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_SLM;
    rp.n_predict = 32;
    rp.stop_at_eog = false;
    abort_after a = {0, 0};
    rp.abort_fn = abort_when;
    rp.abort_user = &a;
    tr_route_stats st;
    /* Aborted at the first poll: during prefill, nothing generated. */
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, out, 32, &st), TR_ERR_STATE);
    assert_true(st.aborted);
    assert_int_equal(st.n_tokens, 0);
    /* Aborted later: after some tokens (one poll for the prefill chunk, then one per token). */
    a = (abort_after){0, 6};
    assert_int_equal(tr_route_generate(ctx, NULL, NULL, prompt, n_prompt, &rp, out, 32, &st), TR_ERR_STATE);
    assert_true(st.aborted);
    assert_int_equal(st.n_tokens, 5);
    tr_context_free(ctx);
}

/* llm mode's first LLM call evaluates the whole prompt: the embedded backend polls abort_fn between chunks. */
static void abort_inside_a_long_llm_catch_up(void **state) {
    demo_pair *p = *state;
    tr_context *ctx = new_ctx(p->slm);
    tr_context_params cp = tr_context_default_params();
    cp.n_ctx = 512;
    tr_llm_backend *llm;
    assert_int_equal(tr_llm_backend_embedded(p->llm, &cp, NULL, &llm), TR_OK);
    int32_t prompt[400];
    prompt[0] = 1;
    for (int i = 1; i < 400; i++) prompt[i] = 259 + i % 200;
    tr_route_params rp = tr_route_default_params();
    rp.mode = TR_MODE_LLM;
    rp.n_predict = 4;
    abort_after a = {0, 2}; /* the loop's poll, the first chunk's poll, then abort before the second chunk */
    rp.abort_fn = abort_when;
    rp.abort_user = &a;
    tr_route_stats st;
    assert_int_equal(tr_route_generate(ctx, NULL, llm, prompt, 400, &rp, NULL, 0, &st), TR_ERR_STATE);
    assert_true(st.aborted);
    assert_int_equal(st.n_tokens, 0);
    /* Without an abort the same call completes, reusing the chunk already evaluated. */
    rp.abort_fn = NULL;
    assert_int_equal(tr_route_generate(ctx, NULL, llm, prompt, 400, &rp, NULL, 0, &st), TR_OK);
    assert_int_equal(st.n_tokens, 4);
    assert_int_equal(st.llm_evaluated, 400 - 256 + 3);
    tr_llm_backend_free(llm);
    tr_context_free(ctx);
}

/* A real TCP server on 127.0.0.1 that accepts connections and never answers (python3), bounded to 60 s. */
typedef struct silent_server {
    FILE *pipe;
    int port;
    long pid;
} silent_server;

static void silent_start(silent_server *s) {
    s->pipe = popen("exec timeout 60 python3 -c '"
                    "import socket,os,sys,time\n"
                    "s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(16)\n"
                    "print(s.getsockname()[1], os.getpid(), flush=True)\n"
                    "held=[]\n"
                    "while True:\n"
                    "    c,_=s.accept(); held.append(c)\n"
                    "'", "r");
    assert_non_null(s->pipe);
    assert_int_equal(fscanf(s->pipe, "%d %ld", &s->port, &s->pid), 2);
}

static void silent_stop(silent_server *s) {
    kill((pid_t)s->pid, SIGTERM);
    pclose(s->pipe);
}

static bool abort_after_time(void *user) { return now_ms() > *(const double *)user; }

static void read_timeout_and_abort_inside_a_call(void **state) {
    silent_server srv;
    silent_start(&srv);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", srv.port);
    tr_remote_params rp = tr_remote_default_params();
    rp.url = url;
    rp.timeout_ms = 400;
    rp.retries = 3;
    int32_t seq[3] = {1, 2, 3}, next;
    tr_llm_backend *(b[3]) = {NULL, NULL, NULL};
    assert_int_equal(tr_llm_backend_server(&rp, &b[0]), TR_OK);
    assert_int_equal(tr_llm_backend_openai(&rp, &b[1]), TR_OK);
    assert_int_equal(tr_llm_backend_llamacpp(&rp, &b[2]), TR_OK);
    for (int k = 0; k < 3; k++) {
        /* The whole call, retries included, ends at the timeout. */
        double t0 = now_ms();
        assert_int_equal(tr_llm_next_token(b[k], seq, 3, &next), TR_ERR_TIMEOUT);
        double dt = now_ms() - t0;
        fprintf(stderr, "%s: timed out after %.0f ms (timeout 400)\n", tr_llm_backend_name(b[k]), dt);
        assert_true(dt >= 350 && dt < 1400);
        /* Breaker open: the next call fails at once. */
        t0 = now_ms();
        assert_int_equal(tr_llm_next_token(b[k], seq, 3, &next), TR_ERR_NETWORK);
        assert_true(now_ms() - t0 < 50);
        assert_non_null(strstr(tr_last_error(), "circuit open"));
        tr_llm_backend_free(b[k]);
    }
    /* The abort callback ends a blocking call long before its timeout. */
    rp.timeout_ms = 20000;
    tr_llm_backend *slow;
    assert_int_equal(tr_llm_backend_llamacpp(&rp, &slow), TR_OK);
    double t0 = now_ms(), abort_at = t0 + 200;
    tr_llm_backend_set_abort(slow, abort_after_time, &abort_at);
    assert_int_equal(tr_llm_next_token(slow, seq, 3, &next), TR_ERR_STATE);
    fprintf(stderr, "aborted %.0f ms after the callback said so\n", now_ms() - abort_at);
    assert_true(now_ms() - abort_at < 500); /* it is asked every 50 ms while the call waits (curl alone: ~1 s) */
    assert_non_null(strstr(tr_last_error(), "aborted"));
    tr_llm_backend_free(slow);
    silent_stop(&srv);
}

static void bad_remote_params(void **state) {
    tr_remote_params rp = tr_remote_default_params();
    tr_llm_backend *b = NULL;
    assert_int_equal(tr_llm_backend_openai(&rp, &b), TR_ERR_ARG);
    rp.url = "ftp://127.0.0.1:1";
    assert_int_equal(tr_llm_backend_server(&rp, &b), TR_ERR_ARG);
    rp.url = "http://127.0.0.1:1";
    rp.timeout_ms = 0;
    assert_int_equal(tr_llm_backend_llamacpp(&rp, &b), TR_ERR_ARG);
    rp.timeout_ms = 1000;
    rp.api_key = "a\r\nX-Evil: 1";
    assert_int_equal(tr_llm_backend_llamacpp(&rp, &b), TR_ERR_ARG);
    assert_null(b);
    /* Nothing listens on port 1: connection refused, a network error (not a hang). */
    rp.api_key = NULL;
    rp.retries = 1;
    assert_int_equal(tr_llm_backend_llamacpp(&rp, &b), TR_OK);
    int32_t seq[1] = {1}, next;
    assert_int_equal(tr_llm_next_token(b, seq, 1, &next), TR_ERR_NETWORK);
    assert_int_equal(tr_llm_backend_stats(b).failures, 1);
    tr_llm_backend_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(custom_backend_through_public_interface),
        cmocka_unit_test(failures_fall_back_and_the_breaker_stops_calling),
        cmocka_unit_test(embedded_is_restricted_to_the_shared_ids),
        cmocka_unit_test(vocabulary_compatibility),
        cmocka_unit_test(padded_llm_vocabulary_routes_like_the_original),
        cmocka_unit_test(abort_callback_stops_generation),
        cmocka_unit_test(abort_inside_a_long_llm_catch_up),
        cmocka_unit_test(read_timeout_and_abort_inside_a_call),
        cmocka_unit_test(bad_remote_params),
    };
    return cmocka_run_group_tests(tests, demo_pair_setup, demo_pair_teardown);
}
