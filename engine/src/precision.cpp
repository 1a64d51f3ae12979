#include "hla/engine/precision.hpp"

#include "hla/problem.hpp"

#include <cmath>
#include <sstream>

namespace hla::engine {

std::string to_string(Precision p) { return std::string(info(p).name); }

Precision parse_precision(std::string_view s) {
  std::vector<std::string> names;
  for (const PrecisionInfo& p : kPrecisions) {
    if (p.name == s) return p.id;
    names.emplace_back(p.name);
  }
  throw InputError("unknown precision '" + std::string(s) + "' (expected " + join_or(names) + ")");
}

Precision precision_of(DType t) { return parse_precision(info(t).name); }

std::optional<Precision> PrecisionMap::of(DType t) const {
  if (auto it = by_dtype.find(t); it != by_dtype.end()) return it->second;
  return all;
}

std::string PrecisionMap::str() const {
  if (all && by_dtype.empty()) return to_string(*all);
  std::string s;
  for (const auto& [t, p] : by_dtype) s += (s.empty() ? "" : ",") + to_string(t) + "=" + to_string(p);
  if (all) s += (s.empty() ? "" : ",") + std::string("*=") + to_string(*all);
  return s;
}

PrecisionMap parse_precision_map(std::string_view s) {
  PrecisionMap m;
  std::stringstream ss{std::string(s)};
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.find('=');
    if (item.empty()) throw InputError("precision '" + std::string(s) + "': empty entry");
    if (eq == std::string::npos) {
      if (m.all) throw InputError("precision '" + std::string(s) + "' names a precision for every dtype twice");
      m.all = parse_precision(item);
      continue;
    }
    const std::string key = item.substr(0, eq);
    const Precision p = parse_precision(item.substr(eq + 1));
    if (key == "*") {
      if (m.all) throw InputError("precision '" + std::string(s) + "' names a precision for every dtype twice");
      m.all = p;
      continue;
    }
    const DType t = parse_dtype(key);
    if (m.by_dtype.count(t)) throw InputError("precision '" + std::string(s) + "' names dtype " + key + " twice");
    m.by_dtype[t] = p;
  }
  return m;
}

std::string to_string(FormClass c) {
  switch (c.kind) {
    case FormClass::Kind::masked:
      return "masked";
    case FormClass::Kind::state_difference:
      return "state_difference";
    case FormClass::Kind::flat:
      return c.width == 0 ? "flat" : "flat:" + std::to_string(c.width);
  }
  return "?";
}

FormClass parse_form_class(std::string_view s) {
  if (s == "masked") return FormClass::masked;
  if (s == "state_difference") return FormClass::state_difference;
  if (s == "flat") return FormClass::flat();
  const std::string valid =
      "expected masked, state_difference, flat (every term added into one accumulator) or flat:W "
      "(intra-chunk terms added one by one in chunks of width W, 1 <= W <= " +
      std::to_string(kMaxFlatWidth) + ")";
  if (s.rfind("flat:", 0) == 0) {
    const std::string w(s.substr(5));
    const bool digits = !w.empty() && w.size() <= 6 && w.find_first_not_of("0123456789") == std::string::npos;
    const long long x = digits ? std::stoll(w) : 0;
    if (x < 1 || x > kMaxFlatWidth) throw InputError("form class '" + std::string(s) + "': bad chunk width '" + w + "' (" + valid + ")");
    return FormClass::flat(x);
  }
  throw InputError("unknown form class '" + std::string(s) + "' (" + valid + ")");
}

FormClass form_class_from_code(std::int32_t code) {
  const std::int32_t kind = code & 0xff, w = code >> 8;
  if (code == 0) return FormClass::masked;
  if (code == 1) return FormClass::state_difference;
  if (kind == 2 && w >= 0 && w <= kMaxFlatWidth) return FormClass::flat(w);
  throw InputError("unknown form_class " + std::to_string(code) +
                   " (expected HLA_CLASS_MASKED 0, HLA_CLASS_STATE_DIFFERENCE 1, HLA_CLASS_FLAT 2 or HLA_CLASS_FLAT_CHUNKS(w), 1 <= w <= " +
                   std::to_string(kMaxFlatWidth) + ")");
}

}  // namespace hla::engine
