// The kernels of kernels.inc for the avx512 target (compile flags: check/CMakeLists.txt).
#define HLA_KERNEL_NS avx512
#define HLA_KERNEL_NAME "avx512"
#define HLA_KERNEL_MRD 8
#define HLA_KERNEL_MR 4
#define HLA_HAVE_FMA 1
#include "kernels.inc"
