// Incremental parser for `text/event-stream` bodies (the HTML living standard's SSE rules): bytes
// in, whole events out. Used by the HTTP client; never buffers more than one unfinished event.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace ajet::http {

struct SseEvent {
  std::string event;  // "" when the event had no `event:` field
  std::string data;   // the `data:` lines joined with '\n'
  std::string id;
};

class SseParser {
 public:
  // Feeds the next bytes (any split, CRLF/LF/CR line ends); calls on_event for every completed
  // event with non-empty data. Stops and returns false as soon as on_event returns false.
  bool feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event);
  // Bytes held for the event being read: its unfinished line and its data so far.
  size_t buffered() const { return partial_.size() + event_.data.size(); }

 private:
  bool line(std::string_view text, const std::function<bool(const SseEvent&)>& on_event);

  std::string partial_;    // an unfinished line
  bool after_cr_ = false;  // the previous byte was '\r' (so a following '\n' is not a new line)
  SseEvent event_;
  bool has_data_ = false;
};

}  // namespace ajet::http
