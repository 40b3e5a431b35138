// Response helpers shared by every route: JSON bodies, OpenAI-shaped errors, Retry-After, SSE.
// Pure functions over the plain structs of message.h; nothing here touches a socket.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "http/message.h"

namespace ajet::http {

// `body` serialised, with `Content-Type: application/json`.
Response json_response(const Json& body, int status = 200);
Response text_response(std::string body, int status = 200,
                       std::string_view content_type = "text/plain; charset=utf-8");

// The OpenAI error shape: {"error": {"message", "type", "code"}}. An empty `type` becomes
// error_type_for(status); an empty `code` becomes JSON null.
Response error_response(int status, std::string_view message, std::string_view type = {},
                        std::string_view code = {});
// An ajet::Error at the HTTP boundary: status_for(code), code = error_code_name(code).
Response error_response(const Error& error);

// kInvalidArgument 400, kUnauthenticated 401, kPermissionDenied 403, kNotFound 404,
// kFailedPrecondition 400 (a wrong state is a 400: docs/protocol.md "Statuses and error mapping"),
// kResourceExhausted 413, kUnavailable 503, everything else 500. A route that needs another status
// builds its own response.
int status_for(ErrorCode code);
// "invalid_request_error" (4xx), "authentication_error" (401), "permission_error" (403),
// "not_found_error" (404), "rate_limit_error" (429), "service_unavailable_error" (503),
// "server_error" (other 5xx).
std::string_view error_type_for(int status);

// `Retry-After: <seconds>` (rounded up to whole seconds, at least 0), e.g. on 409/503.
void set_retry_after(Response& response, std::chrono::milliseconds delay);

// A streamed `text/event-stream` response (no caching, no proxy buffering).
Response sse_response(std::shared_ptr<BodyStream> stream, int status = 200);
// One SSE event: "event: <event>\n" (when given), one "data: " line per line of `data`, "\n".
std::string sse_event(std::string_view data, std::string_view event = {});

}  // namespace ajet::http
