// Error responses of the swarm front. Every error body has OpenAI's shape
// {"error": {"message", "type", "code"}} plus a top-level "detail" string (what upstream AgentJet's
// Python clients print) and "success": false (what command-API clients test). Statuses come from
// swarm::http_status_for; 503 answers carry Retry-After.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "http/message.h"

namespace ajet::swarm {

http::Response openai_error(int status, std::string_view message, std::string_view code = {});
// 503 + Retry-After: the engine is not rolling / not connected; the client should retry.
http::Response unavailable_response(std::string_view message, int retry_after_seconds);
// An ajet::Error at the route boundary (kUnavailable gets Retry-After: 2).
http::Response error_for(const Error& error);

}  // namespace ajet::swarm
