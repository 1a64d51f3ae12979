#include "hla/variants.hpp"

#include "hla/error.hpp"

namespace hla {

std::string join(const std::vector<std::string>& items, std::string_view sep, std::string_view last_sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == items.size() ? last_sep : sep) + items[i];
  return s;
}

namespace {
std::vector<std::string> names(bool paper_literal_too) {
  std::vector<std::string> r;
  for (const VariantInfo& i : kVariants)
    if (paper_literal_too || !i.paper_literal) r.emplace_back(i.name);
  return r;
}
}  // namespace

std::string to_string(Variant v) { return std::string(info(v).name); }

const std::vector<Variant>& all_variants() {
  static const std::vector<Variant> v = [] {
    std::vector<Variant> r;
    for (const VariantInfo& i : kVariants) r.push_back(i.id);
    return r;
  }();
  return v;
}

std::string variant_names(bool paper_literal_too) { return join_or(names(paper_literal_too)); }

std::string variant_csv(bool paper_literal_too) { return join(names(paper_literal_too), ",", ","); }

Variant parse_variant(std::string_view s) {
  for (const VariantInfo& i : kVariants)
    if (i.name == s) return i.id;
  throw InputError("unknown variant '" + std::string(s) + "' (expected " + variant_names() + ")");
}

std::string to_string(Form f) { return std::string(info(f).name); }

const std::vector<Form>& all_forms() {
  static const std::vector<Form> f = [] {
    std::vector<Form> r;
    for (const FormInfo& i : kForms) r.push_back(i.id);
    return r;
  }();
  return f;
}

Form parse_form(std::string_view s) {
  std::vector<std::string> names;
  for (const FormInfo& i : kForms) {
    if (i.name == s) return i.id;
    names.emplace_back(i.name);
  }
  throw InputError("unknown form '" + std::string(s) + "' (expected " + join_or(names) + ")");
}

std::vector<Form> forms_of(Variant v) {
  std::vector<Form> out;
  for (Form f : all_forms())
    if (info(v).forms.has(f)) out.push_back(f);
  return out;
}

}  // namespace hla
