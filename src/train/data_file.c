/* data_file.c — the collected-data files (layout in train_internal.h and docs/train.md): header and record
 * encoding, and loading one or more collect folders into a tr_train_data, every field checked first.
 *
 * Loading trusts nothing: the header's sizes must be in bounds and agree with each other, positions.bin must hold
 * exactly the records its index lists (an unfinished tail from an interrupted collect is ignored, as a resume
 * would cut it), every id must be inside the vocabulary, every probability in [0, 1] and every float finite.
 * Each example's tokens come from tokens.bin when the folder has it, else from its records' references when they
 * run from position 1 (text and llm-sample folders collected before tokens.bin); otherwise they are unknown.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "train/train_internal.h"

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_f32(unsigned char *p, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_u32(p, u);
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static float get_f32(const unsigned char *p) {
    const uint32_t u = get_u32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

uint32_t collect_record_bytes(uint32_t n_embd, uint32_t topk) { return COLLECT_RECORD_FIXED + 4 * (topk + n_embd); }

/* Header layout: magic[8] version header_bytes record_bytes n_embd n_vocab topk rollouts format round max_tokens
 * first last (u32/i32 at 8..55) seed u64 @56, data_hash u64 @64, llm_n_embd @72, prompt_tokens @76, tau f32 @80,
 * chat_template @84, llm_topk @88, slm_name[64] @96, llm_name[64] @160, slm_path[256] @224 (zeros in folders
 * collected before it was recorded), zeros to 512. */
void collect_header_encode(const collect_header *h, unsigned char *buf) {
    memset(buf, 0, COLLECT_HEADER_BYTES);
    memcpy(buf, COLLECT_MAGIC, 8);
    const uint32_t u[12] = {h->version,   h->header_bytes, h->record_bytes, h->n_embd,
                            h->n_vocab,   h->topk,         h->rollouts,     h->format,
                            h->round,     h->max_tokens,   (uint32_t)h->first, (uint32_t)h->last};
    for (int i = 0; i < 12; i++) put_u32(buf + 8 + 4 * i, u[i]);
    put_u64(buf + 56, h->seed);
    put_u64(buf + 64, h->data_hash);
    put_u32(buf + 72, h->llm_n_embd);
    put_u32(buf + 76, h->prompt_tokens);
    put_f32(buf + 80, h->tau);
    put_u32(buf + 84, h->chat_template);
    put_u32(buf + 88, h->llm_topk);
    memcpy(buf + 96, h->slm_name, COLLECT_NAME_BYTES);
    memcpy(buf + 160, h->llm_name, COLLECT_NAME_BYTES);
    memcpy(buf + COLLECT_SLM_PATH_OFFSET, h->slm_path, COLLECT_PATH_BYTES);
}

