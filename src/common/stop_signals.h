// A process's stop signals (SIGINT, SIGTERM, SIGHUP) as calls on a thread of its own: the handler
// only writes the signal's number into a pipe (async-signal-safe), and the thread calls
// `on_signal(signal, nth)`, nth counting the signals received so far (1 for the first). So the
// callback may take locks, print and stop servers, and it still runs while the rest of the process
// is busy stopping (a second Ctrl-C can cut a slow stop short). It never blocks signals: every
// thread of the process, started before or after, may take the signal. One instance at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace ajet {

class StopSignals {
 public:
  // Installs the handlers and starts the thread. Throws Error(kFailedPrecondition) while another
  // StopSignals exists, Error(kIo) when the pipe or a handler cannot be made.
  explicit StopSignals(std::function<void(int signal, int nth)> on_signal);
  // Restores the dispositions found at construction, then ends the thread (a call in progress
  // finishes first). Never call it from `on_signal`.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "SIGINT", "SIGTERM", "SIGHUP"; "signal N" for any other.
std::string stop_signal_name(int signal);

}  // namespace ajet
