// The live-traffic proxy (`ajet proxy`, docs/proxy.md): an ordinary OpenAI / Anthropic endpoint
// for a user's application, backed by a training swarm front. Each application request becomes a
// group (group.h): N episodes answer it, a judge scores them, one answer goes back, and the N train
// the policy as one GRPO group. This file is the HTTP surface: one table of routes, admission (a
// bound on requests in flight, the optional application key and admin token, body limits) and the
// statistics endpoints. It never links libtorch and never dials anything but the front and the
// judge the operator named.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "client/swarm_client.h"
#include "http/router.h"
#include "proxy/group.h"
#include "proxy/judge.h"
#include "proxy/stats.h"

namespace ajet::proxy {

struct ProxyOptions {
  std::string front_url;  // the training front, "http://127.0.0.1:10086"
  GroupOptions group;
  size_t max_in_flight = 64;  // application requests at once; more → 503
  size_t max_body_bytes = size_t(16) << 20;
  std::string api_key;      // when set, the application must send it (Bearer or x-api-key)
  std::string admin_token;  // when set, GET /proxy/stats needs it
  std::string model_name = "agentjet";  // what GET /v1/models lists
  // The front's inference key (ajet-swarm start --inference-key): when set, POST
  // /v1/messages/count_tokens is answered by the front under it (nothing is tracked or trained).
  std::string front_inference_key;
  std::chrono::milliseconds count_tokens_timeout{60'000};
};

class Proxy {
 public:
  // Connects nothing yet: the first request claims from the front.
  Proxy(ProxyOptions options, std::unique_ptr<Judge> judge);
  // Waits for every group in flight to end (their episodes ended or aborted).
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // The routes: POST /v1/chat/completions, /v1/responses, /v1/messages; GET /v1/models,
  // /proxy/stats, /metrics, /health. The router refers to this Proxy: keep it alive while serving.
  http::Router router();
  // Blocks until no group is in flight.
  void drain();
  ProxyStats& stats() { return stats_; }
  const ProxyOptions& options() const { return options_; }

 private:
  void handle(Api api, http::Request request, http::Respond respond);
  // POST /v1/messages/count_tokens: forwarded to the front under front_inference_key.
  void count_tokens(http::Request request, http::Respond respond);
  // Counts one request in flight; false (and a 503 in the API's shape answered) at the limit.
  bool admit(Api api, const http::Respond& respond);
  void release();

  ProxyOptions options_;
  std::unique_ptr<Judge> judge_;
  client::SwarmClient front_;
  ProxyStats stats_;
  GroupDeps deps_;
  std::mutex mu_;
  std::condition_variable idle_;
  size_t in_flight_ = 0;
};

// The front's GRPO group size (pool info `task_expected_num_repeat`), what --n defaults to.
// Throws Error(kUnavailable) naming the URL when the front does not answer.
int front_num_repeat(const std::string& front_url);

}  // namespace ajet::proxy
