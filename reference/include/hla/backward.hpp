// Exact gradients of every operator (SPEC §9): dq, dk, dv of
// L = Σ_t ⟨do_t, o_t⟩ + Σ_t dden_t·den_t, by a named backward form.
//
// Light header: the forms (hla/backward/<variant>.hpp) are instantiated for
// rationals, binary128 and double (the float64 check of a fixture's stored
// gradients) in reference/src/backward_*.cpp.
#pragma once

#include "hla/problem.hpp"

#include <string>

namespace hla {

enum class BackwardForm {
  naive,      // the naive definition differentiated term by term (ground truth)
  streaming,  // reverse-time recurrence over adjoint states, one pass
  chunked,    // the same over chunks of width w, last first, each handing the previous one
              // the gradient of its starting state (what a chunked kernel's backward does)
  chunked_matmul,  // the same, each chunk in matrix products (the backward of the SPEC §5
                   // form); la1, hla2, ahla (not hla3 yet)
};
std::string to_string(BackwardForm f);
inline constexpr BackwardForm kBackwardForms[] = {BackwardForm::naive, BackwardForm::streaming, BackwardForm::chunked,
                                                  BackwardForm::chunked_matmul};

// Gradients with respect to the problem's q (before `scale`), k, v.
template <class S> struct Gradient {
  Mat<S> dq, dk, dv;
  bool operator==(const Gradient&) const = default;
};

// Whether variant v has backward forms (hla3_paper, the paper's erratum E4, has none).
bool has_backward(Variant v);
// Whether variant v has backward form f.
bool has_backward_form(Variant v, BackwardForm f);

// Upstream gradients: dout n × dv (∂L/∂o), dden n (∂L/∂den; zeros where den is
// not an output). Throws InputError for an invalid problem, mismatched
// upstream shapes, chunk < 1 or a variant without that backward form; exact scalars:
// std::domain_error when a normalized output divides by exactly zero.
// log_decay: decay weights in log space (head.hpp make_head), floating-point S only.
template <class S>
Gradient<S> backward(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden, BackwardForm f = BackwardForm::streaming,
                     Index chunk = 16, bool log_decay = false);

// SPEC §9 magnitudes: the sums that define each gradient element, over absolute
// values of every factor (|q|, |k|, |v|, |scale|, and the upstream |∂L/∂Y| with
// num's magnitude for num in ∂L/∂den). The backward forms only add terms of these
// sums, so they err by a modest multiple of u·magnitude, given ∂L/∂Y; with normalize,
// ∂L/∂Y itself is as well conditioned as den ⊕ ε (SPEC §7).
template <class S> Gradient<S> backward_magnitude(const Problem<S>& p, const Mat<S>& dout, const Vec<S>& dden);

}  // namespace hla
