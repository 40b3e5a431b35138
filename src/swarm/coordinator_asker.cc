#include "swarm/coordinator_asker.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/json.h"
#include "common/log.h"
#include "http/client.h"

namespace ajet::swarm {

struct CoordinatorAsker::Shared {
  Options options;
  Settle settle;
  std::mutex mu;  // queue, stopping
  std::mutex
      settle_mu;  // held while `settle` runs; the destructor takes it to wait for the last one
  std::condition_variable cv;
  std::deque<episodes::PendingResolution> queue;
  bool stopping = false;

  bool stopped() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }
  // Delivers a decision unless the asker is gone.
  void deliver(const std::string& episode_uuid, const std::string& decision) {
    std::lock_guard<std::mutex> settling(settle_mu);
    if (stopped()) return;
    settle(episode_uuid, decision);
  }
};

namespace {

// One whole question; the decision, or "unreachable" with the reason in `why`.
std::string ask_once(const episodes::PendingResolution& q, std::chrono::milliseconds deadline,
                     std::string& why) {
  try {
    http::ClientOptions options;
    options.connect_timeout = std::min(deadline, std::chrono::milliseconds(3'000));
    options.timeout = deadline;
    options.total_timeout = deadline;
    options.max_response_bytes = 64 << 10;  // {"decision": "..."}
    http::HttpClient coordinator(q.group.coordinator_url, options);
    http::Headers headers;
    if (!q.group.coordinator_episode_key.empty()) {
      headers.add("Authorization", "Bearer " + q.group.coordinator_episode_key);
    }
    http::ClientResponse r = coordinator.post_json(
        "/resolve_episode_group",
        Json{{"group_id", q.group.group_id}, {"episode_uuid", q.group.coordinator_episode_uuid}},
        headers);
    const Json body = try_parse_json(r.body).value_or(Json());
    if (r.status == 200 && body.is_object() && body.contains("decision") &&
        body["decision"].is_string()) {
      const std::string decision = body["decision"].get<std::string>();
      if (decision == "committed" || decision == "aborted" || decision == "pending")
        return decision;
      why = "an unknown decision";
    } else {
      why = fmt::format("HTTP {}: {}", r.status, r.body.substr(0, 300));
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  return "unreachable";
}

void run(const std::shared_ptr<CoordinatorAsker::Shared>& shared) {
  while (true) {
    episodes::PendingResolution q;
    {
      std::unique_lock<std::mutex> lock(shared->mu);
      shared->cv.wait(lock, [&] { return shared->stopping || !shared->queue.empty(); });
      if (shared->stopping) return;
      q = std::move(shared->queue.front());
      shared->queue.pop_front();
    }
    std::string why;
    const std::string decision = ask_once(q, shared->options.deadline, why);
    if (shared->stopped()) return;  // abandoned: the front is shutting down
    if (decision == "unreachable") {
      log().warn(
          "group {}: episode {} got no decision from its coordinator {} ({}); asked again later",
          q.group.group_id, q.episode_uuid, q.group.coordinator_url, why);
    }
    shared->deliver(q.episode_uuid, decision);
  }
}

}  // namespace

CoordinatorAsker::CoordinatorAsker(Options options, Settle settle)
    : shared_(std::make_shared<Shared>()) {
  shared_->options = options;
  shared_->settle = std::move(settle);
  for (size_t i = 0; i < std::max<size_t>(options.threads, 1); ++i) {
    std::thread([shared = shared_] { run(shared); }).detach();
  }
}

CoordinatorAsker::~CoordinatorAsker() {
  std::lock_guard<std::mutex> settling(shared_->settle_mu);  // no settle runs past this point
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stopping = true;
    shared_->queue.clear();
  }
  shared_->cv.notify_all();
}

void CoordinatorAsker::ask(episodes::PendingResolution question) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->stopping) return;
    if (shared_->queue.size() < shared_->options.max_queued) {
      shared_->queue.push_back(std::move(question));
      shared_->cv.notify_one();
      return;
    }
  }
  log().warn("group {}: {} questions to coordinators wait already; episode {} asks again later",
             question.group.group_id, shared_->options.max_queued, question.episode_uuid);
  shared_->deliver(question.episode_uuid, "unreachable");
}

}  // namespace ajet::swarm
