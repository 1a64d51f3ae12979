// The table of operator options: every fact about an option that code
// outside the operators needs (its one name, type, default, valid range,
// command-line flag, fixture metadata key, help, the spelling it replaced) and
// how it reads and writes itself is one row here. The command line (hla ref,
// hla gen --case), the Python keywords and defaults (through _core.options()),
// the fixture metadata, Options::validate()'s messages and the option table of
// docs/using.md (`hla options --markdown`, ctest docs_options) derive from it.
//
// Adding an option: a field in Options (problem.hpp), a row here, and what it
// means to the operators (docs/contributing.md "Adding an option").
#pragma once

#include "hla/problem.hpp"

#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace hla {

enum class Option : int { variant, masked, gamma, normalize, eps, lam, scale };

using MetaMap = std::map<std::string, std::string>;

struct OptionInfo {
  Option id;
  std::string_view name;          // the one name: Python keyword, `hla gen --case` key, messages
  std::string_view type;          // for the docs: name, bool, rational, or the choices
  std::string_view default_text;  // the default, as text
  std::string_view range;         // what validate() requires, as its messages say it ("": any value read)
  std::string_view cli;           // the flag of hla ref / hla gen (a bool's flips its default)
  std::string_view key;           // fixture metadata key(s)
  std::string_view help;          // one line
  std::string_view alias;         // the spelling it replaced: accepted, with a warning, for one release
  // Its semantics: the value as exact text; set from text (InputError without
  // the name: callers add it); in range (nullptr: every value read is).
  std::string (*text)(const Options&);
  void (*set)(Options&, const std::string&);
  bool (*in_range)(const Options&);
  // Fixture metadata where it is not `key` = text (nullptr: that).
  void (*write_meta)(const Options&, MetaMap&) = nullptr;
  void (*read_meta)(Options&, const MetaMap&) = nullptr;
};

bool parse_bool(const std::string& s);  // "true" | "false"; InputError otherwise
inline std::string bool_text(bool b) { return b ? "true" : "false"; }

namespace detail {
std::string normalize_text(const Options& o);
void set_normalize(Options& o, const std::string& s);
// The semantics of an exact rational option, member m of Options.
template <Rational Options::*m> std::string rational_text(const Options& o) { return to_string(o.*m); }
template <Rational Options::*m> void set_rational(Options& o, const std::string& s) { o.*m = parse_rational(s); }
}  // namespace detail

// One row per option, in enum order.
inline constexpr std::array kOptions{
    OptionInfo{.id = Option::variant,
               .name = "variant",
               .type = "name",
               .default_text = "hla2",
               .range = "",
               .cli = "--variant",
               .key = "variant",
               .help = "the operator",
               .alias = "",
               .text = [](const Options& o) { return to_string(o.variant); },
               .set = [](Options& o, const std::string& s) { o.variant = parse_variant(s); },
               .in_range = nullptr},
    OptionInfo{.id = Option::masked,
               .name = "masked",
               .type = "bool",
               .default_text = "true",
               .range = "",
               .cli = "--unmasked",
               .key = "masked",
               .help = "unmasked: hla2, hla3 only",
               .alias = "",
               .text = [](const Options& o) { return bool_text(o.masked); },
               .set = [](Options& o, const std::string& s) { o.masked = parse_bool(s); },
               .in_range = nullptr},
    OptionInfo{.id = Option::gamma,
               .name = "gamma",
               .type = "rational",
               .default_text = "1",
               .range = "in (0, 1]",
               .cli = "--gamma",
               .key = "gamma",
               .help = "decay γ",
               .alias = "",
               .text = detail::rational_text<&Options::gamma>,
               .set = detail::set_rational<&Options::gamma>,
               .in_range = [](const Options& o) { return o.gamma > 0 && o.gamma <= 1; }},
    OptionInfo{.id = Option::normalize,
               .name = "normalize",
               .type = "none, add or clamp",
               .default_text = "none",
               .range = "",
               .cli = "--normalize",
               .key = "normalize, eps_mode",
               .help = "num/(den+ε); clamp: num/(sign(den)·max(|den|, ε))",
               .alias = "",
               .text = detail::normalize_text,
               .set = detail::set_normalize,
               .in_range = nullptr,
               .write_meta =
                   [](const Options& o, MetaMap& m) {
                     m["normalize"] = bool_text(o.normalize);
                     m["eps_mode"] = to_string(o.eps_mode);
                   },
               .read_meta =
                   [](Options& o, const MetaMap& m) {
                     o.eps_mode = parse_eps_mode(m.at("eps_mode"));
                     o.normalize = parse_bool(m.at("normalize"));
                   }},
    OptionInfo{.id = Option::eps,
               .name = "eps",
               .type = "rational",
               .default_text = "1/1000000",
               .range = "> 0",
               .cli = "--eps",
               .key = "eps",
               .help = "ε of normalize",
               .alias = "",
               .text = detail::rational_text<&Options::eps>,
               .set = detail::set_rational<&Options::eps>,
               .in_range = [](const Options& o) { return o.eps > 0; }},
    OptionInfo{.id = Option::lam,
               .name = "lam",
               .type = "rational",
               .default_text = "0",
               .range = ">= 0",
               .cli = "--lam",
               .key = "lambda",
               .help = "ridge λ (hla2)",
               .alias = "lambda",
               .text = detail::rational_text<&Options::lambda>,
               .set = detail::set_rational<&Options::lambda>,
               .in_range = [](const Options& o) { return o.lambda >= 0; }},
    OptionInfo{.id = Option::scale,
               .name = "scale",
               .type = "rational",
               .default_text = "1",
               .range = "",
               .cli = "--scale",
               .key = "scale",
               .help = "multiplies q",
               .alias = "",
               .text = detail::rational_text<&Options::scale>,
               .set = detail::set_rational<&Options::scale>,
               .in_range = nullptr},
};

static_assert(detail::rows_in_enum_order(kOptions), "kOptions rows must follow enum Option");

constexpr const OptionInfo& info(Option o) { return kOptions[static_cast<std::size_t>(o)]; }
// The row named `name`, or whose alias it is (nullptr: none).
const OptionInfo* find_option(std::string_view name);
// "variant, masked, gamma, ...": for messages.
std::string option_names();
// Sets row r of o from text, naming the option in the InputError.
void set_option(Options& o, const OptionInfo& r, const std::string& text);
// A row's values for help and docs: the variants' names, or its type and range.
std::string option_values(const OptionInfo& r);
// On stderr: "hla: warning: <old> is the old spelling of <now> (removed in the next release)".
void warn_old_spelling(std::string_view old, std::string_view now);
// The option table of docs/using.md, as `hla options --markdown` prints it.
std::string options_markdown();

}  // namespace hla
