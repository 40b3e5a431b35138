#include "proxy/group.h"

#include <algorithm>
#include <condition_variable>
#include <future>
#include <thread>
#include <vector>

#include "common/encoding.h"
#include "common/log.h"
#include "http/client.h"
#include "http/response.h"
#include "http/stream.h"

namespace ajet::proxy {

namespace {

using Clock = std::chrono::steady_clock;

// One episode's answer to the application's request, as the front sent it.
struct Answer {
  int status = 0;  // 0: no HTTP answer at all
  http::Headers headers;
  std::string body;  // raw: a JSON body or the whole SSE stream
  bool sse = false;
  std::string text;   // answer_text(), for the judge
  std::string error;  // why it cannot be used; "" when it is a well-formed answer
  bool ok() const { return error.empty(); }
};

// What the application gets back: the answer's status, bytes and the headers that describe them.
http::Response to_response(const Answer& a) {
  http::Response r;
  r.status = a.status;
  r.body = a.body;
  r.headers.set("Content-Type", a.headers.get_or("Content-Type", "application/json"));
  if (a.sse) r.headers.set("Cache-Control", "no-cache");
  if (std::optional<std::string_view> retry = a.headers.get("Retry-After")) {
    r.headers.set("Retry-After", std::string(*retry));
  }
  return r;
}

std::chrono::milliseconds retry_delay(const http::ClientResponse& r) {
  int seconds = 1;
  if (std::optional<std::string_view> v = r.headers.get("Retry-After")) {
    try {
      seconds = std::stoi(std::string(*v));
    } catch (const std::exception&) {
    }
  }
  return std::chrono::seconds(std::clamp(seconds, 1, 5));
}

// Sends the request to one episode. A 503 (the engine trains, restarts) or a refused connection
// is retried until the deadline: the episode stays claimed meanwhile.
Answer call_episode(const client::Episode& episode, const AppRequest& request,
                    const std::string& raw_body, Clock::time_point deadline) {
  Answer a;
  http::Headers headers = {{"Content-Type", "application/json"},
                           {"Authorization", "Bearer " + episode.api_key}};
  if (request.api == Api::kMessages) headers.add("x-api-key", episode.api_key);
  const std::string path(api_path(request.api).substr(3));  // the base URL ends in /v1
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      if (a.error.empty()) a.error = "no answer within the upstream timeout";
      return a;
    }
    http::ClientOptions o;
    o.total_timeout = left;
    o.timeout = left;
    std::chrono::milliseconds wait{1000};
    try {
      http::HttpClient client(episode.base_url, o);
      http::ClientResponse r = client.request("POST", path, headers, raw_body);
      a.status = r.status;
      a.headers = r.headers;
      a.body = std::move(r.body);
      a.sse = a.headers.get_or("Content-Type", "").find("text/event-stream") != std::string::npos;
      if (r.status == 503) {
        a.error = "HTTP 503 from the front";
        wait = retry_delay(r);
      } else if (r.status != 200) {
        a.error = "HTTP " + std::to_string(r.status) + " from the front: " + a.body.substr(0, 300);
        return a;
      } else {
        try {
          a.text = answer_text(request.api, a.body, a.sse);
          a.error.clear();
        } catch (const Error& e) {
          a.error = std::string("malformed answer: ") + e.what();
        }
        return a;
      }
    } catch (const Error& e) {
      a.error = std::string("the front did not answer: ") + e.what();
    }
    std::this_thread::sleep_for(std::min(
        wait, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
  }
}

// The group's shared state while its N answers arrive.
class Progress {
 public:
  Progress(size_t n, ReturnPolicy policy, Api api, http::Respond respond)
      : answers_(n), policy_(policy), api_(api), respond_(std::move(respond)) {}

