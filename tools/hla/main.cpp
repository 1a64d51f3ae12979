// hla — the oracle's command line. Exit status: 0 success, 1 a check or
// fuzz campaign failed, 2 usage or input error (message on stderr).
#include "commands.hpp"

#include "hla/problem.hpp"

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"hla-oracle: exact reference, checker and fuzzer for Higher-order Linear Attention kernels"};
  app.require_subcommand(1);
  hla::cli::Action action;
  hla::cli::add_demo(app, action);
  hla::cli::add_gen(app, action);
  hla::cli::add_check(app, action);
  hla::cli::add_eval(app, action);
  hla::cli::add_fuzz(app, action);
  hla::cli::add_select(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    return action();
  } catch (const hla::InputError& e) {
    std::cerr << "hla: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hla: internal error: " << e.what() << "\n";
    return 3;
  }
}
