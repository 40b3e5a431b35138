// How long one page of GET /episodes takes on a store of 100,000 episodes (2 LLM calls each),
// against loading every episode (what a list without paging would do), in one run:
//   first page, a page 50,000 episodes deep (keyset cursor), filtered pages (a task, eval+finished,
//   an agent), each with its bounded count and call totals, as Store::list_episodes answers them;
//   the same deep page as bare SQL by keyset and by OFFSET 50,000 (what keyset paging avoids); one
//   SELECT of every episode row, with and without its call totals.
// Median and p90 of repeated runs on a warm cache (the store fits in the page cache, as on a
// front). Prints a table and appends a dated section to docs/benchmarks.md (not with --smoke or
// --no-append).
//   episode_list_bench [--smoke] [--no-append] [--episodes N] [--keep FILE]
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "common/encoding.h"
#include "store/store.h"

namespace {

namespace fs = std::filesystem;
using ajet::store::EpisodePage;
using ajet::store::EpisodePageRequest;
using ajet::store::Store;
using Clock = std::chrono::steady_clock;

// Episode i: claimed 0.5 s after i-1 (pairs share a claimed_at, as a burst of claims does), task
// task-(i % 500), every 10th an eval, every 20th aborted, a batch (global step) per 64 train
// episodes; two calls: agent solver, then critic on odd episodes, each a 48-token prompt and
// 16-token completion.
double fill(Store& st, int episodes) {
  const auto t0 = Clock::now();
  const double base = 1.7e9;
  std::vector<std::string> batch;
  int64_t batch_id = 0;
  for (int i = 0; i < episodes; ++i) {
    ajet::store::EpisodeRow r;
    r.uuid = ajet::new_uuid_hex();
    r.client_uuid = "client-" + std::to_string(i % 8);
    r.task_id = "task-" + std::to_string(i % 500);
    r.episode_type = i % 10 == 0 ? "eval" : "train";
    r.status = i % 20 == 1 ? ajet::store::kEpisodeAborted : ajet::store::kEpisodeFinished;
    r.claimed_at = base + (i / 2) * 1.0;
    r.ended_at = r.claimed_at + 30;
    r.reward = (i % 7) / 6.0;
    r.is_success = i % 7 >= 4;
    r.metadata = ajet::Json{{"task_id", r.task_id}};
    st.upsert_episode(r);
    for (int c = 0; c < 2; ++c) {
      ajet::store::CallRow call;
      call.episode_uuid = r.uuid;
      call.call_index = c;
      call.agent_name = c == 1 && i % 2 == 1 ? "critic" : "solver";
      call.request_json = R"({"messages":[{"role":"user","content":"Solve the task."}]})";
      call.prompt_ids.assign(48, 100 + c);
      call.message_spans = {{0, 48}};
      call.completion_ids.assign(16, 7);
      call.logprobs.assign(16, -0.25f);
      call.policy_versions.assign(16, 1);
      call.finish_reason = "stop";
      st.put_call(std::move(call));
    }
    if (r.episode_type == "train" && r.status == ajet::store::kEpisodeFinished)
      batch.push_back(r.uuid);
    if (batch.size() == 64) {
      ++batch_id;
      st.put_batch(
          ajet::store::BatchRow{batch_id, batch_id, r.claimed_at, ajet::store::kBatchTrained,
                                r.claimed_at, ajet::Json::object()},
          std::move(batch));
      batch.clear();
    }
  }
  st.flush().get();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Timing {
  double median_ms = 0;
  double p90_ms = 0;
  size_t rows = 0;
};

Timing time_it(int repeats, const std::function<size_t()>& fn) {
  std::vector<double> ms;
  size_t rows = fn();  // warm-up
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    rows = fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)], rows};
}

