#include <gtest/gtest.h>

#include "common/error.h"
#include "episodes/commands.h"
#include "episodes/verbose_log.h"

namespace ajet::episodes {
namespace {

std::string parse_error(const char* body) {
  try {
    EndRequest::from_json(Json::parse(body));
  } catch (const Error& e) {
    EXPECT_EQ(http_status_for(e.code()), 400);
    return e.what();
  }
  ADD_FAILURE() << "accepted " << body;
  return "";
}

TEST(ClaimRequestParsing, DefaultsAndThrottlePolicy) {
  ClaimRequest r = ClaimRequest::from_json(Json::parse(R"({"client_uuid": "c1"})"));
  EXPECT_EQ(r.episode_type, "train");
  EXPECT_DOUBLE_EQ(r.discard_episode_timeout, 240.0);
  EXPECT_FALSE(r.throttle_policy.has_value());
  r = ClaimRequest::from_json(Json::parse(
      R"({"client_uuid": "c1", "episode_type": "eval", "discard_episode_timeout": 30,
          "throttle_policy": {"ratio": 2, "expected_batch_size": 8, "expected_num_repeat": 4, "current_task_id": "t9"}})"));
  EXPECT_EQ(r.episode_type, "eval");
  ASSERT_TRUE(r.throttle_policy);
  EXPECT_DOUBLE_EQ(r.throttle_policy->ratio, 2);
  EXPECT_EQ(r.throttle_policy->expected_batch_size, 8);
  EXPECT_EQ(r.throttle_policy->current_task_id, "t9");
  EXPECT_THROW(ClaimRequest::from_json(Json::parse(R"({"episode_type": "train"})")), Error);
  EXPECT_THROW(ClaimRequest::from_json(
                   Json::parse(R"({"client_uuid": "c", "discard_episode_timeout": -1})")),
               Error);
  EXPECT_THROW(
      ClaimRequest::from_json(Json::parse(R"({"client_uuid": "c", "throttle_policy": 3})")), Error);
}

TEST(EndRequestParsing, TaskIdRulesAndReward) {
  EndRequest r = EndRequest::from_json(Json::parse(
      R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "t1",
          "workflow_output": {"reward": 0.5, "is_success": true, "metadata": {"task_id": "t1", "k": 1}}})"));
  EXPECT_EQ(r.task_id, "t1");
  EXPECT_DOUBLE_EQ(r.workflow_output.reward, 0.5);
  EXPECT_EQ(r.workflow_output.is_success, true);
  EXPECT_EQ(r.workflow_output.metadata["k"], 1);
  EXPECT_TRUE(r.declare_client_active);
  // Either place alone is enough; the other is filled in.
  r = EndRequest::from_json(Json::parse(
      R"({"client_uuid": "c", "episode_uuid": "e", "workflow_output": {"reward": 1, "metadata": {"task_id": "t2"}}})"));
  EXPECT_EQ(r.task_id, "t2");
  r = EndRequest::from_json(Json::parse(R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "",
                                            "workflow_output": {"reward": 1}})"));
  EXPECT_EQ(r.task_id, "");  // upstream allows an empty task id: one big group
  EXPECT_EQ(r.workflow_output.metadata["task_id"], "");

  std::string msg = parse_error(R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "t1",
                                    "workflow_output": {"reward": 1, "metadata": {"task_id": "t2"}}})");
  EXPECT_NE(msg.find("task_id 't1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("workflow_output.metadata.task_id 't2'"), std::string::npos) << msg;
  msg =
      parse_error(R"({"client_uuid": "c", "episode_uuid": "e", "workflow_output": {"reward": 1}})");
  EXPECT_NE(msg.find("task_id is required"), std::string::npos) << msg;
  msg = parse_error(
      R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "t", "workflow_output": {}})");
  EXPECT_NE(msg.find("workflow_output.reward is required"), std::string::npos) << msg;
  msg = parse_error(
      R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "t", "workflow_output": {"reward": [1, 0]}})");
  EXPECT_NE(msg.find("step rewards"), std::string::npos) << msg;
  msg = parse_error(
      R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "t", "workflow_output": {"reward": "1"}})");
  EXPECT_NE(msg.find("'reward' must be a number"), std::string::npos) << msg;
  msg = parse_error(R"({"client_uuid": "c", "task_id": "t", "workflow_output": {"reward": 1}})");
  EXPECT_NE(msg.find("episode_uuid"), std::string::npos) << msg;
  msg = parse_error(R"({"client_uuid": "c", "episode_uuid": "e", "task_id": "t",
                        "workflow_output": {"reward": 1, "metadata": {"ajet_group": {"group_id": 7}}}})");
  EXPECT_NE(msg.find("ajet_group is reserved"), std::string::npos) << msg;
}

