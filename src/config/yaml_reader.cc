#include "config/yaml_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

#include "common/error.h"
#include "common/fs.h"
#include "common/strings.h"

namespace ajet::config {

namespace {

// "16 MiB", "64 KiB" or "1000 bytes", for size limits in messages.
std::string size_text(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

// An integer written as one: decimal digits with an optional sign.
std::optional<int64_t> exact_int(const std::string& text) {
  int64_t v = 0;
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  auto [ptr, ec] = std::from_chars(begin, text.data() + text.size(), v);
  if (ec == std::errc() && ptr == text.data() + text.size()) return v;
  return std::nullopt;
}

// Text that names a number which is not finite: YAML's .inf/.nan, strtod's inf/nan, or a literal
// out of double's range ("1e999").
bool non_finite_number(const std::string& text) {
  std::string t = ascii_lower(text);
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) t.erase(0, 1);
  if (t == ".inf" || t == ".nan" || t == "inf" || t == "infinity" || t == "nan") return true;
  if (text.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && !std::isfinite(v);
}

// Counts what converting a node to JSON builds (bytes and depth) and refuses it past the limits.
// YAML aliases make a document a graph in which one node can be reached billions of times, and the
// conversion copies each reference: counting stops it before memory grows without bound.
struct Expansion {
  const YamlReader& reader;
  const std::string& key;
  size_t max_bytes;
  size_t bytes = 0;

  static constexpr size_t kNodeBytes = 16;  // what one value costs besides its text

  void spend(const YAML::Node& node, size_t n, int depth) {
    bytes += n;
    if (bytes > max_bytes) {
      invalid_argument(reader.at(node) + ": " + key + " expands to more than " +
                       size_text(max_bytes) +
                       " (YAML aliases repeat one node many times); write the values out or "
                       "make them smaller");
    }
    if (depth > kMaxJsonDepth) {
      invalid_argument(reader.at(node) + ": " + key + " nests deeper than " +
                       std::to_string(kMaxJsonDepth) + " levels");
    }
  }
};

// The JSON of `node`, or (out == false) only the count of what it would build.
Json convert(const YAML::Node& node, Expansion& expansion, bool out, int depth = 1) {
  if (!node.IsDefined() || node.IsNull()) {
    expansion.spend(node, Expansion::kNodeBytes, depth);
    return nullptr;
  }
  if (node.IsMap()) {
    expansion.spend(node, Expansion::kNodeBytes, depth);
    Json obj = Json::object();
    for (const auto& kv : node) {
      expansion.spend(kv.first, kv.first.Scalar().size(), depth);
      Json value = convert(kv.second, expansion, out, depth + 1);
      if (out) obj[kv.first.Scalar()] = std::move(value);
    }
    return obj;
  }
  if (node.IsSequence()) {
    expansion.spend(node, Expansion::kNodeBytes, depth);
    Json arr = Json::array();
    for (const auto& item : node) {
      Json value = convert(item, expansion, out, depth + 1);
      if (out) arr.push_back(std::move(value));
    }
    return arr;
  }
  expansion.spend(node, Expansion::kNodeBytes + node.Scalar().size(), depth);
  return out ? scalar_json(node) : Json();
}

[[noreturn]] void too_large(std::string_view source, const YamlLimits& limits, size_t size) {
  invalid_argument(fmt::format("{}: {} must be under {} (this one holds {} bytes)", source,
                               limits.what, size_text(limits.max_bytes), size));
}

}  // namespace

std::optional<bool> scalar_bool(std::string_view text) {
  std::string t = ascii_lower(text);
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

std::optional<double> scalar_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> scalar_int(const std::string& text) {
  if (auto v = exact_int(text)) return v;
  // "1e3" or "16.0": accept when the number is integral.
  auto d = scalar_double(text);
  if (d && *d == std::floor(*d) && std::fabs(*d) < 9.0e18) return static_cast<int64_t>(*d);
  return std::nullopt;
}

bool is_quoted(const YAML::Node& node) { return node.Tag() == "!"; }

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "'" + node.Scalar() + "'";
}

Json scalar_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (is_quoted(node)) return text;
  if (auto b = scalar_bool(text)) return *b;
  if (auto i = exact_int(text)) return *i;
  if (auto d = scalar_double(text)) return *d;
  return text;
}

YAML::Node load_yaml(std::string_view text, std::string_view source, const YamlLimits& limits) {
  if (limits.max_bytes != 0 && text.size() > limits.max_bytes)
    too_large(source, limits, text.size());
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    invalid_argument(fmt::format("{}:{}:{}: invalid YAML: {}", source, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  if (limits.max_expanded_bytes != 0) {
    const YamlReader reader{std::string(source)};
    const std::string what(limits.what);
    Expansion expansion{reader, what, limits.max_expanded_bytes};
    convert(root, expansion, /*out=*/false);
  }
  return root;
}

std::string read_yaml_file(const std::filesystem::path& path, const YamlLimits& limits) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && limits.max_bytes != 0 && size > limits.max_bytes)
    too_large(path.string(), limits, size_t(size));
  return read_file(path);  // names the path when unreadable
}

std::string YamlReader::at(const YAML::Node& node) const {
  std::string out(source_);
  if (node.IsDefined() && !node.Mark().is_null()) out += fmt::format(":{}", node.Mark().line + 1);
  return out;
}

void YamlReader::fail(const YAML::Node& node, std::string_view key, std::string_view what) const {
  invalid_argument(fmt::format("{}: {}{}{}", at(node), key, key.empty() ? "" : ": ", what));
}

void YamlReader::only_keys(const YAML::Node& node, const std::string& where,
                           const std::vector<std::string>& known) const {
  if (!node.IsMap()) fail(node, where, "expected a mapping, got " + describe(node));
  for (const auto& kv : node) {
    const std::string k = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), k) != known.end()) continue;
    const std::string near = closest_name(k, known);
    fail(kv.first, where.empty() ? k : where + "." + k,
         "unknown key" + (near.empty() ? fmt::format(" (known: {})", fmt::join(known, ", "))
                                       : " (did you mean '" + near + "'?)"));
  }
}

