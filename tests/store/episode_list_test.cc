// Store::list_episodes on a real SQLite store: every filter, keyset paging that visits each episode
// exactly once (ties in claimed_at included), the bounded count, the summary fields, the query
// plan (the default page walks an index instead of sorting the table), GET /episodes parameter
// checks, and the list indexes appearing in a store made before them.
#include "store/episode_list.h"
#include "support/scratch_dir.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <set>

#include "common/encoding.h"
#include "common/error.h"
#include "store/store.h"

namespace ajet::store::listing {
namespace {

namespace fs = std::filesystem;

using TempDir = ajet::test_support::ScratchDir;

Store::Options fast() {
  Store::Options o;
  o.fsync_each_commit = false;
  return o;
}

EpisodeRow row(const std::string& uuid, double claimed_at) {
  EpisodeRow r;
  r.uuid = uuid;
  r.client_uuid = "client-a";
  r.task_id = "task-1";
  r.status = kEpisodeFinished;
  r.claimed_at = claimed_at;
  r.ended_at = claimed_at + 2;
  return r;
}

CallRow agent_call(const std::string& uuid, int index, const std::string& agent, size_t prompt,
                   size_t completion) {
  CallRow c;
  c.episode_uuid = uuid;
  c.call_index = index;
  c.agent_name = agent;
  c.request_json = "{}";
  c.prompt_ids.assign(prompt, 7);
  c.completion_ids.assign(completion, 8);
  c.logprobs.assign(completion, -0.5f);
  c.policy_versions.assign(completion, 1);
  c.finish_reason = "stop";
  return c;
}

std::vector<std::string> uuids_of(const EpisodePage& page) {
  std::vector<std::string> out;
  for (const auto& e : page.episodes) out.push_back(e.uuid);
  return out;
}

EpisodePageRequest with(EpisodeFilter filter, int limit = 50) {
  EpisodePageRequest r;
  r.filter = std::move(filter);
  r.limit = limit;
  return r;
}

Error error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error";
  return Error(ErrorCode::kInternal, "none");
}

// Six episodes across two steps, two types, two clients and three agents.
void fill_small(Store& st) {
  EpisodeRow a = row("a", 10), b = row("b", 20), c = row("c", 30), d = row("d", 40),
             e = row("e", 50), f = row("f", 60);
  a.reward = 1.0, a.is_success = true;
  b.reward = 0.0, b.is_success = false, b.task_id = "task-2";
  c.reward = 0.5, c.episode_type = "eval", c.client_uuid = "client-b";
  d.status = kEpisodeAborted, d.reward = std::nullopt;
  e.status = kEpisodeClaimed, e.ended_at = std::nullopt, e.task_id = "";
  f.reward = -1.0, f.is_success = false, f.task_id = "task-2";
  for (const EpisodeRow& r : {a, b, c, d, e, f}) st.upsert_episode(r);
  st.put_call(agent_call("a", 0, "solver", 100, 10));
  st.put_call(agent_call("a", 1, "critic", 40, 4));
  st.put_call(agent_call("a", 2, "solver", 120, 12));
  st.put_call(agent_call("b", 0, "critic", 30, 3));
  st.put_call(agent_call("f", 0, "planner", 10, 1));
  st.put_batch(BatchRow{1, 3, 100.0, kBatchTrained, 101.0, Json::object()}, {"a", "b"});
  st.put_batch(BatchRow{2, 4, 200.0, kBatchTaken, std::nullopt, Json::object()}, {"f"});
  st.flush().get();
}

TEST(EpisodeList, EveryFilterSelectsItsEpisodesNewestFirst) {
  TempDir dir;
  Store st(dir / "s.db", fast());
  fill_small(st);
  using V = std::vector<std::string>;
  EXPECT_EQ(uuids_of(st.list_episodes({})), (V{"f", "e", "d", "c", "b", "a"}));
  auto step = [](int64_t s) {
    EpisodeFilter f;
    f.global_step = s;
    return f;
  };
  EXPECT_EQ(uuids_of(st.list_episodes(with(step(3)))), (V{"b", "a"}));
  EXPECT_EQ(uuids_of(st.list_episodes(with(step(4)))), (V{"f"}));
  EXPECT_TRUE(st.list_episodes(with(step(5))).episodes.empty());
  EpisodeFilter f;
  f.task_id = "task-2";
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"f", "b"}));
  f = {};
  f.client_uuid = "client-b";
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"c"}));
  f = {};
  f.agent_name = "critic";
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"b", "a"}));
  f = {};
  f.status = kEpisodeFinished;
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"f", "c", "b", "a"}));
  f = {};
  f.episode_type = "eval";
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"c"}));
  f = {};
  f.reward_min = 0.0;
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"c", "b", "a"})) << "no reward never matches";
  f.reward_max = 0.5;
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"c", "b"}));
  f = {};
  f.is_success = false;
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"f", "b"}));
  f = {};
  f.uuid = "c";
  EXPECT_EQ(uuids_of(st.list_episodes(with(f))), (V{"c"}));
  f = {};  // filters combine
  f.task_id = "task-2";
  f.global_step = 3;
  f.agent_name = "critic";
  f.is_success = false;
  const EpisodePage both = st.list_episodes(with(f));
  EXPECT_EQ(uuids_of(both), (V{"b"}));
  EXPECT_EQ(both.total, 1);
}

