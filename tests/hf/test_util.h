// Helpers for the hf tests: a scratch directory per test, hand-made safetensors bytes, tensor
// bytes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "hf/safetensors.h"
#include "support/scratch_dir.h"

namespace ajet::hf::testing {

using ScratchDir = ajet::test_support::ScratchDir;

// 8-byte little-endian header length + header text + data bytes, exactly as given (no padding).
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

inline std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A tensor's bytes as a string (for comparisons).
inline std::string bytes_of(const TensorView& v) {
  return std::string(reinterpret_cast<const char*>(v.data.data()), v.data.size());
}

}  // namespace ajet::hf::testing
