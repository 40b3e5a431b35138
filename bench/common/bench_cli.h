// What every benchmark program shares: its command line (CLI11, with `--smoke` and `--no-append`
// always there, and the binaries' usage errors: exit 2, a message naming the flag, "did you mean")
// and the dated section it appends to docs/benchmarks.md. No libtorch.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ajet::bench {

class BenchCli {
 public:
  // `program` names the binary in messages; `description` heads --help.
  BenchCli(std::string program, std::string description);

  // Where the benchmark adds its own flags (app().add_option(...) checks types and ranges itself).
  CLI::App& app() { return app_; }

  // Parses the command line. nullopt: go on; otherwise main() returns the value (0 after --help, 2
  // after a usage error, which is printed with the nearest known flag).
  std::optional<int> parse(int argc, char** argv);

  bool smoke() const { return smoke_; }
  // Whether the run adds its table to docs/benchmarks.md: not with --smoke or --no-append.
  bool append() const { return !smoke_ && !no_append_; }
  const std::string& program() const { return program_; }

 private:
  std::string program_;
  CLI::App app_;
  bool smoke_ = false;
  bool no_append_ = false;
};

// Appends "\n## TITLE, DATE\n\nBODY" to the repository's docs/benchmarks.md (DATE: today, local
// time) and prints "appended to docs/benchmarks.md". Throws std::runtime_error naming the file when
// it cannot be written, so a run never reports a table it did not keep.
void append_to_benchmarks(const std::string& title, const std::string& body);

// "1.23 0.98 0.75": the 1, 5 and 15 minute load averages of /proc/loadavg ("unknown" when
// unreadable), which the tables print so a reader can tell a busy machine's run.
std::string load_average_text();

// What a shell command printed on stdout and how it ended: its exit status, 128 + N after signal N
// (as a shell reports it, and as the tests' run_command does), or -1 when it could not be started.
struct CommandOutput {
  std::string text;
  int exit_code = -1;
};
CommandOutput run_command(const std::string& command);

// run_command for a step the benchmark cannot do without: its stdout, or std::runtime_error naming
// the command, its status and what it printed when it fails.
std::string capture(const std::string& command);

}  // namespace ajet::bench