// Ids are copied into logs, the store and the pool information: over their limit they are refused,
// naming the field, before anything keeps them.
TEST(CommandParsing, OverlongIdsAreRefusedNamingTheField) {
  const std::string long_id(kMaxIdBytes + 1, 'a');
  const std::string fits(kMaxIdBytes, 'a');
  EXPECT_EQ(ClaimRequest::from_json(Json{{"client_uuid", fits}}).client_uuid, fits);
  auto refused = [](auto parse, const std::string& field) {
    try {
      parse();
      ADD_FAILURE() << field << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(http_status_for(e.code()), 400);
      EXPECT_NE(std::string(e.what()).find("'" + field + "' is "), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 400u) << "the message quotes the id";
    }
  };
  refused([&] { ClaimRequest::from_json(Json{{"client_uuid", long_id}}); }, "client_uuid");
  refused(
      [&] {
        AbortRequest::from_json(Json{{"client_uuid", long_id}, {"episode_uuid", "e"}});
      },
      "client_uuid");
  refused([&] { AbortRequest::from_json(Json{{"episode_uuid", long_id}}); }, "episode_uuid");
  EXPECT_EQ(AbortRequest::from_json(Json{{"episode_uuid", "e"}}).cause, "unspecified");
  EXPECT_EQ(
      AbortRequest::from_json(Json{{"episode_uuid", "e"}, {"cause", "verifier_timeout"}}).cause,
      "verifier_timeout");
  for (const char* bad : {"", "Verifier", "a-b", "a b", "x\n"}) {
    EXPECT_THROW(AbortRequest::from_json(Json{{"episode_uuid", "e"}, {"cause", bad}}), Error)
        << bad;
  }
  EXPECT_THROW(
      AbortRequest::from_json(Json{{"episode_uuid", "e"}, {"cause", std::string(49, 'a')}}), Error);
  EXPECT_NO_THROW(
      AbortRequest::from_json(Json{{"episode_uuid", "e"}, {"cause", std::string(48, 'a')}}));
  refused(
      [&] {
        EpisodeRef::from_json(Json{{"client_uuid", "c"}, {"episode_uuid", long_id}},
                              "commit_episode", true);
      },
      "episode_uuid");
  const Json out = Json{{"reward", 1}};
  refused(
      [&] {
        EndRequest::from_json(Json{{"client_uuid", "c"},
                                   {"episode_uuid", "e"},
                                   {"task_id", std::string(kMaxTaskIdBytes + 1, 't')},
                                   {"workflow_output", out}});
      },
      "task_id");
  EXPECT_EQ(EndRequest::from_json(Json{{"client_uuid", "c"},
                                       {"episode_uuid", "e"},
                                       {"task_id", std::string(kMaxTaskIdBytes, 't')},
                                       {"workflow_output", out}})
                .task_id.size(),
            kMaxTaskIdBytes);
  refused(
      [&] {
        ClaimRequest::from_json(Json{
            {"client_uuid", "c"},
            {"throttle_policy", {{"current_task_id", std::string(kMaxTaskIdBytes + 1, 't')}}}});
      },
      "current_task_id");
}

// Lines quote what requests said: each is kept to kMaxMessageBytes, cut on a UTF-8 character
// boundary so that GET /get_verbose_logs can still dump them.
TEST(VerboseLogLines, LongLinesAreCutOnACharacterBoundary) {
  VerboseLog log;
  const size_t limit = VerboseLog::kMaxMessageBytes;
  log.add("t", std::string(limit - 1, 'a') + "\xC3\xA9" + std::string(100, 'b'),
          false);  // é straddles the limit
  const Json dumped = Json::parse(log.to_json().dump());
  const std::string line = dumped["entries"][0]["message"].get<std::string>();
  EXPECT_EQ(line.substr(0, limit - 1), std::string(limit - 1, 'a'));
  EXPECT_NE(line.find("(102 more bytes)"), std::string::npos) << line.substr(limit - 1);
  log.add("t", "short", false);
  EXPECT_EQ(log.to_json()["entries"][1]["message"], "short");
}

TEST(ResponseBodies, UpstreamFieldNames) {
  ClaimResponse c;
  c.client_uuid = "c";
  c.fail_cause = "x";
  EXPECT_EQ(c.to_json(), Json::parse(R"({"success": false, "client_uuid": "c", "episode_uuid": "",
      "openai_base_url": "", "openai_api_key": "", "fail_cause": "x", "global_step": 0})"));
  EXPECT_EQ((BoolResponse{true, ""}.to_json()),
            Json::parse(R"({"success": true, "failure_reason": ""})"));
}

}  // namespace
}  // namespace ajet::episodes
