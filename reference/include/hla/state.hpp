// Initial states (SPEC §3, §8): a sequence continued from the streaming state
// X0 that an earlier part left behind. The state is the §3 recurrence's
// (the corrected-state form: hla2 keeps F = S·C − G, not G), in the member
// order of the variant's backward type (backward/<variant>.hpp), each member
// a matrix whose last column, where it has one, is the denominator's part
// (the ones column of v). Outputs from X0 are readout(X0 ⊕ T_0 ⊕ … ⊕ T_t)
// (SPEC §4), which the streaming recurrence started at X0 computes.
//
// Light header: the evaluation is instantiated with the backward forms, in
// reference/src/backward_<scalar>.cpp.
#pragma once

#include "hla/backward.hpp"
#include "hla/evaluate.hpp"

#include <string>
#include <vector>

namespace hla {

// One member of a variant's state as files and users name it.
struct StatePart {
  std::string name;  // its value columns: S, C, F, P, E, SQ
  std::string ones;  // its denominator column (m, f, z, e), empty when it has none
  Index rows = 0, cols = 0;  // d × d, or d × dv (value columns; the ones column adds 1)
  // required: outputs read it. optional: it evolves but no output reads it
  // (hla2 masked without ridge: C), zero when not given. unused: not part of
  // this problem's state (hla2 unmasked: F); giving it is an error.
  enum class Role { required, optional, unused } role = Role::required;
  // Symmetric by construction (S = Σ γ^(t−i) k_i k_iᵀ, hla3's SQ = Σ q qᵀ): a
  // kernel may read it as S·q or Sᵀ·q, so its gradient is taken along symmetric
  // directions, (G + Gᵀ)/2 (SPEC §9).
  bool symmetric = false;
  Index width() const { return cols + (ones.empty() ? 0 : 1); }  // columns as stored in the member
  Index size() const { return rows * width(); }
};

// Whether variant v can start from a state (every variant with a §3
// recurrence: la1, hla2, ahla, hla3; not hla3_paper).
bool has_state(Variant v);
// The state's members, in the variant's State order. InputError when the
// variant has none.
std::vector<StatePart> state_layout(const Options& o, Index d, Index dv);
Index state_size(const std::vector<StatePart>& layout);  // Σ size(): values per (sequence, head)

// A state as matrices in layout order (rows × width()).
template <class S> using StateMats = std::vector<Mat<S>>;

// The outputs of p continued from X0 (the streaming recurrence started at X0;
// normalized as evaluate() does). InputError when X0 does not match the layout.
template <class S> Output<S> evaluate_from(const Problem<S>& p, const StateMats<S>& X0);
// The state after p's last token, starting from X0.
template <class S> StateMats<S> final_state(const Problem<S>& p, const StateMats<S>& X0);
// SPEC §7 magnitude with a state: the same recurrence over |q|, |k|, |v|,
// |scale|, |λ| and |X0|; its forms only add terms, so it bounds |num|, |den| and
// the error of any form that adds the state's terms and the tokens' terms.
template <class S> Output<S> magnitude_from(const Problem<S>& p, const StateMats<S>& X0);

// Gradients from X0 (SPEC §9): dq, dk, dv of p continued from X0, and dstate =
// ∂L/∂X0 (the backward's dX0; a State is the layout's members, so no
// conversion) in layout order, symmetric members symmetrized (symmetrize_gradient).
// Forms: streaming, chunked, chunked_matmul (the
// naive sums have no state: InputError). Errors as backward() and evaluate_from.
template <class S> struct GradientFrom {
  Gradient<S> tokens;
  StateMats<S> dstate;
};
template <class S>
GradientFrom<S> backward_from(const Problem<S>& p, const StateMats<S>& X0, const Mat<S>& dout, const Vec<S>& dden,
                               BackwardForm f = BackwardForm::streaming, Index chunk = 16);
// Their SPEC §9 magnitudes: the streaming backward over absolute values of the
// inputs, of X0 and of the upstream (as backward_magnitude); X0's entries are
// exact inputs (SPEC §8).
// (G + Gᵀ)/2 for the layout's symmetric members of g (a state's gradient or
// its magnitude, in layout order): the gradient along symmetric directions.
template <class S> void symmetrize_gradient(const std::vector<StatePart>& layout, StateMats<S>& g) {
  for (size_t m = 0; m < layout.size() && m < g.size(); ++m)
    if (layout[m].symmetric) {
      const Mat<S> t = g[m].transpose();
      g[m] = (g[m] + t) / S(2);
    }
}
template <class S>
GradientFrom<S> backward_magnitude_from(const Problem<S>& p, const StateMats<S>& X0, const Mat<S>& dout, const Vec<S>& dden);

}  // namespace hla
