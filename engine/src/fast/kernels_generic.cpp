// The kernels of kernels.inc for the generic target (compile flags: check/CMakeLists.txt).
#define HLA_KERNEL_NS generic
#define HLA_KERNEL_NAME "generic"
#define HLA_KERNEL_MRD 2
#define HLA_KERNEL_MR 2

#include "kernels.inc"
