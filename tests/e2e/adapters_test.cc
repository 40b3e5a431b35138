// Named LoRA adapters through the front (docs/protocol.md "Adapters"): the admin endpoints create,
// list, save and remove adapters on the running engine; a call names its adapter through "model"
// ("<served name>:<adapter>", or the adapter's bare name), /v1/models lists them, an unknown one is
// 404; the calls of a batch train the adapters they ran on, each on its own samples, and leave
// every other adapter as it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

// The pid of the ajet-engine whose command line names `dir` (the front's run directory), 0: none.
int64_t engine_pid_under(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline;
    try {
      cmdline = read_file(entry.path() / "cmdline");
    } catch (const std::exception&) {
      continue;  // it exited meanwhile
    }
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find("ajet-engine") != std::string::npos &&
        cmdline.find(dir.string()) != std::string::npos) {
      return std::stoll(pid);
    }
  }
  return 0;
}

Json adapter_entry(Api& api, const std::string& name) {
  Json list = api.get("/adapters").json();
  for (const Json& a : list["adapters"]) {
    if (a["name"] == name) return a;
  }
  return Json();
}

TEST(AdaptersTest, CallsNameAdaptersAndABatchTrainsTheOnesTheyRanOn) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", {}, "", {}});
  Api api(swarm.url());
  std::string yaml =
      config_yaml(model, "  trainer_common:\n    save_freq: 1\n    checkpoint_base_dir: " +
                             (dir / "ckpt").string() + "\n    optim:\n      lr: 0.01\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  api.boot(yaml);

  auto r = api.post("/adapters", Json{{"name", "solver"}, {"rank", 4}, {"alpha", 8}});
  ASSERT_EQ(r.status, 200) << r.body;
  r = api.post("/adapters", Json{{"name", "critic"}, {"rank", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  r = api.post("/adapters", Json{{"name", "solver"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("an adapter named 'solver' exists already"));
  r = api.post("/adapters", Json{{"name", "x y"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("'name' may hold only"));
  Json list = api.get("/adapters").json();
  ASSERT_EQ(list["adapters"].size(), 2u) << list.dump();
  const std::string served = list["model"];

  // /v1/models lists each as "<served>:<adapter>".
  Json e = api.claim("client-a");
  auto models =
      api.get("/v1/models",
              http::Headers{{"Authorization", "Bearer " + e["openai_api_key"].get<std::string>()}});
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_THAT(models.body, HasSubstr("\"" + served + ":solver\""));
  EXPECT_THAT(models.body, HasSubstr("\"" + served + ":critic\""));
  auto unknown = api.chat(e["openai_api_key"],
                          user_chat("hi", {{"model", served + ":nobody"}, {"max_tokens", 4}}));
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_THAT(unknown.body, HasSubstr("no adapter 'nobody'"));
  ASSERT_EQ(api.post("/abort_episode",
                     Json{{"client_uuid", "client-a"}, {"episode_uuid", e["episode_uuid"]}})
                .status,
            200);

  // A batch of calls on "solver" (both spellings): it trains solver alone.
  const std::vector<std::pair<std::string, double>> episodes = {
      {"task-a", 1.0}, {"task-a", 0.0}, {"task-b", 0.0}, {"task-b", 1.0}};
  int i = 0;
  for (const auto& [task, reward] : episodes) {
    Json ep = api.claim("client-a");
    const std::string name = i++ % 2 ? "solver" : served + ":solver";
    auto c = api.chat(ep["openai_api_key"], user_chat("Say something about " + task,
                                                      {{"model", name}, {"max_tokens", 6}}));
    ASSERT_EQ(c.status, 200) << c.body;
    ASSERT_EQ(api.end("client-a", ep["episode_uuid"], task, reward).status, 200);
  }
  ASSERT_TRUE(eventually([&] { return api.status()["global_step"] == 1; }, 300s))
      << api.status().dump() << "\n"
      << api.get("/get_verbose_logs").body;
  EXPECT_EQ(adapter_entry(api, "solver")["trained_steps"], 1) << api.get("/adapters").body;
  EXPECT_EQ(adapter_entry(api, "critic")["trained_steps"], 0) << api.get("/adapters").body;
  // save_freq 1: the adapters are saved in PEFT layout.
  std::string logs;
  EXPECT_TRUE(eventually([&] {
    logs = api.get("/get_verbose_logs").body;
    return logs.find("checkpoint (save_freq 1)") != std::string::npos;
  })) << logs;
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "adapters_step_1" / "solver" / "adapter_config.json"))
      << logs;
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "adapters_step_1" / "solver" / "trainer_state.json"));

  // /metrics: one sample per adapter.
  const std::string prom = api.get("/metrics").body;
  EXPECT_THAT(prom, HasSubstr("ajet_engine_adapter_trained_steps{adapter=\"solver\"} 1"));
  EXPECT_THAT(prom, HasSubstr("ajet_engine_adapter_trained_steps{adapter=\"critic\"} 0"));
  EXPECT_THAT(prom, HasSubstr("ajet_engine_adapter_requests_total{adapter=\"solver\"} 4"));

  // The engine dies: the supervisor restarts it and serves both adapters again from their newest
  // checkpoint (every adapter is saved there).
  const int64_t first = engine_pid_under(dir / "server");
  ASSERT_GT(first, 0) << api.status().dump();
  ASSERT_EQ(::kill(pid_t(first), SIGKILL), 0);
  ASSERT_TRUE(eventually(
      [&] {
        const int64_t now = engine_pid_under(dir / "server");
        return now > 0 && now != first && api.engine_status() == "ENGINE.ROLLING";
      },
      120s))
      << api.status().dump();
  Json again = adapter_entry(api, "solver");
  ASSERT_TRUE(again.is_object()) << api.get("/adapters").body << api.get("/get_verbose_logs").body;
  EXPECT_THAT(again["source"].get<std::string>(), HasSubstr("adapters_step_1"));
  EXPECT_THAT(adapter_entry(api, "critic")["source"].get<std::string>(),
              HasSubstr("adapters_step_1"));
  // The checkpoint held solver's trainer state: its step count (and AdamW moments) came back.
  EXPECT_EQ(again["trained_steps"], 1) << api.get("/adapters").body;
  Json after = api.claim("client-a");
  auto c = api.chat(after["openai_api_key"],
                    user_chat("hello", {{"model", served + ":solver"}, {"max_tokens", 4}}));
  EXPECT_EQ(c.status, 200) << c.body;

  // Episodes assigned to an adapter at claim time: their calls (any "model") train it.
  auto bad_claim =
      api.post("/claim_episode", Json{{"client_uuid", "client-a"}, {"adapter", "a b"}});
  EXPECT_EQ(bad_claim.status, 400) << bad_claim.body;
  i = 0;
  for (const auto& [task, reward] : episodes) {
    auto claimed = api.post("/claim_episode", Json{{"client_uuid", "client-a"},
                                                   {"episode_type", "train"},
                                                   {"discard_episode_timeout", 60},
                                                   {"adapter", "critic"}});
    ASSERT_EQ(claimed.status, 200) << claimed.body;
    Json ep = claimed.json();
    ASSERT_EQ(ep["success"], true) << claimed.body;
    EpisodeKeys::all().remember(ep);
    auto c =
        api.chat(ep["openai_api_key"], user_chat("Tell me about " + task, {{"max_tokens", 6}}));
    ASSERT_EQ(c.status, 200) << c.body;
    ASSERT_EQ(api.end("client-a", ep["episode_uuid"], task, reward).status, 200);
  }
  // (The restarted engine serves policy version 0 again: no trainer checkpoint to resume from.)
  ASSERT_TRUE(eventually([&] { return adapter_entry(api, "critic")["trained_steps"] == 1; }, 300s))
      << api.get("/adapters").body << "\n"
      << api.get("/get_verbose_logs").body;
  EXPECT_EQ(adapter_entry(api, "solver")["trained_steps"], 1) << api.get("/adapters").body;

  // Moved out through the front: a call on it waits for it to come back, and succeeds.
  r = api.post("/adapters/evict", Json{{"name", "solver"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["resident"], false) << r.body;
  auto back_in = api.chat(after["openai_api_key"],
                          user_chat("hello", {{"model", served + ":solver"}, {"max_tokens", 4}}));
  EXPECT_EQ(back_in.status, 200) << back_in.body;
  EXPECT_EQ(adapter_entry(api, "solver")["resident"], true) << api.get("/adapters").body;

  // Save and remove through the front.
  r = api.post("/adapters/save", Json{{"name", "solver"}, {"dir", (dir / "solver").string()}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(fs::exists(dir / "solver" / "adapter_model.safetensors"));
  r = api.post("/adapters/remove", Json{{"name", "critic"}});
  ASSERT_EQ(r.status, 200) << r.body;
  r = api.post("/adapters/remove", Json{{"name", "critic"}});
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(api.get("/adapters").json()["adapters"].size(), 1u);

  // The front itself is SIGKILLed and resumed from its store: its engine serves solver again.
  swarm.stop(SIGKILL);
  swarm.start();
  Api resumed(swarm.url());
  ASSERT_TRUE(eventually([&] { return resumed.engine_status() == "ENGINE.ROLLING"; }, 120s))
      << resumed.status().dump();
  Json back = resumed.get("/adapters").json();
  ASSERT_EQ(back["adapters"].size(), 1u) << back.dump() << resumed.get("/get_verbose_logs").body;
  EXPECT_EQ(back["adapters"][0]["name"], "solver");
}

}  // namespace
}  // namespace ajet::e2e
