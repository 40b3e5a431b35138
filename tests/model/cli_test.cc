// `ajet model init` end to end: the real `ajet` binary forwarding to the real `ajet-engine`,
// writing a model directory that the HF readers open; and the errors for bad arguments.
#include <gtest/gtest.h>

#include "hf/checkpoint.h"
#include "hf/hf_config.h"
#include "model/presets.h"
#include "test_util.h"

namespace ajet::model {
namespace {

namespace fs = std::filesystem;
using testing::quote;
using testing::run_command;
using testing::ScratchDir;

const std::string kAjet = AJET_BINARY_DIR "/bin/ajet";
const std::string kEngine = AJET_BINARY_DIR "/bin/ajet-engine";

std::string init_command(const std::string& binary, const std::string& args) {
  return binary + " model init " + args;
}

// Sum of element counts over every tensor in the directory's weights.
int64_t stored_parameters(const fs::path& dir) {
  auto ckpt = hf::SafetensorsCheckpoint::open(dir);
  int64_t n = 0;
  for (const auto& name : ckpt.names())
    n += ckpt.get(name).data.size() / hf::dtype_size(ckpt.get(name).dtype);
  return n;
}

TEST(ModelInitCli, WritesAnHfDirectoryWithTokenizer) {
  ScratchDir dir;
  testing::write_byte_tokenizer(dir / "tok");
  auto r = run_command(init_command(kAjet, "--preset micro --tokenizer " + quote(dir / "tok") +
                                               " --out " + quote(dir / "m") + " --seed 7"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(dir / "m" / f)) << f;
  }
  auto config = hf::load_model_config(dir / "m" / "config.json");
  EXPECT_EQ(config.vocab_size, 259);    // 256 bytes + 3 special tokens
  EXPECT_EQ(config.eos_token_id, 258);  // <|im_end|>, from tokenizer_config.json
  EXPECT_EQ(config.torch_dtype, "float32");
  auto expected = preset_config("micro", 259);
  EXPECT_EQ(config.hidden_size, expected.hidden_size);
  EXPECT_EQ(config.num_hidden_layers, expected.num_hidden_layers);
  const int64_t params = count_parameters(config);
  EXPECT_EQ(stored_parameters(dir / "m"), params);
  // The printed count, with thousands separators.
  std::string digits = std::to_string(params), pretty;
  for (size_t i = 0; i < digits.size(); ++i)
    pretty += std::string(i > 0 && (digits.size() - i) % 3 == 0 ? "," : "") + digits[i];
  EXPECT_NE(r.out.find(pretty + " parameters"), std::string::npos) << r.out;

  // Same seed → same bytes; another seed → other weights.
  auto again =
      run_command(init_command(kEngine, "--preset micro --tokenizer " + quote(dir / "tok") +
                                            " --out " + quote(dir / "m2") + " --seed 7"));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  auto read = [](const fs::path& p) { return run_command("cat " + quote(p)).out; };
  EXPECT_EQ(read(dir / "m" / "model.safetensors"), read(dir / "m2" / "model.safetensors"));
  auto other =
      run_command(init_command(kEngine, "--preset micro --tokenizer " + quote(dir / "tok") +
                                            " --out " + quote(dir / "m3") + " --seed 8"));
  ASSERT_EQ(other.exit_code, 0) << other.out;
  EXPECT_NE(read(dir / "m" / "model.safetensors"), read(dir / "m3" / "model.safetensors"));
}

TEST(ModelInitCli, BFloat16AndForce) {
  ScratchDir dir;
  testing::write_byte_tokenizer(dir / "tok");
  const std::string base =
      "--preset tiny --tokenizer " + quote(dir / "tok") + " --out " + quote(dir / "m");
  auto r = run_command(init_command(kAjet, base + " --dtype bfloat16"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(hf::load_model_config(dir / "m" / "config.json").torch_dtype, "bfloat16");
  EXPECT_EQ(hf::SafetensorsCheckpoint::open(dir / "m").get("model.norm.weight").dtype,
            hf::DType::kBF16);
  // An existing model directory is kept unless --force.
  auto refused = run_command(init_command(kAjet, base));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.out.find("--force"), std::string::npos) << refused.out;
  EXPECT_EQ(hf::load_model_config(dir / "m" / "config.json").torch_dtype, "bfloat16");
  auto forced = run_command(init_command(kAjet, base + " --force"));
  ASSERT_EQ(forced.exit_code, 0) << forced.out;
  EXPECT_EQ(hf::load_model_config(dir / "m" / "config.json").torch_dtype, "float32");
}

TEST(ModelInitCli, BadArgumentsGiveClearErrors) {
  ScratchDir dir;
  testing::write_byte_tokenizer(dir / "tok");
  fs::create_directories(dir / "full");
  testing::write_text(dir / "full" / "notes.txt", "mine");
  struct Case {
    std::string args;
    std::string expect_in_output;
  };
  const std::vector<Case> cases = {
      {"--preset huge --tokenizer " + quote(dir / "tok") + " --out " + quote(dir / "a"),
       "unknown preset 'huge'"},
      {"--preset tiny --tokenizer " + quote(dir / "missing") + " --out " + quote(dir / "a"),
       "missing"},
      {"--preset tiny --tokenizer " + quote(dir / "full") + " --out " + quote(dir / "a"),
       "tokenizer.json not found"},
      {"--preset tiny --tokenizer " + quote(dir / "tok") + " --out " + quote(dir / "full"),
       "not empty"},
      {"--preset tiny --tokenizer " + quote(dir / "tok") + " --out " + quote(dir / "full") +
           " --force",
       "refusing to replace"},
      {"--preset tiny --tokenizer " + quote(dir / "tok") + " --out " + quote(dir / "a") +
           " --dtype int8",
       "unknown dtype 'int8'"},
      {"--tokenizer " + quote(dir / "tok") + " --out " + quote(dir / "a"), "--preset"},
  };
  for (const auto& c : cases) {
    auto r = run_command(init_command(kAjet, c.args));
    EXPECT_NE(r.exit_code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect_in_output), std::string::npos) << c.args << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(dir / "a"));
  EXPECT_TRUE(fs::exists(dir / "full" / "notes.txt"));
  auto help = run_command(kAjet + " model init --help");
  EXPECT_EQ(help.exit_code, 0) << help.out;
  EXPECT_NE(help.out.find("small"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace ajet::model
