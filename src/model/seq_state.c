/* seq_state.c — a sequence's state beyond its KV cache (qwen35's recurrent layers, lfm2's convolution windows:
 * whatever a family declares through arch_ops.state_floats) and the checkpoints that make rollback exact.
 *
 * A KV cache is truncated by forgetting positions; a recurrent state cannot be: it holds every token it absorbed.
 * So a sequence keeps, besides its live state (F32, its layout the family's), up to SEQ_CHECKPOINTS copies of it
 * taken before chosen positions, and the token ids it processed (the context's / session's token array).
 * Truncating to position p restores the newest checkpoint at or before p (the empty state when none is left) and
 * marks the tokens between it and p for replay: the next evaluation runs them through the model first (forward.c),
 * which rebuilds the same state.
 *
 * Which positions get a checkpoint, in each evaluated chunk of tokens: its first position (so rolling back to the
 * start of any recent evaluation — a drafted token, a rejected speculation — costs a copy and no replay), its last
 * SEQ_TAIL positions (a verifying pass that accepts a prefix of its tokens), and every multiple of SEQ_ANCHOR (a
 * long prompt). When all slots are taken, the one whose removal merges the smallest gap relative to its age goes,
 * so the kept positions thin out geometrically into the past: dense near the end, where rollbacks land, sparse
 * further back. A rollback then replays at most the distance to the kept checkpoint below it.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/arch.h"

#define SEQ_TAIL 4
#define SEQ_ANCHOR 64

static size_t state_floats(const tr_model *m) { return m->arch->state_floats ? m->arch->state_floats(m) : 0; }

size_t seq_state_bytes(const tr_model *m) { return (size_t)(1 + SEQ_CHECKPOINTS) * state_floats(m) * sizeof(float); }

tr_status seq_state_create(const tr_model *m, seq_state **out) {
    *out = NULL;
    if (state_floats(m) == 0) return TR_OK;
    seq_state *s = calloc(1, sizeof *s);
    if (!s) return tr_fail(TR_ERR_NOMEM, "out of memory");
    s->floats = state_floats(m);
    if (!(s->live = calloc(s->floats, sizeof(float)))) {
        const size_t floats = s->floats;
        free(s);
        return tr_fail(TR_ERR_NOMEM, "out of memory for the sequence state (%zu floats)", floats);
    }
    for (int i = 0; i < SEQ_CHECKPOINTS; i++) s->ckpt_pos[i] = -1;
    *out = s;
    return TR_OK;
}

void seq_state_free(seq_state *s) {
    if (!s) return;
    for (int i = 0; i < SEQ_CHECKPOINTS; i++) free(s->ckpt[i]);
    free(s->live);
    free(s->plan);
    free(s);
}

void seq_state_reset(seq_state *s) {
    memset(s->live, 0, s->floats * sizeof(float));
    s->pos = 0;
    for (int i = 0; i < SEQ_CHECKPOINTS; i++) s->ckpt_pos[i] = -1;
    s->plan_n = 0;
}

void seq_state_truncate(seq_state *s, int32_t n_past) {
    int best = -1;
    for (int i = 0; i < SEQ_CHECKPOINTS; i++) {
        if (s->ckpt_pos[i] > n_past) s->ckpt_pos[i] = -1;
        else if (s->ckpt_pos[i] >= 0 && (best < 0 || s->ckpt_pos[i] > s->ckpt_pos[best])) best = i;
    }
    s->plan_n = 0;
    if (s->pos <= n_past) return; /* the tokens up to n_past are replayed from here */
    if (best >= 0) {
        memcpy(s->live, s->ckpt[best], s->floats * sizeof(float));
        s->pos = s->ckpt_pos[best];
    } else {
        memset(s->live, 0, s->floats * sizeof(float));
        s->pos = 0;
    }
}

/* The slot to overwrite when all are taken: the checkpoint (never the newest, `newest`) whose removal merges the
 * smallest gap relative to how far back it lies. */
static int victim(const seq_state *s, int32_t newest) {
    int order[SEQ_CHECKPOINTS], n = 0;
    for (int i = 0; i < SEQ_CHECKPOINTS; i++)
        if (s->ckpt_pos[i] >= 0 && s->ckpt_pos[i] < newest) order[n++] = i;
    for (int i = 1; i < n; i++) /* by position, insertion sort */
        for (int j = i; j > 0 && s->ckpt_pos[order[j]] < s->ckpt_pos[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int best = -1;
    double best_score = 0;
    for (int j = 0; j < n; j++) {
        const int32_t prev = j > 0 ? s->ckpt_pos[order[j - 1]] : 0;
        const int32_t next = j + 1 < n ? s->ckpt_pos[order[j + 1]] : newest;
        const double score = (double)(next - prev) / (double)(newest - prev + 1);
        if (best < 0 || score < best_score) best = order[j], best_score = score;
    }
    return best;
}

/* A slot for a checkpoint at position p: an empty one (allocated on first use) or the victim's. -1 when memory
 * for a first use is short (the checkpoint is skipped; rollback stays exact, only dearer). */
static int take_slot(seq_state *s, int32_t p) {
    for (int i = 0; i < SEQ_CHECKPOINTS; i++) {
        if (s->ckpt_pos[i] >= 0) continue;
        if (!s->ckpt[i] && !(s->ckpt[i] = malloc(s->floats * sizeof(float)))) continue;
        return i;
    }
    return victim(s, p);
}

void seq_state_plan(seq_state *s, int32_t n) {
    s->plan_n = 0;
    s->plan_start = s->pos;
    if (n > s->plan_cap) {
        int8_t *p = realloc(s->plan, (size_t)n);
        if (!p) return; /* no checkpoints in this chunk */
        s->plan = p;
        s->plan_cap = n;
    }
    memset(s->plan, -1, (size_t)n);
    for (int32_t t = 0; t < n; t++) {
        const int32_t p = s->pos + t;
        if (!(t == 0 || t >= n - SEQ_TAIL || p % SEQ_ANCHOR == 0)) continue;
        bool have = false;
        for (int i = 0; i < SEQ_CHECKPOINTS; i++) have |= s->ckpt_pos[i] == p;
        if (have) continue;
        const int slot = take_slot(s, p);
        if (slot < 0) continue;
        for (int32_t u = 0; u < t; u++) /* the victim may be one planned earlier in this chunk */
            if (s->plan[u] == slot) s->plan[u] = -1;
        s->ckpt_pos[slot] = p;
        s->plan[t] = (int8_t)slot;
    }
    s->plan_n = n;
}

void seq_state_commit(seq_state *s, int32_t n) {
    s->pos += n;
    s->plan_n = 0;
}
