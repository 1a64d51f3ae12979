#include "hla/options.hpp"

#include <iostream>
#include <sstream>
#include <vector>

namespace hla {

bool parse_bool(const std::string& s) {
  if (s == "true") return true;
  if (s == "false") return false;
  throw InputError("'" + s + "' is not true or false");
}

namespace detail {
std::string normalize_text(const Options& o) { return o.normalize ? to_string(o.eps_mode) : "none"; }
void set_normalize(Options& o, const std::string& s) {
  if (s == "none") o.normalize = false;
  else if (s == "add" || s == "clamp") o.normalize = true, o.eps_mode = parse_eps_mode(s);
  else throw InputError("'" + s + "' is not none, add or clamp");
}
}  // namespace detail

const OptionInfo* find_option(std::string_view name) {
  for (const OptionInfo& r : kOptions)
    if (r.name == name || (!r.alias.empty() && r.alias == name)) return &r;
  return nullptr;
}

std::string option_names() {
  std::vector<std::string> names;
  for (const OptionInfo& r : kOptions) names.emplace_back(r.name);
  return join(names, ", ", ", ");
}

void set_option(Options& o, const OptionInfo& r, const std::string& text) {
  try {
    r.set(o, text);
  } catch (const InputError& e) {
    throw InputError(std::string(r.name) + ": " + e.what());
  }
}

namespace {
std::string type_and_range(const OptionInfo& r) { return std::string(r.type) + (r.range.empty() ? "" : " ") + std::string(r.range); }
}  // namespace

std::string option_values(const OptionInfo& r) { return r.id == Option::variant ? variant_names(true) : type_and_range(r); }

void warn_old_spelling(std::string_view old, std::string_view now) {
  std::cerr << "hla: warning: " << old << " is the old spelling of " << now << " (removed in the next release)\n";
}

// One row per option; where its flag or fixture key is not its name, the help says so.
std::string options_markdown() {
  auto cell = [](std::string_view text) {  // a '|' would end the cell
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::ostringstream os;
  os << "| option | values (default) | what |\n|---|---|---|\n";
  for (const OptionInfo& r : kOptions) {
    os << "| `" << r.name << "` | " << cell(type_and_range(r)) << " (`" << r.default_text << "`) | " << cell(r.help);
    if (r.cli != "--" + std::string(r.name)) os << "; `" << r.cli << "`";
    if (r.key != r.name) os << "; fixture " << (r.key.find(',') == std::string_view::npos ? "key" : "keys") << " `" << r.key << "`";
    os << " |\n";
  }
  return os.str();
}

}  // namespace hla
