// The front's life cycle with ajet-echo-engine: SIGKILL and restart with the same store (nothing
// acknowledged is lost, claimed episodes and their keys survive, the engine comes back), an engine
// that crashes (marked, restarted, logged), stop_engine by engine_run, the supervisor giving up (an
// engine that exits while booting, one that never gets ready, one that keeps crashing on restart),
// and sync_train_code (the synced tree is built and its ajet-engine runs; a tree that does not
// compile leaves the previous engine running and says why).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = fixture(false).tokenizer; }
  void start(fs::path engine = bin("ajet-echo-engine")) {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", std::move(engine), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(LifecycleTest, SigkilledFrontRestartsWithNothingAcknowledgedLost) {
  start();
  api_->boot(config_yaml(
      model_, "  swarm_mode_sample_collection_method: rollout_until_finish_enough_episodes\n"));
  Json running = api_->claim("client-a", "train", 600);
  ASSERT_EQ(api_->chat(running["openai_api_key"], user_chat("second")).status, 200);
  Json finished = api_->claim("client-a");
  ASSERT_EQ(api_->chat(finished["openai_api_key"], user_chat("first")).status, 200);
  // Acknowledged: committed, and with it every store write queued before it (the running call).
  ASSERT_EQ(api_->end("client-a", finished["episode_uuid"], "task-1", 1.0).status, 200);
  const int64_t old_engine = api_->engine_pid();
  ASSERT_GT(old_engine, 0);
  const Json engine_run = api_->status()["engine_run"];
  ASSERT_TRUE(engine_run.is_string()) << api_->status().dump();

  swarm_->stop(SIGKILL);
  // The engine dies with the front (PR_SET_PDEATHSIG): no orphan keeps the model in memory.
  EXPECT_TRUE(eventually([&] { return process_gone(old_engine); }, 20s))
      << "engine " << old_engine << " survived";

  swarm_->start();
  api_ = std::make_unique<Api>(swarm_->url());
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  // The resumed engine is the same run's: a client that started it can still stop it by name.
  EXPECT_EQ(api_->status()["engine_run"], engine_run);
  Json pool = api_->get("/get_current_batch_rollout_pool_information?client_uuid=client-a").json();
  EXPECT_EQ(pool["completed_episodes"], 1) << pool.dump();
  EXPECT_EQ(pool["completed_tasks_details"]["task-1"][0], finished["episode_uuid"]);
  EXPECT_TRUE(pool["running_episode_details"].contains(running["episode_uuid"].get<std::string>()))
      << pool.dump();
  // The claimed episode's key still works, and its history continues (one sample after merging).
  Json turn2 = {{"messages", Json::array({{{"role", "user"}, {"content", "second"}},
                                          {{"role", "assistant"}, {"content", "second"}},
                                          {{"role", "user"}, {"content", "third"}}})}};
  auto r = api_->chat(running["openai_api_key"], turn2);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(api_->end("client-a", running["episode_uuid"], "task-1", 0.0).status, 200);
  auto episode = api_->get("/episodes/" + running["episode_uuid"].get<std::string>());
  ASSERT_EQ(episode.status, 200);
  EXPECT_EQ(episode.json()["calls"].size(), 2u);
  EXPECT_EQ(episode.json()["samples"].size(), 1u);
  // The finished episode's key stays refused after the restart.
  EXPECT_EQ(api_->chat(finished["openai_api_key"], user_chat("again")).status, 404);
}

