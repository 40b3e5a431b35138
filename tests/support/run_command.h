// Runs a shell command line for a test and keeps what it printed on stdout. Header-only.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace ajet::test_support {

struct CommandResult {
  int exit_code =
      -1;  // the exit status; 128 + N after signal N, as a shell reports it; -1: not started
  std::string out;  // stdout (add 2>&1 to the command line for stderr too)
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status == -1) return r;
  r.exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                      : -1;
  return r;
}

}  // namespace ajet::test_support
