// The KV-pressure admission controller, reading by reading (no engine: the readings are what a
// replica's status reply says). The loop that polls real engines runs in the e2e tests.
#include "engine_control/admission.h"

#include <gtest/gtest.h>

namespace ajet::engine_control {
namespace {

std::optional<KvReading> at(double usage, int64_t preemptions = 0) {
  return KvReading{usage, preemptions, 0};
}

TEST(Admission, StartsAtThePoolSizeAndHoldsWhileTheCachesAreComfortable) {
  AdmissionController c;
  EXPECT_EQ(c.observe({at(0.2), at(0.5)}, 64), AdmissionDecision::kHold);
  EXPECT_EQ(c.cap(), 64);
  EXPECT_EQ(c.observe({at(0.8)}, 64), AdmissionDecision::kHold);  // between low and high
  EXPECT_EQ(c.cap(), 64);
}

TEST(Admission, TrimsMultiplicativelyUnderPressureAndGrowsBackAdditively) {
  AdmissionController c;
  c.observe({at(0.5)}, 64);
  // The fullest replica decides: one at 95 % trims, whatever the other says.
  EXPECT_EQ(c.observe({at(0.1), at(0.95)}, 64), AdmissionDecision::kTrim);
  EXPECT_EQ(c.cap(), 48);
  EXPECT_EQ(c.observe({at(0.1), at(0.95)}, 64), AdmissionDecision::kTrim);
  EXPECT_EQ(c.cap(), 36);
  // Usage falls below the low mark: +ceil(64 / 16) = 4 per reading, up to the pool size.
  EXPECT_EQ(c.observe({at(0.3), at(0.4)}, 64), AdmissionDecision::kGrow);
  EXPECT_EQ(c.cap(), 40);
  for (int i = 0; i < 10; ++i) c.observe({at(0.3), at(0.4)}, 64);
  EXPECT_EQ(c.cap(), 64);
  EXPECT_EQ(c.observe({at(0.3)}, 64), AdmissionDecision::kHold);
  const AdmissionFigures& f = c.figures();
  EXPECT_EQ(f.trims, 2);
  EXPECT_EQ(f.grows, 7);
  EXPECT_DOUBLE_EQ(f.usage, 0.3);
}

TEST(Admission, ANewPreemptionTrimsEvenAtLowUsageAndARestartedCounterIsNotOne) {
  AdmissionController c;
  c.observe({at(0.2, 5), at(0.2, 0)}, 32);  // the first reading sets the baseline of each replica
  EXPECT_EQ(c.cap(), 32);
  EXPECT_EQ(c.observe({at(0.2, 5), at(0.2, 1)}, 32), AdmissionDecision::kTrim);
  EXPECT_EQ(c.cap(), 24);
  // Replica 0 restarted: its counter starts from 0 again, and its 0 is no new preemption.
  EXPECT_EQ(c.observe({at(0.2, 0), at(0.2, 1)}, 32), AdmissionDecision::kGrow);
  EXPECT_EQ(c.observe({at(0.2, 2), at(0.2, 1)}, 32), AdmissionDecision::kTrim);
}

TEST(Admission, StaysBetweenTheFloorAndThePoolSize) {
  AdmissionOptions o;
  o.floor = 3;
  AdmissionController c(o);
  for (int i = 0; i < 20; ++i) c.observe({at(1.0)}, 16);
  EXPECT_EQ(c.cap(), 3);
  EXPECT_EQ(c.observe({at(1.0)}, 16), AdmissionDecision::kHold);  // already at the floor
  // The pool shrinks (a new config): the cap follows it down at once.
  for (int i = 0; i < 20; ++i) c.observe({at(0.1)}, 16);
  EXPECT_EQ(c.cap(), 16);
  c.observe({at(0.1)}, 8);
  EXPECT_EQ(c.cap(), 8);
  // A pool smaller than the floor: the pool wins.
  c.observe({at(1.0)}, 2);
  EXPECT_EQ(c.cap(), 2);
}

TEST(Admission, NoReadingChangesNothing) {
  AdmissionController c;
  c.observe({at(0.95)}, 64);
  const int64_t cap = c.cap();
  EXPECT_EQ(c.observe({std::nullopt, std::nullopt}, 64), AdmissionDecision::kHold);
  EXPECT_EQ(c.observe({}, 64), AdmissionDecision::kHold);
  EXPECT_EQ(c.cap(), cap);
}

TEST(Admission, ReadsAStatusReply) {
  const Json status = Json::parse(
      R"({"engine": {"free_blocks": 25, "total_blocks": 100, "preemptions": 3, "waiting": 2}})");
  const std::optional<KvReading> r = kv_reading(status);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->usage, 0.75);
  EXPECT_EQ(r->preemptions, 3);
  EXPECT_EQ(r->waiting, 2);
  EXPECT_FALSE(kv_reading(Json::parse(R"({"engine": {"free_blocks": 1}})")));
  EXPECT_FALSE(kv_reading(Json::parse(R"({"engine": {"free_blocks": 0, "total_blocks": 0}})")));
  EXPECT_FALSE(kv_reading(Json::parse(R"([1, 2])")));
}

}  // namespace
}  // namespace ajet::engine_control
