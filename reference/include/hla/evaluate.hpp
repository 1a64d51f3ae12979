// "Compute variant V of this problem by form F in scalar S": the one dispatch
// that the demo, the properties, fixtures and the checker call.
//
// Light header: the algorithms are instantiated once per scalar type in
// reference/src/instantiate_*.cpp.
#pragma once

#include "hla/problem.hpp"

#include <string>
#include <vector>

namespace hla {

// Variants and forms: hla/variants.hpp.

// Paper-literal forms shown wrong by SPEC §6 (E4 is the variant hla3_paper).
enum class PaperForm {
  E1_hla2_streaming,  // hla2, γ-decay of G as printed
  E2_hla2_scan,       // hla2, decayed masked concatenation as printed (Blelloch scan)
  E3_ahla_scan,       // ahla, decayed R in the concatenation (Blelloch scan)
  E5_hla2_chunked,    // hla2, Fig. 1C chunk form without the carry × chunk term
  E6_ahla_chunked,    // ahla, Fig. 2C routed carry read with i < t
};
std::string to_string(PaperForm f);
Variant variant_of(PaperForm f);

template <class S> struct Output {
  Mat<S> num;  // n × dv
  Vec<S> den;  // n
  Mat<S> out;  // num, or num / (den ⊕ ε) when normalize is set (SPEC §1)
};

// Throws InputError for an invalid problem, a form the variant lacks, or
// chunk < 1. Exact scalars: throws std::domain_error when a normalized output
// divides by exactly zero.
// log_decay: decay weights in log space (head.hpp make_head), floating-point S only.
template <class S> Output<S> evaluate(const Problem<S>& p, Form f = Form::streaming, Index chunk = 16, bool log_decay = false);
template <class S> Output<S> evaluate_paper(const Problem<S>& p, PaperForm f, Index chunk = 16);

// SPEC §7 magnitude: the naive sums over absolute values (|q|, |k|, |v|, |scale|),
// bounding |num| and |den| and the error of any form that adds only terms of
// the sum. With `unmasked_order` it is the magnitude of the unmasked operator
// of the same order, which also bounds the partial sums a form subtracts
// (S_tC_t − G_t, S^K S^Q P − G⁽¹⁾ − G⁽²⁾ − G⁽³⁾). For hla3_paper it is always the
// unmasked hla3 magnitude (an upper bound of the tied-maximum sum).
template <class S> Output<S> magnitude(const Problem<S>& p, bool unmasked_order = false);

// Whether a form subtracts partial sums (its error scales with the unmasked magnitude).
bool subtracts_partial_sums(const Options& o, Form f);

}  // namespace hla
