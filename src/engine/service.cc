#include "engine/service.h"

#include <tuple>

#include <unistd.h>

#include "common/log.h"
#include "engine/bridge.h"
#include "infer/engine.h"
#include "rpc/messages.h"

namespace ajet::engine {

std::string engine_request_id(rpc::ConnectionId connection, uint64_t request_id) {
  return "rpc-" + std::to_string(connection) + "-" + std::to_string(request_id);
}

EngineService::EngineService(infer::InferenceEngine& engine, ModelInfo model, ComputeInfo compute)
    : engine_(engine), model_(std::move(model)), compute_(std::move(compute)) {
  router_.add(std::string(rpc::kMethodGenerate),
              [this](rpc::Frame request, std::shared_ptr<rpc::ReplySink> sink) {
                generate(std::move(request), std::move(sink));
              });
  router_.add_call(std::string(rpc::kMethodStatus), [this](const rpc::Frame&) {
    rpc::Frame reply;
    reply.body = status();
    return reply;
  });
  // Both hooks run on the I/O thread after the request's on_request, so the engine sees the
  // submission before the abort. Unknown ids (finished, rejected, control calls) are ignored there.
  router_.set_on_abort([this](rpc::ConnectionId connection, uint64_t id) {
    aborts_.fetch_add(1);
    engine_.abort(engine_request_id(connection, id));
  });
  router_.set_on_disconnect([this](rpc::ConnectionId connection, std::vector<uint64_t> in_flight) {
    disconnects_.fetch_add(1);
    if (!in_flight.empty()) {
      log().info("engine RPC: connection {} closed with {} requests in flight; aborting them",
                 connection, in_flight.size());
    }
    for (uint64_t id : in_flight) engine_.abort(engine_request_id(connection, id));
  });
  control_thread_ = std::thread([this] { control_loop(); });
}

EngineService::~EngineService() { stop(); }

void EngineService::generate(rpc::Frame request, std::shared_ptr<rpc::ReplySink> sink) {
  generate_requests_.fetch_add(1);
  rpc::GenerateRequest g;
  try {
    g = rpc::decode_generate_request(request);
  } catch (const Error&) {
    request_errors_.fetch_add(1);
    throw;  // the router turns it into this request's error reply
  }
  batching::GenerateRequest infer_request =
      to_infer_request(g, engine_request_id(sink->connection_id(), sink->request_id()));
  auto builder = std::make_shared<TokensEventBuilder>(static_cast<int64_t>(g.prompt.size()), g.n,
                                                      g.top_logprobs, g.prompt_logprobs);
  if (!g.tag.empty())
    log().debug("generate {} (tag {})",
                engine_request_id(sink->connection_id(), sink->request_id()), g.tag);
  if (g.adapter.empty()) {
    submit(std::move(infer_request), sink, builder, nullptr);
    return;
  }
  try {
    if (!resolve_adapter_)
      fail(ErrorCode::kNotFound, "generate: adapter '" + g.adapter + "': this engine serves none");
    auto request = std::make_shared<batching::GenerateRequest>(std::move(infer_request));
    resolve_adapter_(
        g.adapter,
        [this, request, sink, builder](AdapterLease lease) {
          request->adapter_slot = lease.slot;
          request->adapter_uid = lease.uid;
          submit(std::move(*request), sink, builder, std::move(lease.pin));
        },
        [this, sink](const Error& e) {
          request_errors_.fetch_add(1);
          sink->error(e.code(), std::string("generate: ") + e.what());
        });
  } catch (const Error&) {
    request_errors_.fetch_add(1);
    throw;
  }
}

void EngineService::submit(batching::GenerateRequest request, std::shared_ptr<rpc::ReplySink> sink,
                           std::shared_ptr<TokensEventBuilder> builder, std::shared_ptr<void> pin) {
  // Runs on the engine thread: each event becomes one frame queued on the connection. The adapter's
  // pin is dropped with the request's last event (and with the callback, whatever ends it).
  auto held = std::make_shared<std::shared_ptr<void>>(std::move(pin));
  engine_.submit(std::move(request), [sink, builder, held](const batching::GenerateEvent& event) {
    if (event.error) {
      sink->error(event.error->code(), std::string("generate: ") + event.error->what());
      held->reset();
      return;
    }
    sink->reply(rpc::encode_tokens_event(builder->next(event)));
    if (event.request_finished) {
      sink->done(rpc::encode_generate_done(builder->done()));
      held->reset();
    }
  });
}

void EngineService::add_control_method(std::string name, ControlMethod fn) {
  router_.add(name, [this, name, fn = std::move(fn)](rpc::Frame request,
                                                     std::shared_ptr<rpc::ReplySink> sink) {
    auto run = [name, fn, sink, request = std::move(request)] {
      try {
        sink->done(fn(request));
      } catch (const Error& e) {
        sink->error(e.code(), e.what());
      } catch (const std::exception& e) {
        sink->error(ErrorCode::kInternal, "engine method '" + name + "' failed: " + e.what());
      }
    };
    std::lock_guard lock(mu_);
    if (stopping_)
      fail(ErrorCode::kUnavailable, "the engine is stopping; '" + name + "' was not run");
    control_.push_back(ControlCall{name, sink, std::move(run)});
    control_wake_.notify_one();
  });
}

void EngineService::control_loop() {
  while (true) {
    ControlCall call;
    {
      std::unique_lock lock(mu_);
      control_wake_.wait(lock, [&] { return stopping_ || !control_.empty(); });
      if (stopping_) break;
      call = std::move(control_.front());
      control_.pop_front();
    }
    call.run();
  }
}

void EngineService::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    control_wake_.notify_one();
  }
  if (control_thread_.joinable()) control_thread_.join();
  std::deque<ControlCall> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(control_);
  }
  for (ControlCall& call : dropped) {
    call.sink->error(ErrorCode::kUnavailable, "the engine stopped before '" + call.name + "' ran");
  }
}

