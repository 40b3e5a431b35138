// A Hugging Face checkpoint's weights: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` (weight_map: tensor name -> shard file), behind one lookup by
// name. Never reads a shard outside the checkpoint's directory, and never silently ignores an index
// entry.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf/safetensors.h"

namespace ajet::hf {

inline constexpr std::string_view kSingleFileName = "model.safetensors";
inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

class SafetensorsCheckpoint {
 public:
  // `path` is a directory (its index file when present, else its model.safetensors), an index
  // .json, or one .safetensors file. Errors: a shard the index names is missing (kNotFound), a
  // tensor mapped to a shard that does not hold it, a tensor held by a shard but absent from the
  // index, a tensor in two shards, a shard name that is not a plain file name (kDataLoss /
  // kInvalidArgument).
  static SafetensorsCheckpoint open(const std::filesystem::path& path);

  const std::vector<std::string>& names() const;                // every tensor, sorted
  std::optional<TensorView> find(std::string_view name) const;  // nullopt when absent
  TensorView get(std::string_view name) const;        // throws kNotFound naming the tensor
  const std::vector<SafetensorsFile>& files() const;  // shards, in file-name order
  const std::filesystem::path& source() const;        // what open() was given

 private:
  struct Location {
    size_t file = 0;
    const TensorInfo* info = nullptr;
  };
  std::filesystem::path source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Location, std::less<>> by_name_;
  std::vector<std::string> names_;
};

// Writes `tensors` into `dir` (created if needed) as HF does: everything in dir/model.safetensors
// when it fits in `max_shard_bytes` of tensor data (a stale index file there is removed), else
// shards model-0000i-of-0000n.safetensors filled greedily in the given order (a tensor larger than
// the limit gets a shard of its own) plus the index, written last. Each file is written atomically;
// for the whole checkpoint to appear atomically, write into a fresh directory and rename it.
// `metadata` goes into every shard's `__metadata__`. Returns the files written, index last.
std::vector<std::filesystem::path> write_safetensors_checkpoint(
    const std::filesystem::path& dir, const std::vector<TensorView>& tensors,
    size_t max_shard_bytes, const std::map<std::string, std::string>& metadata = {});

}  // namespace ajet::hf
