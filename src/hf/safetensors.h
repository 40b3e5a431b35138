// safetensors files: mmap'd read with full header validation, and write. No libtorch: tensors are
// (name, dtype, shape, bytes); src/model turns them into torch tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::hf {

enum class DType { kF32, kF16, kBF16, kI64, kI32, kU8, kBool };

std::string_view dtype_name(DType dtype);  // "F32", "BF16", ... as in the file format
size_t dtype_size(DType dtype);            // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t begin = 0;  // byte offsets into the data section, [begin, end)
  size_t end = 0;
  int64_t numel() const;
};

// A read-only view of one tensor's bytes (little-endian, row-major).
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

class SafetensorsFile {
 public:
  // mmaps the file; validates the header (length sane, JSON well-formed, dtypes known, offsets in
  // range, sizes == numel * dtype size, no overlaps, no gaps). Errors name the file and the tensor.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Same validation over bytes in memory (for tests and fuzzing); the bytes must outlive the
  // object.
  static SafetensorsFile parse(std::span<const std::byte> bytes, std::string_view source_name);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::vector<TensorInfo>& tensors() const;              // in file order (by data offset)
  const TensorInfo* find(std::string_view name) const;         // nullptr when absent
  TensorView view(const TensorInfo& info) const;               // `info` must come from this file
  const std::map<std::string, std::string>& metadata() const;  // the "__metadata__" entry
  const std::string& source() const;  // the path or source name, for messages

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes tensors (in the given order) atomically: temp file + fsync + rename. The header is padded
// with spaces to a multiple of 8 bytes, as the reference implementation does. Throws
// Error(kInvalidArgument) for duplicate names or data whose size does not match shape x dtype.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same bytes write_safetensors would write, in memory (tests, fuzzing, small payloads).
std::string serialize_safetensors(const std::vector<TensorView>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace ajet::hf
