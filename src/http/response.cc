#include "http/response.h"

namespace ajet::http {

Response json_response(const Json& body, int status) {
  Response response;
  response.status = status;
  response.headers.add("Content-Type", "application/json");
  // Replace invalid UTF-8 instead of throwing: a response must always be produced.
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

Response text_response(std::string body, int status, std::string_view content_type) {
  Response response;
  response.status = status;
  response.headers.add("Content-Type", std::string(content_type));
  response.body = std::move(body);
  return response;
}

std::string_view error_type_for(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: break;
  }
  return status >= 500 ? "server_error" : "invalid_request_error";
}

Response error_response(int status, std::string_view message, std::string_view type,
                        std::string_view code) {
  Json error = {
      {"message", message},
      {"type", type.empty() ? error_type_for(status) : type},
      {"code", code.empty() ? Json(nullptr) : Json(code)},
  };
  return json_response(Json{{"error", std::move(error)}}, status);
}

int status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 400;
    case ErrorCode::kUnauthenticated: return 401;
    case ErrorCode::kPermissionDenied: return 403;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kFailedPrecondition: return 400;
    case ErrorCode::kResourceExhausted: return 413;
    case ErrorCode::kUnavailable: return 503;
    default: break;
  }
  return 500;
}

Response error_response(const Error& error) {
  int status = status_for(error.code());
  return error_response(status, error.what(), error_type_for(status),
                        error_code_name(error.code()));
}

void set_retry_after(Response& response, std::chrono::milliseconds delay) {
  long long seconds = (std::max<long long>(delay.count(), 0) + 999) / 1000;
  response.headers.set("Retry-After", std::to_string(seconds));
}

Response sse_response(std::shared_ptr<BodyStream> stream, int status) {
  Response response;
  response.status = status;
  response.headers.add("Content-Type", "text/event-stream");
  response.headers.add("Cache-Control", "no-cache");
  response.headers.add("X-Accel-Buffering", "no");
  response.stream = std::move(stream);
  return response;
}

std::string sse_event(std::string_view data, std::string_view event) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  // Every line of the payload is its own data: field; the parser joins them back with '\n'. A line
  // ends at LF, CR or CRLF, as SSE parsers read it: a bare CR split nowhere would end the data:
  // line early there and let the rest read as a field of its own (another event's name, an id).
  size_t start = 0;
  for (;;) {
    size_t nl = data.find_first_of("\r\n", start);
    out += "data: ";
    out += data.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + (data[nl] == '\r' && nl + 1 < data.size() && data[nl + 1] == '\n' ? 2 : 1);
  }
  out += '\n';
  return out;
}

}  // namespace ajet::http
