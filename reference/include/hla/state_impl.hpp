// Definitions behind state.hpp; included by the units that instantiate them
// (reference/src/backward_*.cpp): the variants' State types and
// recurrences live with their backward (backward/<variant>.hpp).
#pragma once

#include "hla/backward_impl.hpp"
#include "hla/state.hpp"

#include <tuple>

namespace hla {

// The State of backward type B from matrices in layout order (checked shapes).
template <class B, class S> StateOf<B, S> state_from(const Head<S>& h, const StateMats<S>& X0) {
  StateOf<B, S> X = B::zero_state(h);
  size_t i = 0;
  std::apply(
      [&](auto&... m) {
        if (X0.size() != sizeof...(m))
          throw InputError("initial state: " + std::to_string(X0.size()) + " members given, the " +
                           to_string(B::variant) + " state has " + std::to_string(sizeof...(m)));
        ((X0[i].rows() == m.rows() && X0[i].cols() == m.cols()
              ? (m = X0[i], ++i)
              : throw InputError("initial state: member " + std::to_string(i) + " is " + std::to_string(X0[i].rows()) +
                                 " x " + std::to_string(X0[i].cols()) + ", expected " + std::to_string(m.rows()) + " x " +
                                 std::to_string(m.cols()))),
         ...);
      },
      X.members());
  return X;
}

template <class B, class S> StateMats<S> mats_of(const StateOf<B, S>& X) {
  return std::apply([](const auto&... m) { return StateMats<S>{Mat<S>(m)...}; }, X.members());
}

template <class S> Output<S> evaluate_from(const Problem<S>& p, const StateMats<S>& X0) {
  check_form_args(p, 1);
  const Head<S> h = make_head(p);
  return finish(p.opt, with_backward(p.opt.variant, [&]<class B>(B) { return forward_from<B>(h, state_from<B>(h, X0)); }));
}

template <class S> StateMats<S> final_state(const Problem<S>& p, const StateMats<S>& X0) {
  check_form_args(p, 1);
  const Head<S> h = make_head(p);
  return with_backward(p.opt.variant, [&]<class B>(B) {
    StateOf<B, S> X = state_from<B>(h, X0);
    for (Index t = 0; t < h.n(); ++t) B::advance(h, X, t);
    return mats_of<B>(X);
  });
}

template <class S> Output<S> magnitude_from(const Problem<S>& p, const StateMats<S>& X0) {
  Problem<S> a = abs_problem(p);
  a.opt.normalize = false;
  StateMats<S> aX;
  for (const Mat<S>& m : X0) aX.push_back(abs_of(m));
  // Every term of the recurrence is a product of inputs, γ, λ and state
  // entries, added: on absolute values it is the sum of |terms|.
  return evaluate_from(a, aX);
}

// The reverse form f of h from X0 for the upstream rows dY, in the problem's coordinates.
template <class B, class S>
GradientFrom<S> gradient_from(const Options& opt, const Head<S>& h, const StateMats<S>& X0, const Mat<S>& dY, BackwardForm f, Index chunk) {
  const auto r = reverse_form<B>(h, dY, f, chunk, state_from<B>(h, X0));
  return {problem_gradient(opt, r.grad), mats_of<B>(r.dX0)};
}

template <class S>
GradientFrom<S> backward_from(const Problem<S>& p, const StateMats<S>& X0, const Mat<S>& dout, const Vec<S>& dden, BackwardForm f,
                               Index chunk) {
  check_backward_args(p, dout, dden, chunk);
  const Head<S> h = make_head(p);
  GradientFrom<S> g = with_backward(p.opt.variant, [&]<class B>(B) {
    // [num | den] from the state, which normalization divides by
    const auto outputs = [&] { return forward_from<B>(h, state_from<B>(h, X0)); };
    return gradient_from<B>(p.opt, h, X0, output_adjoint(p.opt, outputs, dout, dden, from_rational<S>(p.opt.eps)), f, chunk);
  });
  symmetrize_gradient(state_layout(p.opt, p.d(), p.dv()), g.dstate);
  return g;
}

template <class S>
GradientFrom<S> backward_magnitude_from(const Problem<S>& p, const StateMats<S>& X0, const Mat<S>& dout, const Vec<S>& dden) {
  check_backward_args(p, dout, dden);
  const Mat<S> Yb = p.opt.normalize ? upstream_magnitude(p, dout, dden, evaluate_from(p, X0), magnitude_from(p, X0))
                                    : upstream_magnitude(p, dout, dden, Output<S>{}, Output<S>{});
  const Problem<S> a = abs_problem(p);
  StateMats<S> aX;
  for (const Mat<S>& m : X0) aX.push_back(abs_of(m));
  GradientFrom<S> g = with_backward(p.opt.variant, [&]<class B>(B) {
    return gradient_from<B>(a.opt, make_head(a), aX, Yb, BackwardForm::streaming, 1);
  });
  symmetrize_gradient(state_layout(p.opt, p.d(), p.dv()), g.dstate);  // the terms of both halves, halved
  return g;
}

}  // namespace hla

#define HLA_STATE_INSTANTIATIONS(ext, S)                                                                          \
  ext template hla::Output<S> hla::evaluate_from<S>(const hla::Problem<S>&, const hla::StateMats<S>&);              \
  ext template hla::StateMats<S> hla::final_state<S>(const hla::Problem<S>&, const hla::StateMats<S>&);             \
  ext template hla::Output<S> hla::magnitude_from<S>(const hla::Problem<S>&, const hla::StateMats<S>&);            \
  ext template hla::GradientFrom<S> hla::backward_from<S>(const hla::Problem<S>&, const hla::StateMats<S>&, const hla::Mat<S>&, \
                                                          const hla::Vec<S>&, hla::BackwardForm, hla::Index);                     \
  ext template hla::GradientFrom<S> hla::backward_magnitude_from<S>(const hla::Problem<S>&, const hla::StateMats<S>&,          \
                                                                    const hla::Mat<S>&, const hla::Vec<S>&);
HLA_STATE_INSTANTIATIONS(extern, hla::Rational)
HLA_STATE_INSTANTIATIONS(extern, hla::f113)
HLA_STATE_INSTANTIATIONS(extern, double)
HLA_STATE_INSTANTIATIONS(extern, float)
