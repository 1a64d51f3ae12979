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

// The backward types, in table order: one for each kVariants row with has_backward, and none other.
using Backwards = std::tuple<la1_backward, hla2_backward, ahla_backward, hla3_backward>;
namespace detail {
template <std::size_t... I> constexpr bool backwards_match_table(std::index_sequence<I...>) {
  constexpr Variant listed[] = {std::tuple_element_t<I, Backwards>::variant...};
  std::size_t next = 0;
  for (const VariantInfo& r : kVariants) {
    if (!r.has_backward) continue;
    if (next == sizeof...(I) || listed[next] != r.id) return false;
    ++next;
  }
  return next == sizeof...(I);
}
template <Variant v, std::size_t... I> constexpr std::size_t backward_index(std::index_sequence<I...>) {
  std::size_t i = sizeof...(I);  // none: beyond the tuple, a compile error in BackwardOf
  (void)((std::tuple_element_t<I, Backwards>::variant == v ? (i = I, true) : false) || ...);
  return i;
}
}  // namespace detail
static_assert(detail::backwards_match_table(std::make_index_sequence<std::tuple_size_v<Backwards>>{}),
              "Backwards must hold, in table order, one backward type for each kVariants row with has_backward");
// The backward type of variant v (which has_backward).
template <Variant v>
using BackwardOf = std::tuple_element_t<detail::backward_index<v>(std::make_index_sequence<std::tuple_size_v<Backwards>>{}), Backwards>;

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

// A reverse-time backward form f (streaming, chunked, chunked_matmul) of head
// h from the state X0 before token 0: the gradients and ∂L/∂X0.
template <class B, class T>
ReverseResult<T, StateOf<B, T>> reverse_form(const Head<T>& h, const Mat<T>& dY, BackwardForm f, Index chunk, StateOf<B, T> X0) {
  switch (f) {
    case BackwardForm::streaming: return reverse_chunked<B>(h, dY, std::max<Index>(h.n(), 1), std::move(X0));
    case BackwardForm::chunked: return reverse_chunked<B>(h, dY, chunk, std::move(X0));
    case BackwardForm::chunked_matmul:
      if constexpr (has_chunk_backward<B>) return reverse_matmul<B>(h, dY, chunk, std::move(X0));
      break;
    case BackwardForm::naive: break;  // the naive sums start from zero: no state gradient
  }
  throw InputError("variant " + to_string(B::variant) + " has no backward form " + to_string(f) +
                   (f == BackwardForm::naive ? " from an initial state" : ""));
}

// Backward form f of head h for the upstream ∂L/∂Y (output_adjoint).
template <class T>
HeadGrad<T> head_backward(Variant v, const Head<T>& h, const Mat<T>& dY, BackwardForm f, Index chunk = 1) {
  return with_backward(v, [&]<class B>(B) {
    if (f == BackwardForm::naive) return B::naive(h, dY);
    return reverse_form<B>(h, dY, f, chunk, B::zero_state(h)).grad;
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
Gradient<S> backward(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden, BackwardForm f, Index chunk, bool log_decay) {
  check_backward_args(p, dout, dden, chunk);
  // The outputs that normalization divides by, from the matching forward form:
  // with log-space decay the chunked one of the same width, whose decay rounds
  // as the backward's (a kernel's upstream carries its own forward's error).
  const auto outputs = [&] {
    const Form fwd = f == BackwardForm::naive ? Form::naive : log_decay ? Form::chunked_matmul : Form::streaming;
    const Output<S> o = evaluate(p, fwd, chunk, log_decay);
    Mat<S> Y(p.n(), p.dv() + 1);
    Y.leftCols(p.dv()) = o.num;
    Y.col(p.dv()) = o.den;
    return Y;
  };
  const Head<S> h = make_head(p, log_decay);
  return problem_gradient(
      p.opt, head_backward(p.opt.variant, h, output_adjoint(p.opt, outputs, dout, dden, from_rational<S>(p.opt.eps)), f, chunk));
}

// The problem on absolute values (|q|, |k|, |v|, |scale|): its forms add the
// terms' magnitudes.
template <class S> Mat<S> abs_of(const Mat<S>& m) {
  using std::abs;
  return m.unaryExpr([](const S& x) { return S(abs(x)); });
}
template <class S> Problem<S> abs_problem(const Problem<S>& p) {
  using std::abs;
  Problem<S> a{p.opt, abs_of(p.q), abs_of(p.k), abs_of(p.v)};
  a.opt.scale = abs(p.opt.scale);
  return a;
}

// |∂L/∂Y| term by term (output_adjoint), num's terms by their magnitude: from
// the forward's outputs o and magnitude m (used only with normalize).
template <class S>
Mat<S> upstream_magnitude(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden, const Output<S>& o, const Output<S>& m) {
  using std::abs;
  Mat<S> Yb(p.n(), p.dv() + 1);
  Yb.leftCols(p.dv()) = abs_of(dout);
  Yb.col(p.dv()) = abs_of(Mat<S>(dden));
  if (p.opt.normalize) {
    const S eps = from_rational<S>(p.opt.eps);
    for (Index t = 0; t < p.n(); ++t) {
      const S D = abs(normalizer(o.den(t), eps, p.opt.eps_mode));
      Yb.row(t).head(p.dv()) /= D;
      if (!normalizer_flat(o.den(t), eps, p.opt.eps_mode))
        Yb(t, p.dv()) += Yb.row(t).head(p.dv()).dot(m.num.row(t)) / D;
    }
  }
  return Yb;
}

template <class S> Gradient<S> backward_magnitude(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden) {
  check_backward_args(p, dout, dden);
  const Mat<S> Yb = p.opt.normalize ? upstream_magnitude(p, dout, dden, evaluate(p, Form::streaming), magnitude(p))
                                    : upstream_magnitude(p, dout, dden, Output<S>{}, Output<S>{});
  const Problem<S> a = abs_problem(p);
  return problem_gradient(a.opt, head_backward(p.opt.variant, make_head(a), Yb, BackwardForm::streaming));
}

}  // namespace hla

#define HLA_BACKWARD_INSTANTIATIONS(ext, S)                                                                                         \
  ext template hla::Gradient<S> hla::backward<S>(const hla::Problem<S>&, const hla::Mat<S>&, const hla::Vec<S>&, hla::BackwardForm, \
                                                 hla::Index, bool);                                                                 \
  ext template hla::Gradient<S> hla::backward_magnitude<S>(const hla::Problem<S>&, const hla::Mat<S>&, const hla::Vec<S>&);
HLA_BACKWARD_INSTANTIATIONS(extern, hla::Rational)
HLA_BACKWARD_INSTANTIATIONS(extern, hla::f113)
HLA_BACKWARD_INSTANTIATIONS(extern, double)
HLA_BACKWARD_INSTANTIATIONS(extern, float)
