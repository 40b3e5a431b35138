// One error type for the whole project: a code plus a message that names what was wrong and where.
// Thrown inside modules, mapped to HTTP statuses / RPC error replies / CLI exit codes at one
// boundary.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ajet {

enum class ErrorCode {
  kInvalidArgument,     // malformed input: HTTP 400
  kUnauthenticated,     // missing or forged key: 401
  kPermissionDenied,    // valid key, wrong owner: 403/404 per protocol
  kNotFound,            // 404
  kFailedPrecondition,  // wrong state, e.g. engine not OFFLINE: 400/409
  kUnavailable,         // retryable, e.g. engine not rolling: 503
  kResourceExhausted,   // a size limit: 413
  kDataLoss,            // corrupt file
  kIo,                  // filesystem / socket failure
  kInternal,            // a bug
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}
[[noreturn]] inline void invalid_argument(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

}  // namespace ajet
