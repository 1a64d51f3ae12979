// The table of variants and forms: every fact about a variant that code
// outside its operator needs (its name, order, options, forms, how its error
// is bounded, its C ABI code) is one row here, and every list, switch and
// message derives from it. Light header: no Boost, no Eigen.
//
// Adding a variant: its code in include/hla_impl.h, an enumerator and a row
// here, its operator type in ops/<name>.hpp, that type in operators.hpp
// (docs/contributing.md "Adding a variant"); static_asserts here and in operators.hpp fail
// the build when the four disagree.
#pragma once

#include "hla_impl.h"  // the C ABI codes (HLA_LA1, ...) the rows carry

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace hla {

enum class Variant : std::int32_t { la1, hla2, ahla, hla3, hla3_paper };

enum class Form : std::int32_t {
  naive,                  // SPEC §2, the ground truth
  streaming,              // SPEC §3 (hla2: corrected state F)
  streaming_paper_state,  // hla2, hla3: paper state (S·C − G; S·SQ·P − G), decay corrected
  fold,                   // SPEC §4 operator, serial left fold
  blelloch,               // SPEC §4 operator, exclusive Blelloch scan + local inclusion
  chunked_scan,           // SPEC §4 operator, two-level chunked scan
  chunked_matmul,         // SPEC §5 matmul form
  literal,                // SPEC §2's terms, each formed alone and added one by one into the output (flat)
  literal_reversed,       // the same terms added in the reverse order
  chunked_pairs,          // SPEC §5 with the intra-chunk terms added one by one (pair by pair)
};

// A set of forms, one bit per Form.
struct FormSet {
  std::uint32_t bits = 0;
  constexpr FormSet() = default;
  constexpr FormSet(std::initializer_list<Form> fs) {
    for (Form f : fs) bits |= 1u << static_cast<int>(f);
  }
  constexpr bool has(Form f) const { return (bits >> static_cast<int>(f)) & 1u; }
};

struct FormInfo {
  Form id;
  std::string_view name;
  bool chunked;  // the result depends on a chunk width
  bool scan;     // evaluates the SPEC §4 segment operator
};

inline constexpr std::array kForms{
    // {id, name, chunked, scan}
    FormInfo{Form::naive, "naive", false, false},
    FormInfo{Form::streaming, "streaming", false, false},
    FormInfo{Form::streaming_paper_state, "streaming_paper_state", false, false},
    FormInfo{Form::fold, "fold", false, true},
    FormInfo{Form::blelloch, "blelloch", false, true},
    FormInfo{Form::chunked_scan, "chunked_scan", true, true},
    FormInfo{Form::chunked_matmul, "chunked_matmul", true, false},
    FormInfo{Form::literal, "literal", false, false},
    FormInfo{Form::literal_reversed, "literal_reversed", false, false},
    FormInfo{Form::chunked_pairs, "chunked_pairs", true, false},
};

struct VariantInfo {
  Variant id;
  std::string_view name;
  // Number of (q·k) factors in a term of num: the degree of num in q and in k,
  // the a priori depth bound K = (order + 1)(n + d) + 16 (SPEC §7), and the
  // largest power of γ a form uses, γ^(order·(n+1)).
  int order;
  bool has_unmasked;      // takes masked = false
  bool has_ridge;         // takes lambda > 0
  bool needs_unit_gamma;  // defined for γ = 1 only
  FormSet forms;          // forms it has (naive always)
  // Masked forms that subtract partial sums: their error scales with the
  // unmasked-order magnitude (SPEC §7 evaluation classes).
  FormSet subtracting_forms;
  // Its magnitude (SPEC §7) is that of this variant, unmasked when
  // magnitude_unmasked (hla3_paper: the full third-order sum bounds the
  // tied-maximum sum and the partial sums its Algorithm 3 subtracts).
  Variant magnitude_as;
  bool magnitude_unmasked;
  bool paper_literal;     // the paper's own definition, not a kernel's: not fuzzed unless asked
  std::int32_t abi_code;  // hla_variant in include/hla_impl.h: equal to the enumerator
  // Full parity (docs/contributing.md), each checked against the code that provides it:
  bool has_state;     // a §3 streaming state: takes an initial state (its parts: reference/src/state_layout.cpp)
  bool has_backward;  // a backward type in Backwards (reference/include/hla/backward_impl.hpp; static_assert there)
  bool fast_engine;   // a form in the fast engine's ChunkForms (engine/include/hla/fast/engine.hpp; static_assert there)
};

namespace detail {
inline constexpr FormSet kCommonForms{Form::naive,    Form::streaming,        Form::fold,
                                      Form::blelloch, Form::chunked_scan,     Form::chunked_matmul,
                                      Form::literal,  Form::literal_reversed, Form::chunked_pairs};
inline constexpr FormSet kScanForms{Form::fold, Form::blelloch, Form::chunked_scan};
}  // namespace detail

// One row per variant, in enum order; every field named.
inline constexpr std::array kVariants{
    VariantInfo{.id = Variant::la1,
                .name = "la1",
                .order = 1,
                .has_unmasked = false,
                .has_ridge = false,
                .needs_unit_gamma = false,
                .forms = detail::kCommonForms,
                .subtracting_forms = {},
                .magnitude_as = Variant::la1,
                .magnitude_unmasked = false,
                .paper_literal = false,
                .abi_code = HLA_LA1,
                .has_state = true,
                .has_backward = true,
                .fast_engine = true},
    // hla2's paper state and its §4 summary read out u·C − qᵀG.
    VariantInfo{.id = Variant::hla2,
                .name = "hla2",
                .order = 2,
                .has_unmasked = true,
                .has_ridge = true,
                .needs_unit_gamma = false,
                .forms = {Form::naive, Form::streaming, Form::streaming_paper_state, Form::fold, Form::blelloch, Form::chunked_scan,
                          Form::chunked_matmul, Form::literal, Form::literal_reversed, Form::chunked_pairs},
                .subtracting_forms = {Form::streaming_paper_state, Form::fold, Form::blelloch, Form::chunked_scan},
                .magnitude_as = Variant::hla2,
                .magnitude_unmasked = false,
                .paper_literal = false,
                .abi_code = HLA_HLA2,
                .has_state = true,
                .has_backward = true,
                .fast_engine = true},
    VariantInfo{.id = Variant::ahla,
                .name = "ahla",
                .order = 2,
                .has_unmasked = false,
                .has_ridge = false,
                .needs_unit_gamma = false,
                .forms = detail::kCommonForms,
                .subtracting_forms = {},
                .magnitude_as = Variant::ahla,
                .magnitude_unmasked = false,
                .paper_literal = false,
                .abi_code = HLA_AHLA,
                .has_state = true,
                .has_backward = true,
                .fast_engine = true},
    // hla3's forms, and the paper's third-order scan (the corrected F of
    // Eq. 7.4), only add terms; its paper state (S·SQ·P − G, ops/hla3.hpp) subtracts.
    VariantInfo{.id = Variant::hla3,
                .name = "hla3",
                .order = 3,
                .has_unmasked = true,
                .has_ridge = false,
                .needs_unit_gamma = false,
                .forms = {Form::naive, Form::streaming, Form::streaming_paper_state, Form::fold, Form::blelloch, Form::chunked_scan,
                          Form::chunked_matmul, Form::literal, Form::literal_reversed, Form::chunked_pairs},
                .subtracting_forms = {Form::streaming_paper_state},
                .magnitude_as = Variant::hla3,
                .magnitude_unmasked = false,
                .paper_literal = false,
                .abi_code = HLA_HLA3,
                .has_state = true,
                .has_backward = true,
                .fast_engine = true},
    // Paper Alg. 3 (γ = 1), which reads out S^K S^Q P − G⁽¹⁾ − G⁽²⁾ − G⁽³⁾; the
    // paper gives third order no matmul form.
    VariantInfo{.id = Variant::hla3_paper,
                .name = "hla3_paper",
                .order = 3,
                .has_unmasked = false,
                .has_ridge = false,
                .needs_unit_gamma = true,
                .forms = {Form::naive, Form::streaming, Form::fold, Form::blelloch, Form::chunked_scan},
                .subtracting_forms = {Form::streaming},
                .magnitude_as = Variant::hla3,
                .magnitude_unmasked = true,
                .paper_literal = true,
                .abi_code = HLA_HLA3_PAPER,
                .has_state = false,
                .has_backward = false,
                .fast_engine = false},
};

constexpr const VariantInfo& info(Variant v) { return kVariants[static_cast<std::size_t>(v)]; }
constexpr const FormInfo& info(Form f) { return kForms[static_cast<std::size_t>(f)]; }

namespace detail {
template <class Table> constexpr bool rows_in_enum_order(const Table& t) {
  for (std::size_t i = 0; i < t.size(); ++i)
    if (static_cast<std::size_t>(t[i].id) != i) return false;
  return true;
}
// The C ABI code of a row is its enumerator's value (casts between them are safe).
template <class Table> constexpr bool abi_codes_are_enumerators(const Table& t) {
  for (const auto& r : t)
    if (r.abi_code != static_cast<std::int32_t>(r.id)) return false;
  return true;
}
constexpr bool variants_consistent() {
  for (const VariantInfo& v : kVariants) {
    if (v.order < 1 || !v.forms.has(Form::naive) || !v.forms.has(Form::streaming)) return false;
    if ((v.subtracting_forms.bits & ~v.forms.bits) != 0) return false;
    if (static_cast<std::size_t>(v.magnitude_as) >= kVariants.size()) return false;
    if (v.has_backward && !v.has_state) return false;  // a backward starts from a state's adjoint (SPEC §9)
  }
  return true;
}
}  // namespace detail
static_assert(detail::rows_in_enum_order(kVariants), "kVariants rows must follow enum Variant");
static_assert(detail::rows_in_enum_order(kForms), "kForms rows must follow enum Form");
static_assert(detail::abi_codes_are_enumerators(kVariants), "a kVariants row's C ABI code must equal its enumerator");
static_assert(detail::variants_consistent(),
              "a kVariants row lacks naive/streaming, names forms it has not, or has a backward without a state");

std::string to_string(Variant v);
Variant parse_variant(std::string_view s);  // throws InputError naming the known variants
const std::vector<Variant>& all_variants();
// The variants whose table row satisfies pred, in table order: tests and tools
// iterate the table, never a hand-written list (e.g. the kernels' variants:
// variants_where(is_kernel_variant)).
template <class Pred> std::vector<Variant> variants_where(Pred pred) {
  std::vector<Variant> out;
  for (const VariantInfo& r : kVariants)
    if (pred(r)) out.push_back(r.id);
  return out;
}
// A kernel implements the corrected definitions, not the paper's literal ones.
constexpr bool is_kernel_variant(const VariantInfo& r) { return !r.paper_literal; }
// "la1, hla2, ahla, hla3 or hla3_paper": for messages.
std::string variant_names(bool paper_literal_too = true);
// "la1,hla2,ahla,hla3": for command line defaults (without the paper-literal
// variants unless asked: a kernel implements the corrected definitions).
std::string variant_csv(bool paper_literal_too = true);

// Which options a variant takes (SPEC §1-§2): anything else is rejected.
inline bool has_unmasked(Variant v) { return info(v).has_unmasked; }
inline bool has_ridge(Variant v) { return info(v).has_ridge; }
inline bool needs_unit_gamma(Variant v) { return info(v).needs_unit_gamma; }
inline int order_of(Variant v) { return info(v).order; }

std::string to_string(Form f);
Form parse_form(std::string_view s);  // throws InputError
const std::vector<Form>& all_forms();
std::vector<Form> forms_of(Variant v);
inline bool is_chunked(Form f) { return info(f).chunked; }

// "a, b or c" (join(items, ", ", " or ")), "a,b,c" (join(items, ",", ",")).
std::string join(const std::vector<std::string>& items, std::string_view sep, std::string_view last_sep);
inline std::string join_or(const std::vector<std::string>& items) { return join(items, ", ", " or "); }

}  // namespace hla