TEST(EpisodeList, SummaryRowsCarryStepCallsAgentsAndTokenTotals) {
  TempDir dir;
  Store st(dir / "s.db", fast());
  fill_small(st);
  EpisodeFilter f;
  f.uuid = "a";
  const EpisodePage page = st.list_episodes(with(f));
  ASSERT_EQ(page.episodes.size(), 1u);
  const EpisodeSummary& a = page.episodes[0];
  EXPECT_EQ(a.task_id, "task-1");
  EXPECT_EQ(a.client_uuid, "client-a");
  EXPECT_EQ(a.episode_type, "train");
  EXPECT_EQ(a.status, kEpisodeFinished);
  EXPECT_EQ(a.reward, 1.0);
  EXPECT_EQ(a.is_success, true);
  EXPECT_EQ(a.claimed_at, 10.0);
  EXPECT_EQ(a.ended_at, 12.0);
  EXPECT_EQ(a.batch_id, 1);
  EXPECT_EQ(a.global_step, 3);
  EXPECT_EQ(a.llm_calls, 3);
  EXPECT_EQ(a.agents, (std::vector<std::string>{"solver", "critic"}));
  EXPECT_EQ(a.prompt_tokens, 260);
  EXPECT_EQ(a.completion_tokens, 26);

  f.uuid = "e";
  const EpisodeSummary e = st.list_episodes(with(f)).episodes.at(0);
  EXPECT_FALSE(e.global_step.has_value());
  EXPECT_FALSE(e.batch_id.has_value());
  EXPECT_FALSE(e.ended_at.has_value());
  EXPECT_FALSE(e.reward.has_value());
  EXPECT_EQ(e.llm_calls, 0);
  EXPECT_TRUE(e.agents.empty());

  const Json j = episode_page_json(st.list_episodes(with(f)));
  const Json& row = j["episodes"][0];
  for (const char* k :
       {"uuid", "task_id", "client_uuid", "episode_type", "status", "reward", "is_success",
        "claimed_at", "ended_at", "batch_id", "global_step", "llm_calls", "llm_calls_not_retained",
        "agents", "prompt_tokens", "completion_tokens"}) {
    EXPECT_TRUE(row.contains(k)) << k;
  }
  EXPECT_EQ(row.size(), 16u);
  EXPECT_TRUE(row["global_step"].is_null());
  EXPECT_TRUE(row["reward"].is_null());
  EXPECT_TRUE(j["next_cursor"].is_null());
  EXPECT_EQ(j["total"], 1);
  EXPECT_EQ(j["total_is_lower_bound"], false);
}

