// Reading the fields of a JSON request body with errors that name the field's path
// ("request body: field 'messages[2].content[0].tool_use_id' is required"), for the adapters that
// turn other APIs' bodies into chat bodies (anthropic_messages.cc, openai_responses.cc).
#pragma once

#include <string>

#include "common/error.h"
#include "text/messages.h"

namespace ajet::openai::body {

[[noreturn]] inline void bad(const std::string& path, const std::string& what) {
  invalid_argument("request body: field '" + path + "' " + what);
}

// The value at `key`, or nullptr when absent or null.
inline const text::OrderedJson* field(const text::OrderedJson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A required string at `path`.`key`.
inline std::string string_at(const text::OrderedJson& obj, const char* key,
                             const std::string& path) {
  const text::OrderedJson* v = field(obj, key);
  if (v == nullptr) bad(path + "." + key, "is required");
  if (!v->is_string()) bad(path + "." + key, "must be a string");
  return v->get<std::string>();
}

}  // namespace ajet::openai::body
