// Small encodings used on the wire: base64 (standard alphabet, padded), hex, HMAC-SHA256, random
// ids.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ajet {

std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not valid base64 (standard or URL-safe alphabet, padding optional).
std::optional<std::string> base64_decode(std::string_view text);

std::string hex_encode(std::string_view bytes);

// HMAC-SHA256(key, message) as raw 32 bytes.
std::string hmac_sha256(std::string_view key, std::string_view message);

// Constant-time comparison for secrets.
bool constant_time_equal(std::string_view a, std::string_view b);

// `n` bytes from the OS CSPRNG.
std::string random_bytes(size_t n);

// 32 lowercase hex characters, like Python's uuid4().hex.
std::string new_uuid_hex();

}  // namespace ajet
