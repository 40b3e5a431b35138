// What the three binaries say on the console, run as a user runs them (issue 41): --version gives
// the commit and build type as GET /version does; a usage error says what was wrong first (an
// unknown subcommand, also with --help, exits 2); a group command without a subcommand lists them;
// NO_COLOR takes the colour out of the log lines on a terminal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char* kBinaries[] = {"ajet", "ajet-swarm", "ajet-engine"};

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

Captured run(const std::string& program, const std::string& args) {
  return run_capture(shell_quote(bin(program).string()) + " " + args);
}

TEST(CliConsole, VersionGivesTheCommitAndBuildType) {
  std::string line;  // every binary of one build prints the same after its name
  for (const char* program : kBinaries) {
    Captured r = run(program, "--version");
    ASSERT_EQ(WEXITSTATUS(r.status), 0) << program << ": " << r.out;
    std::smatch m;
    const std::string out = first_line(r.out);
    const std::regex line_re(
        std::string(program) +
        R"( (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown), build type (\w+)\))");
    ASSERT_TRUE(std::regex_match(out, m, line_re)) << out;
    const std::string rest = out.substr(std::string(program).size());
    if (line.empty()) line = rest;
    EXPECT_EQ(rest, line) << program;
  }
}

TEST(CliConsole, AnUnknownSubcommandWithHelpIsAUsageError) {
  for (const char* program : kBinaries) {
    for (const std::string args : {"frobnicate --help", "frobnicate", "--help frobnicate"}) {
      Captured r = run(program, args);
      EXPECT_EQ(WEXITSTATUS(r.status), 2) << program << " " << args << ": " << r.out;
      EXPECT_EQ(
          first_line(r.out).rfind(std::string(program) + ": unknown subcommand 'frobnicate'", 0),
          0u)
          << program << " " << args << ": " << r.out;
      EXPECT_THAT(r.out, Not(HasSubstr("Options:"))) << "not the top-level help: " << r.out;
    }
  }
  Captured nested = run("ajet", "episode frobnicate --help");
  EXPECT_EQ(WEXITSTATUS(nested.status), 2) << nested.out;
  EXPECT_THAT(first_line(nested.out),
              HasSubstr("ajet episode: unknown subcommand 'frobnicate' (subcommands: list show)"));
  // The help of a real subcommand is still help.
  Captured help = run("ajet", "episode --help");
  EXPECT_EQ(WEXITSTATUS(help.status), 0) << help.out;
  EXPECT_THAT(help.out, HasSubstr("Subcommands:"));
}

TEST(CliConsole, TheClearMessageComesFirstThenTheHint) {
  Captured r = run("ajet", "tokenze");
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(first_line(r.out), "ajet: unknown subcommand 'tokenze'; did you mean tokenize?")
      << r.out;
  EXPECT_THAT(r.out,
              Not(HasSubstr("The following argument was not expected")));  // CLI11's raw text
  r = run("ajet", "--cnf x.yaml");
  EXPECT_EQ(first_line(r.out), "ajet: unknown option '--cnf'; did you mean --conf?") << r.out;
  r = run("ajet-swarm", "start --prot 0");
  EXPECT_EQ(first_line(r.out), "ajet-swarm start: unknown option '--prot'; did you mean --port?")
      << r.out;
  r = run("ajet", "episode lsit");
  EXPECT_EQ(first_line(r.out), "ajet episode: unknown subcommand 'lsit'; did you mean list?")
      << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("A subcommand is required")));
  r = run("ajet",
          "episode show");  // other usage errors: "error:" and CLI11's words, then where to look
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(first_line(r.out), "ajet episode show: error: uuid is required") << r.out;
  EXPECT_THAT(r.out, HasSubstr("Run 'ajet episode show --help' for the usage."));
}

TEST(CliConsole, AGroupWithoutASubcommandListsItsSubcommands) {
  struct Group {
    std::string program, args;
    std::vector<std::string> subcommands;
  };
  for (const Group& g :
       {Group{"ajet", "episode", {"list", "show"}}, Group{"ajet-swarm", "", {"start", "overwatch"}},
        Group{"ajet-engine", "", {"serve", "sft"}}, Group{"ajet", "", {"episode", "tasks"}}}) {
    Captured r = run(g.program, g.args);
    EXPECT_EQ(WEXITSTATUS(r.status), 2)
        << g.program << " " << g.args << ": " << r.out;  // as bare `ajet` always did
    EXPECT_THAT(r.out, HasSubstr("Subcommands:")) << g.program << " " << g.args;
    for (const std::string& sub : g.subcommands) {
      EXPECT_THAT(r.out, HasSubstr("\n  " + sub)) << g.program << " " << g.args << ": " << r.out;
    }
  }
}

// Under a terminal (script(1) gives one) the log lines are coloured; NO_COLOR=1 takes every colour
// code out. ajet-swarm logs an info line at start, then refuses the config (no model) and exits.
TEST(CliConsole, NoColorTakesTheColourOutOfLogLinesOnATerminal) {
  if (run_capture("command -v script").status != 0)
    GTEST_SKIP() << "SKIPPED: script(1) is not installed";
  ScratchDir dir;
  write_file_atomic(dir / "c.yaml", "ajet:\n  rollout: {num_repeat: 2}\n");
  const std::string start = shell_quote(bin("ajet-swarm").string()) + " start --port 0 --exp-dir " +
                            shell_quote((dir / "s").string()) + " --conf " +
                            shell_quote((dir / "c.yaml").string());
  auto on_terminal = [&](const std::string& env) {
    return run_capture("env " + env + " TERM=xterm script -qec " + shell_quote(start) +
                       " /dev/null");
  };
  Captured coloured = on_terminal("-u NO_COLOR");
  ASSERT_THAT(coloured.out, HasSubstr("restored from the store")) << coloured.out;
  EXPECT_THAT(coloured.out, HasSubstr("\x1b[")) << "a terminal gets colour";
  for (const std::string no_color : {"NO_COLOR=1", "NO_COLOR=yes"}) {
    Captured plain = on_terminal(no_color);
    ASSERT_THAT(plain.out, HasSubstr("restored from the store")) << plain.out;
    EXPECT_THAT(plain.out, Not(HasSubstr("\x1b["))) << no_color << ": " << plain.out;
  }
  Captured empty = on_terminal("NO_COLOR=");  // set but empty: colour stays (no-color.org)
  EXPECT_THAT(empty.out, HasSubstr("\x1b[")) << empty.out;
}

}  // namespace
}  // namespace ajet::e2e
