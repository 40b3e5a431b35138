// Load tools for bench/swarm/front_bench: a closed-loop keep-alive generator for arbitrary raw
// requests (POST with headers and a body: chat completions with per-connection episode keys), and
// an opener of many streaming POSTs that stay open. Benchmark-only: it trusts the server, parses
// just enough HTTP (Content-Length bodies) and runs on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "http_load.h"

namespace ajet::bench {

// A complete HTTP/1.1 request: "POST path" with Host, Content-Type, Content-Length and `headers`.
std::string raw_post(const std::string& path, const std::string& body,
                     const std::vector<std::string>& headers);

// `connections` keep-alive connections; connection i sends requests[i % size] again as soon as the
// previous answer arrived. Latencies of the first `warmup_seconds` are discarded.
LoadResult run_request_load(uint16_t port, const std::vector<std::string>& requests,
                            int connections, double seconds, double warmup_seconds);

// Opens `streams` connections, each sending requests[i % size] (a streaming POST) and reading until
// its first "data:" event; then they stay open. Calls on_ready(ready, failed) once all settled (or
// `settle_seconds` passed), then closes everything and returns.
void hold_request_streams(uint16_t port, const std::vector<std::string>& requests, int streams,
                          double settle_seconds,
                          const std::function<void(int ready, int failed)>& on_ready);

}  // namespace ajet::bench
