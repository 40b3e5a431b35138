// Child processes of the front: output lines, exit statuses, SIGTERM-then-SIGKILL, exec failures.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "common/error.h"
#include "common/subprocess.h"

namespace ajet {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Subprocess, DeliversOutputLinesAndTheExitStatus) {
  std::vector<std::string> lines;
  Subprocess p = Subprocess::spawn(
      {{"/bin/sh", "-c", "echo one; echo two >&2; printf three; exit 3"}, {}, {}});
  EXPECT_GT(p.pid(), 0);
  int status = p.wait([&](std::string line) { lines.push_back(std::move(line)); });
  EXPECT_THAT(lines, ElementsAre("one", "two", "three"));
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(describe_exit(status), "exit code 3");
  EXPECT_FALSE(exited_cleanly(status));
}

TEST(Subprocess, EnvironmentAndWorkingDirectory) {
  CommandResult r =
      run_command({{"sh", "-c", "echo $AJET_TEST_VAR; pwd"}, {{"AJET_TEST_VAR", "hello"}}, "/tmp"});
  EXPECT_TRUE(exited_cleanly(r.status));
  EXPECT_EQ(r.output, "hello\n/tmp\n");
}

TEST(Subprocess, TerminateEscalatesToSigkillAfterTheGrace) {
  // Ignores SIGTERM: terminate() must fall back to SIGKILL.
  Subprocess p = Subprocess::spawn(
      {{"/bin/sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"}, {}, {}});
  bool up = false;
  while (!up)
    p.wait_some(std::chrono::milliseconds(1000),
                [&](const std::string& l) { up = up || l == "up"; });
  int status = p.terminate(std::chrono::milliseconds(200));
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_THAT(describe_exit(status), HasSubstr("signal 9"));

  Subprocess q = Subprocess::spawn({{"/bin/sh", "-c", "echo up; exec sleep 30"}, {}, {}});
  up = false;
  while (!up)
    q.wait_some(std::chrono::milliseconds(1000),
                [&](const std::string& l) { up = up || l == "up"; });
  status = q.terminate(std::chrono::milliseconds(10'000));
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

// pipe_stdin: lines written reach the child in order, closing the input is its end of file, and a
// write to a child that is gone is false (no SIGPIPE: the test process would die of it).
TEST(Subprocess, StdinCarriesLinesAndEndOfFile) {
  SpawnOptions options{
      {"/bin/sh", "-c", "while read -r l; do echo \"got $l\"; done; echo eof"}, {}, {}};
  options.pipe_stdin = true;
  Subprocess p = Subprocess::spawn(options);
  EXPECT_TRUE(p.write_input("one\n"));
  EXPECT_TRUE(p.write_input("two\n"));
  p.close_input();
  std::vector<std::string> lines;
  EXPECT_TRUE(exited_cleanly(p.wait([&](std::string line) { lines.push_back(std::move(line)); })));
  EXPECT_THAT(lines, ElementsAre("got one", "got two", "eof"));

  options.argv = {"/bin/sh", "-c", "exit 0"};
  Subprocess q = Subprocess::spawn(options);
  q.wait();
  EXPECT_FALSE(
      q.write_input(std::string(1 << 20, 'x')));  // the reader is gone: EPIPE, not a signal

  Subprocess r = Subprocess::spawn({{"/bin/sh", "-c", "exit 0"}, {}, {}});
  EXPECT_FALSE(r.write_input("x\n"));  // without pipe_stdin there is nothing to write to
  r.wait();
}

TEST(Subprocess, TheChildInheritsNoDescriptorOfTheParent) {
  // Like a socket Asio or SQLite opened: no O_CLOEXEC.
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 3);
  const std::string probe =
      "[ -e /proc/$$/fd/" + std::to_string(fd) + " ] && echo leaked || echo closed";
  CommandResult r = run_command(SpawnOptions{{"sh", "-c", probe}, {}, {}});
  ::close(fd);
  EXPECT_EQ(r.output, "closed\n");
}

TEST(Subprocess, AProgramThatCannotRunIsAnErrorNamingIt) {
  try {
    Subprocess::spawn({{"/nonexistent/ajet-engine", "serve"}, {}, {}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/ajet-engine"));
  }
  EXPECT_THROW(Subprocess::spawn({{"/bin/true"}, {}, "/nonexistent-dir"}), Error);
}

TEST(Subprocess, RunCommandCanBeCancelled) {
  int polls = 0;
  CommandResult r = run_command({{"sleep", "30"}, {}, {}}, [&] { return ++polls > 2; });
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(exited_cleanly(r.status));
}

}  // namespace
}  // namespace ajet
