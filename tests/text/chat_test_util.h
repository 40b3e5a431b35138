// Helpers shared by the chat-template tests: running a command, finding the npm reference packages
// (scripts/npm-deps.sh), and reading the test data.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <sys/wait.h>

#include "common/fs.h"

namespace ajet::text::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout only; stderr goes to the test log
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 65536> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::filesystem::path source_dir() { return AJET_SOURCE_DIR; }
inline std::filesystem::path data_dir() { return source_dir() / "tests" / "text" / "data"; }

// The node_modules directory with the reference packages, or nullopt with `why` set when node/npm
// are unavailable (the caller must GTEST_SKIP with that reason, loudly).
inline std::optional<std::filesystem::path> npm_node_modules(std::string* why) {
  if (run_command("command -v node >/dev/null 2>&1 && echo ok").out.find("ok") == std::string::npos) {
    *why = "node is not installed: cannot compare against the JS reference (install nodejs, see scripts/setup.sh)";
    return std::nullopt;
  }
  CommandResult r = run_command("bash '" + (source_dir() / "scripts" / "npm-deps.sh").string() + "'");
  if (r.exit_code != 0) {
    *why = "scripts/npm-deps.sh exited with " + std::to_string(r.exit_code) +
           " (npm or the registry unavailable): cannot compare against the JS reference";
    return std::nullopt;
  }
  std::string last = r.out;
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
  if (!std::filesystem::is_directory(last)) {
    *why = "scripts/npm-deps.sh printed '" + last + "', which is not a directory";
    return std::nullopt;
  }
  return std::filesystem::path(last);
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace ajet::text::testing
