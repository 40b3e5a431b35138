#include "http/request_parse.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "common/strings.h"
#include "http/response.h"

namespace ajet::http {

namespace bhttp = boost::beast::http;

void limit_parser(RequestParser& parser, size_t max_header_bytes, size_t max_body_bytes) {
  parser.header_limit(static_cast<std::uint32_t>(std::min<size_t>(max_header_bytes, UINT32_MAX)));
  parser.body_limit(max_body_bytes);
}

// RFC 9112 6.1/6.3: a request body is chunked when Transfer-Encoding's final coding is `chunked`;
// any other final coding leaves the length unknowable (400), a coding this server does not decode
// is 501, and Transfer-Encoding in an HTTP/1.0 request is faulty framing (400). Beast's parser
// already refuses Transfer-Encoding beside Content-Length (reject_bad_request answers it).
std::optional<Response> transfer_coding_error(const RequestParser::value_type& header) {
  bool present = false;
  std::string all;
  for (const auto& field : header) {
    if (field.name() != bhttp::field::transfer_encoding) continue;
    if (present) all += ',';
    present = true;
    all.append(field.value().data(), field.value().size());
  }
  if (!present) return std::nullopt;
  auto bad = [&all](int status, const std::string& reason) {
    return error_response(
        status, "malformed HTTP request: Transfer-Encoding '" + all + "': " + reason,
        "invalid_request_error", status == 501 ? "unsupported_transfer_coding" : "bad_request");
  };
  if (header.version() < 11) return bad(400, "not allowed in an HTTP/1.0 request");
  std::vector<std::string>
      codings;  // lower case, parameters and blanks dropped, empty items skipped
  for (std::string_view rest = all;;) {
    const size_t comma = std::min(rest.find(','), rest.size());
    const std::string_view item = rest.substr(0, std::min(rest.find(';'), comma));
    const size_t b = item.find_first_not_of(" \t");
    if (b != std::string_view::npos)
      codings.push_back(ascii_lower(item.substr(b, item.find_last_not_of(" \t") - b + 1)));
    if (comma == rest.size()) break;
    rest.remove_prefix(comma + 1);
  }
  if (codings.empty()) return bad(400, "names no coding");
  static constexpr std::array<std::string_view, 5> kKnown = {"gzip", "x-gzip", "deflate",
                                                             "compress", "x-compress"};
  for (size_t i = 0; i < codings.size(); ++i) {
    const std::string& c = codings[i];
    const bool last = i + 1 == codings.size();
    if (c == "chunked") {
      if (!last) return bad(400, "chunked must be the final coding");
      continue;
    }
    if (std::find(kKnown.begin(), kKnown.end(), c) == kKnown.end()) {
      return bad(501, "unknown coding '" + c + "' (this server accepts only chunked)");
    }
    if (last) return bad(400, "the final coding must be chunked");
    return bad(501, "coding '" + c + "' is not supported (this server accepts only chunked)");
  }
  return std::nullopt;
}

RequestHead make_head(const RequestParser::value_type& header) {
  RequestHead head;
  head.method.assign(header.method_string());
  head.target.assign(header.target());
  split_target(head.target, head.path, head.query);
  for (const auto& field : header) {
    head.headers.add(std::string(field.name_string()), std::string(field.value()));
  }
  head.version = header.version();
  return head;
}

bool take_body(RequestParser& parser, std::string& body) {
  auto message = parser.release();
  body = std::move(message.body());
  return message.keep_alive();
}

bool take_request(RequestParser& parser, Request& request) {
  static_cast<RequestHead&>(request) = make_head(parser.get());
  return take_body(parser, request.body);
}

}  // namespace ajet::http
