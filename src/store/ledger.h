// The task ledger: one row per task drawn (classic mode: each draw of a task from its stream, keyed
// by the stream position) or per acknowledged train episode (swarm mode, keyed by the episode),
// with what became of it: in flight, trained into policy version N, or dropped and why. It lives in
// the front's store. Its "trained at N" is committed before the checkpoint of step N is written, so
// after any kill the ledger is at most ahead of the checkpoint, never behind; reconciling it with
// the version the restarted engine serves puts the rows of the lost steps back in flight, and they
// are trained again. Plain data and pure functions here; the SQL is in store_ledger.cc. It never
// decides what trains: it records it, and says what was skipped or trained twice.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::store {

// Row states.
inline constexpr const char* kLedgerInFlight = "in_flight";  // drawn, not yet in trained weights
inline constexpr const char* kLedgerTrained = "trained";
inline constexpr const char* kLedgerDropped = "dropped";
// Why a row was dropped.
inline constexpr const char* kDropZeroVariance = "zero_variance";  // equal rewards in its group,
                                                                   // drop_zero_variance_groups on
inline constexpr const char* kDropStale = "stale";  // async: every episode past max_staleness
inline constexpr const char* kDropInfraFailure = "infra_failure";  // the trainer refused the batch
// Dynamic sampling: a later batch of the same step drew the task again; the step holds it once.
inline constexpr const char* kDropRepeatInStep = "repeat_in_step";

struct LedgerRow {
  std::string key;      // "draw:<source>:<seq>" (classic) or "episode:<uuid>" (swarm)
  std::string task_id;  // the GRPO group
  std::string source;   // the task stream ("tasks", or a cocktail task's name); "" for episodes
  int64_t seq = -1;     // position in the source's stream (epoch * size + index); -1 for episodes
  // Classic: the launcher step that drew it (the step its batch trains into). Swarm: the step its
  // batch trained into the first time.
  int64_t drawn_step = 0;
  std::string state = kLedgerInFlight;
  std::optional<int64_t> step;  // trained or dropped: the policy version its batch trained into
  std::string reason;           // dropped: one of the kDrop* reasons
  // Times the row counted as trained or dropped in weights that still hold it (an infra failure
  // does not count). 1 when done; more than 1: trained twice.
  int64_t consumed = 0;
  int64_t attempts = 1;  // draws and rollbacks of the row; > 1: redone after a kill
  std::optional<int64_t> batch_id;
  double updated_at = 0;  // unix seconds
  Json to_json() const;
};

// "draw:tasks:17": the ledger key of position `seq` of task stream `source`.
std::string draw_key(const std::string& source, int64_t seq);

// The engine serves policy version `version` (the checkpoint it resumed from): a row consumed in a
// later step is no longer in the weights; it goes back in flight (to be trained again) and counts
// once less. Rows at or before `version`, rows in flight, infra failures, and episodes left out
// for staleness (in no batch, so no replay trains them) are left alone.
// Returns whether the row changed.
bool reconcile_row(LedgerRow& row, int64_t version);

// A row drawn again (a resumed run replays its draws; a redo draws a rolled-back row again): in
// flight once more, unless it is consumed (then the draw is a mistake the next mark shows as a
// duplicate). Returns the row to write.
LedgerRow redraw_row(LedgerRow row, int64_t step, double now);

struct LedgerSummary {
  int64_t through_step = 0;  // the policy version the weights hold (the front's global step)
  int64_t rows = 0, trained = 0, in_flight = 0, redone = 0;
  std::map<std::string, int64_t> dropped;  // by reason
  // Skipped: a row still in flight although it was drawn at a step the weights already passed,
  // or a position of a task stream below a drawn one that was never drawn. Duplicated: a row
  // counted in the weights more than once.
  int64_t skipped = 0, duplicated = 0;
  std::vector<std::string> skipped_keys, duplicated_keys;  // the first few
  Json to_json() const;
};

// The summary of `rows` for weights at policy version `through_step`.
LedgerSummary summarize(const std::vector<LedgerRow>& rows, int64_t through_step);

// What became of one batch, for Store::ledger_mark_batch.
struct LedgerBatch {
  struct Episode {
    std::string uuid, task_id;
  };
  int64_t batch_id = 0;
  int64_t step = 0;  // the policy version it trained into (or, failed: the front's global step)
  std::vector<Episode> trained;                  // the episodes in the loss (their tasks' groups)
  std::vector<std::string> zero_variance_tasks;  // of `trained`: groups dropped for equal rewards
  std::vector<Episode> stale;                    // async: left out for staleness
  std::optional<std::string> failed;             // the trainer refused the batch: why
};

}  // namespace ajet::store
