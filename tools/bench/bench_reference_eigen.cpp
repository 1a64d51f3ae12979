// Eigen's dgemm rate on the chunked form's block shapes, for hla_bench_reference.
// Compiled with -march=native (tools/CMakeLists.txt): Eigen at its best on this machine.
#include <Eigen/Core>

#include <chrono>

double eigen_dgemm_rate(long m, long k, long n, double seconds) {
  Eigen::MatrixXd A = Eigen::MatrixXd::Random(m, k), B = Eigen::MatrixXd::Random(k, n), C = Eigen::MatrixXd::Zero(m, n);
  long reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double el = 0;
  while (el < seconds) {
    for (int r = 0; r < 16; ++r) C.noalias() += A * B;
    reps += 16;
    el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  volatile double sink = C(0, 0);
  (void)sink;
  return static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) * static_cast<double>(reps) / el;
}