// The comparisons, on a plain read-only connection to the same file.
class Raw {
 public:
  explicit Raw(const fs::path& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      throw std::runtime_error("cannot open " + path.string());
    }
  }
  ~Raw() { sqlite3_close(db_); }
  // Runs `sql`, reading every column of every row as a list would (text copied out); returns rows.
  size_t read_all(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      throw std::runtime_error(std::string("prepare: ") + sqlite3_errmsg(db_));
    }
    std::vector<std::string> keep;
    size_t rows = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
      ++rows;
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const unsigned char* t = sqlite3_column_text(s, c);
        if (t != nullptr) keep.emplace_back(reinterpret_cast<const char*>(t));
      }
    }
    sqlite3_finalize(s);
    return rows;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  int episodes = 100'000;
  std::string keep;
  ajet::bench::BenchCli cli(
      "episode_list_bench",
      "One page of GET /episodes on a store of 100,000 episodes against loading every episode");
  cli.app()
      .add_option("--episodes", episodes, "Episodes in the store (default 100000)")
      ->check(CLI::Range(100, 100'000'000));
  cli.app().add_option("--keep", keep, "Keep the store in FILE (reused when it exists)");
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  if (smoke) episodes = 3'000;
  const fs::path dir =
      fs::temp_directory_path() / ("ajet_episode_list_bench_" + ajet::new_uuid_hex());
  fs::create_directories(dir);
  const fs::path path = keep.empty() ? dir / "store.db" : fs::path(keep);
  const bool reuse = fs::exists(path);
  const int repeats = smoke ? 3 : 30;

  Store::Options options;
  options.fsync_each_commit = false;
  Store st(path, options);
  const double fill_s = reuse ? 0 : fill(st, episodes);
  std::cout << (reuse ? "reusing " : "filled ") << path << " ("
            << (reuse ? "" : std::to_string(episodes) + " episodes")
            << (reuse ? "" : ", " + std::to_string(fill_s).substr(0, 5) + " s") << ")\n";

  // The cursor 50,000 episodes deep (half way in a smoke run), found by paging there.
  const int deep = std::min(50'000, episodes / 2);
  EpisodePageRequest walk;
  walk.limit = 500;
  int walked = 0;
  const auto walk_t0 = Clock::now();
  while (walked < deep) {
    walk.limit = std::min(500, deep - walked);
    EpisodePage p = st.list_episodes(walk);
    walked += static_cast<int>(p.episodes.size());
    if (!p.next_cursor) break;
    walk.cursor = *p.next_cursor;
  }
  const double walk_s = std::chrono::duration<double>(Clock::now() - walk_t0).count();

  struct Row {
    std::string what;
    Timing t;
  };
  std::vector<Row> rows;
  auto page = [&](const std::string& what, EpisodePageRequest request) {
    rows.push_back(
        {what, time_it(repeats, [&] { return st.list_episodes(request).episodes.size(); })});
  };
  page("first page (limit 50)", EpisodePageRequest{});
  EpisodePageRequest deep_page;
  deep_page.cursor = walk.cursor;
  page("page after " + std::to_string(deep) + " (keyset cursor)", deep_page);
  EpisodePageRequest task;
  task.filter.task_id = "task-17";
  page("task=task-17 (1 in 500)", task);
  EpisodePageRequest eval;
  eval.filter.episode_type = "eval";
  eval.filter.status = "finished";
  page("type=eval&status=finished", eval);
  EpisodePageRequest agent;
  agent.filter.agent_name = "critic";
  agent.filter.is_success = true;
  page("agent=critic&success=true", agent);
  EpisodePageRequest step;
  step.filter.global_step = 100;
  page("step=100", step);

  Raw raw(path);
  const std::string columns =
      "e.uuid, e.task_id, e.client_uuid, e.episode_type, e.status, e.reward, e.is_success, "
      "e.claimed_at, e.ended_at, "
      "e.batch_id";
  // The same deep page as bare SQL both ways: the cursor's seek against OFFSET's walk.
  const ajet::store::EpisodeCursor at = ajet::store::decode_episode_cursor(walk.cursor);
  char seek[128];
  std::snprintf(seek, sizeof(seek), "(e.claimed_at, e.uuid) < (%.17g, '%s')", at.claimed_at,
                at.uuid.c_str());
  rows.push_back(
      {"page after " + std::to_string(deep) + ", bare SQL, keyset", time_it(repeats, [&] {
         return raw.read_all("SELECT " + columns + " FROM episodes e WHERE " + seek +
                             " ORDER BY e.claimed_at DESC, e.uuid DESC LIMIT 50");
       })});
  rows.push_back(
      {"page after " + std::to_string(deep) + ", bare SQL, OFFSET", time_it(repeats, [&] {
         return raw.read_all("SELECT " + columns +
                             " FROM episodes e ORDER BY e.claimed_at DESC, e.uuid "
                             "DESC LIMIT 50 OFFSET " +
                             std::to_string(deep));
       })});
  rows.push_back({"load all: every episode row", time_it(smoke ? 3 : 5, [&] {
                    return raw.read_all("SELECT " + columns + " FROM episodes e");
                  })});
  rows.push_back(
      {"load all: rows + call totals", time_it(smoke ? 3 : 5, [&] {
         return raw.read_all(
             "SELECT " + columns +
             ", count(c.call_index), sum(length(c.prompt_ids)) / 4, "
             "sum(length(c.completion_ids)) / 4, group_concat(DISTINCT c.agent_name) "
             "FROM episodes e LEFT JOIN calls c ON c.episode_uuid = e.uuid GROUP BY e.uuid");
       })});

  const size_t stored = rows[rows.size() - 2].t.rows;  // "load all: every episode row"
  std::ostringstream table;
  table << "| query | rows | median ms | p90 ms |\n|---|---|---|---|\n";
  char line[256];
  for (const Row& r : rows) {
    std::snprintf(line, sizeof(line), "| %s | %zu | %.2f | %.2f |\n", r.what.c_str(), r.t.rows,
                  r.t.median_ms, r.t.p90_ms);
    table << line;
  }
  std::cout << "\n" << table.str();
  std::printf("walking to the deep cursor: %d episodes in pages of 500, %.2f s\n", walked, walk_s);
  std::printf("load average: %s\n", ajet::bench::load_average_text().c_str());
  if (keep.empty()) fs::remove_all(dir);
  if (smoke) return rows[0].t.rows == 50 && rows[1].t.rows == 50 ? 0 : 1;

  if (!cli.append()) return 0;
  std::ostringstream body;
  body << "`bench/store/episode_list_bench`: a store of " << stored
       << " episodes (2 LLM calls each, 48 + 16 tokens a\n"
       << "call; 500 tasks, 1 in 10 eval, a batch per 64 train episodes; pairs of episodes share a "
          "claimed_at), filled\n"
       << "in " << static_cast<int>(fill_s + 0.5)
       << " s. `Store::list_episodes` pages (limit 50) include the bounded count\n"
       << "(exact up to 10,000) and each row's call totals, as the route serves them; median and "
          "p90 of "
       << repeats << " runs,\n"
       << "warm page cache. The comparisons read the same file over a plain SQLite connection. "
          "Load average "
       << ajet::bench::load_average_text() << ".\n\n"
       << table.str();
  ajet::bench::append_to_benchmarks(
      "Episode list: one page of GET /episodes against loading every episode", body.str());
  return 0;
}
