// The fast exact engine (hla/exact.hpp): the reference's generic forms
// instantiated for FFRational, between conversions from and to Rational.
#include "hla/exact.hpp"

#include "hla/ffrational.hpp"
#include "hla/run_form.hpp"
#include "hla/state_impl.hpp"

namespace hla::exact {
namespace {

using F = FFRational;

template <class Derived> auto ff(const Eigen::MatrixBase<Derived>& m) {
  return m.unaryExpr([](const Rational& x) { return F::from(x); }).eval();
}
template <class Derived> auto rat(const Eigen::MatrixBase<Derived>& m) {
  return m.unaryExpr([](const F& x) { return x.to_rational(); }).eval();
}
Problem<F> ff(const Problem<Rational>& p) { return {p.opt, ff(p.q), ff(p.k), ff(p.v)}; }
StateMats<F> ff(const StateMats<Rational>& X) {
  StateMats<F> r;
  for (const auto& m : X) r.push_back(ff(m));
  return r;
}
StateMats<Rational> rat(const StateMats<F>& X) {
  StateMats<Rational> r;
  for (const auto& m : X) r.push_back(rat(m));
  return r;
}
Output<Rational> rat(const Output<F>& o) { return {rat(o.num), rat(o.den), rat(o.out)}; }
// [num | den] of an output.
Mat<Rational> rows(const Output<F>& o) {
  Mat<Rational> Y(o.num.rows(), o.num.cols() + 1);
  Y.leftCols(o.num.cols()) = rat(o.num);
  Y.col(o.num.cols()) = rat(o.den);
  return Y;
}

// The context of a computation: the problem's options and every entry it reads.
struct Context {
  FFContext ctx;
  static std::vector<std::span<const Rational>> spans(const Problem<Rational>& p, const StateMats<Rational>* X0,
                                                      const Mat<Rational>* dout, const Vec<Rational>* dden) {
    auto of = [](const auto& m) { return std::span<const Rational>(m.data(), static_cast<size_t>(m.size())); };
    std::vector<std::span<const Rational>> s{of(p.q), of(p.k), of(p.v)};
    if (X0)
      for (const auto& m : *X0) s.push_back(of(m));
    if (dout) s.push_back(of(*dout));
    if (dden) s.push_back(of(*dden));
    return s;
  }
  explicit Context(const Problem<Rational>& p, const StateMats<Rational>* X0 = nullptr, const Mat<Rational>* dout = nullptr,
                   const Vec<Rational>* dden = nullptr)
      : ctx(p.opt, spans(p, X0, dout, dden)) {}
};

Problem<F> unnormalized(const Problem<Rational>& p) {
  Problem<F> q = ff(p);
  q.opt.normalize = false;
  return q;
}

// A backward run on the upstream dY (rationals): run(P·dY in F) gives matrices
// linear in their upstream; they come back divided by P, with P the least
// common multiple of the parts of dY's denominators that are neither powers of
// two nor made of the base's primes (1 unless normalized).
template <class Run> std::vector<Mat<Rational>> scaled_backward(const Mat<Rational>& dY, Run&& run) {
  const mp::mpz_int& base = FFContext::base();
  mp::mpz_int P(1), last(1);
  for (Index i = 0; i < dY.size(); ++i) {
    const mp::mpz_int& den = mp::denominator(dY.data()[i]);
    if (den == last || mp::lsb(den) == mp::msb(den)) continue;  // seen, or a power of two
    last = den;
    mp::mpz_int d = den >> static_cast<unsigned>(mp::lsb(den));
    for (mp::mpz_int g = mp::gcd(d, base); g != 1; g = mp::gcd(d, base)) d /= g;
    if (d != 1) P = P / mp::gcd(P, d) * d;
  }
  const Rational Pr(P);
  const Mat<F> dYf = P == 1 ? ff(dY) : ff(Mat<Rational>(dY * Pr));
  std::vector<Mat<Rational>> out;
  for (const Mat<F>& m : run(dYf)) {
    Mat<Rational> r = rat(m);
    if (P != 1) r /= Pr;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Mat<F>> mats(HeadGrad<F>&& g) { return {std::move(g.dq), std::move(g.dk), std::move(g.dv)}; }
HeadGrad<Rational> head_grad(std::vector<Mat<Rational>>& m) { return {std::move(m[0]), std::move(m[1]), std::move(m[2])}; }

}  // namespace

Output<Rational> evaluate(const Problem<Rational>& p, Form f, Index chunk) {
  check_form_args(p, chunk);
  Context c(p);
  return finish(p.opt, rows(hla::evaluate(unnormalized(p), f, chunk)));
}

Output<Rational> magnitude(const Problem<Rational>& p, bool unmasked_order) {
  Context c(p);
  return rat(hla::magnitude(ff(p), unmasked_order));
}

Output<Rational> evaluate_from(const Problem<Rational>& p, const StateMats<Rational>& X0) {
  check_form_args(p, 1);
  Context c(p, &X0);
  return finish(p.opt, rows(hla::evaluate_from(unnormalized(p), ff(X0))));
}

StateMats<Rational> final_state(const Problem<Rational>& p, const StateMats<Rational>& X0) {
  Context c(p, &X0);
  return rat(hla::final_state(ff(p), ff(X0)));
}

Output<Rational> magnitude_from(const Problem<Rational>& p, const StateMats<Rational>& X0) {
  Context c(p, &X0);
  return rat(hla::magnitude_from(ff(p), ff(X0)));
}

Gradient<Rational> backward(const Problem<Rational>& p, const Mat<Rational>& dout, const Vec<Rational>& dden, BackwardForm f,
                            Index chunk) {
  check_backward_args(p, dout, dden, chunk);
  Context c(p, nullptr, &dout, &dden);
  const Problem<F> q = unnormalized(p);
  const auto outputs = [&] { return rows(hla::evaluate(q, f == BackwardForm::naive ? Form::naive : Form::streaming)); };
  const Mat<Rational> dY = output_adjoint(p.opt, outputs, dout, dden, p.opt.eps);
  const Head<F> h = make_head(q);
  auto g = scaled_backward(dY, [&](const Mat<F>& dYf) { return mats(head_backward(p.opt.variant, h, dYf, f, chunk)); });
  return problem_gradient(p.opt, head_grad(g));
}

Gradient<Rational> backward_magnitude(const Problem<Rational>& p, const Mat<Rational>& dout, const Vec<Rational>& dden) {
  check_backward_args(p, dout, dden);
  const Mat<Rational> Yb = p.opt.normalize ? upstream_magnitude(p, dout, dden, exact::evaluate(p), exact::magnitude(p))
                                           : upstream_magnitude(p, dout, dden, Output<Rational>{}, Output<Rational>{});
  const Problem<Rational> a = abs_problem(p);
  Context c(p, nullptr, &dout, &dden);
  const Head<F> h = make_head(ff(a));
  auto g = scaled_backward(Yb, [&](const Mat<F>& dYf) {
    return mats(head_backward(p.opt.variant, h, dYf, BackwardForm::streaming));
  });
  return problem_gradient(a.opt, head_grad(g));
}

namespace {
// The reverse form of variant B from X0 for the upstream dY (rationals): the
// gradients in head coordinates and ∂L/∂X0, in layout order.
template <class B>
std::vector<Mat<Rational>> reverse_from(const Head<F>& h, const StateMats<F>& X0, const Mat<Rational>& dY, BackwardForm f,
                                        Index chunk) {
  return scaled_backward(dY, [&](const Mat<F>& dYf) {
    auto r = reverse_form<B>(h, dYf, f, chunk, state_from<B>(h, X0));
    std::vector<Mat<F>> m = mats(std::move(r.grad));
    for (Mat<F>& x : mats_of<B>(r.dX0)) m.push_back(std::move(x));
    return m;
  });
}
GradientFrom<Rational> gradient_of(const Options& opt, std::vector<Mat<Rational>>&& m) {
  GradientFrom<Rational> g;
  g.tokens = problem_gradient(opt, head_grad(m));
  for (size_t i = 3; i < m.size(); ++i) g.dstate.push_back(std::move(m[i]));
  symmetrize_gradient(state_layout(opt, g.tokens.dq.cols(), g.tokens.dv.cols()), g.dstate);
  return g;
}
}  // namespace

GradientFrom<Rational> backward_from(const Problem<Rational>& p, const StateMats<Rational>& X0, const Mat<Rational>& dout,
                                     const Vec<Rational>& dden, BackwardForm f, Index chunk) {
  check_backward_args(p, dout, dden, chunk);
  Context c(p, &X0, &dout, &dden);
  const Head<F> h = make_head(ff(p));
  const StateMats<F> X = ff(X0);
  return with_backward(p.opt.variant, [&]<class B>(B) {
    const auto outputs = [&] { return rat(forward_from<B>(h, state_from<B>(h, X))); };
    const Mat<Rational> dY = output_adjoint(p.opt, outputs, dout, dden, p.opt.eps);
    return gradient_of(p.opt, reverse_from<B>(h, X, dY, f, chunk));
  });
}

GradientFrom<Rational> backward_magnitude_from(const Problem<Rational>& p, const StateMats<Rational>& X0,
                                               const Mat<Rational>& dout, const Vec<Rational>& dden) {
  check_backward_args(p, dout, dden);
  const Mat<Rational> Yb = p.opt.normalize
                               ? upstream_magnitude(p, dout, dden, exact::evaluate_from(p, X0), exact::magnitude_from(p, X0))
                               : upstream_magnitude(p, dout, dden, Output<Rational>{}, Output<Rational>{});
  const Problem<Rational> a = abs_problem(p);
  StateMats<Rational> aX;
  for (const Mat<Rational>& m : X0) aX.push_back(abs_of(m));
  Context c(p, &X0, &dout, &dden);
  const Head<F> h = make_head(ff(a));
  const StateMats<F> X = ff(aX);
  return with_backward(p.opt.variant, [&]<class B>(B) {
    return gradient_of(a.opt, reverse_from<B>(h, X, Yb, BackwardForm::streaming, 1));
  });
}

}  // namespace hla::exact
