// HttpClient internals: Beast's async operations driven by a private io_context, one operation at
// a time, so every wait gets a timeout (Beast's blocking calls have none).
#include "http/client.h"

#include <poll.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>

#include "common/error.h"

namespace ajet::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using boost::system::error_code;

Url parse_url(std::string_view url) {
  std::string_view rest = url;
  if (size_t scheme = rest.find("://"); scheme != std::string_view::npos) {
    std::string_view name = rest.substr(0, scheme);
    if (iequals(name, "https"))
      invalid_argument("url '" + std::string(url) + "': https is not supported");
    if (!iequals(name, "http"))
      invalid_argument("url '" + std::string(url) + "': scheme must be http");
    rest.remove_prefix(scheme + 3);
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Url out;
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // [::1]:8080
    size_t close = authority.find(']');
    if (close == std::string_view::npos)
      invalid_argument("url '" + std::string(url) + "': unclosed '['");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') invalid_argument("url '" + std::string(url) + "': junk after ']'");
      port_text = after.substr(1);
    }
  } else {
    size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) invalid_argument("url '" + std::string(url) + "' has no host");
  if (!port_text.empty()) {
    int port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535)
        invalid_argument("url '" + std::string(url) + "': bad port");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535)
      invalid_argument("url '" + std::string(url) + "': port out of range");
    out.port = static_cast<uint16_t>(port);
  }
  return out;
}

Json ClientResponse::json() const {
  return parse_json(body, "HTTP " + std::to_string(status) + " response body");
}

struct HttpClient::Impl {
  ClientOptions options;
  Url base;
  std::string prefix;  // the base URL's path without a trailing '/'
  asio::io_context ioc{1};
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  std::string host;  // of the open connection
  uint16_t port = 0;
  uint64_t opened = 0;
  std::optional<std::chrono::steady_clock::time_point>
      deadline;  // of the request under way (total_timeout)

  // The next wait may last `wait`, and not past the request's deadline.
  void arm(std::chrono::milliseconds wait) {
    auto until = std::chrono::steady_clock::now() + wait;
    if (deadline && *deadline < until) until = *deadline;
    stream->expires_at(until);
  }
  bool past_deadline() const { return deadline && std::chrono::steady_clock::now() >= *deadline; }

  static std::string authority(const std::string& host, uint16_t port) {
    bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }

  // Runs the io_context until the operation just started has completed.
  void run() {
    ioc.restart();
    ioc.run();
  }

  void disconnect() {
    if (!stream) return;
    error_code ec;
    stream->socket().shutdown(tcp::socket::shutdown_both, ec);
    stream->socket().close(ec);
    stream.reset();
    buffer.clear();
  }

  [[noreturn]] void unavailable(const std::string& what, const Url& url, error_code ec) {
    disconnect();
    std::string reason = ec != beast::error::timeout ? ec.message()
                         : past_deadline()
                             ? "timed out: the whole request may take at most " +
                                   std::to_string(options.total_timeout.count()) + " ms"
                             : "timed out after " + std::to_string(options.timeout.count()) + " ms";
    fail(ErrorCode::kUnavailable,
         "http client: " + what + " " + authority(url.host, url.port) + ": " + reason);
  }

