/* matmul_avx2.c — AVX2+FMA+F16C tiles. */
#include "kernels/matmul_impl.h"

void mm_isa_avx2(mm_isa *isa) { isa->name = "avx2"; }
