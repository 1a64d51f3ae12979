// The fast exact engine: the reference's forms evaluated in FFRational
// (hla/ffrational.hpp: no gcd, no allocation in the inner loops), returning
// the same canonical rationals as the evaluation in Rational (GMP mpq), which
// stays the ground truth (properties/exact_engine.cpp demands `==`).
//
// Each function takes and returns what its namesake in evaluate.hpp,
// backward.hpp or state.hpp does for S = Rational, throws what it throws, and
// runs the same generic algorithm. Normalization divides in Rational, once per
// output (finish). A normalized backward's upstream ∂L/∂Y has a denominator
// per token: the backward, linear in ∂L/∂Y, runs on P·∂L/∂Y with P a common
// denominator, and its results are divided by P once at the end.
//
// Light header; the instantiations are in reference/src/exact.cpp.
#pragma once

#include "hla/backward.hpp"
#include "hla/evaluate.hpp"
#include "hla/state.hpp"

namespace hla::exact {

Output<Rational> evaluate(const Problem<Rational>& p, Form f = Form::streaming, Index chunk = 16);
Output<Rational> magnitude(const Problem<Rational>& p, bool unmasked_order = false);

Output<Rational> evaluate_from(const Problem<Rational>& p, const StateMats<Rational>& X0);
StateMats<Rational> final_state(const Problem<Rational>& p, const StateMats<Rational>& X0);
Output<Rational> magnitude_from(const Problem<Rational>& p, const StateMats<Rational>& X0);

Gradient<Rational> backward(const Problem<Rational>& p, const Mat<Rational>& dout, const Vec<Rational>& dden,
                            BackwardForm f = BackwardForm::streaming, Index chunk = 16);
Gradient<Rational> backward_magnitude(const Problem<Rational>& p, const Mat<Rational>& dout, const Vec<Rational>& dden);
GradientFrom<Rational> backward_from(const Problem<Rational>& p, const StateMats<Rational>& X0, const Mat<Rational>& dout,
                                     const Vec<Rational>& dden, BackwardForm f = BackwardForm::streaming, Index chunk = 16);
GradientFrom<Rational> backward_magnitude_from(const Problem<Rational>& p, const StateMats<Rational>& X0,
                                               const Mat<Rational>& dout, const Vec<Rational>& dden);

}  // namespace hla::exact
