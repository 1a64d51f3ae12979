// Definitions behind backward.hpp; included by reference/src/backward_*.cpp
// (and by tests that evaluate the backward forms in their own scalars).
#pragma once

#include "hla/backward.hpp"
#include "hla/backward/ahla.hpp"
#include "hla/backward/hla2.hpp"
#include "hla/backward/hla3.hpp"
#include "hla/backward/la1.hpp"
#include "hla/backward/reverse.hpp"
#include "hla/evaluate_impl.hpp"

#include <stdexcept>
#include <tuple>
#include <utility>

namespace hla {

// In variant order from the first: the backward type of variant v is element v.
using Backwards = std::tuple<la1_backward, hla2_backward, ahla_backward, hla3_backward>;
static_assert([]<std::size_t... I>(std::index_sequence<I...>) {
  return ((static_cast<std::size_t>(std::tuple_element_t<I, Backwards>::variant) == I) && ...);
}(std::make_index_sequence<std::tuple_size_v<Backwards>>{}), "Backwards must follow enum Variant");
template <Variant v> using BackwardOf = std::tuple_element_t<static_cast<std::size_t>(v), Backwards>;

// Calls f(B{}) for the backward type B of variant v; throws InputError when none.
template <class F> auto with_backward(Variant v, F&& f) {
  return std::apply(
      [&](auto... b) {
        using R = decltype(f(std::get<0>(Backwards{})));
        R r;
        if (!((b.variant == v ? (r = f(b), true) : false) || ...))
          throw InputError("variant " + to_string(v) + " has no backward form");
        return r;
      },
      Backwards{});
}

// Backward form f of head h for the upstream ∂L/∂Y (output_adjoint).
template <class T>
HeadGrad<T> head_backward(Variant v, const Head<T>& h, const Mat<T>& dY, BackwardForm f, Index chunk = 1) {
  return with_backward(v, [&]<class B>(B) {
    switch (f) {
      case BackwardForm::naive: return B::naive(h, dY);
      case BackwardForm::streaming: return reverse_chunked<B>(h, dY, std::max<Index>(h.n(), 1)).grad;
      case BackwardForm::chunked: return reverse_chunked<B>(h, dY, chunk).grad;
      case BackwardForm::chunked_matmul:
        if constexpr (has_chunk_backward<B>) return reverse_matmul<B>(h, dY, chunk).grad;
        break;
    }
    throw InputError("variant " + to_string(v) + " has no backward form " + to_string(f));
  });
}

// From the head's coordinates to the problem's: q enters as scale·q; the ones
// column of v is no input.
template <class S> Gradient<S> problem_gradient(const Options& opt, const HeadGrad<S>& g) {
  return {from_rational<S>(opt.scale) * g.dq, g.dk, g.dv.leftCols(g.dv.cols() - 1)};
}

template <class S> void check_backward_args(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden, Index chunk = 1) {
  check_form_args(p, chunk);
  if (dout.rows() != p.n() || dout.cols() != p.dv() || dden.size() != p.n())
    throw InputError("upstream gradients must be n x dv and n (" + std::to_string(p.n()) + " x " +
                     std::to_string(p.dv()) + ", " + std::to_string(p.n()) + "), got " + std::to_string(dout.rows()) +
                     " x " + std::to_string(dout.cols()) + ", " + std::to_string(dden.size()));
  if (!has_backward(p.opt.variant)) throw InputError("variant " + to_string(p.opt.variant) + " has no backward form");
}

template <class S>
Gradient<S> backward(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden, BackwardForm f, Index chunk) {
  check_backward_args(p, dout, dden, chunk);
  // The outputs that normalization divides by, from the matching forward form.
  const Output<S> o = evaluate(p, f == BackwardForm::naive ? Form::naive : Form::streaming);
  Mat<S> Y(p.n(), p.dv() + 1);
  Y.leftCols(p.dv()) = o.num;
  Y.col(p.dv()) = o.den;
  const Head<S> h = make_head(p);
  return problem_gradient(
      p.opt, head_backward(p.opt.variant, h, output_adjoint(p.opt, Y, dout, dden, from_rational<S>(p.opt.eps)), f, chunk));
}

template <class S> Gradient<S> backward_magnitude(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden) {
  using std::abs;
  check_backward_args(p, dout, dden);
  const auto absm = [](const auto& m) { return Mat<S>(m.unaryExpr([](const S& x) { return S(abs(x)); })); };
  // |∂L/∂Y| term by term (output_adjoint), num's terms by their magnitude.
  Mat<S> Yb(p.n(), p.dv() + 1);
  Yb.leftCols(p.dv()) = absm(dout);
  Yb.col(p.dv()) = absm(dden);
  if (p.opt.normalize) {
    const Output<S> o = evaluate(p, Form::streaming), m = magnitude(p);
    const S eps = from_rational<S>(p.opt.eps);
    for (Index t = 0; t < p.n(); ++t) {
      const S D = abs(normalizer(o.den(t), eps, p.opt.eps_mode));
      Yb.row(t).head(p.dv()) /= D;
      if (!normalizer_flat(o.den(t), eps, p.opt.eps_mode))
        Yb(t, p.dv()) += Yb.row(t).head(p.dv()).dot(m.num.row(t)) / D;
    }
  }
  Problem<S> a{p.opt, absm(p.q), absm(p.k), absm(p.v)};
  a.opt.scale = abs(p.opt.scale);
  return problem_gradient(a.opt, head_backward(p.opt.variant, make_head(a), Yb, BackwardForm::streaming));
}

}  // namespace hla

#define HLA_BACKWARD_INSTANTIATIONS(ext, S) \
  ext template hla::Gradient<S> hla::backward<S>(const hla::Problem<S>&, const hla::Mat<S>&, const hla::Vec<S>&, hla::BackwardForm, \
                                                hla::Index);                                                       \
  ext template hla::Gradient<S> hla::backward_magnitude<S>(const hla::Problem<S>&, const hla::Mat<S>&, const hla::Vec<S>&);
HLA_BACKWARD_INSTANTIATIONS(extern, hla::Rational)
HLA_BACKWARD_INSTANTIATIONS(extern, hla::f113)
HLA_BACKWARD_INSTANTIATIONS(extern, double)
HLA_BACKWARD_INSTANTIATIONS(extern, float)