// 1,200 episodes, seven to each claimed_at: paging with any page size visits every episode exactly
// once, in (claimed_at, uuid) descending order, and a filtered paging visits exactly its subset.
TEST(EpisodeList, KeysetPagingVisitsEveryEpisodeOnceAcrossTies) {
  TempDir dir;
  Store st(dir / "s.db", fast());
  std::set<std::string> all, evals;
  for (int i = 0; i < 1200; ++i) {
    EpisodeRow r = row(new_uuid_hex(), 1000.0 + i / 7 + 0.25);
    if (i % 3 == 0) {
      r.episode_type = "eval";
      evals.insert(r.uuid);
    }
    all.insert(r.uuid);
    st.upsert_episode(r);
  }
  st.flush().get();
  for (int limit : {1, 7, 37, 500}) {
    std::vector<EpisodeSummary> seen;
    EpisodePageRequest request = with({}, limit);
    for (int pages = 0;; ++pages) {
      ASSERT_LT(pages, 1300) << "paging does not end";
      EpisodePage page = st.list_episodes(request);
      EXPECT_EQ(page.total, 1200);
      EXPECT_FALSE(page.total_is_lower_bound);
      ASSERT_LE(page.episodes.size(), static_cast<size_t>(limit));
      seen.insert(seen.end(), page.episodes.begin(), page.episodes.end());
      if (!page.next_cursor) break;
      EXPECT_EQ(page.episodes.size(), static_cast<size_t>(limit)) << "only the last page is short";
      request.cursor = *page.next_cursor;
    }
    ASSERT_EQ(seen.size(), 1200u) << "limit " << limit;
    std::set<std::string> unique;
    for (const auto& e : seen) unique.insert(e.uuid);
    EXPECT_EQ(unique, all) << "limit " << limit;
    for (size_t i = 1; i < seen.size(); ++i) {
      const bool descending =
          seen[i - 1].claimed_at > seen[i].claimed_at ||
          (seen[i - 1].claimed_at == seen[i].claimed_at && seen[i - 1].uuid > seen[i].uuid);
      ASSERT_TRUE(descending) << "limit " << limit << " at " << i;
    }
  }
  EpisodeFilter eval;
  eval.episode_type = "eval";
  std::set<std::string> seen;
  EpisodePageRequest request = with(eval, 64);
  for (;;) {
    EpisodePage page = st.list_episodes(request);
    EXPECT_EQ(page.total, static_cast<int64_t>(evals.size()));
    for (const auto& e : page.episodes)
      EXPECT_TRUE(seen.insert(e.uuid).second) << e.uuid << " twice";
    if (!page.next_cursor) break;
    request.cursor = *page.next_cursor;
  }
  EXPECT_EQ(seen, evals);
}

TEST(EpisodeList, CountIsExactUpToTenThousandThenALowerBound) {
  TempDir dir;
  Store st(dir / "s.db", fast());
  for (int i = 0; i < kEpisodeCountBound + 5; ++i) {
    EpisodeRow r = row("ep-" + std::to_string(100000 + i), i);
    r.task_id = i < 3 ? "rare" : "common";
    st.upsert_episode(r);
  }
  st.flush().get();
  EpisodePage page = st.list_episodes({});
  EXPECT_EQ(page.total, kEpisodeCountBound);
  EXPECT_TRUE(page.total_is_lower_bound);
  EXPECT_EQ(page.episodes.size(), 50u);
  EXPECT_EQ(page.episodes.front().uuid, "ep-" + std::to_string(100000 + kEpisodeCountBound + 4));
  EpisodeFilter rare;
  rare.task_id = "rare";
  page = st.list_episodes(with(rare));
  EXPECT_EQ(page.total, 3);
  EXPECT_FALSE(page.total_is_lower_bound);
  st.upsert_episode(row("ep-last", -1)).get();  // exactly the bound + 6 now: still a bound
  EXPECT_TRUE(st.list_episodes({}).total_is_lower_bound);
  EpisodeFilter common;
  common.task_id = "common";
  common.reward_min = 5;  // none has a reward
  page = st.list_episodes(with(common));
  EXPECT_EQ(page.total, 0);
  EXPECT_FALSE(page.total_is_lower_bound);
}

// The page query walks episodes_by_claimed (or episodes_by_task) in order: no scan of the table and
// no sort of every matching row to return fifty of them.
TEST(EpisodeList, QueryPlanWalksAnIndexWithoutSorting) {
  TempDir dir;
  Store st(dir / "s.db", fast());
  fill_small(st);
  auto expect_index = [&](const EpisodePageRequest& request, const std::string& index) {
    const std::string plan = st.list_episodes_plan(request);
    EXPECT_NE(plan.find(index), std::string::npos) << plan;
    EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << plan;
    for (size_t at = plan.find("SCAN e"); at != std::string::npos;
         at = plan.find("SCAN e", at + 1)) {
      const std::string line = plan.substr(at, plan.find('\n', at) - at);
      EXPECT_NE(line.find("USING"), std::string::npos)
          << "a scan of the episodes table itself: " << plan;
    }
  };
  EpisodePageRequest page;
  expect_index(page, "episodes_by_claimed");
  page.cursor = encode_episode_cursor(30, "c");
  expect_index(page, "episodes_by_claimed");
  // A later page seeks to the cursor ("SEARCH ... ((claimed_at,uuid)<(?,?))") instead of walking to
  // it.
  EXPECT_NE(st.list_episodes_plan(page).find("SEARCH e USING INDEX episodes_by_claimed"),
            std::string::npos)
      << st.list_episodes_plan(page);
  EpisodePageRequest status = with({});
  status.filter.status = kEpisodeFinished;
  status.filter.episode_type = "train";
  expect_index(status, "episodes_by_claimed");
  EpisodePageRequest task = with({});
  task.filter.task_id = "task-2";
  expect_index(task, "episodes_by_task");
}

