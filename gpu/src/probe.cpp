// hla_cuda_probe: prints the CUDA devices this process sees. Exit 0 when there
// is one, 77 when there is none (ctest's SKIP_RETURN_CODE for the gpu tests).
#include "hla_cuda.hpp"

#include <cstdio>
#include <string>

int main() {
  std::string why;
  const int n = hla_cuda::device_count(&why);
  if (n == 0) {
    std::printf("no CUDA device: %s\n", why.c_str());
    return 77;
  }
  std::printf("%d CUDA device(s)\n", n);
  return 0;
}
