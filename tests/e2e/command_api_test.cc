// The command API of the real ajet-swarm without a running engine: status, config validation,
// claims outside ROLLING, unknown episodes, the admin token, size limits, forged keys, and
// sync_train_code's archive checks. Fast: no engine process is started.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"
#include "swarm/route_table.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class CommandApiTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}, std::string token = "") {
    Fixture f = fixture(false);
    model_ = f.tokenizer;
    swarm_ = std::make_unique<SwarmProcess>(SwarmProcess::Options{
        dir_ / "server", bin("ajet-echo-engine"), std::move(token), std::move(extra)});
    api_ = std::make_unique<Api>(swarm_->url());
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(CommandApiTest, HealthStatusAndExperimentDirWhileOffline) {
  start();
  auto health = curl("GET", swarm_->url() + "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json(), Json({{"status", "ok"}}));
  Json status = api_->status();
  EXPECT_EQ(status["engine_status"], "ENGINE.OFFLINE");
  EXPECT_EQ(status["global_step"], 0);
  EXPECT_TRUE(status.contains("engine_status_detail"));
  EXPECT_TRUE(api_->get("/get_server_experiment_dir").json()["server_experiment_dir"].is_null());
  Json pool = api_->get("/get_current_batch_rollout_pool_information").json();
  EXPECT_EQ(pool["engine_status"], "ENGINE.OFFLINE");
  EXPECT_EQ(pool["completed_episodes"], 0);
  EXPECT_TRUE(api_->post("/get_episode_buffer", Json::object()).json()["buffer"].empty());
  EXPECT_TRUE(api_->get("/get_verbose_logs").json()["entries"].is_array());
  auto unknown = curl("GET", swarm_->url() + "/no_such_endpoint");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_TRUE(unknown.json()["error"].is_object());
}

TEST_F(CommandApiTest, SyncTrainConfigNamesTheBadKey) {
  start();
  auto r = api_->post("/sync_train_config",
                      Json{{"yaml_as_string", "ajet:\n  rollout:\n    num_repeat: lots\n"}});
  EXPECT_EQ(r.status, 400);
  Json body = r.json();
  EXPECT_THAT(body["error"]["message"].get<std::string>(), HasSubstr("ajet.rollout.num_repeat"));
  EXPECT_THAT(body["detail"].get<std::string>(), HasSubstr("ajet.rollout.num_repeat"));
  EXPECT_EQ(body["success"], false);

  r = api_->post("/sync_train_config", Json{{"yaml_as_string", "ajet: [unclosed\n"}});
  EXPECT_EQ(r.status, 400) << r.body;
  r = api_->post("/sync_train_config", Json{{"yaml", "x"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("yaml_as_string"));
  r = api_->post("/sync_train_config",
                 Json{{"yaml_as_string", config_yaml(model_, "  backbone: warp_drive\n")}});
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("warp_drive"));

  r = api_->post("/sync_train_config",
                 Json{{"yaml_as_string", config_yaml(model_, "  no_such_key: 1\n")}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["success"], true);
  EXPECT_THAT(r.json()["warnings"].dump(), HasSubstr("ajet.no_such_key"));
  EXPECT_THAT(r.json()["warnings"].dump(),
              HasSubstr("sync_train_config yaml_as_string:"));  // no file named
}

// A client that read the config from a file names it ("source"): the warnings and errors point into
// the user's file, not at "sync_train_config yaml_as_string:LINE".
TEST_F(CommandApiTest, SyncTrainConfigNamesTheClientsFile) {
  start();
  auto r = api_->post("/sync_train_config",
                      Json{{"yaml_as_string", config_yaml(model_, "  no_such_key: 1\n")},
                           {"source", "configs/mine.yaml"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string warnings = r.json()["warnings"].dump();
  EXPECT_THAT(warnings, HasSubstr("configs/mine.yaml:"));
  EXPECT_THAT(warnings, ::testing::Not(HasSubstr("yaml_as_string")));
  r = api_->post("/sync_train_config",
                 Json{{"yaml_as_string", "ajet:\n  rollout:\n    num_repeat: lots\n"},
                      {"source", "configs/mine.yaml"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("configs/mine.yaml:3"));
  for (const Json& bad : {Json(3), Json("a\nb"), Json(std::string(600, 'x'))}) {
    r = api_->post("/sync_train_config",
                   Json{{"yaml_as_string", config_yaml(model_)}, {"source", bad}});
    EXPECT_EQ(r.status, 400) << bad.dump();
    EXPECT_THAT(r.body, HasSubstr("'source'"));
  }
}

// Upstream's SwarmClient.sync_train_config(AgentJetJob(...)) body: the whole merged swarm default,
// with a hub model id. Accepted, with warnings that name what is not used and what start_engine
// needs.
TEST_F(CommandApiTest, SyncTrainConfigAcceptsUpstreamsWholeJobWithWarnings) {
  start();
  const std::string yaml = read_file(source("tests/config/data/upstream_swarm_job.yaml"));
  auto r = api_->post("/sync_train_config", Json{{"yaml_as_string", yaml}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string warnings = r.json()["warnings"].dump();
  EXPECT_THAT(warnings, HasSubstr("unknown key 'actor_rollout_ref'"));
  // The task reader and judge are the clients' keys (they read them from the config they sync).
  EXPECT_THAT(warnings, ::testing::Not(HasSubstr("ajet.task_judge")));
  EXPECT_THAT(warnings, ::testing::Not(HasSubstr("ajet.task_reader")));
  EXPECT_THAT(warnings, HasSubstr("'Qwen/Qwen2.5-7B-Instruct' looks like a Hugging Face hub id"));
  EXPECT_THAT(warnings, HasSubstr("cannot download"));
  // With a local model directory the model warning goes.
  std::string local = yaml;
  const std::string hub = "path: Qwen/Qwen2.5-7B-Instruct";
  local.replace(local.find(hub), hub.size(), "path: " + model_.string());
  r = api_->post("/sync_train_config", Json{{"yaml_as_string", local}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.json()["warnings"].dump(), ::testing::Not(HasSubstr("hub id")));
}

TEST_F(CommandApiTest, ClaimOutsideRollingSaysWhatToWaitFor) {
  start();
  Json claim = api_->claim("client-a");
  EXPECT_EQ(claim["success"], false);
  EXPECT_THAT(claim["fail_cause"].get<std::string>(), HasSubstr("ENGINE.OFFLINE"));
  EXPECT_EQ(claim["client_uuid"], "client-a");
  auto bad = api_->post("/claim_episode", Json{{"client_uuid", "c"}, {"episode_type", "exam"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("episode_type"));
  auto missing = api_->post("/begin_episode", Json{{"episode_type", "train"}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_THAT(missing.body, HasSubstr("client_uuid"));
}

// Episode commands need the episode's key (or the admin token): without one, an unknown episode is
// a 401 naming what to send, from the request's header, before its body is read (a body that would
// not parse is a 401 too). With the compatibility switch (--allow-keyless-episode-commands) a body
// that does not parse is a 400, an unknown episode's end is a 400 and an abort succeeds, as
// upstream.
TEST_F(CommandApiTest, EndOfUnknownEpisodeNeedsAKeyAndAbortAlwaysSucceedsWithout) {
  start();
  auto r = api_->end("client-a", "0123456789abcdef0123456789abcdef", "task", 1.0);
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_THAT(r.body, HasSubstr("Authorization: Bearer"));
  const Json no_reward_body = {{"client_uuid", "c"},
                               {"episode_uuid", "e"},
                               {"task_id", "t"},
                               {"workflow_output", {{"metadata", {{"task_id", "t"}}}}}};
  EXPECT_EQ(api_->post("/end_episode", no_reward_body).status, 401);
  EXPECT_EQ(
      api_->post("/abort_episode", Json{{"client_uuid", "c"}, {"episode_uuid", "nope"}}).status,
      401);
  swarm_.reset();
  start({"--allow-keyless-episode-commands"});
  auto no_reward = api_->post("/end_episode", no_reward_body);
  EXPECT_EQ(no_reward.status, 400);
  EXPECT_THAT(no_reward.body, HasSubstr("reward"));
  r = api_->end("client-a", "0123456789abcdef0123456789abcdef", "task", 1.0);
  EXPECT_EQ(r.status, 400) << r.body;
  auto abort = api_->post("/abort_episode", Json{{"client_uuid", "c"}, {"episode_uuid", "nope"}});
  EXPECT_EQ(abort.status, 200);
  EXPECT_EQ(abort.json()["success"], true);
  auto cont =
      api_->post("/can_continue_episode", Json{{"client_uuid", "c"}, {"episode_uuid", "nope"}});
  EXPECT_EQ(cont.json()["can_continue"], false);
  auto agree = api_->post("/agree_sync_weight", Json{{"client_uuid", "c"}});
  EXPECT_EQ(agree.status, 200);
  EXPECT_EQ(agree.json()["success"], false);
  EXPECT_FALSE(agree.json()["failure_reason"].get<std::string>().empty());
  auto replay = api_->post("/replay_latest_llm_call", Json::object());
  EXPECT_EQ(replay.status, 404);
}

TEST_F(CommandApiTest, AdminTokenGuardsTheEndpointsThatChangeTheServer) {
  start({}, "s3cret-token");
  const std::string yaml = config_yaml(model_);
  for (const std::string path :
       {"/sync_train_config", "/start_engine", "/stop_engine", "/sync_train_code"}) {
    auto none = api_->post(path, Json{{"yaml_as_string", yaml}});
    EXPECT_EQ(none.status, 401) << path << ": " << none.body;
    EXPECT_THAT(none.body, HasSubstr("admin token"));
    auto wrong =
        api_->post(path, Json{{"yaml_as_string", yaml}}, {{"Authorization", "Bearer nope"}});
    EXPECT_EQ(wrong.status, 401) << path;
  }
  auto ep = curl("GET", swarm_->url() + "/episodes/0123456789abcdef0123456789abcdef");
  EXPECT_EQ(ep.status, 401);
  // The client verbs need no token.
  EXPECT_EQ(api_->claim("c")["success"], false);
  auto ok = curl("POST", swarm_->url() + "/sync_train_config",
                 Json{{"yaml_as_string", yaml}}.dump(), {"Authorization: Bearer s3cret-token"});
  EXPECT_EQ(ok.status, 200) << ok.body;
  auto ep_ok = curl("GET", swarm_->url() + "/episodes/0123456789abcdef0123456789abcdef", "",
                    {"Authorization: Bearer s3cret-token"});
  EXPECT_EQ(ep_ok.status, 404) << ep_ok.body;
}

TEST_F(CommandApiTest, OversizeBodiesGet413NamingTheLimit) {
  start({"--max-body-mb", "0.0625", "--max-json-mb", "0.015625"});  // 64 KiB any body, 16 KiB JSON
  std::string padding(20 * 1024, 'x');
  auto json_too_big = api_->post("/claim_episode", Json{{"client_uuid", "c"}, {"pad", padding}});
  EXPECT_EQ(json_too_big.status, 413);
  EXPECT_THAT(json_too_big.body, HasSubstr("16 KiB"));
  const fs::path big = dir_ / "big.bin";
  write_file_atomic(big, std::string(100 * 1024, 'z'));
  auto too_big = curl("POST", swarm_->url() + "/sync_train_code", "",
                      {"Content-Type: application/zip"}, big.string());
  EXPECT_EQ(too_big.status, 413) << too_big.body;
  EXPECT_THAT(too_big.body, HasSubstr("65536"));
  EXPECT_EQ(curl("GET", swarm_->url() + "/health").status, 200);  // still serving
}

TEST_F(CommandApiTest, ForgedOrMissingEpisodeKeysGet401) {
  start();
  for (const std::string& key : std::vector<std::string>{
           "", "sk-ajet-not-base64!!", "sk-ajet-eyJhZ2VudF9uYW1lIjoieCJ9", "sk-live-123"}) {
    std::vector<std::string> headers;
    if (!key.empty()) headers.push_back("Authorization: Bearer " + key);
    auto models = curl("GET", swarm_->url() + "/v1/models", "", headers);
    EXPECT_EQ(models.status, 401) << key << ": " << models.body;
    auto chat =
        curl("POST", swarm_->url() + "/v1/chat/completions", user_chat("hi").dump(), headers);
    EXPECT_EQ(chat.status, 401) << key;
    EXPECT_EQ(chat.json()["error"]["type"], "authentication_error");
  }
}

TEST_F(CommandApiTest, SyncTrainCodeRejectsUnsafeArchives) {
  start();
  const fs::path server_dir = dir_ / "server";
  struct Case {
    std::string name;
    std::vector<ZipMember> members;
    std::string expect;
  };
  const std::string cmake = "cmake_minimum_required(VERSION 3.20)\nproject(x CXX)\n";
  std::vector<Case> cases = {
      {"dot-dot", {{"CMakeLists.txt", cmake}, {"../escaped.txt", "boom"}}, ".."},
      {"nested dot-dot", {{"CMakeLists.txt", cmake}, {"src/../../escaped.txt", "boom"}}, ".."},
      {"absolute", {{"CMakeLists.txt", cmake}, {"/tmp/ajet_e2e_absolute.txt", "boom"}}, "absolute"},
      {"symlink", {{"CMakeLists.txt", cmake}, {"link", "/etc/passwd", 0120777}}, "link"},
      {"no CMakeLists", {{"README.md", "hello"}}, "CMakeLists.txt"},
  };
  for (const auto& c : cases) {
    const fs::path zip = dir_ / "archive.zip";
    write_file_atomic(zip, make_zip(c.members));
    auto r = curl("POST", swarm_->url() + "/sync_train_code", "", {"Content-Type: application/zip"},
                  zip.string());
    EXPECT_EQ(r.status, 400) << c.name << ": " << r.body;
    EXPECT_THAT(r.body, HasSubstr(c.expect)) << c.name;
  }
  auto not_zip = api_->post("/sync_train_code", Json{{"hello", "world"}});
  EXPECT_EQ(not_zip.status, 400);
  EXPECT_THAT(not_zip.body, HasSubstr("not a zip"));
  EXPECT_FALSE(fs::exists(server_dir / "escaped.txt"));
  EXPECT_FALSE(fs::exists(server_dir / "synced_code" / "escaped.txt"));
  EXPECT_FALSE(fs::exists("/tmp/ajet_e2e_absolute.txt"));
  // A rejected archive leaves no directory behind.
  if (fs::exists(server_dir / "synced_code")) {
    EXPECT_TRUE(fs::is_empty(server_dir / "synced_code"));
  }

  const fs::path zip = dir_ / "good.zip";
  write_file_atomic(
      zip, make_zip({{"CMakeLists.txt", cmake}, {"src/a.cc", "int main() { return 0; }\n"}}));
  auto ok = curl("POST", swarm_->url() + "/sync_train_code", "", {"Content-Type: application/zip"},
                 zip.string());
  ASSERT_EQ(ok.status, 200) << ok.body;
  fs::path root = ok.json()["temp_ajet_code_path"].get<std::string>();
  EXPECT_TRUE(fs::exists(root / "src/a.cc"));
  EXPECT_EQ(ok.json()["files"], 2);
}

// Every row of the route table (src/swarm/route_table.cc) is served with its method, and asks for
// what its auth column says: with an admin token set, a request with no credential gets 401 exactly
// on the admin, episode command and episode key routes.
TEST_F(CommandApiTest, EveryRouteOfTheTableIsServedWithItsAuth) {
  start({}, "route-table-token");
  for (const swarm::Route& route : swarm::route_table()) {
    std::string path(route.path);
    if (auto at = path.find("{file}"); at != std::string::npos) path.replace(at, 6, "index.html");
    if (auto at = path.find("{episode_uuid}"); at != std::string::npos)
      path.replace(at, 14, "no-such-episode");
    const CurlResult r = curl(std::string(route.method), swarm_->url() + path);
    const std::string what =
        std::string(route.method) + " " + std::string(route.path) + ": " + r.body;
    EXPECT_NE(r.status, 404) << what;
    EXPECT_NE(r.status, 405) << what;
    if (route.auth == swarm::RouteAuth::kNone) {
      EXPECT_NE(r.status, 401) << what;
    } else {
      EXPECT_EQ(r.status, 401) << what;
    }
  }
}

}  // namespace
}  // namespace ajet::e2e
