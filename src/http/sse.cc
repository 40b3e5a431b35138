#include "http/sse.h"

namespace ajet::http {

bool SseParser::feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == start && partial_.empty()) {
      // The '\n' of a CRLF whose '\r' already ended the line.
      after_cr_ = false;
      start = i + 1;
      continue;
    }
    after_cr_ = (c == '\r');
    bool keep_going;
    if (partial_.empty()) {
      keep_going = line(bytes.substr(start, i - start), on_event);
    } else {
      partial_.append(bytes.substr(start, i - start));
      std::string whole = std::move(partial_);
      partial_.clear();
      keep_going = line(whole, on_event);
    }
    start = i + 1;
    if (!keep_going) return false;
  }
  partial_.append(bytes.substr(start));
  return true;
}

bool SseParser::line(std::string_view text, const std::function<bool(const SseEvent&)>& on_event) {
  if (text.empty()) {  // a blank line dispatches the event
    bool keep_going = true;
    if (has_data_) keep_going = on_event(event_);
    event_ = SseEvent{};
    has_data_ = false;
    return keep_going;
  }
  if (text.front() == ':') return true;  // a comment (often a keep-alive)
  size_t colon = text.find(':');
  std::string_view field = text.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) event_.data.push_back('\n');
    event_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.event.assign(value);
  } else if (field == "id") {
    event_.id.assign(value);
  }
  return true;
}

}  // namespace ajet::http
