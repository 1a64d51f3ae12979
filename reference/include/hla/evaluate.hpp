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

enum class Form {
  naive,                  // SPEC §2, the ground truth
  streaming,              // SPEC §3 (hla2: corrected state F)
  streaming_paper_state,  // hla2 only: paper state (S, C, m, G, h), decay corrected
  fold,                   // SPEC §4 operator, serial left fold
  blelloch,               // SPEC §4 operator, exclusive Blelloch scan + local inclusion
  chunked_scan,           // SPEC §4 operator, two-level chunked scan
  chunked_matmul,         // SPEC §5 matmul form
};

std::string to_string(Form f);
Form parse_form(std::string_view s);  // throws InputError
const std::vector<Form>& all_forms();
// The forms that exist for a variant: all but streaming_paper_state (hla2 only)
// and chunked_matmul for hla3_paper (the paper gives third order none).
std::vector<Form> forms_of(Variant v);
// Forms whose result depends on a chunk width.
bool is_chunked(Form f);

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
template <class S> Output<S> evaluate(const Problem<S>& p, Form f = Form::streaming, Index chunk = 16);
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