  // Stores answer i; under the first policy the first well-formed one goes back at once.
  void arrived(size_t i, Answer answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[i] = std::move(answer);
    order_.push_back(i);
    if (policy_ == ReturnPolicy::kFirst && returned_ < 0 && answers_[i].ok()) send(int(i));
  }
  // Sends answer i unless an answer went back already.
  void send_if_none(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    if (returned_ < 0) send(i);
  }
  // Sends an error unless an answer went back already.
  void fail_if_none(http::Response response, ProxyStats& stats) {
    std::lock_guard<std::mutex> lock(mu_);
    if (returned_ >= 0 || errored_) return;
    errored_ = true;
    stats.answered(response.status);
    if (channel_) {
      end_stream(stream_error_event(api_, response.status, response.body));
    } else {
      respond_(std::move(response));
    }
  }
  // A streamed request's sign of life while nothing went back yet: the first call answers the
  // application with an event stream (status 200) at once, and each call writes an SSE comment,
  // which every SSE reader skips. False once an answer or an error went back.
  bool heartbeat() {
    std::lock_guard<std::mutex> lock(mu_);
    if (returned_ >= 0 || errored_) return false;
    if (!channel_) {
      channel_ = std::make_shared<http::ChannelStream>();
      respond_(http::sse_response(channel_));
    }
    channel_->push(": ajet proxy: the answer is not chosen yet\n\n");
    if (stats_ != nullptr) stats_->stream_heartbeat();
    return true;
  }
  // The first well-formed answer to arrive, else -1; the first answer to arrive with an HTTP
  // status.
  int first_ok() const {
    for (size_t i : order_) {
      if (answers_[i].ok()) return int(i);
    }
    return -1;
  }
  int first_with_status() const {
    for (size_t i : order_) {
      if (answers_[i].status != 0) return int(i);
    }
    return -1;
  }
  // Position of answer i in arrival order (ties of rewards go to the earlier).
  size_t arrival(size_t i) const {
    return size_t(std::find(order_.begin(), order_.end(), i) - order_.begin());
  }
  const std::vector<Answer>& answers() const { return answers_; }
  int returned() const {
    std::lock_guard<std::mutex> lock(mu_);
    return returned_;
  }
  void set_stats(ProxyStats* stats) { stats_ = stats; }

 private:
  void send(int i) {
    returned_ = i;
    const Answer& a = answers_[i];
    if (stats_ != nullptr) stats_->answered(a.status);
    if (!channel_) {
      respond_(to_response(a));
    } else if (a.status == 200 && a.sse) {
      end_stream(a.body);          // the episode's whole stream, as the front wrote it
    } else if (a.status != 200) {  // the front's own error, as an error event
      end_stream(stream_error_event(api_, a.status, a.body));
    } else {  // an answer that is not a stream
      const std::string why = "the front answered a streamed request without an event stream";
      end_stream(stream_error_event(api_, 502, api_error(api_, 502, why).body));
    }
  }
  void end_stream(std::string events) {
    channel_->push(std::move(events));
    channel_->close();
  }

  mutable std::mutex mu_;
  std::vector<Answer> answers_;
  std::vector<size_t> order_;  // indices in arrival order
  ReturnPolicy policy_;
  Api api_;
  http::Respond respond_;
  std::shared_ptr<http::ChannelStream> channel_;  // the application's stream, once opened early
  int returned_ = -1;
  bool errored_ = false;
  ProxyStats* stats_ = nullptr;
};

// While a streamed request waits (for its N episodes, their answers, the judge), a thread calls
// Progress::heartbeat() every `period` until something went back; stopped and joined when the
// group's work ends.
class Heartbeat {
 public:
  Heartbeat(Progress& progress, std::chrono::milliseconds period) {
    if (period.count() <= 0) return;
    thread_ = std::thread([this, &progress, period] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, period, [&] { return stop_; })) {
        lock.unlock();
        const bool waiting = progress.heartbeat();
        lock.lock();
        if (!waiting) return;
      }
    });
  }
  ~Heartbeat() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Phase 1: N train episodes, claimed together.
