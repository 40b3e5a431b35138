// nlohmann::json plus typed field access whose errors name the field: "field 'max_tokens' must be an
// integer, got string". Used by every parser of user input (HTTP bodies, config files, CLI stdin).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ajet {

using Json = nlohmann::json;

// Parses text; on failure throws Error(kInvalidArgument) starting with `what` (e.g. a file name).
Json parse_json(std::string_view text, std::string_view what);

std::string_view json_type_name(const Json& value);
std::string_view json_type_name(const nlohmann::ordered_json& value);  // same names (one value_t)

// Typed getters. `where` prefixes the message (e.g. "request body"). Missing required fields and
// wrong types throw Error(kInvalidArgument).
std::string get_string(const Json& obj, std::string_view key, std::string_view where);
std::optional<std::string> get_optional_string(const Json& obj, std::string_view key, std::string_view where);
int64_t get_int(const Json& obj, std::string_view key, std::string_view where);
std::optional<int64_t> get_optional_int(const Json& obj, std::string_view key, std::string_view where);
double get_number(const Json& obj, std::string_view key, std::string_view where);
std::optional<double> get_optional_number(const Json& obj, std::string_view key, std::string_view where);
std::optional<bool> get_optional_bool(const Json& obj, std::string_view key, std::string_view where);

}  // namespace ajet
