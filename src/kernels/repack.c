/* repack.c — the interleaved weight layout (WEIGHT_X16) and the conversions to and from it.
 *
 * A decode step streams every weight once, so its speed is the rate at which the kernels turn weight bytes into
 * dot products. In the file's row-major layout a SIMD kernel must reduce each row's partial sums across lanes and
 * reload the activations per row. In the X16 layout, 16 consecutive rows are stored block column by block column
 * and, inside a block, word by word: 4 bytes of row 0, 4 bytes of row 1, ... 4 bytes of row 15. One 64-byte load
 * then holds the same 4 weight bytes of 16 rows, one broadcast activation word serves all of them, and each 32-bit
 * lane accumulates one row — no reduction, and the 16 results are stored with one vector store.
 *
 * The layout is a permutation of the bytes of the 16 rows (same size), so row r of a matrix starts at the same
 * offset in both layouts when r is past the last whole group, and the rows after the last whole group of 16 stay
 * plain. Per type, a group's block column b (16 blocks, one per row) holds:
 *   Q4_0, IQ4_NL: d[16] F16 | qs word c (0-3) of row r at 32 + 64c + 4r
 *   Q4_1: d[16], m[16] F16 | qs words at 64 + 64c + 4r
 *   Q5_0: d[16] F16 | 8 64-bit masks at 32: bit 4r+i of mask 2c+h is the fifth bit of element 16h+4c+i of row r
 *         (one AVX-512 byte mask per qs word and nibble) | qs words at 96 + 64c + 4r
 *   Q5_1: d[16], m[16] F16 | masks at 64 | qs words at 128 + 64c + 4r
 *   Q8_0: d[16] F16 | qs word c (0-7) of row r at 32 + 64c + 4r
 *   Q4_K: d[16], dmin[16] F16 | scale word k (0-2) at 64 + 64k + 4r | qs word w (0-31) at 256 + 64w + 4r
 *   Q5_K: as Q4_K, with qh word w (0-7) at 256 + 64w + 4r and qs words from 768
 *   Q6_K: d[16] F16 | int8 scale of sub-block s at 32 + 16s + r | then, for 32-element group g, 6-bit values
 *         q[e] rearranged: ql word 4g+w (at 288 + 64(4g+w) + 4r) byte i holds q[32g+4w+i] (low nibble) and
 *         q[32g+16+4w+i] (high nibble); qh word 2g+h (at 2336 + 64(2g+h) + 4r) byte i holds, in bits 2w..2w+1,
 *         the top two bits of q[32g+16h+4w+i].
 *   IQ4_XS: d[16] F16 | scales_h[16] u16 at 32 | scales_l (4 bytes) of row r at 64 + 4r | qs word w (0-31) at
 *         128 + 64w + 4r (sub-block w/4 of 32 elements; byte i holds element 4(w%4)+i and, high nibble, +16).
 *   Q2_K: d[16], dmin[16] F16 | 4 nibble words at 64 + 64k + 4r: the scales of sub-blocks 8k+t (k = 0, 1) and the
 *         mins of sub-blocks 8(k-2)+t (k = 2, 3), nibble t at bit 16(t%2) + 4(t/2), so one shift and one mask give
 *         the 16-bit pair of sub-blocks 2p, 2p+1 | qs word w (0-15, the file's bytes 4w..4w+3) at 320 + 64w + 4r.
 *   Q3_K: d[16] F16 | 3 scale words at 32 + 64k + 4r: the low 4 bits of the 6-bit scales as Q2_K's scale words
 *         (k = 0, 1), their top 2 bits (k = 2) at bit 16(s%2) + 2(s/2) | hmask word k (0-7) at 224 + 64k + 4r |
 *         qs word w (0-15) at 736 + 64w + 4r.
 * Only this file knows the arrangement beyond the kernels that read it (matmul_x16_*.c). */
#include "kernels/kernels.h"

