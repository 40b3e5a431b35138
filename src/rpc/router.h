// A Handler that dispatches requests by method name, so adding an engine method is one line:
// `router.add("train_step", fn)`. Unknown methods and exceptions become error replies for that
// request only. It holds no engine state and never blocks; methods run on the server I/O thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "rpc/server.h"

namespace ajet::rpc {

class Router : public Handler {
 public:
  // Streams or defers: the method keeps `sink` (e.g. queues it for the engine thread) and
  // finishes it later from any thread.
  using Method = std::function<void(Frame request, std::shared_ptr<ReplySink> sink)>;
  // Answers at once: the returned frame is sent as the final kDone frame (e.g. `status`).
  using Call = std::function<Frame(const Frame& request)>;

  // Register before the server starts listening; a second registration of a name throws.
  void add(std::string name, Method method);
  void add_call(std::string name, Call call);
  void set_on_abort(std::function<void(ConnectionId, uint64_t request_id)> fn) {
    on_abort_ = std::move(fn);
  }
  void set_on_disconnect(std::function<void(ConnectionId, std::vector<uint64_t> in_flight)> fn) {
    on_disconnect_ = std::move(fn);
  }

  void on_request(Frame request, std::shared_ptr<ReplySink> sink) override;
  void on_abort(ConnectionId connection, uint64_t request_id) override;
  void on_disconnect(ConnectionId connection, std::vector<uint64_t> in_flight) override;

 private:
  std::map<std::string, Method, std::less<>> methods_;
  std::function<void(ConnectionId, uint64_t)> on_abort_;
  std::function<void(ConnectionId, std::vector<uint64_t>)> on_disconnect_;
};

}  // namespace ajet::rpc
