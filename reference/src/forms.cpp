#include "hla/evaluate.hpp"

namespace hla {

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
  return o.masked && info(o.variant).subtracting_forms.has(f);  // unmasked forms only add
}

}  // namespace hla
