// StopSignals: real signals sent to this process reach the callback on its thread, counted, and the
// dispositions found before come back when it goes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/stop_signals.h"

namespace ajet {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// The callback's calls, waited for as events (the deadline only guards a broken build).
struct Received {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, int>> calls;  // (signal, nth)
  std::thread::id thread;

  void add(int signal, int nth) {
    std::lock_guard lock(mu);
    calls.emplace_back(signal, nth);
    thread = std::this_thread::get_id();
    cv.notify_all();
  }
  bool wait_for(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return calls.size() >= n; });
  }
};

sighandler_t current_handler(int signal) {
  struct sigaction now {};
  ::sigaction(signal, nullptr, &now);
  return now.sa_handler;
}

TEST(StopSignals, EachSignalReachesTheCallbackOnItsThreadCountedInOrder) {
  Received got;
  {
    StopSignals signals([&](int signal, int nth) { got.add(signal, nth); });
    ASSERT_EQ(::kill(::getpid(), SIGHUP), 0);
    ASSERT_TRUE(got.wait_for(1));
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
    ASSERT_TRUE(got.wait_for(2));
    ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
    ASSERT_TRUE(got.wait_for(3));
  }
  EXPECT_THAT(got.calls, ElementsAre(Pair(SIGHUP, 1), Pair(SIGTERM, 2), Pair(SIGINT, 3)));
  EXPECT_NE(got.thread, std::this_thread::get_id());
}

TEST(StopSignals, TheDispositionsFoundBeforeComeBackWhenItGoes) {
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  {
    StopSignals signals([](int, int) {});
    EXPECT_NE(current_handler(SIGINT), SIG_IGN);
    EXPECT_NE(current_handler(SIGHUP), SIG_IGN);
  }
  EXPECT_EQ(current_handler(SIGINT), SIG_IGN);
  EXPECT_EQ(current_handler(SIGHUP), SIG_IGN);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGHUP, SIG_DFL);
}

TEST(StopSignals, ASecondInstanceIsRefusedAndTheFirstKeepsWorking) {
  Received got;
  StopSignals first([&](int signal, int nth) { got.add(signal, nth); });
  try {
    StopSignals second([](int, int) {});
    ADD_FAILURE() << "a second StopSignals was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  }
  ASSERT_EQ(::kill(::getpid(), SIGHUP), 0);
  ASSERT_TRUE(got.wait_for(1));
  EXPECT_THAT(got.calls, ElementsAre(Pair(SIGHUP, 1)));
}

TEST(StopSignals, NamesTheStopSignals) {
  EXPECT_EQ(stop_signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(stop_signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(stop_signal_name(SIGHUP), "SIGHUP");
  EXPECT_EQ(stop_signal_name(SIGUSR1), "signal " + std::to_string(SIGUSR1));
}

}  // namespace
}  // namespace ajet
