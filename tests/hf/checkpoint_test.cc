#include "hf/checkpoint.h"

#include <gtest/gtest.h>

#include <functional>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "hf/test_util.h"

namespace ajet::hf {
namespace {

using testing::as_bytes;
using testing::bytes_of;
using testing::ScratchDir;

// Ten U8 tensors "t0".."t9" of 100 + i bytes, each filled with its index.
struct Weights {
  std::vector<std::string> storage;
  std::vector<TensorView> views;
  Weights() {
    for (int i = 0; i < 10; ++i) storage.emplace_back(100 + i, static_cast<char>(i));
    for (int i = 0; i < 10; ++i) {
      std::string name = "t";
      name += std::to_string(i);  // not "t" + ...: GCC 12 warns falsely (-Wrestrict) on that
      views.push_back({name, DType::kU8, {100 + i}, as_bytes(storage[i])});
    }
  }
};

void expect_error(const std::function<void()>& body, ErrorCode code,
                  const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, ShardsByMaxSizeAndReadsBackThroughTheIndex) {
  ScratchDir dir;
  Weights w;
  // 250 bytes per shard: t0+t1 (201), t2+t3 (205), t4+t5 (209), t6+t7 (213), t8+t9 (217).
  auto files = write_safetensors_checkpoint(dir.path(), w.views, 250, {{"format", "pt"}});
  ASSERT_EQ(files.size(), 6u);
  EXPECT_EQ(files.back().filename(), kIndexFileName);
  EXPECT_EQ(files[0].filename(), "model-00001-of-00005.safetensors");
  EXPECT_EQ(files[4].filename(), "model-00005-of-00005.safetensors");

  Json index = parse_json(read_file(files.back()), "index");
  int64_t total = 0;
  for (int i = 0; i < 10; ++i) total += 100 + i;
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  EXPECT_EQ(index["weight_map"]["t3"], "model-00002-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["t9"], "model-00005-of-00005.safetensors");

  for (const auto& path : {dir.path(), files.back()}) {  // the directory or the index itself
    auto ckpt = SafetensorsCheckpoint::open(path);
    EXPECT_EQ(ckpt.files().size(), 5u);
    ASSERT_EQ(ckpt.names().size(), 10u);
    for (int i = 0; i < 10; ++i) {
      auto view = ckpt.get(w.views[i].name);
      EXPECT_EQ(view.shape, std::vector<int64_t>{100 + i});
      EXPECT_EQ(bytes_of(view), w.storage[i]);
    }
    EXPECT_FALSE(ckpt.find("t10").has_value());
    expect_error([&] { ckpt.get("t10"); }, ErrorCode::kNotFound, {"'t10'"});
    EXPECT_EQ(ckpt.files()[0].metadata().at("format"), "pt");
  }
}

TEST(Checkpoint, OversizedTensorGetsItsOwnShard) {
  ScratchDir dir;
  Weights w;
  auto files =
      write_safetensors_checkpoint(dir.path(), w.views, 50);  // every tensor exceeds the limit
  EXPECT_EQ(files.size(), 11u);
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path()).names().size(), 10u);
}

TEST(Checkpoint, SingleFileWhenEverythingFitsAndStaleIndexIsRemoved) {
  ScratchDir dir;
  Weights w;
  write_safetensors_checkpoint(dir.path(), w.views, 300);
  ASSERT_TRUE(std::filesystem::exists(dir / std::string(kIndexFileName)));
  auto files = write_safetensors_checkpoint(dir.path(), w.views, 1 << 20);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename(), kSingleFileName);
  EXPECT_FALSE(std::filesystem::exists(dir / std::string(kIndexFileName)));
  for (const auto& path : {dir.path(), files[0]}) {
    auto ckpt = SafetensorsCheckpoint::open(path);
    EXPECT_EQ(ckpt.files().size(), 1u);
    EXPECT_EQ(bytes_of(ckpt.get("t7")), w.storage[7]);
  }
}

