#include "hla/evaluate.hpp"

namespace hla {

const std::vector<Form>& all_forms() {
  static const std::vector<Form> f{Form::naive, Form::streaming, Form::streaming_paper_state, Form::fold,
                                   Form::blelloch, Form::chunked_scan, Form::chunked_matmul};
  return f;
}

std::string to_string(Form f) {
  switch (f) {
    case Form::naive: return "naive";
    case Form::streaming: return "streaming";
    case Form::streaming_paper_state: return "streaming_paper_state";
    case Form::fold: return "fold";
    case Form::blelloch: return "blelloch";
    case Form::chunked_scan: return "chunked_scan";
    case Form::chunked_matmul: return "chunked_matmul";
  }
  return "?";
}

Form parse_form(std::string_view s) {
  for (Form f : all_forms())
    if (to_string(f) == s) return f;
  throw InputError("unknown form '" + std::string(s) +
                   "' (expected naive, streaming, streaming_paper_state, fold, blelloch, chunked_scan or chunked_matmul)");
}

std::vector<Form> forms_of(Variant v) {
  // streaming_paper_state is hla2's; the paper gives third order no matmul form.
  std::vector<Form> out;
  for (Form f : all_forms())
    if ((f != Form::streaming_paper_state || v == Variant::hla2) &&
        (f != Form::chunked_matmul || v != Variant::hla3_paper))
      out.push_back(f);
  return out;
}

bool is_chunked(Form f) { return f == Form::chunked_scan || f == Form::chunked_matmul; }

std::string to_string(PaperForm f) {
  switch (f) {
    case PaperForm::E1_hla2_streaming: return "E1_hla2_streaming";
    case PaperForm::E2_hla2_scan: return "E2_hla2_scan";
    case PaperForm::E3_ahla_scan: return "E3_ahla_scan";
    case PaperForm::E5_hla2_chunked: return "E5_hla2_chunked";
    case PaperForm::E6_ahla_chunked: return "E6_ahla_chunked";
  }
  return "?";
}

Variant variant_of(PaperForm f) {
  switch (f) {
    case PaperForm::E1_hla2_streaming:
    case PaperForm::E2_hla2_scan:
    case PaperForm::E5_hla2_chunked: return Variant::hla2;
    case PaperForm::E3_ahla_scan:
    case PaperForm::E6_ahla_chunked: return Variant::ahla;
  }
  return Variant::hla2;
}

bool subtracts_partial_sums(const Options& o, Form f) {
  const Variant v = o.variant;
  if (!o.masked) return false;  // unmasked forms only add
  // hla2's paper state and its §4 summary read out u·C − qᵀG; hla3_paper's
  // Algorithm 3 reads out S^K S^Q P − G⁽¹⁾ − G⁽²⁾ − G⁽³⁾. The paper's third-order
  // scan carries the corrected F of Eq. (7.4) and only adds terms (Eq. 7.7),
  // as do all hla3 forms.
  const bool scan = f == Form::fold || f == Form::blelloch || f == Form::chunked_scan;
  return (v == Variant::hla2 && (f == Form::streaming_paper_state || scan)) ||
         (v == Variant::hla3_paper && f == Form::streaming);
}

}  // namespace hla
