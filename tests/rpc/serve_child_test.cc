// rpc::ServeChild with /bin/sh standing in for ajet-engine serve: the address from the ready line,
// an exit before it named with its code and output, and a child that never exits on its own stopped
// by the destructor.
#include "rpc/serve_child.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/error.h"
#include "support/scratch_dir.h"

namespace ajet::rpc {
namespace {

using ajet::test_support::ScratchDir;

TEST(ServeChild, ReturnsTheAddressOfTheReadyLineAndStopsTheChild) {
  const ScratchDir dir;
  pid_t pid = 0;
  {
    ServeChild child(
        {"/bin/sh", "-c",
         "echo starting; echo 'note' >&2; echo 'ajet-engine: ready on unix:/tmp/x.sock'; "
         "exec sleep 600"},
        dir / "ready.stderr");
    EXPECT_EQ(child.wait_ready(), "unix:/tmp/x.sock");
    EXPECT_EQ(child.address(), "unix:/tmp/x.sock");
    EXPECT_NE(child.stdout_text().find("starting"), std::string::npos);
    EXPECT_NE(child.stderr_text().find("note"), std::string::npos);
    pid = child.pid();
    ASSERT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_NE(::kill(pid, 0), 0);  // terminated and reaped by the destructor
}

TEST(ServeChild, AnExitBeforeTheReadyLineIsNamedWithItsCodeAndOutput) {
  const ScratchDir dir;
  ServeChild child({"/bin/sh", "-c", "echo partial; echo 'cannot load the model' >&2; exit 3"},
                   dir / "exit.stderr");
  try {
    child.wait_ready();
    FAIL() << "no ready line, yet wait_ready returned";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("it exited with code 3"), std::string::npos) << what;
    EXPECT_NE(what.find("partial"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot load the model"), std::string::npos) << what;
  }
  EXPECT_EQ(child.wait_exit(), 3);
}

TEST(ServeChild, SignalsAndExitCodes) {
  const ScratchDir dir;
  ServeChild child(
      {"/bin/sh", "-c", "echo 'ajet-engine: ready on tcp:127.0.0.1:1'; exec sleep 600"},
      dir / "signal.stderr");
  child.wait_ready();
  child.signal(SIGKILL);
  EXPECT_EQ(child.wait_exit(), 128 + SIGKILL);
  ServeChild missing({"/nonexistent/ajet-engine"}, dir / "missing.stderr");
  EXPECT_THROW(missing.wait_ready(), Error);
  EXPECT_EQ(missing.wait_exit(), 127);
}

}  // namespace
}  // namespace ajet::rpc
