// fuzz-sources: src/http/request_parse.cc src/http/message.cc src/http/response.cc
// libFuzzer target: arbitrary bytes as everything a client sends on one connection, read the way
// the server reads them (http/request_parse.h): request after request through Beast's parser with
// small limits, the Transfer-Encoding framing checks, and the conversion into a Request. Nothing
// may crash or escape as an exception; a request that is accepted has its body within the limit, a
// path that is a prefix of its target, and a Transfer-Encoding (if any) that is chunked.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/strings.h"
#include "http/message.h"
#include "http/request_parse.h"

namespace {

constexpr size_t kMaxHeader = 4096;
constexpr size_t kMaxBody = 16384;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (int requests = 0; !rest.empty() && requests < 32; ++requests) {
    ajet::http::RequestParser parser;
    ajet::http::limit_parser(parser, kMaxHeader, kMaxBody);
    boost::beast::error_code ec;
    while (!rest.empty() && !parser.is_done()) {
      const size_t used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
      if (used > rest.size()) std::abort();
      rest.remove_prefix(used);
      if (ec || used == 0) break;  // need_more (an incomplete request) or a rejected one
    }
    if (!parser.is_done()) {
      if (!ec && parser.need_eof())
        parser.put_eof(ec);             // the client closed: a body read to the end
      if (!parser.is_done()) return 0;  // the connection would answer 400/413 and close
    }
    if (std::optional<ajet::http::Response> bad = ajet::http::transfer_coding_error(parser.get());
        bad) {
      if (bad->status != 400 && bad->status != 501) std::abort();
      return 0;  // answered and closed
    }
    ajet::http::Request request;
    const bool keep_alive = ajet::http::take_request(parser, request);
    if (request.body.size() > kMaxBody) std::abort();
    if (request.target.compare(0, request.path.size(), request.path) != 0) std::abort();
    if (request.version != 10 && request.version != 11) std::abort();
    if (auto te = request.headers.get("Transfer-Encoding"); te) {
      if (ajet::ascii_lower(*te).find("chunked") == std::string::npos) std::abort();
    }
    (void)ajet::http::percent_decode(request.path, false);
    if (!keep_alive) return 0;
  }
  return 0;
}