#include "common/error.h"
#include "kernels/blocks.h"
#include "kernels/matmul_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- one block column of a group */

/* Word c of row r inside a region of `words` 64-byte words starting at base. */
static uint8_t *word_at(uint8_t *base, int c, int r) { return base + 64 * c + 4 * r; }

/* Q6_K block → its 256 six-bit values (ggml's layout: two halves of 128 with ql[64], qh[32] each). */
static void q6k_values(const block_q6_k *b, uint8_t *q) {
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
        uint8_t *y = q + 128 * half;
        for (int l = 0; l < 32; l++) {
            y[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            y[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

static void q6k_from_values(const uint8_t *q, block_q6_k *b) {
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int half = 0; half < 2; half++) {
        uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
        const uint8_t *y = q + 128 * half;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((y[l] & 0xF) | ((y[l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((y[l + 32] & 0xF) | ((y[l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((y[l] >> 4) | ((y[l + 32] >> 4) << 2) | ((y[l + 64] >> 4) << 4) | ((y[l + 96] >> 4) << 6));
        }
    }
}

/* Q2_K/Q3_K nibble word: nibble t (0-7) at bit 16(t%2) + 4(t/2). */
static int nib_shift(int t) { return 16 * (t % 2) + 4 * (t / 2); }

static void put_word(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get_word(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Q2_K's scale bytes (scale | min << 4) to or from the four nibble words of row r. */
static void q2k_scales_move(uint8_t *scales, uint8_t *col, int r, bool to_group) {
    for (int k = 0; k < 2; k++) {
        uint32_t sc = 0, mn = 0;
        if (!to_group) sc = get_word(word_at(col, k, r)), mn = get_word(word_at(col, 2 + k, r));
        for (int t = 0; t < 8; t++) {
            uint8_t *s = &scales[8 * k + t];
            if (to_group) {
                sc |= (uint32_t)(*s & 0xF) << nib_shift(t);
                mn |= (uint32_t)(*s >> 4) << nib_shift(t);
            } else {
                *s = (uint8_t)(((sc >> nib_shift(t)) & 0xF) | ((mn >> nib_shift(t)) & 0xF) << 4);
            }
        }
        if (to_group) put_word(word_at(col, k, r), sc), put_word(word_at(col, 2 + k, r), mn);
    }
}

/* Q3_K's 12 packed scale bytes (blocks.h) to or from the three scale words of row r. */
static void q3k_scales_move(uint8_t *scales, uint8_t *col, int r, bool to_group) {
    uint32_t w[3] = {0, 0, 0};
    if (to_group) {
        for (int s = 0; s < 16; s++) {
            const uint32_t v = (uint32_t)q3k_scale(scales, s);
            w[s / 8] |= (v & 0xF) << nib_shift(s % 8);
            w[2] |= (v >> 4) << (16 * (s % 2) + 2 * (s / 2));
        }
        for (int k = 0; k < 3; k++) put_word(word_at(col, k, r), w[k]);
        return;
    }
    for (int k = 0; k < 3; k++) w[k] = get_word(word_at(col, k, r));
    memset(scales, 0, K_SCALE_SIZE);
    for (int s = 0; s < 16; s++) {
        const uint32_t lo = (w[s / 8] >> nib_shift(s % 8)) & 0xF, hi = (w[2] >> (16 * (s % 2) + 2 * (s / 2))) & 3;
        scales[s % 8] |= (uint8_t)(lo << (s < 8 ? 0 : 4));
        scales[8 + s % 4] |= (uint8_t)(hi << (2 * (s / 4)));
    }
}

/* Moves one block (src, of row r) into or out of a group's block column (col). */
static void block_move(tr_type type, uint8_t *col, int r, uint8_t *blk, bool to_group) {
#define MOVE(group_ptr, block_ptr, n)                                                                                \
    do {                                                                                                             \
        if (to_group) memcpy((group_ptr), (block_ptr), (n));                                                         \
        else memcpy((block_ptr), (group_ptr), (n));                                                                  \
    } while (0)
    switch (type) {
    case TR_TYPE_Q4_0:
    case TR_TYPE_IQ4_NL: { /* same bytes: an F16 scale and 16 nibble bytes */
        block_q4_0 *b = (block_q4_0 *)blk;
        MOVE(col + 2 * r, &b->d, 2);
        for (int c = 0; c < 4; c++) MOVE(word_at(col + 32, c, r), b->qs + 4 * c, 4);
        break;
    }
    case TR_TYPE_Q4_1:
    case TR_TYPE_Q5_0:
    case TR_TYPE_Q5_1: {
        /* d, then m (Q4_1, Q5_1), then qh (Q5_0, Q5_1), then qs[16] */
        const bool has_m = type != TR_TYPE_Q5_0, has_h = type != TR_TYPE_Q4_1;
        uint8_t *qh = blk + (has_m ? 4 : 2), *qs = qh + (has_h ? 4 : 0);
        MOVE(col + 2 * r, blk, 2);
        if (has_m) MOVE(col + 32 + 2 * r, blk + 2, 2);
        uint8_t *masks = col + (has_m ? 64 : 32);
        if (has_h) {
            uint32_t h = 0;
            if (to_group) memcpy(&h, qh, 4);
            for (int c = 0; c < 4; c++)
                for (int hf = 0; hf < 2; hf++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t *byte = masks + 8 * (2 * c + hf) + (4 * r + i) / 8;
                        const int bit = (4 * r + i) % 8, e = 16 * hf + 4 * c + i;
                        if (to_group) *byte = (uint8_t)((*byte & ~(1u << bit)) | (((h >> e) & 1u) << bit));
                        else h |= (uint32_t)((*byte >> bit) & 1u) << e;
                    }
            if (!to_group) memcpy(qh, &h, 4);
        }
        for (int c = 0; c < 4; c++) MOVE(word_at(masks + (has_h ? 64 : 0), c, r), qs + 4 * c, 4);
        break;
    }
    case TR_TYPE_Q8_0: {
        block_q8_0 *b = (block_q8_0 *)blk;
        MOVE(col + 2 * r, &b->d, 2);
        for (int c = 0; c < 8; c++) MOVE(word_at(col + 32, c, r), b->qs + 4 * c, 4);
        break;
    }
    case TR_TYPE_Q4_K:
    case TR_TYPE_Q5_K: {
        /* Q4_K and Q5_K share the head (d, dmin, scales); Q5_K adds qh before qs. */
        uint8_t *d = blk, *scales = blk + 4, *qh = blk + 16, *qs = blk + (type == TR_TYPE_Q5_K ? 48 : 16);
        MOVE(col + 2 * r, d, 2);
        MOVE(col + 32 + 2 * r, d + 2, 2);
        for (int k = 0; k < 3; k++) MOVE(word_at(col + 64, k, r), scales + 4 * k, 4);
        uint8_t *qs_base = col + 256;
        if (type == TR_TYPE_Q5_K) {
            for (int w = 0; w < 8; w++) MOVE(word_at(col + 256, w, r), qh + 4 * w, 4);
            qs_base = col + 768;
        }
        for (int w = 0; w < 32; w++) MOVE(word_at(qs_base, w, r), qs + 4 * w, 4);
        break;
    }
    case TR_TYPE_Q2_K: {
        block_q2_k *b = (block_q2_k *)blk;
        MOVE(col + 2 * r, &b->d, 2);
        MOVE(col + 32 + 2 * r, &b->dmin, 2);
        q2k_scales_move(b->scales, col + 64, r, to_group);
        for (int w = 0; w < 16; w++) MOVE(word_at(col + 320, w, r), b->qs + 4 * w, 4);
        break;
    }
    case TR_TYPE_Q3_K: {
        block_q3_k *b = (block_q3_k *)blk;
        MOVE(col + 2 * r, &b->d, 2);
        q3k_scales_move(b->scales, col + 32, r, to_group);
        for (int k = 0; k < 8; k++) MOVE(word_at(col + 224, k, r), b->hmask + 4 * k, 4);
        for (int w = 0; w < 16; w++) MOVE(word_at(col + 736, w, r), b->qs + 4 * w, 4);
        break;
    }
    case TR_TYPE_IQ4_XS: {
        block_iq4_xs *b = (block_iq4_xs *)blk;
        MOVE(col + 2 * r, &b->d, 2);
        MOVE(col + 32 + 2 * r, &b->scales_h, 2);
        MOVE(col + 64 + 4 * r, b->scales_l, 4);
        for (int w = 0; w < 32; w++) MOVE(word_at(col + 128, w, r), b->qs + 4 * w, 4);
        break;
    }
    case TR_TYPE_Q6_K: {
        block_q6_k *b = (block_q6_k *)blk;
        uint8_t q[QK_K];
        MOVE(col + 2 * r, &b->d, 2);
        for (int s = 0; s < 16; s++) MOVE(col + 32 + 16 * s + r, &b->scales[s], 1);
        if (to_group) q6k_values(b, q);
        for (int g = 0; g < 8; g++) {
            for (int w = 0; w < 4; w++) {
                uint8_t *ql = word_at(col + 288, 4 * g + w, r);
                for (int i = 0; i < 4; i++) {
                    const int lo = 32 * g + 4 * w + i, hi = lo + 16;
                    if (to_group) {
                        ql[i] = (uint8_t)((q[lo] & 0xF) | ((q[hi] & 0xF) << 4));
                    } else {
                        q[lo] = ql[i] & 0xF;
                        q[hi] = ql[i] >> 4;
                    }
                }
            }
            for (int h = 0; h < 2; h++) {
                uint8_t *qh = word_at(col + 2336, 2 * g + h, r);
                for (int i = 0; i < 4; i++) {
                    if (to_group) qh[i] = 0;
                    for (int w = 0; w < 4; w++) {
                        const int e = 32 * g + 16 * h + 4 * w + i;
                        if (to_group) qh[i] |= (uint8_t)((q[e] >> 4) << (2 * w));
                        else q[e] |= (uint8_t)(((qh[i] >> (2 * w)) & 3) << 4);
                    }
                }
            }
        }
        if (!to_group) q6k_from_values(q, b);
        break;
    }
    default: break;
    }
#undef MOVE
}

/* ---------------------------------------------------------------- matrices */

bool weight_x16_type(tr_type type) {
    return type == TR_TYPE_Q4_0 || type == TR_TYPE_Q4_1 || type == TR_TYPE_Q5_0 || type == TR_TYPE_Q5_1 ||
           type == TR_TYPE_Q8_0 || type == TR_TYPE_Q4_K || type == TR_TYPE_Q5_K || type == TR_TYPE_Q6_K ||
           type == TR_TYPE_IQ4_NL || type == TR_TYPE_IQ4_XS || type == TR_TYPE_Q2_K || type == TR_TYPE_Q3_K;
}

int64_t weight_x16_rows(const weight_matrix *w) { return w->layout == WEIGHT_X16 ? w->rows / 16 * 16 : 0; }

size_t weight_bytes(const weight_matrix *w) {
    const size_t stride = w->row_stride ? w->row_stride : type_row_bytes(w->type, w->cols);
    return w->rows > 0 ? stride * (size_t)(w->rows - 1) + type_row_bytes(w->type, w->cols) : 0;
}

bool weight_repack_wanted(const weight_matrix *w) {
    const char *off = getenv("TOKROUTE_REPACK"); /* "0" keeps the file's layout (for before/after measurements) */
    return !(off && strcmp(off, "0") == 0) && w->layout == WEIGHT_PLAIN && w->row_stride == 0 && w->rows >= 16 &&
           weight_x16_type(w->type) && w->cols > 0 && w->cols % tr_type_block_elems(w->type) == 0 &&
           kernels_have_x16(w->type);
}

tr_status weight_repack(weight_matrix *w, void *dst) {
    if (!w || !dst || !weight_x16_type(w->type) || w->row_stride != 0 || w->layout != WEIGHT_PLAIN)
        return tr_fail(TR_ERR_ARG, "weight_repack: matrix cannot be repacked");
    const size_t rb = type_row_bytes(w->type, w->cols), bb = tr_type_block_bytes(w->type);
    const int64_t nb = w->cols / tr_type_block_elems(w->type), groups = w->rows / 16;
    const size_t group_bytes = 16 * rb;
    /* Groups are converted one at a time through a copy, so dst may be w->data itself (in place). */
    uint8_t *tmp = malloc(group_bytes);
    if (!tmp) return tr_fail(TR_ERR_NOMEM, "weight_repack: out of memory");
    const uint8_t *src = w->data;
    uint8_t *out = dst;
    for (int64_t g = 0; g < groups; g++) {
        memcpy(tmp, src + (size_t)g * group_bytes, group_bytes);
        uint8_t *grp = out + (size_t)g * group_bytes;
        for (int64_t b = 0; b < nb; b++)
            for (int r = 0; r < 16; r++) block_move(w->type, grp + (size_t)b * 16 * bb, r, tmp + r * rb + b * bb, true);
    }
    free(tmp);
    if ((const uint8_t *)src != out) /* plain tail rows */
        memcpy(out + (size_t)groups * group_bytes, src + (size_t)groups * group_bytes,
               (size_t)(w->rows - groups * 16) * rb);
    w->data = dst;
    w->layout = WEIGHT_X16;
    return TR_OK;
}

void weight_x16_row(const weight_matrix *w, int64_t r, void *dst) {
    const size_t rb = type_row_bytes(w->type, w->cols), bb = tr_type_block_bytes(w->type);
    const int64_t nb = w->cols / tr_type_block_elems(w->type);
    uint8_t *grp = (uint8_t *)w->data + (size_t)(r / 16) * 16 * rb; /* read only: block_move copies out of it */
    for (int64_t b = 0; b < nb; b++) block_move(w->type, grp + (size_t)b * 16 * bb, (int)(r % 16), (uint8_t *)dst + b * bb, false);
}

tr_status weight_dequantize_row(const weight_matrix *w, int64_t r, float *dst) {
    if (!w || !dst || r < 0 || r >= w->rows) return tr_fail(TR_ERR_RANGE, "weight_dequantize_row: row out of range");
    const size_t stride = w->row_stride ? w->row_stride : type_row_bytes(w->type, w->cols);
    if (r >= weight_x16_rows(w)) return dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * stride, dst, w->cols);
    /* The row's blocks are spread over its group: gather them a few at a time into a plain run. */
    enum { CHUNK = 8 };
    const int64_t be = tr_type_block_elems(w->type), nb = w->cols / be;
    const size_t bb = tr_type_block_bytes(w->type), rb = type_row_bytes(w->type, w->cols);
    _Alignas(64) uint8_t run[CHUNK * 210];
    const uint8_t *grp = (const uint8_t *)w->data + (size_t)(r / 16) * 16 * rb;
    for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
        const int64_t k = nb - b0 < CHUNK ? nb - b0 : CHUNK;
        for (int64_t b = 0; b < k; b++)
            block_move(w->type, (uint8_t *)grp + (size_t)(b0 + b) * 16 * bb, (int)(r % 16), run + b * bb, false);
        tr_status st = dequantize_row(w->type, run, dst + b0 * be, k * be);
        if (st != TR_OK) return st;
    }
    return TR_OK;
}
