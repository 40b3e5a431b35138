// Token arrays as little-endian blobs (the on-disk form of ids, logprobs and policy versions), and
// the JSON text columns read back. The encoding is fixed (LE, 4 bytes per value) whatever the host,
// so a store moves between machines.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace ajet::store {

std::string encode_i32(std::span<const int32_t> values);
std::string encode_f32(std::span<const float> values);

// Throw Error(kDataLoss) naming `what` when the blob is not a whole number of 4-byte values.
std::vector<int32_t> decode_i32(std::string_view bytes, std::string_view what);
std::vector<float> decode_f32(std::string_view bytes, std::string_view what);

// A stored JSON column (metadata, log_metrics, batch stats, the registry snapshot), read with the
// bounded parser: Error(kDataLoss) naming `what` when it is not JSON or nests too deep.
Json parse_stored_json(std::string_view text, std::string_view what);

}  // namespace ajet::store
