// The engine process's RPC methods: `generate` (streamed `tokens` events), `status`, abort and
// client disconnects, bridged onto one InferenceEngine. It owns the rpc::Router that the server
// dispatches to; it never touches sockets (the caller owns the rpc::Server) and never blocks the
// server's I/O thread: generation runs on the engine thread, slow methods on the control thread.
//
// Adding a method (the trainer's train_step, save_checkpoint, ...): `router().add_call(name, fn)`
// for an immediate answer, or `add_control_method(name, fn)` for work that takes long; a control
// method that changes weights calls `engine().run_exclusive(..., bump_version).get()` inside fn.
// In-process use (tests): construct over an engine, hand `router()` to an rpc::Server.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "engine/runtime.h"
#include "rpc/router.h"

namespace ajet::batching {
struct GenerateRequest;
}

namespace ajet::engine {

class TokensEventBuilder;

// A request's hold on its adapter: the slot and identity it runs on, and a pin that keeps the
// adapter in that slot (never moved out) until the request has ended and the pin is dropped.
struct AdapterLease {
  int32_t slot = -1;
  uint64_t uid = 0;
  std::shared_ptr<void> pin;
};

class EngineService {
 public:
  // `engine` must outlive the service. Registers generate, status and the abort/disconnect hooks.
  EngineService(infer::InferenceEngine& engine, ModelInfo model, ComputeInfo compute);
  ~EngineService();  // stop()
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  // What an rpc::Server dispatches to. Register extra methods before the server listens.
  rpc::Router& router() { return router_; }
  infer::InferenceEngine& engine() { return engine_; }

  // A method whose work runs on the service's control thread, one call at a time in arrival order:
  // fn's returned frame is the final `done` reply; a thrown ajet::Error becomes the error reply
  // with its code. Aborts do not interrupt it.
  using ControlMethod = std::function<rpc::Frame(const rpc::Frame& request)>;
  void add_control_method(std::string name, ControlMethod fn);

  // The `status` reply: policy_version, model {path, config, parameters, dtype}, engine {running,
  // waiting, free_blocks, total_blocks, block_size, max_model_len, max_batch_tokens, max_running,
  // steps, tokens_generated, tokens_computed, tokens_prefix_cached, cached_blocks, prefix_caching,
  // preemptions, requests_finished}, compute {device,
  // threads, backend}, rpc {address, generate_requests, request_errors, aborts, disconnects},
  // uptime_s, pid. See docs/engine.md.
  Json status() const;
  // How `generate` turns a request's adapter name into the engine's slot and identity (an
  // AdapterSet's acquire): calls `ready` with the lease once the adapter is in its slot (at once
  // when it is; later, from another thread, when it must come back from disk first), or `failed`.
  // Throws Error (kNotFound naming the served ones) for an unknown name. Without one, a request
  // naming an adapter is refused. Set before the server listens.
  using AdapterResolver =
      std::function<void(const std::string& name, std::function<void(AdapterLease)> ready,
                         std::function<void(const Error&)> failed)>;
  void set_adapter_resolver(AdapterResolver resolver) { resolve_adapter_ = std::move(resolver); }
  // Extra members of the `status` reply (e.g. "adapters"), called on the caller's thread.
  void set_status_extra(std::function<Json()> extra) { status_extra_ = std::move(extra); }

  // The listening address shown by status (known once the server is bound). Thread-safe.
  void set_address(std::string address);

  // Ends the control thread; queued control calls get `unavailable`. Call before stopping the
  // engine; idempotent.
  void stop();

 private:
  struct ControlCall {
    std::string name;
    std::shared_ptr<rpc::ReplySink> sink;
    std::function<void()> run;  // answers through sink
  };
  void generate(rpc::Frame request, std::shared_ptr<rpc::ReplySink> sink);
  void submit(batching::GenerateRequest request, std::shared_ptr<rpc::ReplySink> sink,
              std::shared_ptr<TokensEventBuilder> builder, std::shared_ptr<void> pin);
  void control_loop();

  infer::InferenceEngine& engine_;
  const ModelInfo model_;
  const ComputeInfo compute_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  rpc::Router router_;

  mutable std::mutex mu_;  // guards address_, control_ and stopping_
  std::condition_variable control_wake_;
  std::string address_;
  std::deque<ControlCall> control_;
  bool stopping_ = false;
  std::thread control_thread_;

  AdapterResolver resolve_adapter_;
  std::function<Json()> status_extra_;
  std::atomic<int64_t> generate_requests_{0};
  std::atomic<int64_t> request_errors_{0};  // requests rejected before reaching the engine
  std::atomic<int64_t> aborts_{0};
  std::atomic<int64_t> disconnects_{0};
};

// The engine's name for request `request_id` of connection `connection` ("rpc-3-17").
std::string engine_request_id(rpc::ConnectionId connection, uint64_t request_id);

}  // namespace ajet::engine
