// Gradient cases of the fuzzer (SPEC §9): the upstream a case draws, the
// reference its gradients are judged against (check_gradients, as `hla check`
// judges them), and the upstream's part that follows a shrinker's reduction.
#pragma once

#include "hla/fuzz/cases.hpp"

namespace hla::fuzz {

// Draws c.dout (and c.dden when the candidate writes den), values of the
// problem's dtype; one plain case in four becomes grad_nan_causality: a NaN or
// Inf at one upstream element of a token in the first third of its sequence
// (the tokens after it are judged; at most about half the elements go unscored).
void draw_upstream(FuzzCase& c, const Supports& s, gen::Rng& r);

// ref with the reference gradients of c's upstream, its non-finite entries
// taken as 0. With hide, every gradient element such an entry may reach
// (SPEC §9, "NaN causality of gradients") is set to NaN, so that check_gradients
// does not score it; every other element depends on the upstream only through
// finite entries, so it must be finite and within the bound of this reference.
engine::Reference with_gradients(const FuzzCase& c, engine::Reference ref, bool hide);
// The hiding alone: ref.grad's elements that c's non-finite upstream may reach set to NaN.
void hide_reach(const FuzzCase& c, engine::Reference& ref);

// The upstream entries of the batch entries `batches` and query heads `heads`
// (empty: all), the token ranges `tokens` (empty: all; in order, as pieces()
// lays them out) and the first dv columns (a reduction's problem).
struct Keep {
  std::vector<Index> batches, heads;
  Ranges tokens;
  Index dv = 0;
};
void keep_upstream(FuzzCase& k, const FuzzCase& c, const Keep& keep);

bool upstream_finite(const FuzzCase& c);

}  // namespace hla::fuzz