tr_status collect_header_decode(const unsigned char *buf, size_t n, collect_header *h) {
    memset(h, 0, sizeof *h);
    if (n < COLLECT_HEADER_BYTES) return tr_fail(TR_ERR_FORMAT, "truncated header (%zu bytes)", n);
    if (memcmp(buf, COLLECT_MAGIC, 8) != 0) return tr_fail(TR_ERR_FORMAT, "not a tokroute collect file (bad magic)");
    uint32_t u[12];
    for (int i = 0; i < 12; i++) u[i] = get_u32(buf + 8 + 4 * i);
    h->version = u[0];
    h->header_bytes = u[1];
    h->record_bytes = u[2];
    h->n_embd = u[3];
    h->n_vocab = u[4];
    h->topk = u[5];
    h->rollouts = u[6];
    h->format = u[7];
    h->round = u[8];
    h->max_tokens = u[9];
    h->first = (int32_t)u[10];
    h->last = (int32_t)u[11];
    h->seed = get_u64(buf + 56);
    h->data_hash = get_u64(buf + 64);
    h->llm_n_embd = get_u32(buf + 72);
    h->prompt_tokens = get_u32(buf + 76);
    h->tau = get_f32(buf + 80);
    h->chat_template = get_u32(buf + 84);
    h->llm_topk = get_u32(buf + 88);
    memcpy(h->slm_name, buf + 96, COLLECT_NAME_BYTES);
    memcpy(h->llm_name, buf + 160, COLLECT_NAME_BYTES);
    memcpy(h->slm_path, buf + COLLECT_SLM_PATH_OFFSET, COLLECT_PATH_BYTES);
    h->slm_name[COLLECT_NAME_BYTES - 1] = h->llm_name[COLLECT_NAME_BYTES - 1] = '\0';
    h->slm_path[COLLECT_PATH_BYTES - 1] = '\0';
    if (h->version != COLLECT_VERSION)
        return tr_fail(TR_ERR_UNSUPPORTED, "collect file version %" PRIu32 " (this build reads %u)", h->version,
                       COLLECT_VERSION);
    if (h->header_bytes != COLLECT_HEADER_BYTES)
        return tr_fail(TR_ERR_FORMAT, "header size %" PRIu32 " (expected %u)", h->header_bytes, COLLECT_HEADER_BYTES);
    if (h->n_embd < 1 || h->n_embd > COLLECT_MAX_EMBD)
        return tr_fail(TR_ERR_FORMAT, "n_embd %" PRIu32 " is outside 1..%d", h->n_embd, COLLECT_MAX_EMBD);
    if (h->n_vocab < 1 || h->n_vocab > INT32_MAX)
        return tr_fail(TR_ERR_FORMAT, "n_vocab %" PRIu32 " is out of range", h->n_vocab);
    if (h->topk < 1 || h->topk > TR_ROUTER_TOPK_MAX)
        return tr_fail(TR_ERR_FORMAT, "topk %" PRIu32 " is outside 1..%d", h->topk, TR_ROUTER_TOPK_MAX);
    if (h->record_bytes != collect_record_bytes(h->n_embd, h->topk))
        return tr_fail(TR_ERR_FORMAT, "record size %" PRIu32 " does not match n_embd %" PRIu32 " and topk %" PRIu32,
                       h->record_bytes, h->n_embd, h->topk);
    if (h->format > TR_DATA_TEXT_CONTINUE) return tr_fail(TR_ERR_FORMAT, "unknown data format %" PRIu32, h->format);
    if (h->rollouts > 4096) return tr_fail(TR_ERR_FORMAT, "rollouts %" PRIu32 " is out of range", h->rollouts);
    return TR_OK;
}

void collect_record_encode(const collect_record *r, const float *topk, const float *hidden, uint32_t n_topk,
                           uint32_t n_embd, unsigned char *buf) {
    memset(buf, 0, COLLECT_RECORD_FIXED);
    const uint32_t u[5] = {r->example, r->position, (uint32_t)r->truth, (uint32_t)r->slm_top1, (uint32_t)r->llm_top1};
    for (int i = 0; i < 5; i++) put_u32(buf + 4 * i, u[i]);
    const float f[7] = {r->slm_p_top1, r->llm_p_top1, r->slm_p_truth, r->llm_p_truth,
                        r->stats[0],   r->stats[1],   r->stats[2]};
    for (int i = 0; i < 7; i++) put_f32(buf + 20 + 4 * i, f[i]);
    put_u32(buf + 48, (uint32_t)r->rollout_slm);
    put_u32(buf + 52, (uint32_t)r->rollout_llm);
    put_f32(buf + 56, r->llm_p_slm_top1);
    put_f32(buf + 60, r->slm_p_llm_top1);
    unsigned char *p = buf + COLLECT_RECORD_FIXED;
    for (uint32_t i = 0; i < n_topk; i++, p += 4) put_f32(p, topk[i]);
    for (uint32_t i = 0; i < n_embd; i++, p += 4) put_f32(p, hidden[i]);
}

/* ---------------------------------------------------------------- loading */

tr_status train_read_file(const char *path, unsigned char **data, size_t *size) {
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return tr_fail(TR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        unsigned char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    const bool failed = ferror(f) != 0;
    fclose(f);
    if (!buf) return tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    if (failed) {
        free(buf);
        return tr_fail(TR_ERR_IO, "cannot read %s", path);
    }
    *data = buf;
    *size = n;
    return TR_OK;
}

static tr_status data_reserve(tr_train_data *d, int64_t n) {
    if (n <= d->cap) return TR_OK;
    int64_t cap = d->cap ? d->cap : 1024;
    while (cap < n) cap *= 2;
    int32_t **ints[] = {&d->group,       &d->truth,       &d->slm_top1, &d->llm_top1,
                        &d->rollout_slm, &d->rollout_llm, &d->example,  &d->position};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int32_t *p = realloc(*ints[i], (size_t)cap * sizeof(int32_t));
        if (!p) return tr_fail(TR_ERR_NOMEM, "out of memory for %" PRId64 " positions", n);
        *ints[i] = p;
    }
    const size_t widths[3] = {COLLECT_N_PROBS, (size_t)d->n_feats, (size_t)d->n_embd};
    float **floats[3] = {&d->probs, &d->feats, &d->hidden};
    for (int i = 0; i < 3; i++) {
        float *p = realloc(*floats[i], (size_t)cap * widths[i] * sizeof(float));
        if (!p) return tr_fail(TR_ERR_NOMEM, "out of memory for %" PRId64 " positions", n);
        *floats[i] = p;
    }
    d->cap = cap;
    return TR_OK;
}

