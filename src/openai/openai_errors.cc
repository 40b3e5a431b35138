#include "openai/openai_errors.h"

#include <chrono>

#include "episodes/commands.h"
#include "http/response.h"

namespace ajet::swarm {

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
  const int status = http_status_for(error.code());
  if (status == 503) return unavailable_response(error.what(), 2);
  return openai_error(status, error.what(), error_code_name(error.code()));
}

}  // namespace ajet::swarm
