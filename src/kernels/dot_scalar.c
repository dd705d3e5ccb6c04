/* dot_scalar.c — portable dot products of one weight row with one activation row, in llama.cpp's arithmetic:
 * integer sums per block, then one float multiply by the block scales. Also the scalar instruction "set": every
 * type's tile is these dots run one output at a time. This is the reference the SIMD paths are tested against. */
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/matmul_impl.h"
#include "kernels/quants.h"

float dot_f32(const void *w, const void *x, int64_t n) {
    const float *a = w, *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

float dot_f16(const void *w, const void *x, int64_t n) {
    const uint16_t *a = w;
    const float *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += fp16_to_fp32(a[i]) * b[i];
    return s;
}

float dot_bf16(const void *w, const void *x, int64_t n) {
    const uint16_t *a = w;
    const float *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += bf16_to_fp32(a[i]) * b[i];
    return s;
}

float dot_q4_0(const void *w, const void *x, int64_t n) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        s += (float)sumi * (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d));
    }
    return s;
}

float dot_q4_1(const void *w, const void *x, int64_t n) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) sumi += (a[i].qs[j] & 0xF) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        /* The offset m times the activation sum comes from Q8_1's precomputed s = d * sum(q). */
        s += (float)sumi * (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d)) + fp16_to_fp32(a[i].m) * fp16_to_fp32(b[i].s);
    }
    return s;
}

static int q5_isum(const uint8_t *qs, const uint8_t *qh4, const int8_t *y, int offset) {
    const uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
        const int q0 = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        const int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        sumi += (q0 - offset) * y[j] + (q1 - offset) * y[j + 16];
    }
    return sumi;
}

float dot_q5_0(const void *w, const void *x, int64_t n) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK5_0; i++)
        s += (float)q5_isum(a[i].qs, a[i].qh, b[i].qs, 16) * (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d));
    return s;
}

float dot_q5_1(const void *w, const void *x, int64_t n) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK5_1; i++)
        s += (float)q5_isum(a[i].qs, a[i].qh, b[i].qs, 0) * (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d)) +
             fp16_to_fp32(a[i].m) * fp16_to_fp32(b[i].s);
    return s;
}

float dot_q8_0(const void *w, const void *x, int64_t n) {
    const block_q8_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += a[i].qs[j] * b[i].qs[j];
        s += (float)sumi * (fp16_to_fp32(a[i].d) * fp16_to_fp32(b[i].d));
    }
    return s;
}

/* Q4_K/Q5_K: sum_j sc_j * dot_j times d, minus dmin * sum_j m_j * (activation sum of sub-block j), which Q8_K's
 * bsums give in pairs of 16. q[256] holds the block's unpacked weights. */
static float kx_block(const uint8_t *q, const uint8_t *scales, float d, float dmin, const block_q8_k *b) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kquant_scale_min(j, scales, &sc, &m);
        int dot = 0;
        for (int l = 0; l < 32; l++) dot += q[32 * j + l] * b->qs[32 * j + l];
        sumi += sc * dot;
        summ += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
    }
    return b->d * (d * (float)sumi - dmin * (float)summ);
}

float dot_q4_k(const void *w, const void *x, int64_t n) {
    const block_q4_k *a = w;
    const block_q8_k *b = x;
    uint8_t q[QK_K];
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = a[i].qs[32 * c + l] & 0xF;
                q[64 * c + 32 + l] = a[i].qs[32 * c + l] >> 4;
            }
        s += kx_block(q, a[i].scales, fp16_to_fp32(a[i].d), fp16_to_fp32(a[i].dmin), &b[i]);
    }
    return s;
}

float dot_q5_k(const void *w, const void *x, int64_t n) {
    const block_q5_k *a = w;
    const block_q8_k *b = x;
    uint8_t q[QK_K];
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const uint8_t h = a[i].qh[l];
                q[64 * c + l] = (uint8_t)((a[i].qs[32 * c + l] & 0xF) | (((h >> (2 * c)) & 1) << 4));
                q[64 * c + 32 + l] = (uint8_t)((a[i].qs[32 * c + l] >> 4) | (((h >> (2 * c + 1)) & 1) << 4));
            }
        s += kx_block(q, a[i].scales, fp16_to_fp32(a[i].d), fp16_to_fp32(a[i].dmin), &b[i]);
    }
    return s;
}

