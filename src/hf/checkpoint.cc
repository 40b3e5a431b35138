#include "hf/checkpoint.h"

#include <cstdio>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "hf/parse_text.h"

namespace ajet::hf {
namespace {

namespace fs = std::filesystem;

// A shard named by an index must be a plain file beside it: no directories, no "..".
void check_shard_name(const std::string& shard, const std::string& tensor, const fs::path& index) {
  if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
      shard.find('\\') != std::string::npos || shard.find('\0') != std::string::npos) {
    fail(ErrorCode::kDataLoss, index.string() + ": weight_map entry '" + tensor +
                                   "' names shard '" + shard + "', which is not a plain file name");
  }
}

// weight_map of an index file: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  Json json = detail::parse_json_text(read_file(index), index.string());
  if (!json.is_object()) fail(ErrorCode::kDataLoss, index.string() + ": must be a JSON object");
  auto it = json.find("weight_map");
  if (it == json.end() || !it->is_object()) {
    fail(ErrorCode::kDataLoss, index.string() + ": missing object field 'weight_map'");
  }
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : it->items()) {
    if (!shard.is_string()) {
      fail(ErrorCode::kDataLoss,
           index.string() + ": weight_map entry '" + tensor + "' must be a string");
    }
    check_shard_name(shard.get<std::string>(), tensor, index);
    out.emplace(tensor, shard.get<std::string>());
  }
  return out;
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const fs::path& path) {
  SafetensorsCheckpoint ckpt;
  ckpt.source_ = path;
  fs::path index;
  fs::path single;
  if (fs::is_directory(path)) {
    if (fs::exists(path / kIndexFileName)) {
      index = path / kIndexFileName;
    } else if (fs::exists(path / kSingleFileName)) {
      single = path / kSingleFileName;
    } else {
      fail(ErrorCode::kNotFound, path.string() + ": neither " + std::string(kIndexFileName) +
                                     " nor " + std::string(kSingleFileName) + " found");
    }
  } else if (path.extension() == ".json") {
    index = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    ckpt.files_.push_back(SafetensorsFile::open(single));
    for (const TensorInfo& t : ckpt.files_[0].tensors())
      ckpt.by_name_.emplace(t.name, Location{0, &t});
  } else {
    auto weight_map = read_weight_map(index);
    std::map<std::string, size_t> shard_index;  // shard file name -> position in files_
    for (const auto& [tensor, shard] : weight_map) shard_index.emplace(shard, 0);
    for (auto& [shard, position] : shard_index) {
      fs::path shard_path = index.parent_path() / shard;
      if (!fs::exists(shard_path)) {
        std::string tensor;
        for (const auto& [t, s] : weight_map) {
          if (s == shard) {
            tensor = t;
            break;
          }
        }
        fail(ErrorCode::kNotFound, index.string() + ": tensor '" + tensor +
                                       "' is mapped to shard '" + shard +
                                       "', which does not exist");
      }
      position = ckpt.files_.size();
      ckpt.files_.push_back(SafetensorsFile::open(shard_path));
    }
    for (const auto& [tensor, shard] : weight_map) {
      size_t file = shard_index.at(shard);
      const TensorInfo* info = ckpt.files_[file].find(tensor);
      if (info == nullptr) {
        fail(ErrorCode::kDataLoss, index.string() + ": tensor '" + tensor +
                                       "' is mapped to shard '" + shard +
                                       "', which does not hold it");
      }
      ckpt.by_name_.emplace(tensor, Location{file, info});
    }
    // Every shard tensor must be indexed: a tensor the index omits (or one in two shards) means the
    // index and the shards come from different saves.
    for (size_t f = 0; f < ckpt.files_.size(); ++f) {
      for (const TensorInfo& t : ckpt.files_[f].tensors()) {
        auto it = ckpt.by_name_.find(t.name);
        if (it == ckpt.by_name_.end() || it->second.file != f) {
          fail(ErrorCode::kDataLoss, ckpt.files_[f].source() + ": tensor '" + t.name +
                                         "' is not mapped to this " + "shard by " + index.string());
        }
      }
    }
  }
  for (const auto& [name, location] : ckpt.by_name_) ckpt.names_.push_back(name);
  return ckpt;
}

const std::vector<std::string>& SafetensorsCheckpoint::names() const { return names_; }

std::optional<TensorView> SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return files_[it->second.file].view(*it->second.info);
}

TensorView SafetensorsCheckpoint::get(std::string_view name) const {
  auto view = find(name);
  if (!view)
    fail(ErrorCode::kNotFound, source_.string() + ": no tensor '" + std::string(name) + "'");
  return *view;
}

const std::vector<SafetensorsFile>& SafetensorsCheckpoint::files() const { return files_; }

const fs::path& SafetensorsCheckpoint::source() const { return source_; }

std::vector<fs::path> write_safetensors_checkpoint(
    const fs::path& dir, const std::vector<TensorView>& tensors, size_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) invalid_argument(dir.string() + ": max_shard_bytes must be positive");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(ErrorCode::kIo, dir.string() + ": cannot create directory (" + ec.message() + ")");

  // Greedy fill in the given order, as transformers' shard splitting does.
  std::vector<std::vector<TensorView>> shards;
  size_t current_bytes = 0;
  uint64_t total_bytes = 0;
  for (const TensorView& t : tensors) {
    if (shards.empty() || (current_bytes > 0 && current_bytes + t.data.size() > max_shard_bytes)) {
      shards.emplace_back();
      current_bytes = 0;
    }
    shards.back().push_back(t);
    current_bytes += t.data.size();
    total_bytes += t.data.size();
  }

  std::vector<fs::path> written;
  if (shards.size() <= 1) {
    written.push_back(dir / kSingleFileName);
    write_safetensors(written.back(), tensors, metadata);
    fs::remove(dir / kIndexFileName, ec);  // a stale index would shadow the new file on open()
    return written;
  }
  Json weight_map = Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const TensorView& t : shards[i]) {
      if (weight_map.contains(t.name))
        invalid_argument(dir.string() + ": tensor '" + t.name + "' given twice");
      weight_map[t.name] = shard_name(i, shards.size());
    }
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    written.push_back(dir / shard_name(i, shards.size()));
    write_safetensors(written.back(), shards[i], metadata);
  }
  Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  written.push_back(dir / kIndexFileName);
  write_file_atomic(written.back(), index.dump(2) + "\n");
  return written;
}

}  // namespace ajet::hf
