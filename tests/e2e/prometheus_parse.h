// A strict reader of the Prometheus text exposition format 0.0.4, for the tests of GET /metrics. It
// is the test's independent oracle, not a copy of the writer (src/common/prometheus_text.cc): every
// line must be a comment, blank, or `name{labels} value [timestamp]`; every family needs `# HELP`
// and
// `# TYPE` before its first sample and keeps its samples together; names and label names follow the
// format's grammar and label values use only its three escapes; a series appears once; counters end
// in `_total` and are never negative; a histogram's buckets rise in `le`, are cumulative, end with
// `+Inf`, and its `+Inf` bucket equals its `_count`. Each violation is a test failure naming the
// line.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ajet::e2e {

using PromLabels = std::map<std::string, std::string>;

struct PromSample {
  std::string name;  // as written: a histogram's samples end in _bucket, _sum, _count
  PromLabels labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string type;  // counter | gauge | histogram | summary | untyped
  std::string help;
  std::vector<PromSample> samples;
};

struct Exposition {
  std::map<std::string, PromFamily> families;

  bool has(const std::string& family) const { return families.count(family) > 0; }
  // The sample `name` with exactly these labels; nullopt when there is none.
  std::optional<double> value(const std::string& name, const PromLabels& labels = {}) const {
    for (const auto& [f, family] : families) {
      for (const auto& s : family.samples) {
        if (s.name == name && s.labels == labels) return s.value;
      }
    }
    return std::nullopt;
  }
  // The same, failing the test when it is absent (then NaN).
  double at(const std::string& name, const PromLabels& labels = {}) const {
    std::optional<double> v = value(name, labels);
    if (!v) {
      std::string text;
      for (const auto& [k, val] : labels) text += k + "=" + val + " ";
      ADD_FAILURE() << "no sample " << name << " {" << text << "}";
      return std::nan("");
    }
    return *v;
  }
  // Every sample of `name` (any labels).
  std::vector<PromSample> all(const std::string& name) const {
    std::vector<PromSample> out;
    for (const auto& [f, family] : families) {
      for (const auto& s : family.samples) {
        if (s.name == name) out.push_back(s);
      }
    }
    return out;
  }
};

namespace prom_detail {

inline bool name_char(char c, bool first, bool colon) {
  const bool letter =
      (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return first ? letter : letter || (c >= '0' && c <= '9');
}

// Reads a name at `at`; "" when none starts there.
inline std::string read_name(const std::string& line, size_t& at, bool colon) {
  size_t start = at;
  while (at < line.size() && name_char(line[at], at == start, colon)) ++at;
  return line.substr(start, at - start);
}

inline bool valid_name(const std::string& name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, colon)) return false;
  }
  return true;
}

inline std::optional<double> parse_number(const std::string& text) {
  if (text == "+Inf" || text == "Inf") return INFINITY;
  if (text == "-Inf") return -INFINITY;
  if (text == "NaN") return NAN;
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  // strtod also reads "inf", "nan" and hex floats, which the format does not allow.
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
  }
  return v;
}

inline std::string series_key(const std::string& name, const PromLabels& labels) {
  std::string key = name + "{";
  for (const auto& [k, v] : labels) key += k + "=\"" + v + "\",";
  return key + "}";
}

}  // namespace prom_detail