static bool is_prob(float p) { return p >= 0.0f && p <= 1.0f; }

/* Decodes record bytes into position d->n (reserved), checking every value. */
static tr_status decode_record(tr_train_data *d, const collect_header *h, const unsigned char *p, int32_t group,
                               uint32_t example) {
    const int64_t i = d->n;
    const uint32_t ex = get_u32(p), pos = get_u32(p + 4);
    const int32_t truth = (int32_t)get_u32(p + 8), s1 = (int32_t)get_u32(p + 12), l1 = (int32_t)get_u32(p + 16);
    if (ex != example) return tr_fail(TR_ERR_FORMAT, "record of example %" PRIu32 " inside example %" PRIu32, ex, example);
    if (pos < 1 || pos >= 1u << 24) return tr_fail(TR_ERR_FORMAT, "record position %" PRIu32 " is out of range", pos);
    const int32_t nv = (int32_t)h->n_vocab;
    if (truth < 0 || truth >= nv || s1 < 0 || s1 >= nv || l1 < 0 || l1 >= nv)
        return tr_fail(TR_ERR_FORMAT, "token id outside the vocabulary of %d in example %" PRIu32, nv, ex);
    float *probs = d->probs + i * COLLECT_N_PROBS;
    for (int k = 0; k < COLLECT_N_PROBS; k++) {
        probs[k] = get_f32(k < 4 ? p + 20 + 4 * k : p + 56 + 4 * (k - 4));
        if (!is_prob(probs[k])) return tr_fail(TR_ERR_FORMAT, "probability out of [0, 1] in example %" PRIu32, ex);
    }
    float *feats = d->feats + i * d->n_feats;
    for (int k = 0; k < COLLECT_N_STATS; k++) {
        feats[k] = get_f32(p + 36 + 4 * k);
        if (!is_prob(feats[k])) return tr_fail(TR_ERR_FORMAT, "logit statistic out of [0, 1] in example %" PRIu32, ex);
    }
    const int32_t rs = (int32_t)get_u32(p + 48), rl = (int32_t)get_u32(p + 52);
    const int32_t kmax = (int32_t)h->rollouts;
    if (rs < -1 || rs > kmax || rl < -1 || rl > kmax || (rs < 0) != (rl < 0))
        return tr_fail(TR_ERR_FORMAT, "rollout counts %d, %d out of range in example %" PRIu32, rs, rl, ex);
    const unsigned char *q = p + COLLECT_RECORD_FIXED;
    for (uint32_t k = 0; k < h->topk; k++, q += 4) {
        const float v = get_f32(q);
        if (!(v <= 0.0f && v >= -1000.0f)) return tr_fail(TR_ERR_FORMAT, "bad top-k log-prob in example %" PRIu32, ex);
        feats[COLLECT_N_STATS + k] = v;
    }
    float *hidden = d->hidden + i * d->n_embd;
    for (uint32_t k = 0; k < h->n_embd; k++, q += 4) {
        hidden[k] = get_f32(q);
        if (!isfinite(hidden[k])) return tr_fail(TR_ERR_FORMAT, "non-finite hidden state in example %" PRIu32, ex);
    }
    d->group[i] = group;
    d->example[i] = (int32_t)ex;
    d->position[i] = (int32_t)pos;
    d->truth[i] = truth;
    d->slm_top1[i] = s1;
    d->llm_top1[i] = l1;
    d->rollout_slm[i] = rs;
    d->rollout_llm[i] = rl;
    d->n++;
    return TR_OK;
}