std::vector<client::Episode> claim(const GroupOptions& options, GroupDeps& deps) {
  std::vector<client::Episode> episodes;
  client::ClaimOptions claim;
  claim.discard_episode_timeout = options.discard_episode_timeout;
  claim.episode_type = "train";
  std::lock_guard<std::mutex> lock(deps.claim_mu);
  const auto deadline = Clock::now() + options.claim_timeout;
  try {
    for (int i = 0; i < options.n; ++i) {
      claim.max_wait =
          std::max(0.001, std::chrono::duration<double>(deadline - Clock::now()).count());
      episodes.push_back(deps.front->begin_episode(claim));
    }
  } catch (...) {
    for (const client::Episode& e : episodes)
      deps.front->abort_episode(e.episode_uuid, "proxy_claim");
    throw;
  }
  return episodes;
}

void abort_all(const std::vector<client::Episode>& episodes, const std::string& cause,
               GroupDeps& deps) {
  int64_t aborted = 0;
  for (const client::Episode& e : episodes)
    aborted += deps.front->abort_episode(e.episode_uuid, cause);
  deps.stats->episodes(0, aborted);
}

// Phase 6 (success): every episode ends with its reward under the group's task id. Returns the
// failures' messages ("" when all ended).
std::string end_all(const std::vector<client::Episode>& episodes,
                    const std::vector<double>& rewards, const std::string& task_id,
                    const AppRequest& request, int returned, GroupDeps& deps) {
  std::string failures;
  int64_t ended = 0;
  for (size_t i = 0; i < episodes.size(); ++i) {
    client::WorkflowOutput out;
    out.reward = rewards[i];
    out.metadata = {{"proxy",
                     {{"api", api_name(request.api)},
                      {"stream", request.stream},
                      {"returned", int(i) == returned}}}};
    try {
      if (deps.front->end_episode(task_id, episodes[i].episode_uuid, out) ==
          client::EndResult::kEnded) {
        ++ended;
      }
    } catch (const std::exception& e) {
      failures += (failures.empty() ? "" : "; ") + episodes[i].episode_uuid + ": " + e.what();
    }
  }
  deps.stats->episodes(ended, 0);
  return failures;
}

// Phases 2-3: the request to every episode at once; under the first policy the first well-formed
// answer goes back from inside Progress::arrived().
void fan_out(const std::vector<client::Episode>& episodes, const AppRequest& request,
             const std::string& raw_body, const GroupOptions& options, Progress& progress) {
  const auto deadline = Clock::now() + options.upstream_timeout;
  std::vector<std::future<void>> calls;
  for (size_t i = 0; i < episodes.size(); ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      progress.arrived(i, call_episode(episodes[i], request, raw_body, deadline));
    }));
  }
  for (auto& c : calls) c.get();
}

// An episode without a well-formed answer: the application still gets one when another episode
// has it, else the front's own error as the front wrote it, else a 502 naming what went wrong.
void answer_despite(const std::string& error, Api api, Progress& progress, ProxyStats& stats) {
  if (const int ok = progress.first_ok(); ok >= 0) {
    progress.send_if_none(ok);
  } else if (const int with_status = progress.first_with_status(); with_status >= 0) {
    progress.send_if_none(with_status);
  } else {
    progress.fail_if_none(api_error(api, 502, error), stats);
  }
}

// Phase 4: one reward per answer, or JudgeFailure.
std::vector<double> judge_answers(const AppRequest& request, const std::string& task_id,
                                  const std::vector<Answer>& answers, Judge& judge) {
  JudgeInput input;
  input.api = request.api;
  input.request = &request.body;
  input.question = request_text(request.api, request.body);
  input.task_id = task_id;
  for (const Answer& a : answers) input.answers.push_back(a.text);
  std::vector<double> rewards;
  try {
    rewards = judge.score(input);
  } catch (const JudgeFailure&) {
    throw;
  } catch (const std::exception& e) {  // a judge's own bug counts as its crash
    throw JudgeFailure("crash", e.what());
  }
  if (rewards.size() != answers.size()) {
    throw JudgeFailure("malformed", "the judge gave " + std::to_string(rewards.size()) +
                                        " rewards for " + std::to_string(answers.size()) +
                                        " answers");
  }
  return rewards;
}