  // A pooled connection is usable only if it is idle and quiet: readable now means the server
  // closed it (EOF) or sent something unasked; either way it cannot carry the next request.
  bool reusable(const Url& url) {
    if (!stream || !stream->socket().is_open() || host != url.host || port != url.port)
      return false;
    pollfd p{stream->socket().native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0 && buffer.size() == 0;
  }

  void connect(const Url& url) {
    disconnect();
    error_code ec;
    tcp::resolver resolver(ioc);
    tcp::resolver::results_type endpoints;
    resolver.async_resolve(url.host, std::to_string(url.port),
                           [&](error_code e, tcp::resolver::results_type r) {
                             ec = e;
                             endpoints = std::move(r);
                           });
    run();
    if (ec) unavailable("cannot resolve", url, ec);
    stream.emplace(ioc);
    arm(options.connect_timeout);
    stream->async_connect(endpoints, [&](error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (ec == beast::error::timeout) {
      disconnect();
      fail(ErrorCode::kUnavailable,
           "http client: cannot connect to " + authority(url.host, url.port) +
               ": timed out after " +
               std::to_string(
                   (past_deadline() ? options.total_timeout : options.connect_timeout).count()) +
               " ms");
    }
    if (ec) unavailable("cannot connect to", url, ec);
    stream->socket().set_option(tcp::no_delay(true), ec);
    host = url.host;
    port = url.port;
    ++opened;
  }

  Url resolve(std::string_view url_or_path) const {
    if (!url_or_path.empty() && url_or_path.front() == '/') {
      Url url = base;
      url.target = prefix + std::string(url_or_path);
      return url;
    }
    return parse_url(url_or_path);
  }

  ClientResponse exchange(std::string_view method, std::string_view url_or_path,
                          const Headers& headers, std::string_view body,
                          const std::function<bool(const SseEvent&)>* on_event) {
    Url url = resolve(url_or_path);
    std::string what = std::string(method) + " " + url.target + " at";
    deadline.reset();
    if (options.total_timeout.count() > 0)
      deadline = std::chrono::steady_clock::now() + options.total_timeout;

    bhttp::request<bhttp::span_body<const char>> req;
    req.method_string(method);
    req.target(url.target);
    req.version(11);
    for (const auto& [name, value] : headers) req.insert(name, value);
    if (!headers.has("Host")) req.set(bhttp::field::host, authority(url.host, url.port));
    if (!headers.has("User-Agent")) req.set(bhttp::field::user_agent, options.user_agent);
    req.body() = boost::span<const char>(body.data(), body.size());
    if (!headers.has("Content-Length") && !headers.has("Transfer-Encoding") &&
        (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH")) {
      req.content_length(body.size());
    }

    for (int attempt = 0;; ++attempt) {
      bool reused = reusable(url);
      if (!reused) connect(url);
      error_code ec;
      arm(options.timeout);
      bhttp::async_write(*stream, req, [&](error_code e, size_t) { ec = e; });
      run();
      if (ec) {
        if (reused && attempt == 0 && ec != beast::error::timeout) {
          disconnect();
          continue;
        }
        unavailable("sending " + what, url, ec);
      }

      bhttp::response_parser<bhttp::buffer_body> parser;
      parser.body_limit(boost::none);  // enforced below, with a message naming the limit
      if (method == "HEAD") parser.skip(true);
      arm(options.timeout);
      bhttp::async_read_header(*stream, buffer, parser, [&](error_code e, size_t) { ec = e; });
      run();
      if (ec) {
        // The server closed an idle connection just as we reused it: nothing was answered, so
        // sending again on a fresh connection is safe.
        bool closed_idle = ec == bhttp::error::end_of_stream ||
                           ec == asio::error::connection_reset || ec == asio::error::eof ||
                           ec == asio::error::broken_pipe;
        if (reused && attempt == 0 && closed_idle && !parser.got_some()) {
          disconnect();
          continue;
        }
        unavailable("reading the response to " + what, url, ec);
      }

      ClientResponse out;
      out.status = static_cast<int>(parser.get().result_int());
      for (const auto& field : parser.get())
        out.headers.add(std::string(field.name_string()), std::string(field.value()));
      bool sse = on_event && out.status / 100 == 2 &&
                 out.headers.get_or("Content-Type", "").starts_with("text/event-stream");
      SseParser sse_parser;
      bool stopped = false;
      std::array<char, 16 * 1024> chunk;
      while (!parser.is_done()) {
        parser.get().body().data = chunk.data();
        parser.get().body().size = chunk.size();
        arm(options.timeout);
        bhttp::async_read_some(*stream, buffer, parser, [&](error_code e, size_t) { ec = e; });
        run();
        if (ec == bhttp::error::need_buffer) ec = {};
        if (ec) unavailable("reading the response body of " + what, url, ec);
        size_t n = chunk.size() - parser.get().body().size;
        if (sse) {
          if (!sse_parser.feed(std::string_view(chunk.data(), n), *on_event)) {
            stopped = true;
            break;
          }
          // A stream may run on without end, but one event (a line that never ends, data lines
          // without the blank line that dispatches them) is held whole: bounded like a body.
          if (sse_parser.buffered() > options.max_response_bytes) {
            disconnect();
            fail(ErrorCode::kResourceExhausted,
                 "http client: an event of the stream answering " + what + " " +
                     authority(url.host, url.port) + " exceeds max_response_bytes (" +
                     std::to_string(options.max_response_bytes) + ")");
          }
        } else {
          if (out.body.size() + n > options.max_response_bytes) {
            disconnect();
            fail(ErrorCode::kResourceExhausted,
                 "http client: the response to " + what + " " + authority(url.host, url.port) +
                     " exceeds max_response_bytes (" + std::to_string(options.max_response_bytes) +
                     ")");
          }
          out.body.append(chunk.data(), n);
        }
      }
      if (stopped || !parser.get().keep_alive()) disconnect();
      return out;
    }
  }
};

HttpClient::HttpClient(std::string_view base_url, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->base = parse_url(base_url);
  std::string path = impl_->base.target;
  if (size_t q = path.find('?'); q != std::string::npos) path.resize(q);
  while (!path.empty() && path.back() == '/') path.pop_back();
  impl_->prefix = path;
}

HttpClient::~HttpClient() {
  if (impl_) impl_->disconnect();
}
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;

ClientResponse HttpClient::request(std::string_view method, std::string_view url_or_path,
                                   const Headers& headers, std::string_view body) {
  return impl_->exchange(method, url_or_path, headers, body, nullptr);
}

ClientResponse HttpClient::post_json(std::string_view url_or_path, const Json& body,
                                     const Headers& headers) {
  Headers with_type = headers;
  if (!with_type.has("Content-Type")) with_type.add("Content-Type", "application/json");
  std::string text = body.dump();
  return impl_->exchange("POST", url_or_path, with_type, text, nullptr);
}

ClientResponse HttpClient::stream(std::string_view method, std::string_view url_or_path,
                                  const Headers& headers, std::string_view body,
                                  const std::function<bool(const SseEvent&)>& on_event) {
  return impl_->exchange(method, url_or_path, headers, body, &on_event);
}

void HttpClient::close() { impl_->disconnect(); }
uint64_t HttpClient::connections_opened() const { return impl_->opened; }
const std::string& HttpClient::host() const { return impl_->base.host; }
uint16_t HttpClient::port() const { return impl_->base.port; }

}  // namespace ajet::http