static tr_status check_compatible(tr_train_data *d, const collect_header *h) {
    if (d->n_embd == 0) {
        d->n_embd = (int32_t)h->n_embd;
        d->n_vocab = (int32_t)h->n_vocab;
        d->topk = (int32_t)h->topk;
        d->rollouts = (int32_t)h->rollouts;
        d->n_feats = COLLECT_N_STATS + d->topk;
        memcpy(d->slm_name, h->slm_name, COLLECT_NAME_BYTES);
        memcpy(d->slm_path, h->slm_path, COLLECT_PATH_BYTES);
        return TR_OK;
    }
    if (d->n_embd != (int32_t)h->n_embd || d->n_vocab != (int32_t)h->n_vocab)
        return tr_fail(TR_ERR_ARG, "collected with another SLM (n_embd %" PRIu32 ", n_vocab %" PRIu32
                       " where earlier folders have %d, %d)", h->n_embd, h->n_vocab, (int)d->n_embd, (int)d->n_vocab);
    if (d->topk != (int32_t)h->topk)
        return tr_fail(TR_ERR_ARG, "collected with topk %" PRIu32 " where earlier folders have %d", h->topk,
                       (int)d->topk);
    /* Rollout counts are compared within a position, so folders with different K can still be mixed. */
    if ((int32_t)h->rollouts > d->rollouts) d->rollouts = (int32_t)h->rollouts;
    return TR_OK;
}

/* Room for group g's token slot and n more tokens in the pool. */
static tr_status tokens_reserve(tr_train_data *d, int32_t g, int64_t n) {
    if (g >= d->groups_cap) {
        const int32_t cap = d->groups_cap ? (d->groups_cap > INT32_MAX / 2 ? INT32_MAX : 2 * d->groups_cap) : 256;
        int64_t *off = realloc(d->group_tokens, (size_t)cap * sizeof(int64_t));
        if (off) d->group_tokens = off;
        int32_t *cnt = realloc(d->group_n_tokens, (size_t)cap * sizeof(int32_t));
        if (cnt) d->group_n_tokens = cnt;
        int32_t *ex = realloc(d->example_of_group, (size_t)cap * sizeof(int32_t));
        if (ex) d->example_of_group = ex;
        if (!off || !cnt || !ex) return tr_fail(TR_ERR_NOMEM, "out of memory for %d examples", (int)g);
        d->groups_cap = cap;
    }
    if (d->n_tokens + n > d->tokens_cap) {
        int64_t cap = d->tokens_cap ? d->tokens_cap : 4096;
        while (cap < d->n_tokens + n) cap *= 2;
        int32_t *p = realloc(d->tokens, (size_t)cap * sizeof(int32_t));
        if (!p) return tr_fail(TR_ERR_NOMEM, "out of memory for %" PRId64 " tokens", cap);
        d->tokens = p;
        d->tokens_cap = cap;
    }
    return TR_OK;
}

/* Group g's tokens from its records (first..d->n) when they are positions 1, 2, ...: the reference at each; the
 * BOS at 0 is not stored (-1, never read). Otherwise unknown. */
static tr_status tokens_from_records(tr_train_data *d, int32_t g, int64_t first) {
    const int64_t n = d->n - first;
    tr_status st = tokens_reserve(d, g, n + 1);
    if (st != TR_OK) return st;
    d->group_tokens[g] = -1;
    d->group_n_tokens[g] = 0;
    for (int64_t k = 0; k < n; k++)
        if (d->position[first + k] != k + 1) return TR_OK;
    int32_t *t = d->tokens + d->n_tokens;
    t[0] = -1;
    for (int64_t k = 0; k < n; k++) t[k + 1] = d->truth[first + k];
    d->group_tokens[g] = d->n_tokens;
    d->group_n_tokens[g] = (int32_t)(n + 1);
    d->n_tokens += n + 1;
    return TR_OK;
}

/* tokens.bin of the folder whose examples are groups first_group.. (n of them, in index order, examples ascending;
 * group first_group + k holds records first_rec[k] .. first_rec[k + 1]): each entry replaces its example's tokens;
 * entries of examples not in the index (a tail a resume would cut) are ignored. Every entry must hold the tokens
 * before each of its example's records. */
