#include "common/stop_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <thread>

#include "common/error.h"

namespace ajet {

namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr unsigned char kQuit = 0;  // not a signal number: tells the thread to end

// The write end of the live instance's pipe (-1: none), for the handler.
std::atomic<int> g_write_fd{-1};

void on_stop_signal(int signal) {
  const int saved = errno;
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal);
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

struct StopSignals::Impl {
  std::function<void(int, int)> on_signal;
  int read_fd = -1;
  int write_fd = -1;
  struct sigaction previous[std::size(kSignals)] = {};
  std::thread thread;

  void run() {
    int nth = 0;
    for (;;) {
      unsigned char byte = 0;
      const ssize_t n = ::read(read_fd, &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == kQuit) return;
      on_signal(int(byte), ++nth);
    }
  }
};

StopSignals::StopSignals(std::function<void(int signal, int nth)> on_signal)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.on_signal = std::move(on_signal);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail(ErrorCode::kIo, std::string("stop signals: cannot make a pipe: ") + std::strerror(errno));
  s.read_fd = fds[0];
  s.write_fd = fds[1];
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, s.write_fd)) {
    ::close(s.read_fd);
    ::close(s.write_fd);
    fail(ErrorCode::kFailedPrecondition, "stop signals: another StopSignals is installed");
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the process's other system calls go on as if nothing happened
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (::sigaction(kSignals[i], &action, &s.previous[i]) != 0) {
      const std::string why = std::strerror(errno);
      for (size_t j = 0; j < i; ++j) ::sigaction(kSignals[j], &s.previous[j], nullptr);
      g_write_fd.store(-1);
      ::close(s.read_fd);
      ::close(s.write_fd);
      fail(ErrorCode::kIo,
           "stop signals: cannot handle " + stop_signal_name(kSignals[i]) + ": " + why);
    }
  }
  s.thread = std::thread([&s] { s.run(); });
}

StopSignals::~StopSignals() {
  Impl& s = *impl_;
  for (size_t i = 0; i < std::size(kSignals); ++i)
    ::sigaction(kSignals[i], &s.previous[i], nullptr);
  g_write_fd.store(-1);
  const unsigned char quit = kQuit;
  while (::write(s.write_fd, &quit, 1) < 0 && errno == EINTR) {
  }
  s.thread.join();
  ::close(s.read_fd);
  ::close(s.write_fd);
}

std::string stop_signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace ajet
