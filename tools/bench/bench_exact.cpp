// hla_bench_exact: the fast exact engine (hla/exact.hpp, FFRational) against
// the evaluation in GMP's mpq (the reference library in Rational), on the
// targets of issue 30: exact hla2 at n = 48, d = dv = 16, γ = 9/10, every
// form; exact hla3; the exact backward (raw and normalized). Inputs are
// Gaussian values rounded to f32 (as fixtures and the fuzzer draw them).
// Every ratio is mpq time / engine time measured in this one run (medians);
// every result is also compared with `==` (a mismatch exits 1). Nothing else
// is asserted.
// Usage: hla_bench_exact [--quick]   (--quick: one repetition of each)
#include "hla/backward.hpp"
#include "hla/evaluate.hpp"
#include "hla/exact.hpp"

#include "../../tests/float_inputs.hpp"
#include "median_time.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace hla;

namespace {

Problem<Rational> make_problem(Variant v, Index n, Index d, const char* gamma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Options o;
  o.variant = v;
  o.gamma = parse_rational(gamma);
  Problem<Rational> p{o, test::gaussian_f32_matrix(rng, n, d), test::gaussian_f32_matrix(rng, n, d), test::gaussian_f32_matrix(rng, n, d)};
  return p;
}

bool all_same = true;

bool equal(const Output<Rational>& a, const Output<Rational>& b) { return a.num == b.num && a.den == b.den && a.out == b.out; }
bool equal(const Gradient<Rational>& a, const Gradient<Rational>& b) { return a == b; }

struct Totals {
  double mpq = 0, engine = 0;
};

// One row: the mpq evaluation and the engine's, timed, compared with ==.
template <class R> void row(const std::string& name, const std::function<R()>& mpq, const std::function<R()>& engine, int reps,
                            Totals& tot) {
  R a, b;
  const double tm = bench::median_seconds([&] { a = mpq(); }, std::max(1, reps / 4));
  const double te = bench::median_seconds([&] { b = engine(); }, reps);
  const bool same = equal(a, b);
  all_same = all_same && same;
  tot.mpq += tm, tot.engine += te;
  std::printf("  %-44s %10.2f %10.2f %8.1fx  %s\n", name.c_str(), 1e3 * tm, 1e3 * te, tm / te, same ? "==" : "DIFFERENT");
}

void header(const char* title) {
  std::printf("\n%s\n  %-44s %10s %10s %9s\n", title, "", "mpq ms", "engine ms", "ratio");
}
void total(const char* what, const Totals& t) {
  std::printf("  %-44s %10.2f %10.2f %8.1fx\n", what, 1e3 * t.mpq, 1e3 * t.engine, t.mpq / t.engine);
}


void forms(const Problem<Rational>& p, int reps, const char* title) {
  header(title);
  Totals t;
  for (const Form f : forms_of(p.opt.variant))
    row<Output<Rational>>(to_string(f) + (is_chunked(f) ? " (w = 16)" : ""), [&] { return evaluate(p, f, 16); },
                          [&] { return exact::evaluate(p, f, 16); }, reps, t);
  total("all forms", t);
}

void backwards(const Problem<Rational>& p0, int reps, const char* title) {
  header(title);
  std::mt19937_64 rng(7);
  const Mat<Rational> dout = test::gaussian_f32_matrix(rng, p0.n(), p0.dv());
  const Vec<Rational> dden = test::gaussian_f32_matrix(rng, p0.n(), 1).col(0);
  Totals t;
  for (const bool normalize : {false, true}) {
    Problem<Rational> p = p0;
    p.opt.normalize = normalize;
    for (const BackwardForm f : kBackwardForms) {
      if (!has_backward_form(p.opt.variant, f)) continue;
      // The normalized mpq backward takes seconds a form: the streaming one stands for the rest.
      if (normalize && f != BackwardForm::streaming) continue;
      row<Gradient<Rational>>(std::string(normalize ? "normalize add, " : "raw, ") + to_string(f) +
                                  (f == BackwardForm::chunked || f == BackwardForm::chunked_matmul ? " (w = 16)" : ""),
                              [&] { return backward(p, dout, dden, f, 16); },
                              [&] { return exact::backward(p, dout, dden, f, 16); }, normalize ? std::min(reps, 3) : reps, t);
    }
  }
  total("all rows", t);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int reps = quick ? 1 : 8;
  std::printf("hla_bench_exact: the fast exact engine (FFRational) vs GMP mpq; f32 Gaussian inputs; medians;\n"
              "ratio = mpq time / engine time, both measured in this run; == : the same rationals\n");
  forms(make_problem(Variant::hla2, 48, 16, "9/10", 1), reps, "exact hla2, masked, n = 48, d = dv = 16, gamma = 9/10");
  Problem<Rational> un = make_problem(Variant::hla2, 48, 16, "9/10", 1);
  un.opt.masked = false;
  un.opt.lambda = Rational(1, 10);
  forms(un, reps, "exact hla2, unmasked, ridge 1/10, n = 48, d = dv = 16, gamma = 9/10");
  forms(make_problem(Variant::hla3, 24, 16, "9/10", 2), reps, "exact hla3, masked, n = 24, d = dv = 16, gamma = 9/10");
  forms(make_problem(Variant::ahla, 48, 16, "9/10", 3), reps, "exact ahla, n = 48, d = dv = 16, gamma = 9/10");
  backwards(make_problem(Variant::hla2, 48, 16, "9/10", 4), reps, "exact backward, hla2 masked, n = 48, d = dv = 16, gamma = 9/10");
  backwards(make_problem(Variant::hla3, 24, 16, "9/10", 5), reps, "exact backward, hla3 masked, n = 24, d = dv = 16, gamma = 9/10");
  std::printf("\n%s\n", all_same ? "every engine result == its mpq result" : "ERROR: an engine result differs from mpq");
  return all_same ? 0 : 1;
}
