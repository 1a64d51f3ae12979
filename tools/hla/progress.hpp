// A progress bar with ETA on stderr for long work (ref, gen, check): shown
// when stderr is a terminal, or when forced (--progress); never with --quiet.
// Redrawn at most ten times a second; cleared when done.
#pragma once

#include <chrono>
#include <string>

namespace CLI {
class App;
}

namespace hla::cli {

class Progress {
 public:
  // enabled: whether to draw at all (progress_wanted()).
  Progress(std::string label, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // done of total units; the label may change ("reference", "checking").
  void update(double done, double total);
  void set_label(std::string label);
  // Clears the bar (the caller prints its own summary line).
  void finish();

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

// --no-progress wins; --progress forces; else only when stderr is a terminal.
bool progress_wanted(bool off, bool force);

// The progress flags, one spelling for every subcommand: --no-progress and
// --progress; --quiet, the old spelling of --no-progress, warns (removed in
// the next release).
void add_progress_flags(CLI::App* c, bool& off, bool& force);

}  // namespace hla::cli
