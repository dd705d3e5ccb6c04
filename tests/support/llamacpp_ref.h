/* llamacpp_ref.h — llama.cpp as the reference of a test: scripts/llamacpp.sh's build (once per machine), a fresh work
 * folder, and a reference program from the source tree compiled there against that build's libllama. */
#ifndef TR_TEST_LLAMACPP_REF_H
#define TR_TEST_LLAMACPP_REF_H

#include <stddef.h>
#include <stdint.h>

#include "tokroute.h"

typedef struct llamacpp_ref {
    char bin[512]; /* llama.cpp's bin folder (llama-quantize, llama-tokenize, libllama.so) */
    char work[64]; /* this run's files: /tmp/tokroute-<name>-XXXXXX */
    char exe[128]; /* the reference program, compiled into work */
} llamacpp_ref;

/* Builds `target` (a llama.cpp tool, e.g. "llama-quantize") if missing, makes the work folder and compiles
 * `program` (a .c path relative to the source tree) against libllama into <work>/<its base name>. 0, or -1 with a
 * message on stderr. */
int llamacpp_ref_setup(llamacpp_ref *ref, const char *name, const char *target, const char *program);
/* Removes the work folder. 0 or -1. */
int llamacpp_ref_teardown(const llamacpp_ref *ref);
/* system(cmd), saying on stderr when it fails; its status. */
int run_command(const char *cmd);
/* A reference dump of exactly `expect` floats (fails the test otherwise); the caller frees it. */
float *read_f32_dump(const char *path, size_t expect);
/* llamacpp_ref's "<prefix>.greedy": for each of n greedy tokens, the token, its runner-up and how far behind it is
 * (relative); fails the test when the file cannot be read. */
void read_greedy_dump(const char *prefix, int n, int32_t *token, int32_t *runner_up, double *gap);
/* The reference logits' argmax where its top two differ by more than 1% of the top, else -1 (a near-tie that a
 * rounding may swap). */
int reference_clear_argmax(const float *ref, size_t n_vocab);

enum { LLAMACPP_N_PROMPT = 24, LLAMACPP_N_GREEDY = 16 };

/* `tokroute synth`'s `shape` in `type` against llama.cpp (the reference program tests/model/llamacpp_ref.c, compiled
 * by llamacpp_ref_setup): the engine must give llama.cpp's logits and final hidden states at every position of a
 * 24-token prompt (fed in chunks of n_batch) within relative RMS `tol`, its argmax where its top two differ
 * clearly, and its 16 greedy tokens decoded one at a time (a quantized file may part at one of llama.cpp's own
 * near-ties). The file and the reference dumps are made once per work folder; `arch` is the family expected. */
void llamacpp_check_shape(const llamacpp_ref *llama, const char *shape, tr_arch arch, tr_type type, double tol,
                          int32_t n_batch);
/* The same on a variant of the shape: its file with the keys `set_keys` writes (e.g. a sliding window), named
 * after `variant`. */
void llamacpp_check_variant(const llamacpp_ref *llama, const char *shape, const char *variant,
                            tr_status (*set_keys)(tr_gguf_writer *w, void *user), tr_arch arch, tr_type type,
                            double tol, int32_t n_batch);

/* The same with the engine's KV cache of type kv (TR_KV_Q8_0) against llama.cpp's of that type (`-ctk q8_0 -ctv q8_0`,
 * flash attention on, as llama.cpp requires for a quantized V): within `tol`, which must also tell the caches apart
 * (the engine's F16 cache against llama.cpp's q8_0 one must exceed it). */
void llamacpp_check_kv(const llamacpp_ref *llama, const char *shape, tr_arch arch, tr_type type, tr_kv_type kv,
                       double tol, int32_t n_batch);

#endif
