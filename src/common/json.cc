#include "common/json.h"

#include <cctype>
#include <cmath>
#include <vector>

#include "common/error.h"

namespace ajet {

namespace {

// A SAX handler (nlohmann's DOM builder, an acceptor, a caller's reader), wrapped to know where it
// is: the keys and indices from the root down to the value being read. It names the field in an
// error and refuses nesting beyond the limit while the parser (which is iterative) reads it, so no
// deep value is ever built. With report_syntax false, a syntax error stops the parse quietly (only
// depth throws).
template <class J, class Inner>
class LocatingSax {
 public:
  using string_t = typename J::string_t;

  LocatingSax(Inner& inner, std::string_view what, int max_depth, bool report_syntax = true)
      : inner_(inner), what_(what), max_depth_(max_depth), report_syntax_(report_syntax) {}

  bool null() { return element(), inner_.null(); }
  bool boolean(bool v) { return element(), inner_.boolean(v); }
  bool number_integer(typename J::number_integer_t v) {
    return element(), inner_.number_integer(v);
  }
  bool number_unsigned(typename J::number_unsigned_t v) {
    return element(), inner_.number_unsigned(v);
  }
  bool number_float(typename J::number_float_t v, const string_t& s) {
    return element(), inner_.number_float(v, s);
  }
  bool string(string_t& v) { return element(), inner_.string(v); }
  bool binary(typename J::binary_t& v) { return element(), inner_.binary(v); }
  bool start_object(std::size_t n) { return enter(false), inner_.start_object(n); }
  bool key(string_t& k) {
    frames_.back().key.assign(k, 0, std::min<size_t>(k.size(), kKeyChars));
    frames_.back().key_truncated = k.size() > kKeyChars;
    return inner_.key(k);
  }
  bool end_object() { return frames_.pop_back(), inner_.end_object(); }
  bool start_array(std::size_t n) { return enter(true), inner_.start_array(n); }
  bool end_array() { return frames_.pop_back(), inner_.end_array(); }

  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const Exception& ex) {
    if (!report_syntax_) return false;
    std::string reason =
        ex.what();  // "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    if (size_t end = reason.find("] ");
        reason.rfind("[json.exception.", 0) == 0 && end != std::string::npos) {
      reason.erase(0, end + 2);
    }
    if (reason.size() > kReasonChars)
      reason = reason.substr(0, kReasonChars) + "...";  // "last read: '<token>'"
    // The failed value never reached element(): in an array, it is the one after the last counted.
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    fail_at(reason);
    return false;  // not reached: fail_at throws
  }

 private:
  static constexpr size_t kKeyChars = 64;    // of one key, in the path
  static constexpr size_t kPathFrames = 12;  // named in full before the path is elided
  static constexpr size_t kReasonChars = 160;

  struct Frame {
    bool array = false;
    int64_t index = -1;  // of the current element, for arrays
    std::string key;     // the current key, for objects
    bool key_truncated = false;
  };

  // A value starts: inside an array, it is the next element.
  void element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  void enter(bool array) {
    element();
    if (int(frames_.size()) >= max_depth_) {
      fail_at("arrays and objects nested deeper than " + std::to_string(max_depth_) + " levels");
    }
    Frame frame;
    frame.array = array;
    frames_.push_back(std::move(frame));
  }

  [[noreturn]] void fail_at(const std::string& reason) const {
    invalid_argument(std::string(what_) + ": invalid JSON at " + path() + ": " + reason);
  }

  std::string path() const {
    std::string out;
    size_t named = 0;
    for (const Frame& f : frames_) {
      if (f.array ? f.index < 0 : f.key.empty() && !f.key_truncated)
        break;  // nothing read inside it yet
      if (named == kPathFrames) {
        out += "...";
        break;
      }
      ++named;
      if (f.array) {
        out += "[" + std::to_string(f.index) + "]";
        continue;
      }
      bool plain = !f.key_truncated;
      for (char c : f.key)
        plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
      if (plain) {
        out += (out.empty() ? "" : ".") + f.key;
      } else {
        out += "[" + Json(f.key).dump(-1, ' ', false, Json::error_handler_t::replace) +
               (f.key_truncated ? "...]" : "]");
      }
    }
    if (out.empty()) return "the top level";
    if (frames_.size() > kPathFrames)
      out += " (" + std::to_string(frames_.size()) + " levels deep)";
    return out;
  }

