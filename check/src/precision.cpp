#include "hla/check/precision.hpp"

#include "hla/problem.hpp"

#include <cmath>
#include <sstream>

namespace hla::check {

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

std::string to_string(FormClass c) { return c == FormClass::masked ? "masked" : "state_difference"; }

FormClass parse_form_class(std::string_view s) {
  if (s == "masked") return FormClass::masked;
  if (s == "state_difference") return FormClass::state_difference;
  throw InputError("unknown form class '" + std::string(s) + "' (expected masked or state_difference)");
}

}  // namespace hla::check
