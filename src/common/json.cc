#include "common/json.h"

#include <cmath>

#include "common/error.h"

namespace ajet {

Json parse_json(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e+600
    invalid_argument(std::string(what) + ": invalid JSON: " + e.what());
  }
}

static std::string_view type_name_of(nlohmann::detail::value_t type) {
  switch (type) {
    case nlohmann::detail::value_t::null: return "null";
    case nlohmann::detail::value_t::object: return "object";
    case nlohmann::detail::value_t::array: return "array";
    case nlohmann::detail::value_t::string: return "string";
    case nlohmann::detail::value_t::boolean: return "boolean";
    case nlohmann::detail::value_t::number_integer:
    case nlohmann::detail::value_t::number_unsigned: return "integer";
    case nlohmann::detail::value_t::number_float: return "number";
    case nlohmann::detail::value_t::binary: return "binary";
    case nlohmann::detail::value_t::discarded: return "discarded";
  }
  return "unknown";
}

std::string_view json_type_name(const Json& value) { return type_name_of(value.type()); }
std::string_view json_type_name(const nlohmann::ordered_json& value) { return type_name_of(value.type()); }

namespace {

const Json* find_field(const Json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) {
    invalid_argument(std::string(where) + ": expected a JSON object, got " + std::string(json_type_name(obj)));
  }
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

[[noreturn]] void wrong_type(std::string_view key, std::string_view where, std::string_view expected,
                             const Json& got) {
  invalid_argument(std::string(where) + ": field '" + std::string(key) + "' must be " + std::string(expected) +
                   ", got " + std::string(json_type_name(got)));
}

[[noreturn]] void missing(std::string_view key, std::string_view where) {
  invalid_argument(std::string(where) + ": missing required field '" + std::string(key) + "'");
}

}  // namespace

std::optional<std::string> get_optional_string(const Json& obj, std::string_view key, std::string_view where) {
  const Json* v = find_field(obj, key, where);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(key, where, "a string", *v);
  return v->get<std::string>();
}

std::string get_string(const Json& obj, std::string_view key, std::string_view where) {
  auto v = get_optional_string(obj, key, where);
  if (!v) missing(key, where);
  return *v;
}

std::optional<int64_t> get_optional_int(const Json& obj, std::string_view key, std::string_view where) {
  const Json* v = find_field(obj, key, where);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    // 2^63 bounds keep the cast defined; only integral values (like 3.0) are accepted.
    double d = v->get<double>();
    if (d >= -9.2233720368547758e18 && d < 9.2233720368547758e18 && d == std::floor(d)) {
      return static_cast<int64_t>(d);
    }
  }
  wrong_type(key, where, "an integer", *v);
}

int64_t get_int(const Json& obj, std::string_view key, std::string_view where) {
  auto v = get_optional_int(obj, key, where);
  if (!v) missing(key, where);
  return *v;
}

std::optional<double> get_optional_number(const Json& obj, std::string_view key, std::string_view where) {
  const Json* v = find_field(obj, key, where);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(key, where, "a number", *v);
  return v->get<double>();
}

double get_number(const Json& obj, std::string_view key, std::string_view where) {
  auto v = get_optional_number(obj, key, where);
  if (!v) missing(key, where);
  return *v;
}

std::optional<bool> get_optional_bool(const Json& obj, std::string_view key, std::string_view where) {
  const Json* v = find_field(obj, key, where);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, where, "a boolean", *v);
  return v->get<bool>();
}

}  // namespace ajet