static tr_status tokens_from_file(tr_train_data *d, const collect_header *h, int32_t first_group, int32_t n,
                                  const int64_t *first_rec, const unsigned char *tok, size_t n_tok) {
    if (n_tok < 8 || memcmp(tok, COLLECT_TOKENS_MAGIC, 8) != 0)
        return tr_fail(TR_ERR_FORMAT, "not a tokroute tokens file (bad magic)");
    size_t at = 8;
    int32_t k = 0;
    while (at + 8 <= n_tok && k < n) {
        const uint32_t example = get_u32(tok + at), count = get_u32(tok + at + 4);
        if (count > COLLECT_MAX_TOKENS || (uint64_t)count * 4 > n_tok - at - 8) break; /* an unfinished tail */
        const unsigned char *ids = tok + at + 8;
        at += 8 + (size_t)count * 4;
        while (k < n && (uint32_t)d->example_of_group[first_group + k] < example) k++; /* no entry: records' */
        if (k >= n || (uint32_t)d->example_of_group[first_group + k] != example) continue;
        const int32_t g = first_group + k;
        tr_status st = tokens_reserve(d, g, count);
        if (st != TR_OK) return st;
        int32_t *t = d->tokens + d->n_tokens;
        for (uint32_t q = 0; q < count; q++) {
            t[q] = (int32_t)get_u32(ids + 4 * q);
            if (t[q] < 0 || t[q] >= (int32_t)h->n_vocab)
                return tr_fail(TR_ERR_FORMAT, "token id outside the vocabulary in " COLLECT_TOKENS_FILE
                               " (example %" PRIu32 ")", example);
        }
        for (int64_t i = first_rec[k]; i < first_rec[k + 1]; i++)
            if ((uint32_t)d->position[i] > count)
                return tr_fail(TR_ERR_FORMAT, COLLECT_TOKENS_FILE " holds %" PRIu32 " tokens of example %" PRIu32
                               ", which has a record at position %d", count, example, (int)d->position[i]);
        d->group_tokens[g] = d->n_tokens;
        d->group_n_tokens[g] = (int32_t)count;
        d->n_tokens += count;
        k++;
    }
    return TR_OK;
}

static tr_status load_folder(tr_train_data *d, const unsigned char *data, size_t n_data, const unsigned char *index,
                             size_t n_index, const unsigned char *tok, size_t n_tok) {
    collect_header h;
    tr_status st = collect_header_decode(data, n_data, &h);
    if (st != TR_OK) return st;
    if ((st = check_compatible(d, &h)) != TR_OK) return st;
    if (n_index < 8 || memcmp(index, COLLECT_INDEX_MAGIC, 8) != 0)
        return tr_fail(TR_ERR_FORMAT, "not a tokroute collect index (bad magic)");
    const size_t n_entries = (n_index - 8) / COLLECT_INDEX_ENTRY;
    const int32_t first_group = d->n_groups;
    uint64_t expect = COLLECT_HEADER_BYTES;
    for (size_t e = 0; e < n_entries; e++) {
        const unsigned char *p = index + 8 + e * COLLECT_INDEX_ENTRY;
        const uint32_t example = get_u32(p), n_pos = get_u32(p + 4);
        const uint64_t offset = get_u64(p + 8);
        if (offset != expect)
            return tr_fail(TR_ERR_FORMAT, "index entry %zu starts at %" PRIu64 ", expected %" PRIu64, e, offset, expect);
        const uint64_t bytes = (uint64_t)n_pos * h.record_bytes;
        if (n_pos > (1u << 24) || offset > n_data || bytes > n_data - offset)
            return tr_fail(TR_ERR_FORMAT, "index entry %zu (%" PRIu32 " positions) runs past the end of the data",
                           e, n_pos);
        if (d->n_groups == INT32_MAX) return tr_fail(TR_ERR_RANGE, "too many examples");
        if ((st = data_reserve(d, d->n + n_pos)) != TR_OK) return st;
        const int64_t first = d->n;
        for (uint32_t k = 0; k < n_pos; k++)
            if ((st = decode_record(d, &h, data + offset + (uint64_t)k * h.record_bytes, d->n_groups, example)) != TR_OK)
                return st;
        if ((st = tokens_from_records(d, d->n_groups, first)) != TR_OK) return st;
        d->example_of_group[d->n_groups] = (int32_t)example;
        d->n_groups++;
        expect = offset + bytes;
    }
    if (!tok) return TR_OK;
    /* Each group's first record (and the end), for tokens.bin's checks. */
    const int32_t n = d->n_groups - first_group;
    int64_t *first_rec = malloc(((size_t)n + 1) * sizeof *first_rec);
    if (!first_rec) return tr_fail(TR_ERR_NOMEM, "out of memory");
    int64_t i = d->n;
    while (i > 0 && d->group[i - 1] >= first_group) i--;
    for (int32_t k = 0; k < n; k++) {
        first_rec[k] = i;
        while (i < d->n && d->group[i] == first_group + k) i++;
    }
    first_rec[n] = d->n;
    st = tokens_from_file(d, &h, first_group, n, first_rec, tok, n_tok);
    free(first_rec);
    return st;
}