inline Exposition parse_exposition(const std::string& text) {
  using namespace prom_detail;
  Exposition out;
  if (!text.empty() && text.back() != '\n')
    ADD_FAILURE() << "the exposition does not end with a newline";
  std::set<std::string> closed;  // families whose samples ended (another family's came after)
  std::set<std::string> series;
  std::string current;  // the family of the last sample
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    auto fail = [&](const std::string& why) {
      ADD_FAILURE() << "line " << number << ": " << why << ": " << line;
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line.substr(1));
      std::string keyword, name;
      words >> keyword >> name;
      if (keyword != "HELP" && keyword != "TYPE") continue;  // any other comment is allowed
      if (!valid_name(name, true)) {
        fail("invalid metric name in " + keyword);
        continue;
      }
      PromFamily& f = out.families[name];
      f.name = name;
      if (!f.samples.empty()) fail(keyword + " after the family's samples");
      std::string rest;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (keyword == "TYPE") {
        if (!f.type.empty()) fail("a second TYPE");
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped") {
          fail("unknown type '" + rest + "'");
        }
        f.type = rest;
      } else {
        if (!f.help.empty()) fail("a second HELP");
        for (size_t i = 0; i < rest.size(); ++i) {  // HELP escapes: \\ and \n only
          if (rest[i] == '\\') {
            if (i + 1 >= rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n'))
              fail("a bad escape in HELP");
            ++i;
          }
        }
        f.help = rest.empty() ? "(empty)" : rest;
      }
      continue;
    }

    PromSample s;
    size_t at = 0;
    s.name = read_name(line, at, true);
    if (s.name.empty()) {
      fail("neither a comment, blank, nor a sample");
      continue;
    }
    if (at < line.size() && line[at] == '{') {
      ++at;
      bool ok = true;
      while (ok && at < line.size() && line[at] != '}') {
        std::string label = read_name(line, at, false);
        if (label.empty() || label.rfind("__", 0) == 0) ok = false;
        if (!ok || at + 1 >= line.size() || line[at] != '=' || line[at + 1] != '"') {
          ok = false;
          break;
        }
        at += 2;
        std::string value;
        while (at < line.size() && line[at] != '"') {
          if (line[at] == '\\') {
            if (at + 1 >= line.size()) {
              ok = false;
              break;
            }
            const char e = line[at + 1];
            if (e == '\\') {
              value += '\\';
            } else if (e == '"') {
              value += '"';
            } else if (e == 'n') {
              value += '\n';
            } else {
              ok = false;
              break;
            }
            at += 2;
          } else {
            value += line[at++];
          }
        }
        if (!ok || at >= line.size()) {
          ok = false;
          break;
        }
        ++at;  // closing quote
        if (s.labels.count(label)) fail("label '" + label + "' twice");
        s.labels[label] = value;
        if (at < line.size() && line[at] == ',') {
          ++at;
          if (at < line.size() && line[at] == '}')
            ok = false;  // no trailing comma in what we write
        } else if (at < line.size() && line[at] != '}') {
          ok = false;
        }
      }
      if (!ok || at >= line.size() || line[at] != '}') {
        fail("malformed labels");
        continue;
      }
      ++at;
    }
    if (at >= line.size() || line[at] != ' ') {
      fail("no space before the value");
      continue;
    }
    std::istringstream rest(line.substr(at));
    std::string value_text, timestamp, extra;
    rest >> value_text >> timestamp >> extra;
    std::optional<double> value = parse_number(value_text);
    if (!value) {
      fail("bad value '" + value_text + "'");
      continue;
    }
    if (!timestamp.empty() && !parse_number(timestamp)) fail("bad timestamp");
    if (!extra.empty()) fail("text after the timestamp");
    s.value = *value;

    // The family: the name itself, or a histogram's base name for _bucket, _sum, _count.
    std::string family = s.name;
    if (!out.has(family)) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string sfx = suffix;
        if (s.name.size() > sfx.size() &&
            s.name.compare(s.name.size() - sfx.size(), sfx.size(), sfx) == 0) {
          const std::string base = s.name.substr(0, s.name.size() - sfx.size());
          if (out.has(base) &&
              (out.families[base].type == "histogram" || out.families[base].type == "summary")) {
            family = base;
          }
        }
      }
    }
    if (!out.has(family)) {
      fail("a sample with no # HELP / # TYPE before it");
      continue;
    }
    PromFamily& f = out.families[family];
    if (f.type.empty()) fail("a sample before its family's # TYPE");
    if (f.help.empty()) fail("a sample before its family's # HELP");
    if (family != current) {
      if (closed.count(family)) fail("family " + family + "'s samples are not together");
      if (!current.empty()) closed.insert(current);
      current = family;
    }
    if (f.type == "histogram" && s.name == family)
      fail("a histogram sample without _bucket, _sum or _count");
    if (f.type == "histogram" && s.name == family + "_bucket" && !s.labels.count("le"))
      fail("a bucket without le");
    if (!series.insert(series_key(s.name, s.labels)).second) fail("a series written twice");
    f.samples.push_back(std::move(s));
  }

  // Per family: counters, histograms.
  for (const auto& [name, f] : out.families) {
    if (f.type.empty()) ADD_FAILURE() << name << ": # HELP without # TYPE";
    if (f.help.empty()) ADD_FAILURE() << name << ": # TYPE without # HELP";
    if (f.type == "counter") {
      if (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0) {
        ADD_FAILURE() << "counter " << name << " does not end in _total";
      }
      for (const auto& s : f.samples) {
        if (!(s.value >= 0)) ADD_FAILURE() << "counter " << name << " is " << s.value;
      }
    }
    if (f.type != "histogram") continue;
    std::map<std::string, std::vector<const PromSample*>>
        buckets;  // series without le → buckets, in order
    std::map<std::string, double> counts, sums;
    for (const auto& s : f.samples) {
      PromLabels rest = s.labels;
      rest.erase("le");
      const std::string key = series_key(name, rest);
      if (s.name == name + "_bucket") buckets[key].push_back(&s);
      if (s.name == name + "_count") counts[key] = s.value;
      if (s.name == name + "_sum") sums[key] = s.value;
    }
    for (const auto& [key, list] : buckets) {
      double le_before = -INFINITY, count_before = 0;
      for (const PromSample* b : list) {
        std::optional<double> le = parse_number(b->labels.at("le"));
        if (!le || !(*le > le_before))
          ADD_FAILURE() << key << ": le " << b->labels.at("le") << " does not rise";
        if (b->value < count_before)
          ADD_FAILURE() << key << ": bucket le=" << b->labels.at("le") << " is not cumulative";
        le_before = le.value_or(le_before);
        count_before = b->value;
      }
      if (list.back()->labels.at("le") != "+Inf")
        ADD_FAILURE() << key << ": the last bucket is not le=\"+Inf\"";
      if (!counts.count(key)) {
        ADD_FAILURE() << key << ": no _count";
      } else if (list.back()->value != counts[key]) {
        ADD_FAILURE() << key << ": +Inf bucket " << list.back()->value << " != _count "
                      << counts[key];
      }
      if (!sums.count(key)) ADD_FAILURE() << key << ": no _sum";
    }
    for (const auto& [key, n] : counts) {
      if (!buckets.count(key)) ADD_FAILURE() << key << ": _count without buckets";
    }
  }
  return out;
}

}  // namespace ajet::e2e
