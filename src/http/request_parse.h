// One request off the wire, apart from any socket: Beast's parser with this server's limits, the
// framing checks Beast leaves to us (Transfer-Encoding, RFC 9112), and the conversion into a
// Request. The connection (connection.cc) reads every request through these; the fuzz target
// fuzz_http_request feeds them arbitrary bytes.
#pragma once

#include <boost/beast/http.hpp>
#include <cstddef>
#include <optional>

#include "http/message.h"

namespace ajet::http {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// A header above max_header_bytes fails with header_limit, a body above max_body_bytes with
// body_limit.
void limit_parser(RequestParser& parser, size_t max_header_bytes, size_t max_body_bytes);

// RFC 9112 6.1/6.3 for a parsed header: nullopt when its framing is sound; else the answer (400, or
// 501 for a coding this server does not decode), after which the connection must close: the bytes
// after such a header would otherwise be read as the next request (request smuggling).
std::optional<Response> transfer_coding_error(const RequestParser::value_type& header);

// The head of a request whose header is parsed (parser.is_header_done()), all but remote_address.
RequestHead make_head(const RequestParser::value_type& header);

// Moves the finished request's body out of `parser` (which must be done) into `body`; returns
// whether the connection may stay open after the answer.
bool take_body(RequestParser& parser, std::string& body);

// make_head and take_body in one: the finished request (all but remote_address) into `request`.
bool take_request(RequestParser& parser, Request& request);

}  // namespace ajet::http