TEST_F(LifecycleTest, CrashedEngineIsMarkedRestartedAndLogged) {
  start();
  api_->boot(config_yaml(model_));
  Json claim = api_->claim("client-a", "train", 600);
  const int64_t first = api_->engine_pid();
  ASSERT_GT(first, 0);
  const Json engine_run = api_->status()["engine_run"];
  ASSERT_EQ(::kill(pid_t(first), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] {
    int64_t now = api_->engine_pid();
    return api_->engine_status() == "ENGINE.ROLLING" && now > 0 && now != first;
  })) << api_->status().dump();
  std::string logs = api_->get("/get_verbose_logs").body;
  EXPECT_THAT(logs, HasSubstr("exited unexpectedly"));
  EXPECT_THAT(logs, HasSubstr("restarting"));
  EXPECT_THAT(logs, HasSubstr("killed by signal 9"));
  EXPECT_EQ(api_->status()["engine_run"], engine_run);  // restarted, not replaced
  // The claimed episode survived the restart.
  auto r = api_->chat(claim["openai_api_key"], user_chat("still here"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(api_->end("client-a", claim["episode_uuid"], "t", 1.0).status, 200);
}

// stop_engine {"engine_run": X} stops the engine start_engine X started, and no other: a client
// whose engine another client replaced cannot end the new one's training by stopping "its" engine
// late.
TEST_F(LifecycleTest, StopEngineWithAnEngineRunStopsOnlyThatStart) {
  start();
  const std::string yaml = config_yaml(model_);
  ASSERT_EQ(api_->post("/sync_train_config", Json{{"yaml_as_string", yaml}}).status, 200);
  auto r = api_->post("/start_engine", Json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string first = r.json().value("engine_run", "");
  ASSERT_FALSE(first.empty()) << r.body;
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  EXPECT_EQ(api_->status()["engine_run"], first);

  r = api_->post("/stop_engine", Json{{"engine_run", 7}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("'engine_run' must be the non-empty string start_engine answered"));
  r = api_->post("/stop_engine", Json{{"engine_run", "someone-else"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("is engine_run " + first + ", not someone-else"));
  EXPECT_THAT(r.body, HasSubstr("left running"));
  EXPECT_EQ(api_->engine_status(), "ENGINE.ROLLING");

  ASSERT_EQ(api_->post("/stop_engine", Json{{"engine_run", first}}).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }))
      << api_->status().dump();
  EXPECT_TRUE(api_->status()["engine_run"].is_null());
  // Nothing runs: a late stop of the first engine is nothing to refuse.
  EXPECT_EQ(api_->post("/stop_engine", Json{{"engine_run", first}}).status, 200);

  // Another client starts its own engine: the first client's late stop leaves it running.
  r = api_->post("/start_engine", Json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string second = r.json().value("engine_run", "");
  EXPECT_NE(second, first);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  EXPECT_EQ(api_->post("/stop_engine", Json{{"engine_run", first}}).status, 400);
  EXPECT_EQ(api_->engine_status(), "ENGINE.ROLLING");
  // Claims naming the first engine are refused too (409, code engine_replaced); the second's are
  // served.
  r = api_->post("/claim_episode", Json{{"client_uuid", "late"}, {"engine_run", first}});
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "engine_replaced") << r.body;
  EXPECT_THAT(r.body, HasSubstr("is engine_run " + second + " now, not " + first));
  r = api_->post("/claim_episode", Json{{"client_uuid", "late"}, {"engine_run", 1}});
  EXPECT_EQ(r.status, 400) << r.body;
  r = api_->post("/claim_episode", Json{{"client_uuid", "current"}, {"engine_run", second}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["success"], true) << r.body;
  // Without a name, stop_engine stops whatever runs (upstream's semantics).
  ASSERT_EQ(api_->post("/stop_engine", Json::object()).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }))
      << api_->status().dump();
}

// An engine executable written by the test: a shell script (made executable).
fs::path script_engine(const fs::path& dir, const std::string& body) {
  const fs::path path = dir / "engine.sh";
  write_file_atomic(path, "#!/bin/sh\n" + body);
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add);
  return path;
}

// The supervisor's ways of giving up, each ending in ENGINE.OFFLINE with the reason and the
// engine's last lines in the detail, with the front still serving.
TEST_F(LifecycleTest, AnEngineThatExitsWhileBootingEndsOfflineWithItsLastLines) {
  start(script_engine(dir_.path(), "echo 'fake engine: cannot read the weights' >&2\nexit 3\n"));
  ASSERT_EQ(api_->post("/sync_train_config", Json{{"yaml_as_string", config_yaml(model_)}}).status,
            200);
  ASSERT_EQ(api_->post("/start_engine", Json::object()).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }))
      << api_->status().dump();
  const std::string detail = api_->status()["engine_status_detail"];
  EXPECT_THAT(detail, HasSubstr("the engine failed to start (exit code 3)"));
  EXPECT_THAT(detail, HasSubstr("fake engine: cannot read the weights"));
  EXPECT_THAT(api_->get("/get_verbose_logs").body, HasSubstr("failed to start"));
  EXPECT_EQ(curl("GET", swarm_->url() + "/health").status, 200);
  // Nothing is left half-started: the config can be synced again.
  EXPECT_EQ(api_->post("/sync_train_config", Json{{"yaml_as_string", config_yaml(model_)}}).status,
            200);
}

TEST_F(LifecycleTest, AnEngineThatNeverGetsReadyIsStoppedAtTheBootTimeout) {
  const fs::path pid_file = dir_ / "engine.pid";
  swarm_ = std::make_unique<SwarmProcess>(SwarmProcess::Options{
      dir_ / "server",
      script_engine(dir_.path(), "echo $$ > " + pid_file.string() + "\nexec sleep 600\n"),
      "",
      {"--engine-boot-timeout", "1"}});
  api_ = std::make_unique<Api>(swarm_->url());
  ASSERT_EQ(api_->post("/sync_train_config", Json{{"yaml_as_string", config_yaml(model_)}}).status,
            200);
  ASSERT_EQ(api_->post("/start_engine", Json::object()).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }))
      << api_->status().dump();
  EXPECT_THAT(api_->status()["engine_status_detail"].get<std::string>(),
              HasSubstr("the engine failed to start (did not accept connections within 1 s)"));
  ASSERT_TRUE(fs::exists(pid_file));
  const pid_t engine = static_cast<pid_t>(std::stol(read_file(pid_file)));
  EXPECT_TRUE(eventually([&] { return process_gone(engine); }))
      << "the engine " << engine << " was left running";
}

