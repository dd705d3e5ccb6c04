/* types.c — what tokroute knows about each ggml tensor type: name, block size in elements and bytes, and whether
 * matrix products exist for it. Ids follow ggml's numbering (GGUF stores them). */
#include "kernels/kernels.h"
#include "kernels/types.h"

#include <strings.h>

typedef struct type_info {
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    bool supported;
} type_info;

static const type_info TYPES[TR_TYPE_COUNT] = {
    [TR_TYPE_F32] = {"f32", 1, 4, true},
    [TR_TYPE_F16] = {"f16", 1, 2, true},
    [TR_TYPE_Q4_0] = {"q4_0", 32, 18, true},
    [TR_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [TR_TYPE_Q5_0] = {"q5_0", 32, 22, true},
    [TR_TYPE_Q5_1] = {"q5_1", 32, 24, true},
    [TR_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    /* Q8_1 and Q8_K are activation formats: they decode, but no weight product uses them. */
    [TR_TYPE_Q8_1] = {"q8_1", 32, 36, false},
    [TR_TYPE_Q2_K] = {"q2_k", 256, 84, true},
    [TR_TYPE_Q3_K] = {"q3_k", 256, 110, true},
    [TR_TYPE_Q4_K] = {"q4_k", 256, 144, true},
    [TR_TYPE_Q5_K] = {"q5_k", 256, 176, true},
    [TR_TYPE_Q6_K] = {"q6_k", 256, 210, true},
    [TR_TYPE_Q8_K] = {"q8_k", 256, 292, false},
    [TR_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [TR_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [TR_TYPE_BF16] = {"bf16", 1, 2, true},
};

static const type_info *info(tr_type type) {
    if ((int)type < 0 || type >= TR_TYPE_COUNT || !TYPES[type].name) return NULL;
    return &TYPES[type];
}

const char *tr_type_name(tr_type type) {
    const type_info *t = info(type);
    return t ? t->name : NULL;
}

tr_status tr_type_from_name(const char *name, tr_type *out) {
    if (!name || !out) return tr_fail(TR_ERR_ARG, "tr_type_from_name: NULL argument");
    for (int i = 0; i < TR_TYPE_COUNT; i++) {
        if (TYPES[i].name && strcasecmp(TYPES[i].name, name) == 0) {
            *out = (tr_type)i;
            return TR_OK;
        }
    }
    return tr_fail(TR_ERR_ARG, "unknown tensor type '%s'", name);
}

int64_t tr_type_block_elems(tr_type type) {
    const type_info *t = info(type);
    return t ? t->block_elems : 0;
}

size_t tr_type_block_bytes(tr_type type) {
    const type_info *t = info(type);
    return t ? t->block_bytes : 0;
}

bool tr_type_supported(tr_type type) {
    const type_info *t = info(type);
    return t && t->supported;
}

bool type_decodable(tr_type type) {
    const type_info *t = info(type);
    return t && (t->supported || type == TR_TYPE_Q8_1 || type == TR_TYPE_Q8_K);
}

size_t type_row_bytes(tr_type type, int64_t n) {
    const type_info *t = info(type);
    if (!t || n < 0) return 0;
    return (size_t)(n / t->block_elems) * t->block_bytes;
}

tr_type type_vec_dot_type(tr_type type) {
    switch (type) {
    case TR_TYPE_Q4_0:
    case TR_TYPE_Q5_0:
    case TR_TYPE_Q8_0:
    case TR_TYPE_IQ4_NL: return TR_TYPE_Q8_0;
    case TR_TYPE_Q4_1:
    case TR_TYPE_Q5_1: return TR_TYPE_Q8_1;
    case TR_TYPE_Q2_K:
    case TR_TYPE_Q3_K:
    case TR_TYPE_Q4_K:
    case TR_TYPE_Q5_K:
    case TR_TYPE_Q6_K:
    case TR_TYPE_IQ4_XS: return TR_TYPE_Q8_K;
    default: return TR_TYPE_F32;
    }
}
