// What the proxy has done since it started: requests by API, groups trained or dropped (and why),
// judge failures by kind, episodes ended and aborted, and the last groups in detail. Read by
// GET /proxy/stats (JSON) and GET /metrics (Prometheus text). Thread-safe; never blocks on I/O.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::proxy {

// One request's group, as it ended.
struct GroupRecord {
  std::string task_id;
  std::string api;
  bool stream = false;
  std::vector<std::string> episode_uuids;
  std::vector<double> rewards;  // empty unless judged
  int returned = -1;            // the answer the application got (-1: an error)
  std::string outcome;          // "trained" | "dropped"
  std::string reason;  // why dropped: "judge_failed", "upstream_error", "claim_failed", …
  std::string detail;  // the message of the failure
  double seconds = 0;  // from the request to the last episode ended or aborted
  Json to_json() const;
};

class ProxyStats {
 public:
  static constexpr size_t kRecentGroups = 64;

  void request(const std::string& api);
  void answered(int status);  // one application request answered with this status
  void group(GroupRecord record);
  void judge_failure(const std::string& kind);
  void episodes(int64_t ended, int64_t aborted);
  void in_flight(int delta);
  void stream_heartbeat();  // one SSE comment written to a streamed request that waits

  Json to_json() const;
  std::string prometheus() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> requests_;  // by API
  std::map<int, int64_t> answers_;           // by HTTP status
  int64_t groups_trained_ = 0;
  std::map<std::string, int64_t> groups_dropped_;  // by reason
  std::map<std::string, int64_t> judge_failures_;  // by kind
  int64_t episodes_ended_ = 0;
  int64_t episodes_aborted_ = 0;
  int64_t in_flight_ = 0;
  int64_t stream_heartbeats_ = 0;
  double reward_sum_ = 0;  // of the trained groups' episodes
  int64_t reward_count_ = 0;
  double returned_reward_sum_ = 0;  // of the answers returned from trained groups
  int64_t returned_count_ = 0;
  std::deque<GroupRecord> recent_;
};

}  // namespace ajet::proxy
