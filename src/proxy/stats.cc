#include "proxy/stats.h"

#include "common/prometheus_text.h"

namespace ajet::proxy {

Json GroupRecord::to_json() const {
  return {{"task_id", task_id}, {"api", api},
          {"stream", stream},   {"episode_uuids", episode_uuids},
          {"rewards", rewards}, {"returned", returned},
          {"outcome", outcome}, {"reason", reason},
          {"detail", detail},   {"seconds", seconds}};
}

void ProxyStats::request(const std::string& api) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[api];
}

void ProxyStats::answered(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++answers_[status];
}

void ProxyStats::group(GroupRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (record.outcome == "trained") {
    ++groups_trained_;
    for (double r : record.rewards) reward_sum_ += r;
    reward_count_ += static_cast<int64_t>(record.rewards.size());
    if (record.returned >= 0 && static_cast<size_t>(record.returned) < record.rewards.size()) {
      returned_reward_sum_ += record.rewards[record.returned];
      ++returned_count_;
    }
  } else {
    ++groups_dropped_[record.reason];
  }
  recent_.push_back(std::move(record));
  while (recent_.size() > kRecentGroups) recent_.pop_front();
}

void ProxyStats::judge_failure(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  ++judge_failures_[kind];
}

void ProxyStats::episodes(int64_t ended, int64_t aborted) {
  std::lock_guard<std::mutex> lock(mu_);
  episodes_ended_ += ended;
  episodes_aborted_ += aborted;
}

void ProxyStats::in_flight(int delta) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ += delta;
}

void ProxyStats::stream_heartbeat() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stream_heartbeats_;
}

Json ProxyStats::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  Json answers = Json::object();
  int64_t requests_total = 0;
  for (const auto& [api, n] : requests_) requests_total += n;
  for (const auto& [status, n] : answers_) answers[std::to_string(status)] = n;
  int64_t dropped_total = 0;
  for (const auto& [reason, n] : groups_dropped_) dropped_total += n;
  Json recent = Json::array();
  for (const GroupRecord& g : recent_) recent.push_back(g.to_json());
  return {
      {"requests", requests_total},
      {"requests_by_api", requests_},
      {"answers_by_status", answers},
      {"in_flight", in_flight_},
      {"stream_heartbeats", stream_heartbeats_},
      {"groups_trained", groups_trained_},
      {"groups_dropped", dropped_total},
      {"groups_dropped_by_reason", groups_dropped_},
      {"judge_failures_by_kind", judge_failures_},
      {"episodes_ended", episodes_ended_},
      {"episodes_aborted", episodes_aborted_},
      {"reward_mean", reward_count_ ? Json(reward_sum_ / double(reward_count_)) : Json(nullptr)},
      {"returned_reward_mean",
       returned_count_ ? Json(returned_reward_sum_ / double(returned_count_)) : Json(nullptr)},
      {"recent_groups", recent}};
}

std::string ProxyStats::prometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  using prometheus::Type;
  prometheus::TextBuilder out;
  out.family("ajet_proxy_requests_total", Type::kCounter, "Application requests, by API.");
  for (const auto& [api, n] : requests_) out.sample({{"api", api}}, double(n));
  out.family("ajet_proxy_answers_total", Type::kCounter,
             "Application requests answered, by HTTP status.");
  for (const auto& [status, n] : answers_)
    out.sample({{"code", std::to_string(status)}}, double(n));
  out.family("ajet_proxy_groups_trained_total", Type::kCounter,
             "Groups whose episodes were ended with the judge's rewards.");
  out.sample({}, double(groups_trained_));
  out.family("ajet_proxy_groups_dropped_total", Type::kCounter,
             "Groups whose episodes were aborted (not trained), by reason.");
  for (const auto& [reason, n] : groups_dropped_) out.sample({{"reason", reason}}, double(n));
  out.family("ajet_proxy_judge_failures_total", Type::kCounter, "Judge failures, by kind.");
  for (const auto& [kind, n] : judge_failures_) out.sample({{"kind", kind}}, double(n));
  out.family("ajet_proxy_episodes_ended_total", Type::kCounter, "Episodes ended with a reward.");
  out.sample({}, double(episodes_ended_));
  out.family("ajet_proxy_episodes_aborted_total", Type::kCounter, "Episodes aborted.");
  out.sample({}, double(episodes_aborted_));
  out.family("ajet_proxy_in_flight", Type::kGauge, "Application requests being handled.");
  out.sample({}, double(in_flight_));
  out.family("ajet_proxy_stream_heartbeats_total", Type::kCounter,
             "SSE comments written to streamed requests waiting for their answer.");
  out.sample({}, double(stream_heartbeats_));
  return out.take();
}

}  // namespace ajet::proxy
