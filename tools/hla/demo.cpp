// `hla demo`: the main job on a built-in default problem. Evaluates every
// variant through every form in exact rationals, binary128, double and float,
// and prints the largest discrepancy of each from the exact naive value,
// relative to the SPEC §7 magnitude (0 exactly for the rational column).
#include "commands.hpp"
#include "problem_options.hpp"

#include "hla/bounds.hpp"
#include "hla/evaluate.hpp"
#include "hla/exact.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

namespace hla::cli {
namespace {

struct DemoArgs {
  Index n = 48, d = 8, dv = 8, chunk = 16;
  std::string gamma = "15/16", lambda = "1/4";
  uint64_t seed = 1;
};

// Entries j/8, j ∈ [-8, 8]: exact in every float type, so the float columns
// measure the algorithms' rounding, not the inputs'.
Mat<Rational> dyadic_matrix(std::mt19937_64& rng, Index r, Index c) {
  Mat<Rational> m(r, c);
  for (Index i = 0; i < r; ++i)
    for (Index j = 0; j < c; ++j) m(i, j) = Rational(static_cast<long>(rng() % 17) - 8, 8);
  return m;
}

struct Config {
  std::string name;
  Options opt;
};

std::vector<Config> configs(const DemoArgs& a) {
  std::vector<Config> out;
  for (Variant v : all_variants()) {
    Options o;
    o.variant = v;
    o.gamma = needs_unit_gamma(v) ? Rational(1) : parse_rational(a.gamma);
    out.push_back({to_string(v) + (has_unmasked(v) ? " masked" : ""), o});
    if (has_unmasked(v)) {
      Options u = o;
      u.masked = false;
      out.push_back({to_string(v) + " unmasked", u});
    }
    if (has_ridge(v)) {
      Options r = o;
      r.lambda = parse_rational(a.lambda);
      r.normalize = true;
      out.push_back({to_string(v) + " masked, lam=" + a.lambda + ", normalized", r});
    }
  }
  return out;
}

// max over elements of |got − exact| / magnitude (num and den; out scaled by
// its normalized magnitude, bounds.hpp).
template <class S>
std::string discrepancy(const Output<Rational>& ex, const Output<Rational>& mag, const Output<S>& got, const Options& opt) {
  Rational worst(0);
  bool nonfinite = false;
  auto upd = [&](const S& g, const Rational& e, const Rational& m) {
    Rational gr;
    try {
      gr = to_rational(g);
    } catch (const std::domain_error&) {
      nonfinite = true;
      return;
    }
    const Rational diff = gr > e ? Rational(gr - e) : Rational(e - gr);
    if (diff == 0) return;
    const Rational r = m == 0 ? Rational(1000000) : Rational(diff / m);
    if (r > worst) worst = r;
  };
  for (Index t = 0; t < ex.num.rows(); ++t) {
    upd(got.den(t), ex.den(t), mag.den(t));
    for (Index c = 0; c < ex.num.cols(); ++c) {
      upd(got.num(t, c), ex.num(t, c), mag.num(t, c));
      if (opt.normalize)
        upd(got.out(t, c), ex.out(t, c),
            *normalized_magnitude(ex.num(t, c), ex.den(t), opt.eps, opt.eps_mode, mag.num(t, c), mag.den(t)));
    }
  }
  if (nonfinite) return "non-finite";
  if (worst == 0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", to_double(worst));
  return buf;
}

int run_demo(const DemoArgs& a) {
  const std::vector<Config> cfgs = configs(a);
  for (const Config& c : cfgs) c.opt.validate();  // bad options: exit 2 before any output
  std::mt19937_64 rng(a.seed);
  const Mat<Rational> q = dyadic_matrix(rng, a.n, a.d), k = dyadic_matrix(rng, a.n, a.d), v = dyadic_matrix(rng, a.n, a.dv);
  std::cout << "hla demo: n=" << a.n << " d=" << a.d << " dv=" << a.dv << " gamma=" << a.gamma << " chunk=" << a.chunk
            << " seed=" << a.seed << " (entries j/8, j in [-8, 8])\n"
            << "Each cell: max over tokens and columns of |form - exact naive| / magnitude (SPEC §7),\n"
            << "num and den (and out when normalized). Unit roundoff: f113 9.6e-35, f64 1.1e-16, f32 6.0e-08.\n"
            << "Forms marked * subtract partial sums; their error scales with the unmasked magnitude.\n\n";
  std::printf("%-36s %-23s %-9s %-9s %-9s %-9s\n", "variant", "form", "rational", "f113", "f64", "f32");
  bool exact_ok = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Config& cfg : cfgs) {
    const Problem<Rational> p{cfg.opt, q, k, v};
    // The ground truth by the fast exact engine (the same rationals as evaluate() in Rational).
    const Output<Rational> exact = hla::exact::evaluate(p, Form::naive), mag = hla::exact::magnitude(p);
    for (Form f : forms_of(cfg.opt.variant)) {
      const std::string fname = to_string(f) + (subtracts_partial_sums(cfg.opt, f) ? " *" : "");
      const std::string rcol = discrepancy(exact, mag, evaluate(p, f, a.chunk), cfg.opt);
      exact_ok = exact_ok && rcol == "0";
      std::printf("%-36s %-23s %-9s %-9s %-9s %-9s\n", cfg.name.c_str(), fname.c_str(), rcol.c_str(),
                  discrepancy(exact, mag, evaluate(convert_problem<f113>(p), f, a.chunk), cfg.opt).c_str(),
                  discrepancy(exact, mag, evaluate(convert_problem<double>(p), f, a.chunk), cfg.opt).c_str(),
                  discrepancy(exact, mag, evaluate(convert_problem<float>(p), f, a.chunk), cfg.opt).c_str());
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n%s (%.1f s)\n", exact_ok ? "All exact forms agree with the naive definition exactly."
                                           : "ERROR: an exact form disagrees with the naive definition.", secs);
  return exact_ok ? 0 : 1;
}

}  // namespace

void add_demo(CLI::App& app, Action& action) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* c = app.add_subcommand("demo", "evaluate every variant through every form and print discrepancies");
  c->add_option("--n", a->n, "tokens")->check(integer_in(0, 512));
  c->add_option("--d", a->d, "head dimension")->check(integer_in(1, 64));
  c->add_option("--dv", a->dv, "value dimension")->check(integer_in(1, 64));
  add_option_flag(c, info(Option::gamma), a->gamma, "decay (exact: 15/16, 0.9, ...)");
  add_option_flag(c, info(Option::lam), a->lambda, "ridge for the hla2 ridge row");
  c->add_option("--chunk", a->chunk, "chunk width for chunked forms")->check(integer_in(1, 1024));
  c->add_option("--seed", a->seed, "seed of the default inputs")->check(integer_in(0, kAnyU64));
  c->callback([a, &action] { action = [a] { return run_demo(*a); }; });
}

}  // namespace hla::cli