TEST(EpisodeList, CursorsRoundTripAndForgedOnesAreRefused) {
  const std::string c = encode_episode_cursor(1733212800.123456789, "3f2a-uuid with spaces+plus");
  for (char ch : c) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(ch))) << c;
  const EpisodeCursor back = decode_episode_cursor(c);
  EXPECT_EQ(back.claimed_at, 1733212800.123456789);
  EXPECT_EQ(back.uuid, "3f2a-uuid with spaces+plus");
  for (const std::string bad :
       {"", "xyz", "0123", "7ff0000000000000", "zz00000000000000", "00000000000000000"}) {
    Error e = error_of([&] { decode_episode_cursor(bad); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(e.what()).find("'cursor'"), std::string::npos) << e.what();
  }
  TempDir dir;
  Store st(dir / "s.db", fast());
  EpisodePageRequest r;
  r.cursor = "not-a-cursor";
  EXPECT_EQ(error_of([&] { st.list_episodes(r); }).code(), ErrorCode::kInvalidArgument);
  r.cursor.clear();
  r.limit = 0;
  EXPECT_EQ(error_of([&] { st.list_episodes(r); }).code(), ErrorCode::kInvalidArgument);
  r.limit = kEpisodePageMaxLimit + 1;
  EXPECT_EQ(error_of([&] { st.list_episodes(r); }).code(), ErrorCode::kInvalidArgument);
}

TEST(EpisodeList, ParametersParseAndBadOnesNameTheParameter) {
  const EpisodePageRequest r =
      episode_page_request_from_params({{"limit", "20"},
                                        {"step", "7"},
                                        {"task", "t 1"},
                                        {"client", "c"},
                                        {"agent", "solver"},
                                        {"status", "finished"},
                                        {"type", "eval"},
                                        {"reward_min", "-0.5"},
                                        {"reward_max", "1e0"},
                                        {"success", "false"},
                                        {"uuid", "u"},
                                        {"cursor", encode_episode_cursor(5, "x")}});
  EXPECT_EQ(r.limit, 20);
  EXPECT_EQ(r.filter.global_step, 7);
  EXPECT_EQ(r.filter.task_id, "t 1");
  EXPECT_EQ(r.filter.client_uuid, "c");
  EXPECT_EQ(r.filter.agent_name, "solver");
  EXPECT_EQ(r.filter.status, "finished");
  EXPECT_EQ(r.filter.episode_type, "eval");
  EXPECT_EQ(r.filter.reward_min, -0.5);
  EXPECT_EQ(r.filter.reward_max, 1.0);
  EXPECT_EQ(r.filter.is_success, false);
  EXPECT_EQ(r.filter.uuid, "u");
  const EpisodePageRequest blank =
      episode_page_request_from_params({{"task", ""}, {"limit", ""}, {"success", ""}});
  EXPECT_FALSE(blank.filter.task_id.has_value()) << "an empty form field filters nothing";
  EXPECT_EQ(blank.limit, kEpisodePageDefaultLimit);
  EXPECT_FALSE(blank.filter.is_success.has_value());

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"limit", "0"},        {"limit", "501"},      {"limit", "ten"},      {"limit", "5x"},
      {"step", "-1"},        {"step", "1.5"},       {"status", "done"},    {"type", "test"},
      {"reward_min", "nan"}, {"reward_max", "inf"}, {"reward_min", "1,5"}, {"success", "yes"},
      {"cursor", "abc"}};
  for (const auto& parameter : bad) {
    const std::string& name = parameter.first;
    Error e = error_of([&] { episode_page_request_from_params({parameter}); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << name << "=" << parameter.second;
    EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
  }
  Error unknown = error_of([] { episode_page_request_from_params({{"stauts", "finished"}}); });
  EXPECT_NE(std::string(unknown.what()).find("'stauts'"), std::string::npos) << unknown.what();
  EXPECT_NE(std::string(unknown.what()).find("did you mean 'status'"), std::string::npos)
      << unknown.what();
}

// A store written before the list indexes existed gains them when opened.
TEST(EpisodeList, AStoreWithoutTheListIndexesGainsThemAtOpen) {
  TempDir dir;
  const fs::path path = dir / "s.db";
  {
    Store st(path, fast());
    st.upsert_episode(row("old", 1)).get();
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP INDEX episodes_by_claimed; DROP INDEX episodes_by_task", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  Store st(path, fast());
  EXPECT_NE(st.list_episodes_plan({}).find("episodes_by_claimed"), std::string::npos);
  EXPECT_EQ(uuids_of(st.list_episodes({})), std::vector<std::string>{"old"});
}

}  // namespace
}  // namespace ajet::store::listing
