// The kernels of kernels.inc for the avx2 target (compile flags: check/CMakeLists.txt).
#define HLA_KERNEL_NS avx2
#define HLA_KERNEL_NAME "avx2"
#define HLA_KERNEL_MRD 4
#define HLA_KERNEL_MR 2
#define HLA_HAVE_FMA 1
#include "kernels.inc"
