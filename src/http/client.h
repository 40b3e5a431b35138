// HttpClient: a small synchronous HTTP/1.1 client (Beast underneath, hidden) for the C++ swarm
// client, classic-mode agents and tests. Keeps one keep-alive connection; never speaks TLS.
// Thread-safety: none; use one HttpClient per thread (they are cheap).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/json.h"
#include "http/message.h"
#include "http/sse.h"

namespace ajet::http {

struct Url {
  std::string host;  // "127.0.0.1", "localhost", "::1" (no brackets)
  uint16_t port = 80;
  std::string target;  // "/v1/chat/completions?x=1"; "/" when the URL has no path
};
// "http://host[:port][/path]" (the scheme may be left out). https → Error(kInvalidArgument).
Url parse_url(std::string_view url);

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5'000};
  // The longest wait for the server at any point: sending, the response head, each body read (for
  // a stream: the longest gap between two events). Not a bound on the whole request.
  std::chrono::milliseconds timeout{60'000};
  // When above zero, a bound on one whole request: connecting, sending and reading the answer
  // together (each wait above is cut to what is left of it), so a peer that trickles bytes cannot
  // hold the caller past it. Name resolution is not bounded by it.
  std::chrono::milliseconds total_timeout{0};
  size_t max_response_bytes = 256u << 20;
  std::string user_agent = "ajet-http";
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;   // for stream(): only a non-SSE body (e.g. a JSON error)
  Json json() const;  // body parsed; Error(kInvalidArgument) naming the status when it is not JSON
};

class HttpClient {
 public:
  // `base_url` "http://host:port[/prefix]": requests given a path ("/x") go to host:port and get
  // the prefix prepended ("/v1" + "/models"); a full URL goes where it says (reconnecting).
  explicit HttpClient(std::string_view base_url, ClientOptions options = {});
  ~HttpClient();
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;

  // Sends one request and reads the whole response. `Host`, `User-Agent` and `Content-Length` are
  // added unless `headers` has them. A connection that the server closed while idle is retried
  // once, on a new one, when nothing of the response arrived. Errors: Error(kUnavailable) naming
  // host:port for refused connections, timeouts and broken connections; kResourceExhausted for a
  // response over max_response_bytes; kInvalidArgument for a bad URL.
  ClientResponse request(std::string_view method, std::string_view url_or_path,
                         const Headers& headers = {}, std::string_view body = {});
  ClientResponse get(std::string_view url_or_path, const Headers& headers = {}) {
    return request("GET", url_or_path, headers);
  }
  // POST with `Content-Type: application/json` (added unless `headers` has a Content-Type).
  ClientResponse post_json(std::string_view url_or_path, const Json& body,
                           const Headers& headers = {});

  // Like request(), but a `text/event-stream` response is read as it arrives: on_event gets every
  // event (the `data:` payload, event name, id) as soon as its blank line is received, and
  // returning false stops reading and closes the connection (the server sees the client leave).
  // Any other response is read whole into .body without calling on_event.
  ClientResponse stream(std::string_view method, std::string_view url_or_path,
                        const Headers& headers, std::string_view body,
                        const std::function<bool(const SseEvent&)>& on_event);

  void close();                         // drops the keep-alive connection
  uint64_t connections_opened() const;  // how many TCP connections this client has made
  const std::string& host() const;
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::http
