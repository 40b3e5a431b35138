// The study's journal: one SQLite file (`journal.sqlite` in the study directory) that holds
// everything the controller knows — the frozen study text, every trial (parameters, seed, status,
// attempts, running time, result, log tail), every validation value it read, and every decision
// with its reason and numbers. Every state change is one transaction, so a controller killed at any
// point leaves the journal at the last whole decision; `ajet research resume` starts from it. The
// journal never starts or stops processes. One writer (the controller, under the study's lock);
// readers
// (`ajet research status`) may open it at any time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "research/study.h"

namespace ajet::store {
class Db;
}

namespace ajet::research {

// pending → running → completed (reached the objective step) | stopped (pruned, plateau, time) |
// failed (crashed max_attempts times). A running trial whose controller died stays running in the
// journal; resume continues it.
inline constexpr const char* kPending = "pending";
inline constexpr const char* kRunning = "running";
inline constexpr const char* kCompleted = "completed";
inline constexpr const char* kStopped = "stopped";
inline constexpr const char* kFailed = "failed";

struct TrialRow {
  int64_t id = 0;
  std::string name;                 // t001, ... (its experiment directory under trials/)
  int64_t round = 0;                // 0: confirmation
  std::string role = "search";      // search | base (the base config searched with) | confirm
  std::optional<int64_t> confirms;  // confirm: the trial whose configuration it re-runs
  Params params;                    // empty for the base config
  int64_t seed = 0;
  std::string status = kPending;
  std::string reason;            // why it stopped or failed
  int64_t attempts = 0;          // launches that ended in a crash
  int64_t launches = 0;          // every launch (resumes after a controller restart included)
  double runtime_s = 0;          // running time over all launches
  std::optional<double> result;  // the objective at objective.step
  std::string error;             // the log tail of the last crash
  std::optional<int64_t>
      revalidate;  // its run lost this step's validation: a val_only run redoes it
};

struct Point {
  int64_t trial = 0;
  int64_t step = 0;
  double value = 0;
};

struct Decision {
  int64_t id = 0;
  std::string time;  // local time
  std::string kind;  // plan, launch, promote, stop, plateau, retry, fail, complete, round, confirm,
                     // conclude, ...
  std::optional<int64_t> trial;
  std::string reason;
  Json numbers;
};

class Journal {
 public:
  // Opens (creating) the journal; throws Error(kIo) naming the file.
  explicit Journal(const std::filesystem::path& file);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Runs `body` in one transaction (BEGIN IMMEDIATE … COMMIT); an exception rolls it back.
  // Test hook: $AJET_RESEARCH_KILL_AT=N makes this process SIGKILL itself at its N-th transaction,
  // before the commit when $AJET_RESEARCH_KILL_BEFORE_COMMIT=1, else just after it.
  void transaction(const std::function<void()>& body);

  std::optional<std::string> meta(const std::string& key);
  // meta(key) as a number, nullopt when absent. A value that is not one (a hand-edited or damaged
  // journal) is Error(kInvalidArgument) naming the key, the value and the journal's file.
  std::optional<int64_t> meta_int(const std::string& key);
  std::optional<double> meta_double(const std::string& key);
  void set_meta(const std::string& key, const std::string& value);

  int64_t add_trial(const TrialRow& row);  // returns the id; the row's name is written as given
  void update_trial(const TrialRow& row);
  std::vector<TrialRow> trials();
  TrialRow trial(int64_t id);

  // Records a validation value; false when (trial, step) was already recorded (the first one
  // stays).
  bool add_point(int64_t trial, int64_t step, double value);
  std::vector<Point> points(std::optional<int64_t> trial = std::nullopt);

  // A trial's result at a successive-halving rung (measured at `step`: the rung's own validation,
  // or the first one after it when a resumed run lost that one); false when already recorded.
  bool add_rung(int64_t trial, int64_t rung, double value, int64_t step);
  // Every result at `rung`: trial -> value.
  std::map<int64_t, double> rung_values(int64_t rung);

  void add_decision(const std::string& kind, std::optional<int64_t> trial,
                    const std::string& reason, const Json& numbers = Json::object());
  std::vector<Decision> decisions();

 private:
  std::unique_ptr<store::Db> db_;
  int64_t transactions_ = 0;
  int64_t kill_at_ = 0;
  bool kill_before_commit_ = false;
};

}  // namespace ajet::research
