#include "store/ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace ajet::store {

namespace {
constexpr size_t kKeysNamed = 10;  // a summary names this many skipped / duplicated rows

void note_key(std::vector<std::string>& keys, const std::string& key) {
  if (keys.size() < kKeysNamed) keys.push_back(key);
}
}  // namespace

Json LedgerRow::to_json() const {
  return Json{{"key", key},
              {"task_id", task_id},
              {"source", source},
              {"seq", seq},
              {"drawn_step", drawn_step},
              {"state", state},
              {"step", step ? Json(*step) : Json(nullptr)},
              {"reason", reason},
              {"consumed", consumed},
              {"attempts", attempts},
              {"batch_id", batch_id ? Json(*batch_id) : Json(nullptr)},
              {"updated_at", updated_at}};
}

std::string draw_key(const std::string& source, int64_t seq) {
  return fmt::format("draw:{}:{}", source, seq);
}

bool reconcile_row(LedgerRow& row, int64_t version) {
  if (row.state == kLedgerInFlight || !row.step || *row.step <= version) return false;
  if (row.state == kLedgerDropped && row.reason == kDropInfraFailure) return false;
  // An episode left out for staleness was in no batch: no replay would train it, and the decision
  // holds for any weights. (A draw row of it is drawn again by a resumed launcher.)
  if (row.seq < 0 && row.reason == kDropStale) return false;
  row.state = kLedgerInFlight;
  row.step.reset();
  row.reason.clear();
  row.batch_id.reset();
  row.consumed = std::max<int64_t>(0, row.consumed - 1);
  row.attempts += 1;  // it trains again
  return true;
}

LedgerRow redraw_row(LedgerRow row, int64_t step, double now) {
  row.attempts += 1;
  row.updated_at = now;
  const bool consumed = row.state == kLedgerTrained ||
                        (row.state == kLedgerDropped && row.reason != kDropInfraFailure);
  if (consumed) return row;
  row.state = kLedgerInFlight;
  row.drawn_step = step;
  row.step.reset();
  row.reason.clear();
  row.batch_id.reset();
  return row;
}

LedgerSummary summarize(const std::vector<LedgerRow>& rows, int64_t through_step) {
  LedgerSummary s;
  s.through_step = through_step;
  std::map<std::string, std::set<int64_t>> seqs;  // per task stream, the positions drawn
  for (const LedgerRow& r : rows) {
    s.rows += 1;
    if (r.attempts > 1) s.redone += 1;
    if (r.seq >= 0) seqs[r.source].insert(r.seq);
    if (r.consumed > 1) {
      s.duplicated += 1;
      note_key(s.duplicated_keys, r.key);
    }
    if (r.state == kLedgerTrained) {
      s.trained += 1;
    } else if (r.state == kLedgerDropped) {
      s.dropped[r.reason] += 1;
    } else {
      s.in_flight += 1;
      if (r.drawn_step <= through_step) {
        s.skipped += 1;
        note_key(s.skipped_keys, r.key);
      }
    }
  }
  // A stream is read in order: a position below the furthest one drawn that was never drawn was
  // passed over (a cursor restored too far).
  for (const auto& [source, drawn] : seqs) {
    int64_t expect = 0;
    for (const int64_t seq : drawn) {
      for (; expect < seq; ++expect) {
        s.skipped += 1;
        note_key(s.skipped_keys, draw_key(source, expect) + " (never drawn)");
      }
      expect = seq + 1;
    }
  }
  return s;
}

Json LedgerSummary::to_json() const {
  Json by_reason = Json::object();
  int64_t dropped_total = 0;
  for (const auto& [reason, n] : dropped) {
    by_reason[reason] = n;
    dropped_total += n;
  }
  return Json{{"through_step", through_step},
              {"rows", rows},
              {"trained", trained},
              {"in_flight", in_flight},
              {"dropped", dropped_total},
              {"dropped_by_reason", std::move(by_reason)},
              {"redone", redone},
              {"skipped", skipped},
              {"duplicated", duplicated},
              {"skipped_keys", skipped_keys},
              {"duplicated_keys", duplicated_keys}};
}

}  // namespace ajet::store
