// Stopping a campaign on SIGTERM or SIGINT (a CI job's timeout, Ctrl-C)
// without leaving a candidate's processes or temporary folders behind.
#pragma once

namespace hla::fuzz {

// While one exists, SIGTERM and SIGINT do not end the process at once: the
// handler (async-signal-safe: kill(2) only) kills the process group of every
// candidate child that runs (C ABI workers, exec commands and servers, with
// whatever they started) and records the signal. A running campaign then
// stops (stop_signal()), keeping the findings it has; the adapters remove
// their temporary folders as they are destroyed, and the caller ends with
// reraise(). A second signal ends the process at once. The previous handlers
// are restored when it is destroyed. One at a time (`hla fuzz` makes it).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int received() const;  // the signal that arrived, 0 none
  // Ends the process by the signal received, as its default action does (a
  // shell sees 128 + signo).
  [[noreturn]] void reraise() const;
};

// The stop signal that arrived while a StopSignals existed (0: none): a
// campaign checks it between its steps.
int stop_signal();

// A process that stops cleanly by itself on SIGTERM or SIGINT (a campaign of
// `hla fuzz --jobs`, with its own StopSignals): while registered, the handler
// passes it the signal instead of killing it. At most 64 at a time.
void forward_stop_signal(int pid);
void unforward_stop_signal(int pid);

}  // namespace hla::fuzz
