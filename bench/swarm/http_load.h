// Load tools for bench/swarm/http_bench: a closed-loop keep-alive load generator, an opener of many
// idle SSE streams, and a minimal raw-Asio HTTP responder used as the reference point.
// Benchmark-only code: it trusts the server it talks to and parses just enough HTTP for that.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ajet::bench {

// 127.0.0.1:port.
boost::asio::ip::tcp::endpoint loopback(uint16_t port);

// Length of the first complete response in `data` (head + Content-Length body), 0 if incomplete;
// `ok`: whether its status is 200.
size_t complete_response(std::string_view data, bool& ok);

struct LoadResult {
  int connections = 0;    // connected and used
  uint64_t requests = 0;  // completed during the measured window
  uint64_t errors = 0;    // failed connects, broken connections, non-200 answers
  double seconds = 0;     // the measured window
  double p50_us = 0;
  double p99_us = 0;
  double requests_per_second() const { return seconds > 0 ? double(requests) / seconds : 0; }
};

// `connections` keep-alive connections, each sending `GET path` again as soon as the previous
// answer arrived (one request in flight per connection), on one thread. Latencies of the first
// `warmup_seconds` are discarded; then it measures for `seconds`.
LoadResult run_load(uint16_t port, const std::string& path, int connections, double seconds,
                    double warmup_seconds);

// Opens `streams` connections that each GET `path` and read until the first "data:" event, then
// stay open and idle. Calls on_ready(ready, failed) once every stream got its first event or
// failed, and returns when `stop_fd` becomes readable or hits EOF (the parent closing a pipe).
void hold_streams(uint16_t port, const std::string& path, int streams, int stop_fd,
                  const std::function<void(int ready, int failed)>& on_ready);

// The reference: a few I/O threads that answer every "\r\n\r\n"-terminated request with a fixed
// 200 JSON response. No parsing, no routing, no timeouts: the ceiling for this machine.
class RawResponder {
 public:
  RawResponder(int threads, std::string body);
  ~RawResponder();
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::bench
