// State layouts (state.hpp): light, so that the file readers (and their
// libFuzzer build, which compiles the reader sources alone) take them.
#include "hla/state.hpp"

namespace hla {

bool has_state(Variant v) { return info(v).has_state; }

std::vector<StatePart> state_layout(const Options& o, Index d, Index dv) {
  using R = StatePart::Role;
  const R masked = o.masked ? R::required : R::unused, unmasked = o.masked ? R::unused : R::required;
  switch (o.variant) {
    case Variant::la1: return {{"P", "z", d, dv}};
    case Variant::hla2:
      // C feeds only the ridge term and the unmasked readout; masked F = S·C − G (SPEC §3).
      return {{"S", "", d, d, R::required, true},
              {"C", "m", d, dv, o.masked && o.lambda == 0 ? R::optional : R::required},
              {"F", "f", d, dv, masked}};
    case Variant::ahla: return {{"P", "z", d, dv}, {"E", "e", d, dv}};
    case Variant::hla3:
      // The third member is F (masked) or SQ = Σ γ^(t−u) q_u q_uᵀ (unmasked).
      return {{"S", "", d, d, R::required, true}, {"P", "z", d, dv},
              o.masked ? StatePart{"F", "f", d, dv, masked} : StatePart{"SQ", "", d, d, unmasked, true}};
    default: break;
  }
  throw InputError("variant " + to_string(o.variant) + " has no streaming state (no initial state can be given)");
}

Index state_size(const std::vector<StatePart>& layout) {
  Index s = 0;
  for (const StatePart& p : layout) s += p.size();
  return s;
}

}  // namespace hla