void EngineService::set_address(std::string address) {
  std::lock_guard lock(mu_);
  address_ = std::move(address);
}

Json EngineService::status() const {
  const infer::EngineStats s = engine_.stats();
  const infer::InferenceEngineOptions& c = engine_.config();
  std::string address;
  {
    std::lock_guard lock(mu_);
    address = address_;
  }
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  Json out = Json{
      {"policy_version", s.policy_version},
      {"model", model_info_json(model_)},
      {"engine",
       {{"running", s.running},
        {"waiting", s.waiting},
        {"free_blocks", s.free_blocks},
        {"total_blocks", s.total_blocks},
        {"block_size", s.block_size},
        {"max_model_len", s.max_model_len},
        {"max_batch_tokens", c.max_batch_tokens},
        {"max_running", c.max_running},
        {"kv_cache_bytes", c.cache_bytes},
        {"kv_cache_dtype", model::dtype_to_hf_name(engine_.cache_dtype())},
        {"steps", s.steps},
        {"busy_s", s.busy_seconds},
        {"tokens_generated", s.tokens_generated},
        {"tokens_computed", s.tokens_computed},
        {"tokens_prefix_cached", s.tokens_prefix_cached},
        {"cached_blocks", s.cached_blocks},
        {"prefix_caching", c.prefix_caching},
        {"preemptions", s.preemptions},
        {"madness_stops", s.madness_stops},
        {"requests_finished", s.requests_finished}}},
      {"compute",
       {{"device", compute_.device}, {"threads", compute_.threads}, {"backend", compute_.backend}}},
      {"rpc",
       {{"address", address},
        {"generate_requests", generate_requests_.load()},
        {"request_errors", request_errors_.load()},
        {"aborts", aborts_.load()},
        {"disconnects", disconnects_.load()}}},
      {"uptime_s", uptime},
      {"pid", static_cast<int64_t>(::getpid())},
  };
  if (status_extra_) out.update(status_extra_());
  return out;
}

}  // namespace ajet::engine
