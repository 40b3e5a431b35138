// Test double of the engine behind the RPC (the real engine gets its own RPC tests): one engine
// thread that owns every request and streams deterministic tokens, one token per sample per step,
// round-robin over all requests, through the ReplySinks, exactly as the real engine thread will.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <thread>

#include "rpc/messages.h"
#include "rpc/router.h"

namespace ajet::rpc::testing {

inline constexpr int32_t kFakeVocab = 1000;
inline constexpr int64_t kFakePolicyVersion = 3;
inline constexpr int kHoldAfterTokens =
    3;  // tag "hold": stream this many tokens, then wait for an abort

// Token `t` of sample `s` for `prompt`; its logprobs and top alternatives follow from it.
inline int32_t fake_token(const std::vector<int32_t>& prompt, int s, int t) {
  int64_t sum = 0;
  for (int32_t id : prompt) sum += id;
  return static_cast<int32_t>((sum + 7 * s + t) % kFakeVocab);
}
inline float fake_logprob(int t) { return -0.01f * static_cast<float>(t + 1); }
inline float fake_raw_logprob(int t) { return -0.02f * static_cast<float>(t + 1); }

class FakeEngine {
 public:
  FakeEngine() {
    router_.add(
        std::string(kMethodGenerate), [this](Frame request, std::shared_ptr<ReplySink> sink) {
          GenerateRequest g = decode_generate_request(request);  // throws → error reply
          for (size_t i = 0; i < g.prompt.size(); ++i) {
            if (g.prompt[i] >= kFakeVocab) {
              invalid_argument("generate: prompt[" + std::to_string(i) +
                               "] = " + std::to_string(g.prompt[i]) +
                               " is outside the vocabulary of " + std::to_string(kFakeVocab));
            }
          }
          std::lock_guard lk(mu_);
          inbox_.push_back(Inbox{
              Inbox::kRequest, sink->connection_id(), sink->request_id(), std::move(g), sink, {}});
          ++received_;
          cv_.notify_all();
        });
    router_.add_call(std::string(kMethodStatus), [this](const Frame&) {
      Frame f;
      f.body = {{"policy_version", kFakePolicyVersion},
                {"model", {{"name", "fake"}}},
                {"received", received()}};
      return f;
    });
    // Replies with a u8 array of body.bytes bytes (size-limit tests).
    router_.add_call("big", [](const Frame& request) {
      Frame f;
      f.add_array("blob", std::vector<uint8_t>(get_int(request.body, "bytes", "big"), 7));
      return f;
    });
    router_.add("throw", [](Frame, std::shared_ptr<ReplySink>) {
      throw Error(ErrorCode::kFailedPrecondition, "throw: the engine is not ready");
    });
    router_.add("drop",
                [](Frame, std::shared_ptr<ReplySink>) {});  // forgets the sink: an internal error
    router_.set_on_abort([this](ConnectionId connection, uint64_t id) {
      std::lock_guard lk(mu_);
      inbox_.push_back(Inbox{Inbox::kAbort, connection, id, {}, nullptr, {}});
      ++aborts_;
      cv_.notify_all();
    });
    router_.set_on_disconnect([this](ConnectionId connection, std::vector<uint64_t> in_flight) {
      std::lock_guard lk(mu_);
      inbox_.push_back(Inbox{Inbox::kDisconnect, connection, 0, {}, nullptr, in_flight});
      disconnects_.push_back(std::move(in_flight));
      cv_.notify_all();
    });
    thread_ = std::thread([this] { run(); });
  }

  ~FakeEngine() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

  Router& router() { return router_; }

  // The engine thread starts stepping only once this many generate requests have arrived, so
  // their replies are guaranteed to interleave.
  void set_gate(size_t requests) {
    std::lock_guard lk(mu_);
    gate_ = requests;
    cv_.notify_all();
  }

