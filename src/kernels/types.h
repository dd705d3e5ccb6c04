/* types.h — type facts used inside src/kernels beyond the public tr_type_* functions. */
#ifndef TR_KERNELS_TYPES_H
#define TR_KERNELS_TYPES_H

#include "common/error.h"
#include "tokroute.h"

/* True when dequantize_row can decode the type (weight types plus the Q8_1/Q8_K activation formats). */
bool type_decodable(tr_type type);
/* The format activations are quantized to before a product with weights of `type` (as llama.cpp's
 * vec_dot_type): Q8_0, Q8_1, Q8_K, or F32 for float weights. */
tr_type type_vec_dot_type(tr_type type);

#endif /* TR_KERNELS_TYPES_H */