TEST_F(LifecycleTest, AnEngineThatKeepsCrashingOnRestartIsGivenUp) {
  // Runs the echo engine once; every restart after that exits at once.
  const fs::path marker = dir_ / "started-once";
  start(script_engine(dir_.path(),
                      "if [ -e " + marker.string() +
                          " ]; then echo 'fake engine: crashed again' >&2; exit 4; fi\ntouch " +
                          marker.string() + "\nexec " + bin("ajet-echo-engine").string() +
                          " \"$@\"\n"));
  api_->boot(config_yaml(model_));
  const int64_t pid = api_->engine_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid_t(pid), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }, 60s))
      << api_->status().dump();
  const std::string detail = api_->status()["engine_status_detail"];
  EXPECT_THAT(detail, HasSubstr("the engine crashed and failed to restart 3 times (exit code 4)"));
  EXPECT_THAT(detail, HasSubstr("fake engine: crashed again"));
  EXPECT_THAT(detail, HasSubstr("giving up"));
  const std::string logs = api_->get("/get_verbose_logs").body;
  EXPECT_THAT(logs, HasSubstr("killed by signal 9"));  // the first crash, then the restarts
  EXPECT_THAT(logs, HasSubstr("restarting it from"));
  EXPECT_EQ(curl("GET", swarm_->url() + "/health").status, 200);
}

TEST_F(LifecycleTest, SyncedCodeIsBuiltAndItsEngineRunsAndABrokenTreeKeepsThePreviousOne) {
  start();
  const fs::path marker = dir_ / "built-engine-ran";
  const std::string cmake =
      "cmake_minimum_required(VERSION 3.20)\nproject(synced CXX)\nadd_executable(ajet-engine "
      "main.cc)\n"
      "set_target_properties(ajet-engine PROPERTIES RUNTIME_OUTPUT_DIRECTORY "
      "${CMAKE_BINARY_DIR}/bin)\n";
  const std::string main_cc =
      "#include <unistd.h>\n#include <fstream>\nint main(int, char** argv) {\n"
      "  std::ofstream(\"" +
      marker.string() +
      "\") << \"ran\\n\";\n"
      "  execv(\"" +
      bin("ajet-echo-engine").string() + "\", argv);\n  return 127;\n}\n";
  const fs::path zip = dir_ / "code.zip";
  write_file_atomic(zip, make_zip({{"CMakeLists.txt", cmake}, {"main.cc", main_cc}}));
  auto synced = curl("POST", swarm_->url() + "/sync_train_code", "",
                     {"Content-Type: application/zip"}, zip.string());
  ASSERT_EQ(synced.status, 200) << synced.body;
  api_->boot(config_yaml(model_));
  EXPECT_TRUE(fs::exists(marker)) << api_->status().dump();
  EXPECT_THAT(api_->status()["engine_status_detail"].get<std::string>(),
              HasSubstr("built from the synced code"));
  Json claim = api_->claim("client-a");
  EXPECT_EQ(api_->chat(claim["openai_api_key"], user_chat("from the synced engine")).status, 200);
  ASSERT_EQ(api_->post("/stop_engine", Json::object()).status, 200);
  // The build goes through ccache (scripts/setup.sh installs it), so the files a later upload
  // leaves unchanged are cache hits instead of a rebuild from scratch.
  std::string build_log;
  for (const auto& entry : fs::recursive_directory_iterator(dir_.path())) {
    if (entry.path().filename() == "engine-build.log") build_log = read_file(entry.path());
  }
  EXPECT_THAT(build_log, HasSubstr("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")) << "engine-build.log:\n"
                                                                            << build_log;

  // A tree that does not compile: the previous engine (the one just built) runs, and the status
  // says why.
  fs::remove(marker);
  write_file_atomic(
      zip, make_zip({{"CMakeLists.txt", cmake}, {"main.cc", "int main( { this is not C++ }\n"}}));
  synced = curl("POST", swarm_->url() + "/sync_train_code", "", {"Content-Type: application/zip"},
                zip.string());
  ASSERT_EQ(synced.status, 200) << synced.body;
  ASSERT_EQ(api_->post("/start_engine", Json::object()).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.ROLLING"; }))
      << api_->status().dump();
  std::string detail = api_->status()["engine_status_detail"];
  EXPECT_THAT(detail, HasSubstr("failed to build"));
  EXPECT_THAT(detail, HasSubstr("error"));
  EXPECT_THAT(detail, HasSubstr("main.cc"));
  EXPECT_TRUE(fs::exists(marker));  // the previously built engine ran again
  EXPECT_THAT(api_->get("/get_verbose_logs").body, HasSubstr("failed to build"));
}

}  // namespace
}  // namespace ajet::e2e
