#include "hf/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "common/fs.h"
#include "hf/test_util.h"

namespace ajet::hf {
namespace {

using testing::as_bytes;
using testing::bytes_of;
using testing::raw_bytes;
using testing::safetensors_bytes;
using testing::ScratchDir;

// One tensor of every supported dtype, with distinct contents; includes a scalar and an empty
// tensor.
struct Sample {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::vector<Sample> every_dtype() {
  std::vector<Sample> s;
  s.push_back({"f32",
               DType::kF32,
               {2, 3},
               raw_bytes(std::vector<float>{1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f})});
  s.push_back(
      {"f16", DType::kF16, {4}, raw_bytes(std::vector<uint16_t>{0x3C00, 0xC000, 0x3800, 0x7BFF})});
  s.push_back({"bf16",
               DType::kBF16,
               {2, 2},
               raw_bytes(std::vector<uint16_t>{0x3F80, 0xC000, 0x3F00, 0x4049})});
  s.push_back({"i64", DType::kI64, {3}, raw_bytes(std::vector<int64_t>{-1, int64_t{1} << 40, 7})});
  s.push_back({"i32", DType::kI32, {1, 3, 1}, raw_bytes(std::vector<int32_t>{-5, 0, 2147483647})});
  s.push_back({"u8", DType::kU8, {5}, raw_bytes(std::vector<uint8_t>{0, 1, 127, 128, 255})});
  s.push_back({"bool", DType::kBool, {3}, raw_bytes(std::vector<uint8_t>{1, 0, 1})});
  s.push_back({"scalar", DType::kF32, {}, raw_bytes(std::vector<float>{42.0f})});
  s.push_back({"empty", DType::kI32, {0, 3}, ""});
  return s;
}

std::vector<TensorView> views_of(const std::vector<Sample>& samples) {
  std::vector<TensorView> views;
  for (const Sample& s : samples) views.push_back({s.name, s.dtype, s.shape, as_bytes(s.bytes)});
  return views;
}

TEST(Safetensors, RoundTripsEveryDtypeThroughAFile) {
  ScratchDir dir;
  auto samples = every_dtype();
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
  write_safetensors(dir / "model.safetensors", views_of(samples), metadata);

  auto file = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_EQ(file.tensors().size(), samples.size());
  EXPECT_EQ(file.metadata(), metadata);
  for (size_t i = 0; i < samples.size(); ++i) {
    const TensorInfo& info = file.tensors()[i];  // file order == the order given to the writer
    EXPECT_EQ(info.name, samples[i].name);
    EXPECT_EQ(info.dtype, samples[i].dtype);
    EXPECT_EQ(info.shape, samples[i].shape);
    EXPECT_EQ(static_cast<size_t>(info.numel()) * dtype_size(info.dtype), samples[i].bytes.size());
    EXPECT_EQ(bytes_of(file.view(info)), samples[i].bytes) << info.name;
    EXPECT_EQ(file.find(samples[i].name), &info);
  }
  EXPECT_EQ(file.find("absent"), nullptr);
  // No temp file is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Safetensors, HeaderIsPaddedWithSpacesToEightBytes) {
  auto samples = every_dtype();
  for (size_t n = 0; n <= samples.size();
       ++n) {  // several header lengths, so every remainder shows up
    std::vector<Sample> some(samples.begin(), samples.begin() + n);
    std::string bytes = serialize_safetensors(views_of(some));
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    EXPECT_EQ(header_len % 8, 0u);
    std::string header = bytes.substr(8, header_len);
    size_t json_end = header.find_last_of('}');
    EXPECT_LT(header.size() - json_end - 1, 8u);
    EXPECT_EQ(header.find_first_not_of(' ', json_end + 1), std::string::npos);
    auto parsed = SafetensorsFile::parse(as_bytes(bytes), "buffer");
    EXPECT_EQ(parsed.tensors().size(), n);
  }
}

TEST(Safetensors, FileAndBufferWritersAgree) {
  ScratchDir dir;
  auto samples = every_dtype();
  write_safetensors(dir / "a.safetensors", views_of(samples), {{"k", "v"}});
  EXPECT_EQ(read_file(dir / "a.safetensors"),
            serialize_safetensors(views_of(samples), {{"k", "v"}}));
  // Overwriting an existing file replaces it.
  write_safetensors(dir / "a.safetensors", views_of({samples[0]}));
  EXPECT_EQ(SafetensorsFile::open(dir / "a.safetensors").tensors().size(), 1u);
}

TEST(Safetensors, TensorsComeInDataOrderWhateverTheHeaderOrder) {
  std::string header =
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"__metadata__":{"x":"y"},)"
      R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  std::string bytes = safetensors_bytes(header, "ABCD");
  auto file = SafetensorsFile::parse(as_bytes(bytes), "buffer");
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "a");
  EXPECT_EQ(bytes_of(file.view(*file.find("b"))), "CD");
  EXPECT_EQ(file.metadata().at("x"), "y");
}

TEST(Safetensors, AcceptsWhatTheSpecAllows) {
  // Unpadded header, empty header, zero-size tensors sharing an offset, trailing-space padding.
  for (
      const auto& [header, data] : std::vector<std::pair<std::string, std::string>>{
          {"{}", ""},
          {R"({"__metadata__":{}})", ""},
          {R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"x":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})",
           "\x01"},
          {R"({"x":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]},"e":{"dtype":"F32","shape":[2,0],"data_offsets":[1,1]}})",
           "\x01"},
          {"{}      ", ""},
      }) {
    std::string bytes = safetensors_bytes(header, data);
    EXPECT_NO_THROW(SafetensorsFile::parse(as_bytes(bytes), "buffer")) << header;
  }
}

