#include "progress.hpp"

#include "hla/options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <unistd.h>

namespace hla::cli {

bool progress_wanted(bool off, bool force) { return !off && (force || ::isatty(2) == 1); }

void add_progress_flags(CLI::App* c, bool& off, bool& force) {
  c->add_flag("--no-progress", off, "no progress display");
  c->add_flag("--progress", force, "draw the progress display even when stderr is not a terminal");
  c->add_flag_callback("--quiet", [&off] {
     off = true;
     warn_old_spelling("--quiet", "--no-progress");
   })->group("");  // hidden: an alias for one release
}

Progress::Progress(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled), start_(std::chrono::steady_clock::now()), last_(start_) {}

Progress::~Progress() { finish(); }

void Progress::set_label(std::string label) {
  if (label == label_) return;
  label_ = std::move(label);
  start_ = std::chrono::steady_clock::now();  // a new stage: its own ETA
  last_ = start_ - std::chrono::seconds(1);   // and drawn at once
}

void Progress::update(double done, double total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool complete = total > 0 && done >= total;
  if (drawn_ && !complete && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double f = total > 0 ? std::clamp(done / total, 0.0, 1.0) : 0;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  constexpr int width = 30;
  const int filled = static_cast<int>(std::floor(f * width));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '-');
  char eta[32] = "--";
  if (f > 0.01 && f < 1) std::snprintf(eta, sizeof eta, "%.0f s", elapsed * (1 - f) / f);
  else if (f >= 1) std::snprintf(eta, sizeof eta, "0 s");
  std::fprintf(stderr, "\r%s [%s] %5.1f%%  %.0f s elapsed, ETA %s   ", label_.c_str(), bar.c_str(), 100 * f, elapsed, eta);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r%*s\r", 100, "");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace hla::cli
