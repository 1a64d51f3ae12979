#include "problem_options.hpp"

#include "commands.hpp"

#include <iostream>

namespace hla::cli {

void add_option_flag(CLI::App* c, const OptionInfo& r, std::string& text, const std::string& help) {
  const std::string flag(r.cli);
  c->add_option(flag, text, help)->check(non_empty);
  if (r.alias.empty()) return;
  const std::string old = "--" + std::string(r.alias);
  c->add_option_function<std::string>(
       old,
       [&text, old, flag](const std::string& v) {
         warn_old_spelling(old, flag);
         text = v;
       },
       help)
      ->check(non_empty)
      ->group("");  // hidden: an alias for one release
}

void ProblemOptionArgs::add_to(CLI::App* c) {
  for (const OptionInfo& r : kOptions) {
    std::string& text = (*this)[r.id];
    const std::string help = std::string(r.help) + "; " + option_values(r) + " (default " + std::string(r.default_text) + ")";
    if (r.type != "bool") {
      add_option_flag(c, r, text, help);
      continue;
    }
    const std::string flipped = bool_text(!parse_bool(std::string(r.default_text)));
    c->add_flag_callback(
        std::string(r.cli), [&text, flipped] { text = flipped; }, std::string(r.name) + " = " + flipped + " (" + std::string(r.help) + ")");
  }
}

// hla options: the option table of docs/using.md, in Markdown (ctest docs_options compares them).
void add_options(CLI::App& app, Action& action) {
  CLI::App* c = app.add_subcommand("options", "print the table of operator options (Markdown)");
  c->group("");  // hidden: for the docs
  c->callback([&action] {
    action = [] {
      std::cout << options_markdown();
      return 0;
    };
  });
}

}  // namespace hla::cli