int32_t router_extra_width(void);

tr_status tr_train_data_add(tr_train_data *data, const char *dir) {
    if (!data || !dir) return tr_fail(TR_ERR_ARG, "tr_train_data_add: NULL argument");
    char path[4096];
    unsigned char *bytes = NULL, *index = NULL;
    size_t n_bytes = 0, n_index = 0;
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_DATA_FILE);
    tr_status st = train_read_file(path, &bytes, &n_bytes);
    if (st == TR_OK) {
        snprintf(path, sizeof path, "%s/%s", dir, COLLECT_INDEX_FILE);
        st = train_read_file(path, &index, &n_index);
    }
    unsigned char *tok = NULL;
    size_t n_tok = 0;
    snprintf(path, sizeof path, "%s/%s", dir, COLLECT_TOKENS_FILE);
    if (st == TR_OK && access(path, F_OK) == 0) st = train_read_file(path, &tok, &n_tok); /* older folders lack it */
    const int64_t n_before = data->n, tokens_before = data->n_tokens;
    const int32_t groups_before = data->n_groups;
    if (st == TR_OK) st = load_folder(data, bytes, n_bytes, index, n_index, tok, n_tok);
    free(bytes);
    free(index);
    free(tok);
    const int32_t ne = router_extra_width();
    if (st == TR_OK && ne > 0) {
        snprintf(path, sizeof path, "%s/extra.f32", dir);
        unsigned char *ex = NULL;
        size_t n_ex = 0;
        st = train_read_file(path, &ex, &n_ex);
        if (st == TR_OK && n_ex != (size_t)(data->n - n_before) * ne * sizeof(float))
            st = tr_fail(TR_ERR_FORMAT, "extra.f32: %zu bytes for %lld rows", n_ex, (long long)(data->n - n_before));
        if (st == TR_OK) {
            float *bigger = realloc(data->extra, (size_t)data->n * ne * sizeof(float));
            if (!bigger) st = tr_fail(TR_ERR_NOMEM, "out of memory");
            else {
                data->extra = bigger;
                memcpy(data->extra + n_before * ne, ex, n_ex);
            }
        }
        free(ex);
    }
    if (st != TR_OK) {
        data->n = n_before; /* a folder is added whole or not at all */
        data->n_groups = groups_before;
        data->n_tokens = tokens_before;
        return tr_fail_prefix(st, "collected data %s", dir);
    }
    return TR_OK;
}

tr_status tr_train_data_open(const char *dir, tr_train_data **out) {
    if (!dir || !out) return tr_fail(TR_ERR_ARG, "tr_train_data_open: NULL argument");
    *out = NULL;
    tr_train_data *d = calloc(1, sizeof *d);
    if (!d) return tr_fail(TR_ERR_NOMEM, "out of memory");
    const tr_status st = tr_train_data_add(d, dir);
    if (st != TR_OK) {
        tr_train_data_free(d);
        return st;
    }
    *out = d;
    return TR_OK;
}

void tr_train_data_free(tr_train_data *d) {
    if (!d) return;
    void *ptrs[] = {d->group, d->truth, d->slm_top1, d->llm_top1, d->rollout_slm, d->rollout_llm,
                    d->example, d->position, d->probs, d->feats, d->hidden, d->tokens, d->group_tokens,
                    d->group_n_tokens, d->example_of_group};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free(ptrs[i]);
    free(d);
}

tr_train_data_info tr_train_data_get_info(const tr_train_data *d) {
    tr_train_data_info info;
    memset(&info, 0, sizeof info);
    if (!d) return info;
    info.n_embd = d->n_embd;
    info.n_vocab = d->n_vocab;
    info.topk = d->topk;
    info.rollouts = d->rollouts;
    info.n_examples = d->n_groups;
    info.n_positions = d->n;
    info.slm_name = d->slm_name;
    info.slm_path = d->slm_path;
    for (int64_t i = 0; i < d->n; i++) {
        const bool s = d->slm_top1[i] == d->truth[i], l = d->llm_top1[i] == d->truth[i];
        info.slm_correct += s;
        info.llm_correct += l;
        info.both_wrong += !s && !l;
    }
    return info;
}
