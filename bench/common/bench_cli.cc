#include "bench_cli.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "cli/cli_main.h"
#include "common/time_text.h"

namespace ajet::bench {

BenchCli::BenchCli(std::string program, std::string description)
    : program_(std::move(program)), app_(std::move(description), program_) {
  app_.add_flag("--smoke", smoke_,
                "A seconds-long run that checks the program works; appends nothing");
  app_.add_flag("--no-append", no_append_,
                "Print the table without adding it to docs/benchmarks.md");
}

std::optional<int> BenchCli::parse(int argc, char** argv) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return apps::report_parse_error(app_, e, program_.c_str(), argc, argv);
  }
  return std::nullopt;
}

void append_to_benchmarks(const std::string& title, const std::string& body) {
  const std::string path = std::string(AJET_SOURCE_DIR) + "/docs/benchmarks.md";
  std::ofstream out(path, std::ios::app);
  out << "\n## " << title << ", " << local_date_text() << "\n\n" << body;
  out.flush();
  if (!out) throw std::runtime_error("could not append to " + path);
  std::printf("appended to docs/benchmarks.md\n");
}

std::string load_average_text() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one.empty() ? "unknown" : one + " " + five + " " + fifteen;
}

CommandOutput run_command(const std::string& command) {
  CommandOutput result;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return result;
  char buf[16384];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) result.text.append(buf, n);
  const int status = ::pclose(p);
  if (status == -1) return result;
  result.exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                     : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                           : -1;
  return result;
}

std::string capture(const std::string& command) {
  CommandOutput out = run_command(command);
  if (out.exit_code != 0) {
    throw std::runtime_error("'" + command + "' failed (exit " + std::to_string(out.exit_code) +
                             "):\n" + out.text);
  }
  return std::move(out.text);
}

}  // namespace ajet::bench