float dot_q6_k(const void *w, const void *x, int64_t n) {
    const block_q6_k *a = w;
    const block_q8_k *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *y = b[i].qs + 128 * h;
            /* Element e of this half: l = e % 32, part = e / 32 picks ql[l] or ql[l+32], low or high nibble, and the
             * qh[l] bit pair; sub-block (e / 16) has its own int8 scale. */
            for (int sub = 0; sub < 8; sub++) {
                int dot = 0;
                for (int e = 16 * sub; e < 16 * sub + 16; e++) {
                    const int l = e % 32, part = e / 32;
                    const uint8_t lo = part & 1 ? ql[l + 32] : ql[l];
                    const int nib = part < 2 ? (lo & 0xF) : (lo >> 4);
                    dot += ((nib | (((qh[l] >> (2 * part)) & 3) << 4)) - 32) * y[e];
                }
                sumi += a[i].scales[8 * h + sub] * dot;
            }
        }
        s += b[i].d * fp16_to_fp32(a[i].d) * (float)sumi;
    }
    return s;
}

void tile_by_dot(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1, vec_dot_fn dot) {
    for (int64_t i = i0; i < i1; i++)
        for (int64_t r = r0; r < r1; r++)
            a->y[i * a->ldy + r] = dot(a->w + (size_t)r * a->w_stride, a->x + (size_t)i * a->x_stride, a->cols);
}

#define SCALAR_TILE(name)                                                                                   \
    static void tile_##name(const mm_args *a, int64_t r0, int64_t r1, int64_t i0, int64_t i1) {            \
        tile_by_dot(a, r0, r1, i0, i1, dot_##name);                                                         \
    }
SCALAR_TILE(f32)
SCALAR_TILE(f16)
SCALAR_TILE(bf16)
SCALAR_TILE(q4_0)
SCALAR_TILE(q4_1)
SCALAR_TILE(q5_0)
SCALAR_TILE(q5_1)
SCALAR_TILE(q8_0)
SCALAR_TILE(q4_k)
SCALAR_TILE(q5_k)
SCALAR_TILE(q6_k)
SCALAR_TILE(q2_k)
SCALAR_TILE(q3_k)
SCALAR_TILE(iq4_nl)
SCALAR_TILE(iq4_xs)

static size_t q8_0_bytes(int64_t cols) { return type_row_bytes(TR_TYPE_Q8_0, cols); }
static size_t q8_1_bytes(int64_t cols) { return type_row_bytes(TR_TYPE_Q8_1, cols); }
size_t q8_k_row_bytes(int64_t cols) { return type_row_bytes(TR_TYPE_Q8_K, cols); }

void mm_isa_scalar(mm_isa *isa) {
    isa->name = "scalar";
    isa->k[TR_TYPE_F32] = (mm_kernel){tile_f32, NULL, NULL, NULL};
    isa->k[TR_TYPE_F16] = (mm_kernel){tile_f16, NULL, NULL, NULL};
    isa->k[TR_TYPE_BF16] = (mm_kernel){tile_bf16, NULL, NULL, NULL};
    isa->k[TR_TYPE_Q4_0] = (mm_kernel){tile_q4_0, quantize_q8_0, q8_0_bytes, NULL};
    isa->k[TR_TYPE_Q5_0] = (mm_kernel){tile_q5_0, quantize_q8_0, q8_0_bytes, NULL};
    isa->k[TR_TYPE_Q8_0] = (mm_kernel){tile_q8_0, quantize_q8_0, q8_0_bytes, NULL};
    isa->k[TR_TYPE_Q4_1] = (mm_kernel){tile_q4_1, quantize_q8_1, q8_1_bytes, NULL};
    isa->k[TR_TYPE_Q5_1] = (mm_kernel){tile_q5_1, quantize_q8_1, q8_1_bytes, NULL};
    isa->k[TR_TYPE_Q4_K] = (mm_kernel){tile_q4_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q5_K] = (mm_kernel){tile_q5_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q6_K] = (mm_kernel){tile_q6_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q2_K] = (mm_kernel){tile_q2_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_Q3_K] = (mm_kernel){tile_q3_k, quantize_q8_k, q8_k_row_bytes, NULL};
    isa->k[TR_TYPE_IQ4_NL] = (mm_kernel){tile_iq4_nl, quantize_q8_0, q8_0_bytes, NULL};
    isa->k[TR_TYPE_IQ4_XS] = (mm_kernel){tile_iq4_xs, quantize_q8_k, q8_k_row_bytes, NULL};
}
