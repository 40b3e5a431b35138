#include "rpc/router.h"

namespace ajet::rpc {

void Router::add(std::string name, Method method) {
  if (methods_.count(name) > 0) {
    throw Error(ErrorCode::kFailedPrecondition,
                "rpc router: method '" + name + "' is registered twice");
  }
  methods_.emplace(std::move(name), std::move(method));
}

void Router::add_call(std::string name, Call call) {
  add(std::move(name), [call = std::move(call)](Frame request, std::shared_ptr<ReplySink> sink) {
    sink->done(call(request));
  });
}

void Router::on_request(Frame request, std::shared_ptr<ReplySink> sink) {
  auto it = methods_.find(request.method);
  if (it == methods_.end()) {
    std::string known;
    for (const auto& [name, method] : methods_) known += (known.empty() ? "" : ", ") + name;
    sink->error(ErrorCode::kNotFound, "unknown engine method '" + request.method.substr(0, 64) +
                                          "' (this engine serves: " + known + ")");
    return;
  }
  try {
    it->second(std::move(request), sink);
  } catch (const Error& e) {
    sink->error(e.code(), e.what());
  } catch (const std::exception& e) {
    sink->error(ErrorCode::kInternal, "engine method '" + it->first + "' failed: " + e.what());
  }
}

void Router::on_abort(ConnectionId connection, uint64_t request_id) {
  if (on_abort_) on_abort_(connection, request_id);
}

void Router::on_disconnect(ConnectionId connection, std::vector<uint64_t> in_flight) {
  if (on_disconnect_) on_disconnect_(connection, std::move(in_flight));
}

}  // namespace ajet::rpc