TEST(Checkpoint, IndexErrorsNameTheIndexShardAndTensor) {
  ScratchDir dir;
  Weights w;
  write_safetensors_checkpoint(dir.path(), w.views, 250);
  auto index_path = dir / std::string(kIndexFileName);
  const Json good = parse_json(read_file(index_path), "index");
  auto with_index = [&](const Json& index) { write_file_atomic(index_path, index.dump()); };

  // A tensor mapped to a shard file that does not exist.
  Json missing_shard = good;
  missing_shard["weight_map"]["t9"] = "model-00009-of-00009.safetensors";
  with_index(missing_shard);
  expect_error(
      [&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kNotFound,
      {kIndexFileName.data(), "'t9'", "model-00009-of-00009.safetensors", "does not exist"});

  // A tensor mapped to a shard that exists but does not hold it.
  Json wrong_shard = good;
  wrong_shard["weight_map"]["ghost"] = "model-00001-of-00005.safetensors";
  with_index(wrong_shard);
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"'ghost'", "model-00001-of-00005.safetensors", "does not hold it"});

  // A shard tensor the index does not list.
  Json unlisted = good;
  unlisted["weight_map"].erase("t0");
  with_index(unlisted);
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"model-00001-of-00005.safetensors", "'t0'", "not mapped"});

  // A tensor that two shards hold (the index maps it to the second).
  with_index(good);
  auto shard1 = dir / "model-00001-of-00005.safetensors";
  std::string shard1_bytes = read_file(shard1);
  write_safetensors(shard1, {w.views[0], w.views[1], w.views[2]});
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"model-00001-of-00005.safetensors", "'t2'", "not mapped"});
  write_file_atomic(shard1, shard1_bytes);

  // Shard names that would escape the directory.
  Json escaping = good;
  escaping["weight_map"]["t0"] = "../model-00001-of-00005.safetensors";
  with_index(escaping);
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"not a plain file name"});

  // Structural problems.
  with_index(Json{{"metadata", Json::object()}});
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"weight_map"});
  with_index(Json{{"weight_map", {{"t0", 3}}}});
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"'t0'", "string"});
  write_file_atomic(index_path, "{\"weight_map\": {");
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kInvalidArgument,
               {"invalid JSON"});
  write_file_atomic(index_path, R"({"metadata": {"total_size": 1e+600}, "weight_map": {}})");
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kInvalidArgument,
               {"invalid JSON"});

  // And the original index still works.
  with_index(good);
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path()).names().size(), 10u);
}

TEST(Checkpoint, CorruptShardIsReportedByName) {
  ScratchDir dir;
  Weights w;
  write_safetensors_checkpoint(dir.path(), w.views, 250);
  auto shard = dir / "model-00003-of-00005.safetensors";
  std::string bytes = read_file(shard);
  bytes.pop_back();  // data section one byte short
  write_file_atomic(shard, bytes);
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kDataLoss,
               {"model-00003-of-00005.safetensors"});
}

TEST(Checkpoint, EmptyDirectoryAndBadArguments) {
  ScratchDir dir;
  expect_error([&] { SafetensorsCheckpoint::open(dir.path()); }, ErrorCode::kNotFound,
               {kSingleFileName.data()});
  Weights w;
  expect_error([&] { write_safetensors_checkpoint(dir.path(), w.views, 0); },
               ErrorCode::kInvalidArgument, {"max_shard_bytes"});
  auto dup = w.views;
  dup.push_back(w.views[0]);
  expect_error([&] { write_safetensors_checkpoint(dir / "dup", dup, 250); },
               ErrorCode::kInvalidArgument, {"'t0'", "twice"});
  EXPECT_FALSE(std::filesystem::exists(dir / "dup" / std::string(kIndexFileName)));
}

}  // namespace
}  // namespace ajet::hf
