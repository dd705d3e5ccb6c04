/* matmul_avx512.c — AVX-512 VNNI tiles. */
#include "kernels/matmul_impl.h"

void mm_isa_avx512(mm_isa *isa) { isa->name = "avx512"; }
