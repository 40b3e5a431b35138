// One engine RPC call to each of several engines at once, for the collective methods whose calls
// only finish together (train_step on data-parallel ranks, join_group, push_weights): a thread per
// call, every call waited for, each outcome kept. No libtorch.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "rpc/frame.h"

namespace ajet::rpc {
class Client;
}

namespace ajet::engine_control {

struct CallOutcome {
  bool ok = false;
  Json reply;  // the done frame's body (an object) when ok
  ErrorCode code = ErrorCode::kInternal;
  std::string error;  // the error's message when not ok
};

// requests[i] goes to clients[i]; the outcomes come back in the same order.
std::vector<CallOutcome> call_all(const std::vector<std::shared_ptr<rpc::Client>>& clients,
                                  std::vector<rpc::Frame> requests,
                                  std::chrono::milliseconds timeout);

// A request frame for `method` with a JSON body.
rpc::Frame method_request(std::string_view method, Json body);

}  // namespace ajet::engine_control