  size_t received() {
    std::lock_guard lk(mu_);
    return received_;
  }
  size_t aborts() {
    std::lock_guard lk(mu_);
    return aborts_;
  }
  // Blocks until `count` disconnects were reported; returns their in-flight id lists.
  std::vector<std::vector<uint64_t>> wait_disconnects(size_t count) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return disconnects_.size() >= count; });
    return disconnects_;
  }
  // Blocks until `count` aborts were received.
  void wait_aborts(size_t count) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return aborts_ >= count; });
  }

 private:
  struct Inbox {
    enum Kind { kRequest, kAbort, kDisconnect } kind;
    ConnectionId connection;
    uint64_t id;
    GenerateRequest request;
    std::shared_ptr<ReplySink> sink;
    std::vector<uint64_t> ids;
  };
  struct Running {
    ConnectionId connection;
    uint64_t id;
    GenerateRequest request;
    std::shared_ptr<ReplySink> sink;
    std::vector<int> produced;
    std::vector<bool> finished;
    bool aborted = false;
    int64_t completion = 0;
  };

  bool runnable(const Running& r) const {
    if (r.aborted) return true;
    for (size_t s = 0; s < r.produced.size(); ++s) {
      if (!r.finished[s] && (r.request.tag != "hold" || r.produced[s] < kHoldAfterTokens))
        return true;
    }
    return false;
  }

  void finish_sample(Running& r, int s, FinishReason reason, TokensEvent e) {
    r.finished[s] = true;
    e.finish_reason = reason;
    e.prompt_tokens = static_cast<int64_t>(r.request.prompt.size());
    e.completion_tokens = r.produced[s];
    r.sink->reply(encode_tokens_event(e));
  }

  // One step of one request: one token for every unfinished sample (or the abort finals).
  void step(Running& r) {
    for (int s = 0; s < r.request.n; ++s) {
      if (r.finished[s]) continue;
      TokensEvent e;
      e.sample = s;
      if (r.aborted) {
        finish_sample(r, s, FinishReason::kAbort, std::move(e));
        continue;
      }
      if (r.request.tag == "hold" && r.produced[s] >= kHoldAfterTokens) continue;
      int t = r.produced[s]++;
      ++r.completion;
      int32_t token = fake_token(r.request.prompt, s, t);
      e.token_ids = {token};
      e.logprobs = {fake_logprob(t)};
      e.raw_logprobs = {fake_raw_logprob(t)};
      e.policy_versions = {kFakePolicyVersion};
      e.top_k = r.request.top_logprobs;
      for (int j = 0; j < e.top_k; ++j) {
        e.top_ids.push_back((token + 1 + j) % kFakeVocab);
        e.top_logprobs.push_back(fake_logprob(t) - static_cast<float>(j + 1));
      }
      const auto& stops = r.request.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        finish_sample(r, s, FinishReason::kStop, std::move(e));
      } else if (r.produced[s] >= r.request.max_tokens) {
        finish_sample(r, s, FinishReason::kLength, std::move(e));
      } else {
        r.sink->reply(encode_tokens_event(e));
      }
    }
    if (std::all_of(r.finished.begin(), r.finished.end(), [](bool b) { return b; })) {
      r.sink->done(
          encode_generate_done({static_cast<int64_t>(r.request.prompt.size()), r.completion}));
    }
  }

  void run() {
    std::list<Running> active;
    bool any_runnable = false;
    while (true) {
      std::deque<Inbox> inbox;
      bool gate_open = false;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk,
                 [&] { return stop_ || !inbox_.empty() || (any_runnable && received_ >= gate_); });
        if (stop_) return;
        inbox.swap(inbox_);
        gate_open = received_ >= gate_;
      }
      for (auto& m : inbox) {
        if (m.kind == Inbox::kRequest) {
          int n = m.request.n;
          active.push_back(Running{m.connection, m.id, std::move(m.request), std::move(m.sink),
                                   std::vector<int>(n, 0), std::vector<bool>(n, false)});
        } else if (m.kind == Inbox::kAbort) {
          for (auto& r : active) {
            if (r.connection == m.connection && r.id == m.id) r.aborted = true;
          }
        } else {
          // The peer is gone: drop its requests (their sinks would refuse every frame anyway).
          active.remove_if([&](const Running& r) { return r.connection == m.connection; });
        }
      }
      if (gate_open) {
        for (auto& r : active) {
          if (runnable(r)) step(r);
        }
        active.remove_if([](const Running& r) { return r.sink->finished(); });
      }
      any_runnable =
          std::any_of(active.begin(), active.end(), [&](const Running& r) { return runnable(r); });
    }
  }

  Router router_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Inbox> inbox_;
  std::vector<std::vector<uint64_t>> disconnects_;
  size_t received_ = 0;
  size_t aborts_ = 0;
  size_t gate_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ajet::rpc::testing
