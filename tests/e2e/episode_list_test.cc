// GET /episodes on the real ajet-swarm (with the echo engine): the admin token, the documented
// response shape, filters, keyset paging, 400 naming each bad parameter, and `ajet episode list` /
// `ajet episode show` reading a live front with --url (the store is locked by the front).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

constexpr const char* kListToken = "list-admin-token";

class EpisodeListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = fixture(false).tokenizer;
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), kListToken, {}});
    api_ = std::make_unique<Api>(swarm_->url());
    api_->boot(config_yaml(model_), admin_);
  }
  http::ClientResponse list(const std::string& query) {
    return api_->get("/episodes" + query, admin_);
  }
  Json page(const std::string& query) {
    auto r = list(query);
    EXPECT_EQ(r.status, 200) << query << ": " << r.body;
    return r.json();
  }
  static std::vector<std::string> uuids(const Json& page) {
    std::vector<std::string> out;
    for (const Json& e : page["episodes"]) out.push_back(e["uuid"]);
    return out;
  }
  // Claims an episode and makes `calls` chat calls as `agent`; returns its uuid.
  std::string episode(const std::string& client, const std::string& type, const std::string& agent,
                      int calls) {
    Json claim = api_->claim(client, type);
    EXPECT_EQ(claim["success"], true) << claim.dump();
    const std::string uuid = claim.value("episode_uuid", "");
    for (int i = 0; i < calls; ++i) {
      auto r =
          api_->chat(claim.value("openai_api_key", ""),
                     user_chat("hello number " + std::to_string(i)), {{"X-Agent-Name", agent}});
      EXPECT_EQ(r.status, 200) << r.body;
    }
    return uuid;
  }
  void end(const std::string& client, const std::string& uuid, const std::string& task,
           double reward) {
    auto r = api_->end(client, uuid, task, reward);
    EXPECT_EQ(r.status, 200) << r.body;
  }

  ScratchDir dir_;
  fs::path model_;
  http::Headers admin_{{"Authorization", std::string("Bearer ") + kListToken}};
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(EpisodeListTest, PagesFiltersAndRefusesBadParameters) {
  // All claimed before any ends: ending train episodes may fill the batch and stop the claims.
  const std::string a = episode("client-a", "train", "solver", 2);
  const std::string b = episode("client-a", "train", "critic", 1);
  const std::string c = episode("client-b", "eval", "solver", 1);
  end("client-a", a, "task-1", 1.0);
  end("client-a", b, "task-2", 0.0);

  EXPECT_EQ(api_->get("/episodes").status, 401);
  EXPECT_EQ(api_->get("/episodes", {{"Authorization", "Bearer wrong"}}).status, 401);

  const Json all = page("");
  ASSERT_EQ(all["episodes"].size(), 3u) << all.dump();
  const std::vector<std::string> listed = uuids(all);
  EXPECT_EQ(std::set<std::string>({a, b, c}), std::set<std::string>(listed.begin(), listed.end()));
  EXPECT_EQ(all["total"], 3);
  EXPECT_EQ(all["total_is_lower_bound"], false);
  EXPECT_TRUE(all["next_cursor"].is_null());
  EXPECT_EQ(all.size(), 4u) << all.dump();
  for (size_t i = 1; i < all["episodes"].size(); ++i) {
    EXPECT_GE(all["episodes"][i - 1]["claimed_at"].get<double>(),
              all["episodes"][i]["claimed_at"].get<double>());
  }
  for (const Json& e : all["episodes"]) {
    EXPECT_EQ(e.size(), 16u) << e.dump();
    if (e["uuid"] == a) {
      EXPECT_EQ(e["task_id"], "task-1");
      EXPECT_EQ(e["client_uuid"], "client-a");
      EXPECT_EQ(e["episode_type"], "train");
      EXPECT_EQ(e["status"], "finished");
      EXPECT_EQ(e["reward"], 1.0);
      EXPECT_TRUE(e["claimed_at"].is_number());
      EXPECT_TRUE(e["ended_at"].is_number());
      EXPECT_EQ(e["llm_calls"], 2);
      EXPECT_EQ(e["agents"], Json::array({"solver"}));
      EXPECT_GT(e["prompt_tokens"].get<int64_t>(), 0);
      EXPECT_GT(e["completion_tokens"].get<int64_t>(), 0);
    }
    if (e["uuid"] == c) {
      EXPECT_EQ(e["status"], "claimed");
      EXPECT_TRUE(e["reward"].is_null());
      EXPECT_TRUE(e["ended_at"].is_null());
      EXPECT_TRUE(e["global_step"].is_null());
    }
  }

  EXPECT_EQ(uuids(page("?status=finished&type=train&agent=critic")), std::vector<std::string>{b});
  EXPECT_EQ(uuids(page("?type=eval")), std::vector<std::string>{c});
  EXPECT_EQ(uuids(page("?client=client-b")), std::vector<std::string>{c});
  EXPECT_EQ(uuids(page("?task=task-1&reward_min=0.5&reward_max=1")), std::vector<std::string>{a});
  EXPECT_EQ(page("?agent=solver")["total"], 2);
  EXPECT_EQ(page("?task=&limit=")["total"], 3) << "empty parameters filter nothing";
  for (const Json& e : all["episodes"]) {  // whatever batch the trainer took: its step finds it
    if (!e["global_step"].is_null()) {
      const std::vector<std::string> in_step = uuids(page("?step=" + e["global_step"].dump()));
      EXPECT_NE(std::find(in_step.begin(), in_step.end(), e["uuid"]), in_step.end());
    }
  }

  std::vector<std::string> paged;
  std::string query = "?limit=1";
  for (int i = 0; i < 5; ++i) {
    const Json p = page(query);
    for (const auto& u : uuids(p)) paged.push_back(u);
    if (p["next_cursor"].is_null()) break;
    query = "?limit=1&cursor=" + p["next_cursor"].get<std::string>();
  }
  EXPECT_EQ(paged, uuids(all));

  for (const std::string bad :
       {"limit=0", "limit=501", "limit=ten", "step=-1", "step=x", "status=done", "type=test",
        "reward_min=high", "reward_max=nan", "success=maybe", "cursor=zz", "stauts=finished"}) {
    auto r = list("?" + bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
    EXPECT_THAT(r.body, HasSubstr("'" + bad.substr(0, bad.find('=')) + "'")) << bad;
  }
}

TEST_F(EpisodeListTest, TheCliReadsALiveFrontWithUrl) {
  const std::string a = episode("client-a", "train", "solver", 2);
  end("client-a", a, "task-7", 0.5);
  const std::string ajet = shell_quote(bin("ajet").string());
  const std::string url = " --url " + swarm_->url() + " ";

  Captured denied = run_capture("env -u AJET_ADMIN_TOKEN " + ajet + " episode list" + url);
  EXPECT_EQ(WEXITSTATUS(denied.status), 1) << denied.out;
  EXPECT_THAT(denied.out, HasSubstr("AJET_ADMIN_TOKEN"));

  Captured table =
      run_capture(ajet + " episode list" + url + "--token " + kListToken + " --full-uuids");
  ASSERT_EQ(WEXITSTATUS(table.status), 0) << table.out;
  EXPECT_THAT(table.out, HasSubstr(a));
  EXPECT_THAT(table.out, HasSubstr("task-7"));
  EXPECT_THAT(table.out, HasSubstr("1 of 1 episode"));

  const std::string env = std::string("AJET_ADMIN_TOKEN=") + kListToken + " ";
  Captured json = run_capture(env + ajet + " episode list --json --status finished" + url);
  ASSERT_EQ(WEXITSTATUS(json.status), 0) << json.out;
  EXPECT_EQ(Json::parse(json.out)["episodes"][0]["uuid"], a);
  Captured bad = run_capture(env + ajet + " episode list --cursor 00" + url);
  EXPECT_EQ(WEXITSTATUS(bad.status), 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("cursor"));

  Captured doc = run_capture(env + ajet + " episode show --json --indent -1" + url + a);
  ASSERT_EQ(WEXITSTATUS(doc.status), 0) << doc.out;
  EXPECT_EQ(Json::parse(doc.out), api_->get("/episodes/" + a, admin_).json());

  Captured text = run_capture(env + ajet + " episode show" + url + a);
  ASSERT_EQ(WEXITSTATUS(text.status), 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("episode " + a));
  EXPECT_THAT(text.out, HasSubstr("task task-7"));
  EXPECT_THAT(text.out, HasSubstr("client client-a"));
  EXPECT_THAT(text.out, HasSubstr("user: hello number 0"));
  EXPECT_THAT(text.out, HasSubstr("[trained]"));
  EXPECT_THAT(text.out, HasSubstr("-- call 1 . agent solver"));

  // The 12 characters `list` prints are enough, on the front as in the CLI.
  Captured short_id =
      run_capture(env + ajet + " episode show --json --indent -1" + url + a.substr(0, 12));
  ASSERT_EQ(WEXITSTATUS(short_id.status), 0) << short_id.out;
  EXPECT_EQ(Json::parse(short_id.out), Json::parse(doc.out));
  Captured short_text = run_capture(env + ajet + " episode show" + url + a.substr(0, 12));
  ASSERT_EQ(WEXITSTATUS(short_text.status), 0) << short_text.out;
  EXPECT_THAT(short_text.out,
              HasSubstr("client client-a"));  // the summary, asked for by the whole uuid
  EXPECT_EQ(api_->get("/episodes/" + a.substr(0, 8), admin_).json()["episode_uuid"], a);

  Captured missing =
      run_capture(env + ajet + " episode show" + url + "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(WEXITSTATUS(missing.status), 1) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr("404"));
}

}  // namespace
}  // namespace ajet::e2e