struct BadCase {
  const char* label;
  std::string bytes;
  std::vector<std::string> message_parts;  // each must appear in the error
};

std::string u8_entry(const std::string& name, const std::string& offsets,
                     const std::string& shape) {
  return "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":" + shape + ",\"data_offsets\":" + offsets +
         "}";
}

std::vector<BadCase> bad_cases() {
  std::string length_only(8, '\0');
  std::string huge_length = safetensors_bytes("{}", "");
  huge_length[5] = 1;  // 2^40 + 2
  std::string over_limit = safetensors_bytes("{}", "");
  uint64_t n = 200'000'000;
  std::memcpy(over_limit.data(), &n, 8);
  std::string truncated_header =
      safetensors_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  truncated_header.resize(20);
  return {
      {"empty file", "", {"0 bytes", "too small"}},
      {"truncated length", std::string(5, '\0'), {"5 bytes"}},
      {"zero header length", length_only, {"header length 0"}},
      {"header length past the end", huge_length, {"header length 1099511627778", "exceeds"}},
      {"header length over the limit", over_limit, {"100 MB"}},
      {"truncated header", truncated_header, {"exceeds the 12 bytes"}},
      {"bad JSON", safetensors_bytes(R"({"a":{"dtype":)", ""), {"header: invalid JSON"}},
      {"number overflow",
       safetensors_bytes("{" + u8_entry("a", "[0,0]", "[1e+600]") + "}", ""),
       {"header: invalid JSON"}},
      {"trailing garbage", safetensors_bytes("{} x", ""), {"header: invalid JSON"}},
      {"not an object", safetensors_bytes("[1, 2]", ""), {"start with '{'"}},
      {"invalid UTF-8", safetensors_bytes("{\"\xff\":{}}", ""), {"header: invalid JSON"}},
      {"deep nesting",
       safetensors_bytes(
           "{\"__metadata__\": " + std::string(5000, '[') + std::string(5000, ']') + "}", ""),
       {"header: invalid JSON at __metadata__[0][0]", "nested deeper than 128 levels"}},
      {"duplicate key",
       safetensors_bytes(
           "{" + u8_entry("a", "[0,1]", "[1]") + "," + u8_entry("a", "[0,1]", "[1]") + "}", "x"),
       {"repeats the key 'a'"}},
      {"unknown dtype",
       safetensors_bytes(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", "12345678"),
       {"tensor 'w'", "'F64'"}},
      {"missing dtype",
       safetensors_bytes(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"),
       {"tensor 'w'", "dtype"}},
      {"entry not an object", safetensors_bytes(R"({"w":[1]})", ""), {"tensor 'w'", "object"}},
      {"offsets out of range",
       safetensors_bytes("{" + u8_entry("w", "[0,16]", "[16]") + "}", "12345678"),
       {"tensor 'w'", "past the data section (8 bytes)"}},
      {"size mismatch",
       safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"),
       {"tensor 'w'", "needs 12 bytes", "hold 8"}},
      {"overlap",
       safetensors_bytes(
           "{" + u8_entry("a", "[0,8]", "[8]") + "," + u8_entry("b", "[4,12]", "[8]") + "}",
           "123456789012"),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"gap",
       safetensors_bytes(
           "{" + u8_entry("a", "[0,4]", "[4]") + "," + u8_entry("b", "[8,12]", "[4]") + "}",
           "123456789012"),
       {"tensor 'b'", "gap of 4 bytes"}},
      {"uncovered tail",
       safetensors_bytes("{" + u8_entry("a", "[0,4]", "[4]") + "}", "12345678"),
       {"cover only 4"}},
      {"negative shape",
       safetensors_bytes("{" + u8_entry("a", "[0,0]", "[-1]") + "}", ""),
       {"tensor 'a'", "non-negative"}},
      {"float shape",
       safetensors_bytes("{" + u8_entry("a", "[0,2]", "[2.0]") + "}", "xy"),
       {"tensor 'a'", "non-negative"}},
      {"overflowing shape",
       safetensors_bytes("{" + u8_entry("a", "[0,0]", "[4294967296,4294967296,16]") + "}", ""),
       {"tensor 'a'", "overflows"}},
      {"begin after end",
       safetensors_bytes("{" + u8_entry("a", "[2,1]", "[1]") + "}", "xy"),
       {"tensor 'a'", "begin <= end"}},
      {"one offset",
       safetensors_bytes("{" + u8_entry("a", "[1]", "[1]") + "}", "x"),
       {"tensor 'a'", "data_offsets"}},
      {"metadata not strings",
       safetensors_bytes(R"({"__metadata__":{"n":1}})", ""),
       {"'__metadata__' entry 'n'"}},
  };
}

TEST(Safetensors, RejectsCorruptBuffersNamingSourceAndTensor) {
  for (const BadCase& c : bad_cases()) {
    try {
      SafetensorsFile::parse(as_bytes(c.bytes), "buf.safetensors");
      ADD_FAILURE() << c.label << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << c.label;
      std::string message = e.what();
      EXPECT_EQ(message.rfind("buf.safetensors: ", 0), 0u) << c.label << ": " << message;
      for (const auto& part : c.message_parts) {
        EXPECT_NE(message.find(part), std::string::npos)
            << c.label << ": '" << part << "' not in: " << message;
      }
    }
  }
}

TEST(Safetensors, RejectsCorruptFilesOnDisk) {
  ScratchDir dir;
  for (const BadCase& c : bad_cases()) {
    auto path = dir / "bad.safetensors";
    write_file_atomic(path, c.bytes);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << c.label << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos)
          << c.label << ": " << e.what();
    }
  }
}

