// Error responses of the swarm front. Every error body has OpenAI's shape
// {"error": {"message", "type", "code"}} plus a top-level "detail" string (what upstream AgentJet's
// Python clients print) and "success": false (what command-API clients test), except on
// /v1/messages, which answers in Anthropic's shape (anthropic_error). Statuses come from
// episodes::http_status_for; 503 answers carry Retry-After.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "http/message.h"

namespace ajet::openai {

http::Response openai_error(int status, std::string_view message, std::string_view code = {});
// 503 + Retry-After: the engine is not rolling / not connected; the client should retry.
http::Response unavailable_response(std::string_view message, int retry_after_seconds);
// An ajet::Error at the route boundary (kUnavailable gets Retry-After: 2).
http::Response error_for(const Error& error);

// /v1/messages answers errors in Anthropic's envelope, which its SDKs read:
// {"type": "error", "error": {"type", "message"}}, the type from the status (invalid_request_error,
// authentication_error, permission_error, not_found_error, request_too_large, rate_limit_error,
// api_error; 503 is overloaded_error with Retry-After: `retry_after_seconds`).
http::Response anthropic_error(int status, std::string_view message, int retry_after_seconds = 2);
http::Response anthropic_error_for(const Error& error);

}  // namespace ajet::openai
