#include "http/message.h"

#include <algorithm>

#include "http/response.h"

namespace ajet::http {

namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

void Headers::set(std::string name, std::string value) {
  erase(name);
  fields_.emplace_back(std::move(name), std::move(value));
}

void Headers::erase(std::string_view name) {
  std::erase_if(fields_, [&](const Field& f) { return iequals(f.first, name); });
}

std::optional<std::string_view> Headers::get(std::string_view name) const {
  for (const Field& f : fields_) {
    if (iequals(f.first, name)) return std::string_view(f.second);
  }
  return std::nullopt;
}

std::string Headers::get_or(std::string_view name, std::string_view fallback) const {
  auto value = get(name);
  return std::string(value ? *value : fallback);
}

void CancelSignal::on_cancel(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!cancelled_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void CancelSignal::cancel() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    cancelled_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  for (auto& fn : callbacks) fn();
}

namespace detail {

template <>
Response dropped_value<Response>() {
  return error_response(500, "the handler dropped the request without responding", "server_error",
                        "no_response");
}

}  // namespace detail

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

void split_target(std::string_view target, std::string& path,
                  std::map<std::string, std::string>& query) {
  size_t q = target.find('?');
  path.assign(target.substr(0, q));
  if (q == std::string_view::npos) return;
  std::string_view rest = target.substr(q + 1);
  size_t hash = rest.find('#');
  if (hash != std::string_view::npos) rest = rest.substr(0, hash);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    std::string key = percent_decode(pair.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
    query[std::move(key)] = std::move(value);
  }
}

}  // namespace ajet::http
