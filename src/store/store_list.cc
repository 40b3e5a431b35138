// Store::list_episodes: one page of episode summaries by keyset paging along the claimed_at index.
//
// Why keyset and not OFFSET: page 1,000 of an OFFSET query reads the 50,000 rows before it; a
// cursor (claimed_at, uuid) of the last row seeks straight to the next one, so every page costs the
// same. In the page query, filters on columns with few distinct values (status, type) are written
// `+e.status` so that SQLite walks the claimed_at index in order and stops after `limit` matches,
// instead of taking episodes_by_status and sorting every finished episode of the run to return 50
// of them. The count has no order to keep, so there they may use episodes_by_status.
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "store/episode_list.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace ajet::store {

namespace {

// A WHERE clause and the values of its ?NNN parameters, in order.
struct ListQuery {
  std::string where;  // " WHERE ..." or ""
  struct Value {
    enum Kind { kText, kInt, kReal } kind = kText;
    std::string text;
    int64_t integer = 0;
    double real = 0;
  };
  std::vector<Value> values;

  void add(const std::string& condition) {
    where += (where.empty() ? " WHERE " : " AND ") + condition;
  }
  // Each returns the placeholder of the value it appends.
  std::string text(std::string v) {
    Value value;
    value.text = std::move(v);
    return push(std::move(value));
  }
  std::string integer(int64_t v) {
    Value value;
    value.kind = Value::kInt;
    value.integer = v;
    return push(std::move(value));
  }
  std::string real(double v) {
    Value value;
    value.kind = Value::kReal;
    value.real = v;
    return push(std::move(value));
  }
  std::string push(Value value) {
    values.push_back(std::move(value));
    return "?" + std::to_string(values.size());
  }
  void bind(Stmt& s) const {
    for (size_t i = 0; i < values.size(); ++i) {
      const int index = static_cast<int>(i + 1);
      switch (values[i].kind) {
        case Value::kText: s.bind(index, std::string_view(values[i].text)); break;
        case Value::kInt: s.bind(index, values[i].integer); break;
        case Value::kReal: s.bind(index, values[i].real); break;
      }
    }
  }
};

// `ordered`: for the page query (see the top of the file); false for the count.
ListQuery filter_query(const EpisodeFilter& f, bool ordered) {
  const std::string plus = ordered ? "+" : "";
  ListQuery q;
  if (f.uuid) q.add("e.uuid = " + q.text(*f.uuid));
  if (f.global_step)
    q.add("e.batch_id IN (SELECT id FROM batches WHERE global_step = " + q.integer(*f.global_step) +
          ")");
  if (f.task_id) q.add("e.task_id = " + q.text(*f.task_id));
  if (f.client_uuid) q.add("e.client_uuid = " + q.text(*f.client_uuid));
  if (f.agent_name) {
    q.add("EXISTS (SELECT 1 FROM calls c WHERE c.episode_uuid = e.uuid AND c.agent_name = " +
          q.text(*f.agent_name) + ")");
  }
  if (f.status) q.add(plus + "e.status = " + q.text(*f.status));
  if (f.episode_type) q.add(plus + "e.episode_type = " + q.text(*f.episode_type));
  if (f.reward_min) q.add("e.reward >= " + q.real(*f.reward_min));
  if (f.reward_max) q.add("e.reward <= " + q.real(*f.reward_max));
  if (f.is_success) q.add("e.is_success = " + q.integer(*f.is_success ? 1 : 0));
  return q;
}

constexpr const char* kSummaryColumns =
    "e.uuid, e.task_id, e.client_uuid, e.episode_type, e.status, e.reward, e.is_success, "
    "e.claimed_at, e.ended_at, "
    "e.batch_id, b.global_step";

// The page query: `limit + 1` rows, the extra one saying whether there is a next page.
std::string page_sql(const EpisodePageRequest& request, ListQuery& q) {
  if (!request.cursor.empty()) {
    EpisodeCursor c = decode_episode_cursor(request.cursor);
    const std::string at =
        q.real(c.claimed_at);  // two statements: the ?NNN numbers follow call order
    const std::string uuid = q.text(c.uuid);
    q.add("(e.claimed_at, e.uuid) < (" + at + ", " + uuid + ")");
  }
  return std::string("SELECT ") + kSummaryColumns +
         " FROM episodes e LEFT JOIN batches b ON b.id = e.batch_id" + q.where +
         " ORDER BY e.claimed_at DESC, e.uuid DESC LIMIT " + q.integer(request.limit + 1);
}

void check_request(const EpisodePageRequest& request) {
  if (request.limit < 1 || request.limit > kEpisodePageMaxLimit) {
    invalid_argument("episode list: limit must be between 1 and " +
                     std::to_string(kEpisodePageMaxLimit) + " (got " +
                     std::to_string(request.limit) + ")");
  }
}

EpisodeSummary read_summary(const Stmt& s) {
  EpisodeSummary e;
  e.uuid = s.column_text(0);
  e.task_id = s.column_text(1);
  e.client_uuid = s.column_text(2);
  e.episode_type = s.column_text(3);
  e.status = s.column_text(4);
  e.reward = s.column_optional_double(5);
  if (auto v = s.column_optional_int(6)) e.is_success = *v != 0;
  e.claimed_at = s.column_double(7);
  e.ended_at = s.column_optional_double(8);
  e.batch_id = s.column_optional_int(9);
  e.global_step = s.column_optional_int(10);
  return e;
}

// Calls, agents and token totals of one episode. length() of a blob reads its size from the record
// header, not the token arrays themselves (int32 and so 4 bytes a token).
void add_call_totals(Db& db, EpisodeSummary& e) {
  Stmt& s = db.prepare(
      "SELECT agent_name, count(*), sum(length(prompt_ids)), sum(length(completion_ids)), "
      "min(call_index) AS first "
      "FROM calls WHERE episode_uuid = ?1 GROUP BY agent_name ORDER BY first");
  s.bind(1, e.uuid);
  while (s.step()) {
    e.agents.push_back(s.column_text(0));
    e.llm_calls += s.column_int(1);
    e.prompt_tokens += s.column_int(2) / 4;
    e.completion_tokens += s.column_int(3) / 4;
  }
  s.reset();
  if (e.llm_calls > 0) return;
  Stmt& dropped = db.prepare("SELECT calls FROM dropped_calls WHERE episode_uuid = ?1");
  dropped.bind(1, e.uuid);
  if (dropped.step()) e.llm_calls_not_retained = dropped.column_int(0);
  dropped.reset();
}

// One read transaction, so the page, its call totals and the count see the same commit.
class ReadSnapshot {
 public:
  explicit ReadSnapshot(Db& db) : db_(db) { db_.exec("BEGIN"); }
  ~ReadSnapshot() {
    try {
      db_.exec("COMMIT");
    } catch (...) {
    }
  }
  ReadSnapshot(const ReadSnapshot&) = delete;
  ReadSnapshot& operator=(const ReadSnapshot&) = delete;