TEST(Safetensors, OpenErrorsNameTheFile) {
  ScratchDir dir;
  try {
    SafetensorsFile::open(dir / "missing.safetensors");
    FAIL() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos);
  }
  EXPECT_THROW(SafetensorsFile::open(dir.path()), Error);  // a directory
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  ScratchDir dir;
  std::string four(4, 'x');
  auto expect_rejected = [&](std::vector<TensorView> views, const std::string& part) {
    try {
      write_safetensors(dir / "w.safetensors", views);
      ADD_FAILURE() << "accepted: " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_rejected({{"a", DType::kF32, {2}, as_bytes(four)}}, "needs 8 bytes, got 4");
  expect_rejected({{"a", DType::kU8, {4}, as_bytes(four)}, {"a", DType::kU8, {4}, as_bytes(four)}},
                  "given twice");
  expect_rejected({{"__metadata__", DType::kU8, {4}, as_bytes(four)}}, "reserved");
  expect_rejected({{"a", DType::kU8, {-4}, as_bytes(four)}}, "negative");
  EXPECT_FALSE(std::filesystem::exists(dir / "w.safetensors"));
  EXPECT_THROW(write_safetensors(dir / "no" / "such" / "dir.safetensors", {}), Error);
}

}  // namespace
}  // namespace ajet::hf
