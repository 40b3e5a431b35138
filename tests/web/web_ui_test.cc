// The web pages in a real browser: a real ajet-swarm with the real engine on the micro model, real
// episodes made through its OpenAI endpoint (multi-call, with a tool call and its result), batches
// recorded, curves posted through /log_metrics; then tests/web/ui_pages.mjs drives Debian's
// chromium through the dashboard, the episode list and an episode's token view, and checks what
// they render against the API (screenshots in <build>/web_ui_screenshots). Skipped loudly when
// node, the npm packages or chromium are missing (scripts/test.sh installs them).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "client_e2e/client_e2e_util.h"
#include "common/fs.h"
#include "web/assets.h"

namespace ajet::clients_test {
namespace {

constexpr const char* kToken = "ui-admin-token";

http::Headers admin() {
  http::Headers h;
  h.add("Authorization", std::string("Bearer ") + kToken);
  return h;
}

Json calculator_tools() {
  return Json::parse(
      R"([{"type": "function", "function": {"name": "calculator", "description": "Evaluates arithmetic",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}])");
}

// One episode as an agent makes it: a first call, then a second whose history holds the first
// answer, a tool call and its result (so the episode has two calls, messages of every role and a
// branch).
void run_episode(Api& api, const std::string& task, double reward) {
  Json claimed = api.claim("web-ui-test");
  ASSERT_TRUE(claimed.value("success", false)) << claimed.dump();
  const std::string key = claimed["openai_api_key"];
  const std::string question = "What is 12 + 30? Task " + task + ".";
  Json first = {{"model", "agentjet"},
                {"max_tokens", 12},
                {"tools", calculator_tools()},
                {"messages", Json::array({{{"role", "user"}, {"content", question}}})}};
  auto r = api.chat(key, first);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string answer = r.json()["choices"][0]["message"].value("content", "");
  Json second = first;
  second["messages"].push_back(
      {{"role", "assistant"},
       {"content", answer},
       {"tool_calls",
        Json::array(
            {{{"id", "call_1"},
              {"type", "function"},
              {"function", {{"name", "calculator"}, {"arguments", R"({"expr": "12+30"})"}}}}})}});
  second["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}});
  r = api.chat(key, second);
  ASSERT_EQ(r.status, 200) << r.body;
  r = api.end("web-ui-test", claimed["episode_uuid"], task, reward);
  ASSERT_EQ(r.status, 200) << r.body;
}

TEST(WebUi, PagesRenderWhatTheApiSaysInChromium) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  const char* chromium_env = std::getenv("CHROMIUM");
  const std::string chromium = chromium_env != nullptr ? chromium_env : "/usr/bin/chromium";
  if (!fs::exists(chromium))
    GTEST_SKIP() << "SKIPPED LOUDLY: no " << chromium << " (scripts/setup.sh --tests installs it)";

  BootedSwarm swarm("ajet-engine", "", 2, kToken);
  if (HasFailure()) return;
  Api& api = swarm.api();
  // two batches of 2 tasks x 2 repeats: the debug backbone records them, the front writes their
  // numbers
  for (int t = 0; t < 4; ++t) {
    for (int k = 0; k < 2; ++k) {
      run_episode(api, "task-" + std::to_string(t), (t + k) % 2 == 0 ? 1.0 : 0.0);
      if (HasFatalFailure()) return;
    }
  }
  // curves over 30 steps, per task too: what a classic run posts after each step and validation
  for (int step = 0; step < 30; ++step) {
    Json metrics = {{"val/greedy_success", 0.2 + 0.02 * step},
                    {"val/pass@4", std::min(1.0, 0.4 + 0.02 * step)},
                    {"val/pass@4@calc", std::min(1.0, 0.5 + 0.01 * step)},
                    {"rollout/success_rate@calc", 0.5 + 0.4 * std::sin(step / 4.0)},
                    {"rollout/success_rate@frozenlake", 0.3 + 0.01 * step}};
    auto r = api.post("/log_metrics", Json{{"step", step}, {"metrics", metrics}}, admin());
    ASSERT_EQ(r.status, 200) << r.body;
  }

  // the snapshot a classic run writes, from the same history
  Json index = api.get("/metrics_history", admin()).json();
  ASSERT_TRUE(index.contains("names")) << index.dump();
  Json snapshot = {{"title", "web_ui_test"},
                   {"global_step", index["global_step"]},
                   {"names", index["names"]},
                   {"series", Json::object()}};
  for (const auto& n : index["names"]) {
    const std::string name = n["name"];
    Json one = api.get("/metrics_history?name=" + name, admin()).json();
    snapshot["series"][name] = one["series"][name];
  }
  const fs::path shots = fs::path(AJET_BINARY_DIR) / "web_ui_screenshots";
  fs::create_directories(shots);
  const fs::path snapshot_file = swarm.dir().path() / "reward_curve.html";
  write_file_atomic(snapshot_file, web::dashboard_snapshot_html(snapshot));

  // a 10,000-step run (noisy, rising), as a snapshot: the chart must stay readable
  Json long_series = Json::array();
  uint32_t noise = 12345;
  for (int step = 0; step < 10000; ++step) {
    noise = noise * 1664525u + 1013904223u;
    const double jitter = double(noise >> 8) / double(1u << 24) - 0.5;
    long_series.push_back(
        Json::array({step, 0.25 + 0.5 * step / 10000.0 + 0.2 * jitter, 1.0e9 + step}));
  }
  const fs::path long_file = swarm.dir().path() / "long_run.html";
  write_file_atomic(long_file, web::dashboard_snapshot_html(
                                   {{"title", "10,000 steps"},
                                    {"global_step", 10000},
                                    {"names", Json::array({{{"name", "rollout/reward_mean"},
                                                            {"points", 10000},
                                                            {"last_step", 9999}}})},
                                    {"series", {{"rollout/reward_mean", long_series}}}}));

  // a calc run's shapes (docs/operations.md "Metrics"): four names with the same values at every
  // step, one that differs at its last step, a loss, and 4-point validations: the greedy one
  // 100 -> 99% (a small drop), the sampled one ending at 0.98 (smoothed, it would end near 0.94)
  Json shapes = {{"title", "calc shapes"},
                 {"global_step", 31},
                 {"latest_checkpoint", "/runs/calc/saved_checkpoints/global_step_30"},
                 {"names", Json::array()},
                 {"series", Json::object()}};
  using Points = std::vector<std::pair<int, double>>;
  auto add_series = [&](const std::string& name, const Points& points) {
    Json rows = Json::array();
    for (const auto& [step, value] : points)
      rows.push_back(Json::array({step, value, 1.0e9 + step}));
    shapes["names"].push_back(
        {{"name", name}, {"points", points.size()}, {"last_step", points.back().first}});
    shapes["series"][name] = rows;
  };
  Points success, loss;
  for (int step = 0; step < 30; ++step) {
    success.emplace_back(step, step == 29 ? 0.66 : 0.5 + 0.25 * std::sin(step / 3.0));
    loss.emplace_back(step, 2.0 - 0.05 * step);
  }
  for (const char* name :
       {"rollout/reward_mean", "train/reward_mean", "rollout/success_rate", "workflow/success"}) {
    add_series(name, success);
  }
  auto almost = success;
  almost.back().second = 0.7;
  add_series("train/reward_max", almost);
  add_series("train/loss", loss);
  add_series("val/greedy_success", {{0, 1.0}, {10, 1.0}, {20, 1.0}, {30, 0.99}});
  add_series("val/sampled_success", {{0, 0.615}, {10, 0.9}, {20, 0.94}, {30, 0.98}});
  add_series("val/pass_at_1", {{0, 0.615}, {10, 0.9}, {20, 0.94}, {30, 0.98}});
  add_series("val/pass_at_4", {{0, 0.8}, {10, 0.95}, {20, 0.97}, {30, 0.99}});
  add_series("val/tasks", {{0, 100}, {10, 100}, {20, 100}, {30, 100}});
  const fs::path shapes_file = swarm.dir().path() / "shapes.html";
  write_file_atomic(shapes_file, web::dashboard_snapshot_html(shapes));

  Captured out = run_capture(
      "NODE_MODULES=" + shell_quote(node_modules->string()) + " CHROMIUM=" + shell_quote(chromium) +
      " node " + shell_quote(source("tests/web/ui_pages.mjs").string()) + " --url " +
      shell_quote(swarm.url()) + " --token " + kToken + " --out " + shell_quote(shots.string()) +
      " --snapshot " + shell_quote(snapshot_file.string()) + " --long-snapshot " +
      shell_quote(long_file.string()) + " --shapes-snapshot " + shell_quote(shapes_file.string()) +
      " 2>&1");
  std::cout << out.out;  // every check, also when all pass (ctest -V)
  EXPECT_EQ(out.status, 0) << out.out;
  EXPECT_NE(out.out.find("all passed"), std::string::npos) << out.out;
  for (const char* png : {"dashboard.png", "episodes.png", "episode.png", "snapshot.png",
                          "long_run.png", "shapes.png"}) {
    EXPECT_TRUE(fs::exists(shots / png)) << png;
  }
}

TEST(WebUi, PagesAreServedWithoutTheTokenButTheirDataIsNot) {
  BootedSwarm swarm("ajet-echo-engine", "", 2, kToken);
  if (HasFailure()) return;
  Api& api = swarm.api();
  auto page = api.get("/ui/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.body, std::string(web::find_asset("index.html")->body));
  EXPECT_EQ(page.headers.get_or("Content-Type", ""), "text/html; charset=utf-8");
  EXPECT_NE(page.headers.get_or("Content-Security-Policy", "").find("default-src 'self'"),
            std::string::npos);
  auto js = api.get("/ui/ui.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_EQ(js.headers.get_or("Content-Type", ""), "text/javascript; charset=utf-8");
  auto redirect = api.get("/ui");
  EXPECT_EQ(redirect.status, 308);
  EXPECT_EQ(redirect.headers.get_or("Location", ""), "/ui/");
  auto missing = api.get("/ui/secrets.txt");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("/ui/secrets.txt"), std::string::npos) << missing.body;
  EXPECT_EQ(api.get("/ui/..%2Fswarm.sqlite").status, 404);
  // the data behind the pages needs the admin token
  EXPECT_EQ(api.get("/metrics_history").status, 401);
  EXPECT_EQ(api.get("/episodes").status, 401);
  EXPECT_EQ(api.get("/metrics_history", admin()).status, 200);
}

}  // namespace
}  // namespace ajet::clients_test
