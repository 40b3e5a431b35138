// Cross-checks our safetensors reader and writer against tests/hf/safetensors_ref.py, an
// independent implementation in Python (json + struct only; Debian has no python3-safetensors
// package).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/json.h"
#include "hf/safetensors.h"
#include "hf/test_util.h"

namespace ajet::hf {
namespace {

using testing::as_bytes;
using testing::raw_bytes;
using testing::ScratchDir;

constexpr const char* kPython = "/usr/bin/python3";

std::string ref_script() { return std::string(AJET_SOURCE_DIR) + "/tests/hf/safetensors_ref.py"; }

// Runs the reference script; returns its stdout, failing the test on a non-zero exit.
std::string run_reference(const std::string& args) {
  std::string command = std::string(kPython) + " " + ref_script() + " " + args;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return "";
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << command << " printed: " << out;
  return out;
}

float half_to_float(uint16_t h) {
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                    : exponent == 31
                        ? (mantissa ? NAN : INFINITY)
                        : std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// Our own decoding of a tensor's bytes to doubles (floats rounded to their dtype first).
std::vector<double> decode(const TensorView& v) {
  std::vector<double> out;
  const std::byte* p = v.data.data();
  size_t size = dtype_size(v.dtype);
  for (size_t i = 0; i < v.data.size(); i += size) {
    switch (v.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p + i, 4);
        out.push_back(f);
        break;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, p + i, 2);
        out.push_back(half_to_float(h));
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p + i, 2);
        uint32_t bits = uint32_t{h} << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out.push_back(f);
        break;
      }
      case DType::kI64: {
        int64_t x;
        std::memcpy(&x, p + i, 8);
        out.push_back(static_cast<double>(x));
        break;
      }
      case DType::kI32: {
        int32_t x;
        std::memcpy(&x, p + i, 4);
        out.push_back(x);
        break;
      }
      case DType::kU8: out.push_back(std::to_integer<uint8_t>(p[i])); break;
      case DType::kBool: out.push_back(std::to_integer<uint8_t>(p[i]) != 0); break;
    }
  }
  return out;
}

// A JSON number or boolean from the reference, rounded to the precision of `dtype`.
double expected_value(const Json& v, DType dtype) {
  double d = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
  if (dtype == DType::kF32) return static_cast<float>(d);
  return d;
}

class SafetensorsPython : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPython)) {
      GTEST_SKIP() << "SKIPPED: " << kPython
                   << " not found; the independent Python cross-check cannot run";
    }
  }
};

TEST_F(SafetensorsPython, PythonReadsWhatWeWrite) {
  ScratchDir dir;
  std::string f32 = raw_bytes(std::vector<float>{1.5f, -2.0f, 1e-3f, 3.25f});
  std::string f16 =
      raw_bytes(std::vector<uint16_t>{0x3C00, 0xC000, 0x3800, 0x7BFF});  // 1, -2, 0.5, 65504
  std::string bf16 =
      raw_bytes(std::vector<uint16_t>{0x3F80, 0xC000, 0x3F00, 0x4049});  // 1, -2, 0.5, 3.140625
  std::string i64 = raw_bytes(std::vector<int64_t>{-1, int64_t{1} << 40, 7});
  std::string i32 = raw_bytes(std::vector<int32_t>{-5, 0, 2147483647});
  std::string u8 = raw_bytes(std::vector<uint8_t>{0, 127, 255});
  std::string flags = raw_bytes(std::vector<uint8_t>{1, 0});
  std::vector<TensorView> tensors = {
      {"w.f32", DType::kF32, {2, 2}, as_bytes(f32)},    {"w.f16", DType::kF16, {4}, as_bytes(f16)},
      {"w.bf16", DType::kBF16, {2, 2}, as_bytes(bf16)}, {"ids", DType::kI64, {3}, as_bytes(i64)},
      {"n", DType::kI32, {3, 1}, as_bytes(i32)},        {"u", DType::kU8, {3}, as_bytes(u8)},
      {"mask", DType::kBool, {2}, as_bytes(flags)},     {"empty", DType::kF32, {0}, {}},
  };
  const std::vector<std::vector<double>> expected = {{1.5, -2.0, static_cast<float>(1e-3f), 3.25},
                                                     {1, -2, 0.5, 65504},
                                                     {1, -2, 0.5, 3.140625},
                                                     {-1, 1099511627776.0, 7},
                                                     {-5, 0, 2147483647},
                                                     {0, 127, 255},
                                                     {1, 0},
                                                     {}};
  write_safetensors(dir / "ours.safetensors", tensors, {{"format", "pt"}});

  Json seen =
      parse_json(run_reference("read " + (dir / "ours.safetensors").string()), "reference output");
  EXPECT_EQ(seen["metadata"], Json({{"format", "pt"}}));
  EXPECT_EQ(seen["header_len"].get<int64_t>() % 8, 0);
  EXPECT_LT(seen["padding"].get<int>(), 8);
  ASSERT_EQ(seen["tensors"].size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Json& t = seen["tensors"][i];
    EXPECT_EQ(t["name"], tensors[i].name);
    EXPECT_EQ(t["dtype"], std::string(dtype_name(tensors[i].dtype)));
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), tensors[i].shape);
    ASSERT_EQ(t["values"].size(), expected[i].size()) << tensors[i].name;
    for (size_t k = 0; k < expected[i].size(); ++k) {
      EXPECT_EQ(expected_value(t["values"][k], tensors[i].dtype), expected[i][k])
          << tensors[i].name << "[" << k << "]";
    }
  }
}

TEST_F(SafetensorsPython, WeReadWhatPythonWrites) {
  ScratchDir dir;
  for (const char* pad : {"", " --no-pad"}) {
    auto path = dir / "theirs.safetensors";
    Json written = parse_json(run_reference("write " + path.string() + pad), "reference output");
    auto file = SafetensorsFile::open(path);
    EXPECT_EQ(file.metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"source", "python"}}));
    ASSERT_EQ(file.tensors().size(), written.size());
    for (size_t i = 0; i < written.size(); ++i) {
      const Json& w = written[i];
      const TensorInfo& info = file.tensors()[i];  // data order == the order the script wrote them
      EXPECT_EQ(info.name, w["name"].get<std::string>());
      EXPECT_EQ(dtype_name(info.dtype), w["dtype"].get<std::string>());
      EXPECT_EQ(info.shape, w["shape"].get<std::vector<int64_t>>());
      auto values = decode(file.view(info));
      ASSERT_EQ(values.size(), w["values"].size()) << info.name;
      for (size_t k = 0; k < values.size(); ++k) {
        EXPECT_EQ(values[k], expected_value(w["values"][k], info.dtype))
            << info.name << "[" << k << "]" << pad;
      }
    }
  }
}

}  // namespace
}  // namespace ajet::hf
