// nlohmann::json plus typed field access whose errors name the field: "field 'max_tokens' must be
// an integer, got string". Every JSON text the project reads (HTTP bodies and answers, files,
// stored values, JSON inside strings) goes through the parsers here, never nlohmann's own parse,
// whose depth is unbounded (tests/build/json_parse_guard_test.cc fails naming any other call).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ajet {

using Json = nlohmann::json;

// How deep arrays and objects may nest in JSON read from outside (HTTP bodies, files, RPC frames,
// JSON inside strings such as tool-call arguments). Every later walk of a parsed value (dump, copy,
// comparison, template rendering) recurses once per level, so an unbounded depth is a stack
// overflow waiting for the first hostile body; 128 is far above any real tool schema or metadata.
inline constexpr int kMaxJsonDepth = 128;

// Parses text; on failure throws Error(kInvalidArgument) "<what>: invalid JSON at <path>:
// <reason>", the path being where the parser stopped ("tools[0].function.parameters"; "the top
// level" before any key). Nesting deeper than max_depth fails the same way as soon as it is read,
// before the deep value exists. `what` names the source (a file name, "request body").
Json parse_json(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view what,
                                          int max_depth = kMaxJsonDepth);
// The same parse for text that may or may not be JSON (a tool call's arguments, a stored value):
// nullopt instead of an error.
std::optional<Json> try_parse_json(std::string_view text, int max_depth = kMaxJsonDepth);
std::optional<nlohmann::ordered_json> try_parse_ordered_json(std::string_view text,
                                                             int max_depth = kMaxJsonDepth);

// For text that may be any text but is read as JSON when it is JSON (a tool call's arguments):
// throws parse_json's error when the text opens arrays and objects deeper than max_depth before it
// stops being JSON; any other text, JSON or not, passes. Builds nothing, so it costs one scan.
void require_json_depth(std::string_view text, std::string_view what,
                        int max_depth = kMaxJsonDepth);

// The same parse for a reader that consumes a large document as it is read instead of building it
// (tokenizer.json's vocabulary, a safetensors header's duplicate keys): the events go to `handler`,
// whose parse_error is never called (syntax errors and nesting beyond max_depth throw parse_json's
// error). A handler refuses by throwing; returns false only where the handler returned false.
bool sax_parse_json(std::string_view text, std::string_view what, nlohmann::json_sax<Json>& handler,
                    int max_depth = kMaxJsonDepth);
bool sax_parse_json(std::string_view text, std::string_view what,
                    nlohmann::json_sax<nlohmann::ordered_json>& handler,
                    int max_depth = kMaxJsonDepth);

std::string_view json_type_name(const Json& value);
std::string_view json_type_name(const nlohmann::ordered_json& value);  // same names (one value_t)

// Typed getters. `where` prefixes the message (e.g. "request body"). Missing required fields and
// wrong types throw Error(kInvalidArgument).
std::string get_string(const Json& obj, std::string_view key, std::string_view where);
std::optional<std::string> get_optional_string(const Json& obj, std::string_view key,
                                               std::string_view where);
int64_t get_int(const Json& obj, std::string_view key, std::string_view where);
std::optional<int64_t> get_optional_int(const Json& obj, std::string_view key,
                                        std::string_view where);
double get_number(const Json& obj, std::string_view key, std::string_view where);
std::optional<double> get_optional_number(const Json& obj, std::string_view key,
                                          std::string_view where);
std::optional<bool> get_optional_bool(const Json& obj, std::string_view key,
                                      std::string_view where);

}  // namespace ajet
