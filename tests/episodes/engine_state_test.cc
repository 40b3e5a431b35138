#include <gtest/gtest.h>

#include "common/error.h"
#include "episodes/commands.h"
#include "episodes/engine_state.h"

namespace ajet::episodes {
namespace {

using S = EnginePhase;

TEST(EngineStatusNames, ExactWireStrings) {
  EXPECT_EQ(engine_phase_name(S::kOffline), "ENGINE.OFFLINE");
  EXPECT_EQ(engine_phase_name(S::kBooting), "ENGINE.BOOTING");
  EXPECT_EQ(engine_phase_name(S::kRolling), "ENGINE.ROLLING");
  EXPECT_EQ(engine_phase_name(S::kRollingPost), "ENGINE.ROLLING_POST");
  EXPECT_EQ(engine_phase_name(S::kWeightSyncing), "ENGINE.WEIGHT_SYNCING");
  EXPECT_EQ(engine_phase_name(S::kWeightExporting), "ENGINE.WEIGHT_EXPORTING");
  for (S s : {S::kOffline, S::kBooting, S::kRolling, S::kRollingPost, S::kWeightSyncing,
              S::kWeightExporting}) {
    EXPECT_EQ(parse_engine_phase(engine_phase_name(s)), s);
  }
  EXPECT_FALSE(parse_engine_phase("ENGINE.CANNOT_CONNECT").has_value());
}

TEST(EngineTransitions, TheDesignCycleAndNothingElse) {
  EXPECT_TRUE(transition_allowed(S::kOffline, S::kBooting));
  EXPECT_TRUE(transition_allowed(S::kBooting, S::kRolling));
  EXPECT_TRUE(transition_allowed(S::kRolling, S::kRollingPost));
  EXPECT_TRUE(transition_allowed(S::kRollingPost, S::kWeightSyncing));
  EXPECT_TRUE(transition_allowed(S::kWeightSyncing, S::kRolling));
  EXPECT_TRUE(transition_allowed(S::kRollingPost, S::kRolling));  // debug backbone
  EXPECT_TRUE(transition_allowed(S::kWeightSyncing, S::kWeightExporting));
  EXPECT_TRUE(transition_allowed(S::kWeightExporting, S::kWeightSyncing));
  for (S s : {S::kOffline, S::kBooting, S::kRolling, S::kRollingPost, S::kWeightSyncing,
              S::kWeightExporting}) {
    EXPECT_TRUE(transition_allowed(s, S::kOffline)) << engine_phase_name(s);  // stop_engine
  }
  EXPECT_FALSE(transition_allowed(S::kOffline, S::kRolling));
  EXPECT_FALSE(transition_allowed(S::kRolling, S::kWeightSyncing));
  EXPECT_FALSE(transition_allowed(S::kBooting, S::kRollingPost));
  EXPECT_FALSE(transition_allowed(S::kWeightSyncing, S::kRollingPost));
}

TEST(EngineState, TransitionsRecordBootingTimeAndRefuseIllegalMoves) {
  EngineState st;
  EXPECT_EQ(
      st.to_json(),
      Json::parse(
          R"({"engine_status":"ENGINE.OFFLINE","engine_status_detail":null,"global_step":0})"));
  st.transition(S::kBooting, 123.5, "loading model");
  EXPECT_EQ(st.booting_start_time(), 123.5);
  EXPECT_EQ(st.to_json()["engine_status_detail"], "loading model");
  try {
    st.transition(S::kWeightSyncing, 124, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_STREQ(e.what(), "illegal engine transition ENGINE.BOOTING -> ENGINE.WEIGHT_SYNCING");
  }
  st.transition(S::kRolling, 130, "");
  EXPECT_FALSE(st.booting_start_time().has_value());
  EXPECT_TRUE(st.to_json()["engine_status_detail"].is_null());
}

TEST(EngineAdvice, EachStatusSaysWhatToWaitFor) {
  EXPECT_TRUE(claims_allowed(S::kRolling));
  EXPECT_FALSE(claims_allowed(S::kRollingPost));
  EXPECT_TRUE(chat_allowed(S::kRollingPost));
  EXPECT_FALSE(chat_allowed(S::kWeightSyncing));
  EXPECT_EQ(claim_fail_cause(S::kWeightSyncing),
            "Engine not ready. Current status: [ENGINE.WEIGHT_SYNCING]. Engine is syncing weights. "
            "Try again (maybe 1 "
            "minute) later.");
  EXPECT_NE(claim_fail_cause(S::kOffline).find("start_engine"), std::string::npos);
  EXPECT_NE(claim_fail_cause(S::kBooting).find("fully booted"), std::string::npos);
  EXPECT_NE(chat_unavailable_message(S::kBooting).find("ENGINE.BOOTING"), std::string::npos);
}

TEST(Backbones, NamesAndUpstreamAliases) {
  EXPECT_EQ(parse_backbone("torch"), Backbone::kTorch);
  EXPECT_EQ(parse_backbone("verl"), Backbone::kTorch);
  EXPECT_EQ(parse_backbone("trinity"), Backbone::kAsync);
  EXPECT_EQ(parse_backbone("debug"), Backbone::kDebug);
  EXPECT_THROW(parse_backbone("jax"), Error);
}

TEST(HttpStatus, ProtocolMapping) {
  EXPECT_EQ(http_status_for(ErrorCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status_for(ErrorCode::kFailedPrecondition), 400);
  EXPECT_EQ(http_status_for(ErrorCode::kUnauthenticated), 401);
  EXPECT_EQ(http_status_for(ErrorCode::kPermissionDenied), 404);
  EXPECT_EQ(http_status_for(ErrorCode::kNotFound), 404);
  EXPECT_EQ(http_status_for(ErrorCode::kResourceExhausted), 413);
  EXPECT_EQ(http_status_for(ErrorCode::kUnavailable), 503);
  EXPECT_EQ(http_status_for(ErrorCode::kIo), 500);
}

}  // namespace
}  // namespace ajet::episodes
