#include "openai/openai_errors.h"

#include <chrono>

#include "episodes/commands.h"
#include "http/response.h"
#include "openai/openai_params.h"

namespace ajet::openai {

http::Response openai_error(int status, std::string_view message, std::string_view code) {
  Json body = {{"error",
                {{"message", message},
                 {"type", http::error_type_for(status)},
                 {"code", code.empty() ? Json(nullptr) : Json(code)}}},
               {"detail", message},
               {"success", false}};
  return http::json_response(body, status);
}

http::Response unavailable_response(std::string_view message, int retry_after_seconds) {
  http::Response r = openai_error(503, message, "engine_unavailable");
  http::set_retry_after(r, std::chrono::seconds(retry_after_seconds));
  return r;
}

http::Response error_for(const Error& error) {
  const int status = episodes::http_status_for(error.code());
  if (status == 503) return unavailable_response(error.what(), 2);
  if (dynamic_cast<const ContextLengthExceeded*>(&error) != nullptr) {
    return openai_error(status, error.what(), "context_length_exceeded");
  }
  return openai_error(status, error.what(), error_code_name(error.code()));
}

namespace {

std::string_view anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: break;
  }
  return status >= 500 ? "api_error" : "invalid_request_error";
}

}  // namespace

http::Response anthropic_error(int status, std::string_view message, int retry_after_seconds) {
  Json body = {{"type", "error"},
               {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
  http::Response r = http::json_response(body, status);
  if (status == 503) http::set_retry_after(r, std::chrono::seconds(retry_after_seconds));
  return r;
}

http::Response anthropic_error_for(const Error& error) {
  return anthropic_error(episodes::http_status_for(error.code()), error.what());
}

}  // namespace ajet::openai