  Inner& inner_;
  std::string_view what_;
  int max_depth_;
  bool report_syntax_;
  std::vector<Frame> frames_;
};

// The one call of nlohmann's parser. Its errors all arrive through parse_error; an exception that
// left it any other way (none is known) still becomes the same Error, never a crash of the caller.
template <class J, class Inner>
bool sax_parse_located(std::string_view text, std::string_view what, int max_depth, Inner& inner,
                       bool report_syntax = true) {
  LocatingSax<J, Inner> sax(inner, what, max_depth, report_syntax);
  try {
    return J::sax_parse(text.begin(), text.end(), &sax);
  } catch (const nlohmann::json::exception& e) {
    invalid_argument(std::string(what) + ": invalid JSON: " + e.what());
  }
}

template <class J>
J parse_located(std::string_view text, std::string_view what, int max_depth) {
  J result;
  nlohmann::detail::json_sax_dom_parser<J> dom(result, true);
  sax_parse_located<J>(text, what, max_depth, dom);
  return result;
}

}  // namespace

void require_json_depth(std::string_view text, std::string_view what, int max_depth) {
  nlohmann::detail::json_sax_acceptor<Json> acceptor;
  sax_parse_located<Json>(text, what, max_depth, acceptor, /*report_syntax=*/false);
}

bool sax_parse_json(std::string_view text, std::string_view what, nlohmann::json_sax<Json>& handler,
                    int max_depth) {
  return sax_parse_located<Json>(text, what, max_depth, handler);
}

bool sax_parse_json(std::string_view text, std::string_view what,
                    nlohmann::json_sax<nlohmann::ordered_json>& handler, int max_depth) {
  return sax_parse_located<nlohmann::ordered_json>(text, what, max_depth, handler);
}

Json parse_json(std::string_view text, std::string_view what, int max_depth) {
  return parse_located<Json>(text, what, max_depth);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view what,
                                          int max_depth) {
  return parse_located<nlohmann::ordered_json>(text, what, max_depth);
}

std::optional<Json> try_parse_json(std::string_view text, int max_depth) {
  try {
    return parse_located<Json>(text, "", max_depth);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<nlohmann::ordered_json> try_parse_ordered_json(std::string_view text, int max_depth) {
  try {
    return parse_located<nlohmann::ordered_json>(text, "", max_depth);
  } catch (const Error&) {
    return std::nullopt;
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
std::string_view json_type_name(const nlohmann::ordered_json& value) {
  return type_name_of(value.type());
}

namespace {

const Json* find_field(const Json& obj, std::string_view key, std::string_view where) {
  if (!obj.is_object()) {
    invalid_argument(std::string(where) + ": expected a JSON object, got " +
                     std::string(json_type_name(obj)));
  }
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

[[noreturn]] void wrong_type(std::string_view key, std::string_view where,
                             std::string_view expected, const Json& got) {
  invalid_argument(std::string(where) + ": field '" + std::string(key) + "' must be " +
                   std::string(expected) + ", got " + std::string(json_type_name(got)));
}

[[noreturn]] void missing(std::string_view key, std::string_view where) {
  invalid_argument(std::string(where) + ": missing required field '" + std::string(key) + "'");
}

}  // namespace

std::optional<std::string> get_optional_string(const Json& obj, std::string_view key,
                                               std::string_view where) {
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

std::optional<int64_t> get_optional_int(const Json& obj, std::string_view key,
                                        std::string_view where) {
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

std::optional<double> get_optional_number(const Json& obj, std::string_view key,
                                          std::string_view where) {
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

std::optional<bool> get_optional_bool(const Json& obj, std::string_view key,
                                      std::string_view where) {
  const Json* v = find_field(obj, key, where);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, where, "a boolean", *v);
  return v->get<bool>();
}

}  // namespace ajet
