// The one YAML reader of the project's own files: the typed config (config/load.cc) and study files
// (research/study.cc). It loads a document with a size limit, names `source:line` in every message,
// and reads scalars by one set of rules:
//
//   * booleans: true/false, yes/no, on/off (any case);
//   * integers: decimal with an optional sign, or any number that is integral ("1e3", "16.0");
//   * numbers: what strtod reads, finite only (".inf" and "nan" are refused);
//   * where the key does not fix the type (a study's choice or fixed value, a free-form mapping's
//     leaf), a typed JSON scalar: a quoted value is text; otherwise a boolean, an integer written
//     as one ("+5", not "1e3"), a finite number, or else text.
//
// Errors are Error(kInvalidArgument) "source:line: key: what is wrong"; nothing here exits.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace ajet::config {

// How far YAML aliases may expand when a node becomes JSON: one alias names a whole node, so nine
// levels of nine aliases (about 500 bytes of YAML) name one value 9^9 times.
inline constexpr size_t kMaxExpandedBytes = size_t(16) << 20;

// The scalar rules above, on a scalar's text (nullopt: not of that type).
std::optional<bool> scalar_bool(std::string_view text);
std::optional<int64_t> scalar_int(const std::string& text);
std::optional<double> scalar_double(const std::string& text);
// A quoted scalar ('x' or "x"): yaml-cpp tags it "!", so it stays text.
bool is_quoted(const YAML::Node& node);
// A node for messages: "null", "a mapping", "a list" or the scalar in quotes.
std::string describe(const YAML::Node& node);

struct YamlLimits {
  size_t max_bytes = 0;                // the text's size limit (0: none)
  std::string_view what = "the file";  // names the text in the size error ("a study file")
  size_t max_expanded_bytes = 0;       // 0: aliases are not expanded at load time
};

// Parses `text`. Invalid YAML fails naming "source:line:col: invalid YAML: ..."; text beyond
// limits.max_bytes fails naming its size before parsing. With limits.max_expanded_bytes, the whole
// document is walked as JSON conversion would walk it (aliases expanded, nesting counted) and
// refused past that size or kMaxJsonDepth levels: for documents with no free-form parts, where
// nothing legitimate comes near it. A config keeps it 0: its unread sections may hold anything,
// and its free-form fields are guarded where they are converted (YamlReader::to_json).
YAML::Node load_yaml(std::string_view text, std::string_view source, const YamlLimits& limits = {});
// Reads a file for load_yaml, refusing one over limits.max_bytes before reading it.
std::string read_yaml_file(const std::filesystem::path& path, const YamlLimits& limits);

// Typed reads of one document's nodes. `key` is the dotted name of the value read
// ("search.lr.log_uniform[0]"); every error names the source, the node's line, the key and what
// is wrong: "x.yaml:12: search.lr.log_uniform[0]: expected a finite number, got 'abc'".
class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  // "source:line" (1-based), or the source alone for a node with no position.
  std::string at(const YAML::Node& node) const;
  // "source:line: key: what" (no "key: " when key is empty). For a missing key, pass the mapping
  // it is missing from.
  [[noreturn]] void fail(const YAML::Node& node, std::string_view key, std::string_view what) const;

  // Refuses a non-mapping and any key outside `known`, with "did you mean" for a near miss.
  // `where` is the mapping's dotted key ("" for the top level).
  void only_keys(const YAML::Node& node, const std::string& where,
                 const std::vector<std::string>& known) const;

  bool boolean(const YAML::Node& node, const std::string& key) const;
  int64_t integer(const YAML::Node& node, const std::string& key, int64_t lo = INT64_MIN,
                  int64_t hi = INT64_MAX) const;
  double number(const YAML::Node& node, const std::string& key) const;
  std::string text(const YAML::Node& node, const std::string& key) const;
  // A typed JSON scalar (the rules above); a mapping, list or null is refused.
  Json scalar(const YAML::Node& node, const std::string& key) const;
  // A list of integers, each in [lo, hi]; items are named "key[i]".
  std::vector<int64_t> int_list(const YAML::Node& node, const std::string& key, int64_t lo,
                                int64_t hi) const;
  // Any node as JSON (scalars typed as above; null is null), refused past max_expanded_bytes or
  // kMaxJsonDepth levels: "source:line: key expands to more than 16 MiB (...)".
  Json to_json(const YAML::Node& node, const std::string& key,
               size_t max_expanded_bytes = kMaxExpandedBytes) const;

 private:
  std::string source_;
};

// A scalar node as a typed JSON value (the rules above); the node must be a scalar.
Json scalar_json(const YAML::Node& node);

}  // namespace ajet::config