// Phase 5: the highest reward; among equals, the answer that was ready first.
size_t best_answer(const std::vector<double>& rewards, const Progress& progress) {
  size_t best = 0;
  for (size_t i = 1; i < rewards.size(); ++i) {
    if (rewards[i] > rewards[best] ||
        (rewards[i] == rewards[best] && progress.arrival(i) < progress.arrival(best))) {
      best = i;
    }
  }
  return best;
}

}  // namespace

void run_group(const AppRequest& request, const std::string& raw_body, const GroupOptions& options,
               GroupDeps& deps, http::Respond respond) {
  const auto started = Clock::now();
  GroupRecord record;
  record.task_id = request.task_id.empty() ? "proxy-" + new_uuid_hex() : request.task_id;
  record.api = std::string(api_name(request.api));
  record.stream = request.stream;
  auto finish = [&](std::string outcome, std::string reason, std::string detail) {
    record.outcome = std::move(outcome);
    record.reason = std::move(reason);
    record.detail = std::move(detail);
    record.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (record.outcome != "trained") {
      log().warn("ajet proxy: group {} dropped ({}): {}", record.task_id, record.reason,
                 record.detail);
    }
    deps.stats->group(std::move(record));
  };

  Progress progress(size_t(options.n), options.policy, request.api, std::move(respond));
  progress.set_stats(deps.stats);
  // A streamed request that waits longer than stream_heartbeat gets its stream opened and a
  // comment every stream_heartbeat: clients and load balancers that close idle connections keep it.
  Heartbeat heartbeat(progress,
                      request.stream ? options.stream_heartbeat : std::chrono::milliseconds(0));

  // 1. Claim N episodes.
  std::vector<client::Episode> episodes;
  try {
    episodes = claim(options, deps);
  } catch (const std::exception& e) {
    progress.fail_if_none(
        api_error(request.api, 503, std::string("the model is busy, try again: ") + e.what()),
        *deps.stats);
    finish("dropped", "claim_failed", e.what());
    return;
  }
  for (const client::Episode& e : episodes) record.episode_uuids.push_back(e.episode_uuid);

  // 2-3. Ask every episode; the first policy answers as soon as one is ready.
  fan_out(episodes, request, raw_body, options, progress);
  const std::vector<Answer>& answers = progress.answers();
  for (const Answer& a : answers) {
    if (a.ok()) continue;
    abort_all(episodes, "proxy_upstream_error", deps);
    answer_despite(a.error, request.api, progress, *deps.stats);
    record.returned = progress.returned();
    finish("dropped", "upstream_error", a.error);
    return;
  }

  // 4. Judge; a failure answers with the first answer ready and drops the group.
  std::vector<double> rewards;
  try {
    rewards = judge_answers(request, record.task_id, answers, *deps.judge);
  } catch (const JudgeFailure& e) {
    deps.stats->judge_failure(e.kind());
    progress.send_if_none(progress.first_ok());
    abort_all(episodes, "proxy_judge_failed", deps);
    record.returned = progress.returned();
    finish("dropped", "judge_failed", e.what());
    return;
  }

  // 5. Return the best (unless the first policy returned one already).
  progress.send_if_none(int(best_answer(rewards, progress)));
  record.returned = progress.returned();
  record.rewards = rewards;

  // 6. End the group with its rewards.
  const std::string failures =
      end_all(episodes, rewards, record.task_id, request, record.returned, deps);
  if (!failures.empty()) {
    finish("dropped", "end_failed", failures);
    return;
  }
  finish("trained", "", "");
}

}  // namespace ajet::proxy
