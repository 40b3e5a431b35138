#include "engine_control/fan_out.h"

#include <future>

#include "rpc/client.h"

namespace ajet::engine_control {

rpc::Frame method_request(std::string_view method, Json body) {
  rpc::Frame f;
  f.kind = rpc::FrameKind::kRequest;
  f.method = std::string(method);
  f.body = std::move(body);
  return f;
}

std::vector<CallOutcome> call_all(const std::vector<std::shared_ptr<rpc::Client>>& clients,
                                  std::vector<rpc::Frame> requests,
                                  std::chrono::milliseconds timeout) {
  std::vector<std::future<Json>> calls;
  for (size_t i = 0; i < clients.size(); ++i) {
    calls.push_back(std::async(std::launch::async,
                               [client = clients[i], frame = std::move(requests[i]), timeout] {
                                 Json body = client->call(frame, timeout).done.body;
                                 return body.is_object() ? body : Json::object();
                               }));
  }
  std::vector<CallOutcome> out(clients.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    try {
      out[i].reply = calls[i].get();
      out[i].ok = true;
    } catch (const Error& e) {
      out[i].code = e.code();
      out[i].error = e.what();
    } catch (const std::exception& e) {
      out[i].error = e.what();
    }
  }
  return out;
}

}  // namespace ajet::engine_control
