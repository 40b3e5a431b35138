// The C++ decoder against an independent reference: tests/model/reference_forward.py, run with
// Debian's python3-torch, reads the same saved directory and computes the logits in float64 from
// the HF formulas. Tolerance: max |C++ float32 - reference| <= 1e-4 on logits of magnitude O(1-10).
#include <gtest/gtest.h>

#include <fstream>

#include "model/model_dir.h"
#include "test_util.h"
#include "torch_util.h"

namespace ajet::model {
namespace {

constexpr double kTolerance = 1e-4;
const char* kPython = "/usr/bin/python3";

bool python_has_torch() {
  static const bool ok =
      testing::run_command(std::string(kPython) + " -c 'import torch'").exit_code == 0;
  return ok;
}

// (T, V) float64 logits from the reference script.
torch::Tensor reference_logits(const std::filesystem::path& model_dir,
                               const std::vector<int64_t>& ids, int64_t vocab) {
  std::string csv;
  for (auto id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id);
  const auto out = model_dir / "reference_logits.f64";
  auto r = testing::run_command(std::string(kPython) +
                                " " AJET_SOURCE_DIR "/tests/model/reference_forward.py " +
                                testing::quote(model_dir) + " " + csv + " " + testing::quote(out));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::ifstream in(out, std::ios::binary);
  std::vector<double> values(ids.size() * static_cast<size_t>(vocab));
  in.read(reinterpret_cast<char*>(values.data()),
          static_cast<std::streamsize>(values.size() * sizeof(double)));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(values.size() * sizeof(double))) << r.out;
  return torch::from_blob(values.data(), {static_cast<int64_t>(ids.size()), vocab}, torch::kDouble)
      .clone();
}

void check_against_reference(const hf::ModelConfig& config, uint64_t seed) {
  if (!python_has_torch())
    GTEST_SKIP() << kPython
                 << " cannot import torch (install python3-torch); reference check SKIPPED";
  testing::ScratchDir dir;
  auto model = testing::random_model(config, seed);
  save_model_dir(model, dir / "m");
  const std::vector<int64_t> ids = {1, 7, 3, 3, 12, 40, 0, 25, 9, 17, 5, 33};
  auto ids_t = torch::tensor(ids, torch::kLong).unsqueeze(0);                             // (1, T)
  auto ours = model->forward_logits(ids_t, testing::arange_positions(ids_t.size(1)))[0];  // (T, V)
  auto ref = reference_logits(dir / "m", ids, config.vocab_size);
  const double diff = testing::max_abs_diff(ours, ref);
  const double scale = ref.abs().max().item<double>();
  std::printf("%s: max |logit| %.3f, max |C++ - reference| %.2e (tolerance %.0e)\n",
              config.model_type.c_str(), scale, diff, kTolerance);
  EXPECT_GT(scale, 1.0) << "logits too small for the comparison to mean anything";
  EXPECT_LE(diff, kTolerance);
  // The tolerance is far below what changing one input token does to the logits.
  auto other = ids_t.clone();
  other[0][4] = 13;
  auto perturbed = model->forward_logits(other, testing::arange_positions(ids_t.size(1)))[0];
  EXPECT_GT(testing::max_abs_diff(perturbed, ref), 100 * kTolerance);
}

TEST(Reference, Qwen2BiasUntiedGqa) { check_against_reference(testing::qwen2_config(), 31); }

TEST(Reference, Qwen3QkNormTiedGqa) { check_against_reference(testing::qwen3_config(), 32); }

TEST(Reference, LlamaWithAttentionBiasOnAllFour) {
  auto c = testing::qwen2_config();
  c.model_type = "llama";
  c.attention_bias = true;  // Llama then has a bias on o_proj too
  c.num_key_value_heads = 4;
  check_against_reference(c, 33);
}

}  // namespace
}  // namespace ajet::model