bool YamlReader::boolean(const YAML::Node& node, const std::string& key) const {
  auto v = node.IsScalar() ? scalar_bool(node.Scalar()) : std::nullopt;
  if (!v) fail(node, key, "expected true or false, got " + describe(node));
  return *v;
}

int64_t YamlReader::integer(const YAML::Node& node, const std::string& key, int64_t lo,
                            int64_t hi) const {
  if (!node.IsScalar()) fail(node, key, "expected an integer, got " + describe(node));
  auto v = scalar_int(node.Scalar());
  if (!v) fail(node, key, "expected an integer, got '" + node.Scalar() + "'");
  if (*v < lo || *v > hi)
    fail(node, key, fmt::format("must be between {} and {}, got {}", lo, hi, *v));
  return *v;
}

double YamlReader::number(const YAML::Node& node, const std::string& key) const {
  if (!node.IsScalar()) fail(node, key, "expected a number, got " + describe(node));
  auto v = scalar_double(node.Scalar());
  if (!v && non_finite_number(node.Scalar()))
    fail(node, key, "expected a finite number, got '" + node.Scalar() + "'");
  if (!v) fail(node, key, "expected a number, got '" + node.Scalar() + "'");
  return *v;
}

std::string YamlReader::text(const YAML::Node& node, const std::string& key) const {
  if (!node.IsScalar()) fail(node, key, "expected text, got " + describe(node));
  return node.Scalar();
}

Json YamlReader::scalar(const YAML::Node& node, const std::string& key) const {
  if (!node.IsScalar())
    fail(node, key, "expected a scalar (number, text or true/false), got " + describe(node));
  return scalar_json(node);
}

std::vector<int64_t> YamlReader::int_list(const YAML::Node& node, const std::string& key,
                                          int64_t lo, int64_t hi) const {
  if (!node.IsSequence()) fail(node, key, "expected a list of integers, got " + describe(node));
  std::vector<int64_t> out;
  for (size_t i = 0; i < node.size(); ++i)
    out.push_back(integer(node[i], fmt::format("{}[{}]", key, i), lo, hi));
  return out;
}

Json YamlReader::to_json(const YAML::Node& node, const std::string& key,
                         size_t max_expanded_bytes) const {
  Expansion expansion{*this, key, max_expanded_bytes};
  return convert(node, expansion, /*out=*/true);
}

}  // namespace ajet::config