 private:
  Db& db_;
};

}  // namespace

EpisodePage Store::list_episodes(const EpisodePageRequest& request) {
  check_request(request);
  std::lock_guard<std::mutex> lock(reader_mu_);
  Db& db = *reader_db_;
  ReadSnapshot snapshot(db);
  EpisodePage page;

  {
    const ListQuery c = filter_query(request.filter, /*ordered=*/false);
    Stmt count(db, "SELECT count(*) FROM (SELECT 1 FROM episodes e" + c.where + " LIMIT " +
                       std::to_string(kEpisodeCountBound + 1) + ")");
    c.bind(count);
    const int64_t n = count.step() ? count.column_int(0) : 0;
    page.total = std::min(n, kEpisodeCountBound);
    page.total_is_lower_bound = n > kEpisodeCountBound;
  }

  ListQuery q = filter_query(request.filter, /*ordered=*/true);
  Stmt rows(db, page_sql(request, q));
  q.bind(rows);
  while (rows.step()) page.episodes.push_back(read_summary(rows));
  if (page.episodes.size() > static_cast<size_t>(request.limit)) {
    page.episodes.pop_back();
    const EpisodeSummary& last = page.episodes.back();
    page.next_cursor = encode_episode_cursor(last.claimed_at, last.uuid);
  }
  for (EpisodeSummary& e : page.episodes) add_call_totals(db, e);
  return page;
}

std::string Store::list_episodes_plan(const EpisodePageRequest& request) {
  check_request(request);
  std::lock_guard<std::mutex> lock(reader_mu_);
  ListQuery q = filter_query(request.filter, /*ordered=*/true);
  Stmt s(*reader_db_, "EXPLAIN QUERY PLAN " + page_sql(request, q));
  q.bind(s);
  std::string out;
  while (s.step()) out += s.column_text(3) + "\n";
  return out;
}

}  // namespace ajet::store
