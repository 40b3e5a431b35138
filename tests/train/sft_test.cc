// SFT warm-up: the loss mask covers exactly what the model generates (assistant bodies and their
// <|im_end|>), demo files fail with file:line and field, a few steps on a micro model lower the
// demo loss deterministically, and the saved model loads back with the same loss.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "common/error.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "model/test_util.h"
#include "text/bpe_trainer.h"
#include "train/sft.h"

namespace ajet::train {
namespace {

using model::testing::ScratchDir;
using text::OrderedJson;

// Calc-like demonstrations: a calculator call, its result, the answer.
std::string demo_line(int a, int b) {
  const std::string expr = std::to_string(a) + "*" + std::to_string(b);
  const std::string value = std::to_string(a * b);
  OrderedJson tool = OrderedJson::parse(
      R"({"type":"function","function":{"name":"calculator","description":"Evaluate.","parameters":{"type":"object","properties":{"expression":{"type":"string"}}}}})");
  OrderedJson j = OrderedJson::object();
  j["task_id"] = "t" + expr;
  j["reward"] = 1.0;
  j["messages"] = OrderedJson::array(
      {OrderedJson{{"role", "system"}, {"content", "Use the calculator."}},
       OrderedJson{{"role", "user"}, {"content", expr + "=?"}},
       OrderedJson{{"role", "assistant"},
                   {"content", nullptr},
                   {"tool_calls", OrderedJson::array({OrderedJson{
                                      {"id", "call_0"},
                                      {"type", "function"},
                                      {"function",
                                       {{"name", "calculator"},
                                        {"arguments", "{\"expression\": \"" + expr + "\"}"}}}}})}},
       OrderedJson{{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", value}},
       OrderedJson{{"role", "assistant"}, {"content", "<answer>" + value + "</answer>"}}});
  j["tools"] = OrderedJson::array({tool});
  return j.dump() + "\n";
}

std::string demos_text() {
  std::string s;
  for (int i = 0; i < 12; ++i) s += demo_line(3 + i, 7 + 2 * i);
  return s;
}

// Short one-turn demos (no tools block) keep the training test to a few milliseconds per step.
std::string short_demos_text() {
  std::string s;
  for (int i = 0; i < 12; ++i) {
    const int a = 3 + i, b = 7 + 2 * i;
    OrderedJson j = OrderedJson::object();
    j["messages"] = OrderedJson::array(
        {OrderedJson{{"role", "system"}, {"content", "Multiply."}},
         OrderedJson{{"role", "user"},
                     {"content", std::to_string(a) + "*" + std::to_string(b) + "=?"}},
         OrderedJson{{"role", "assistant"},
                     {"content", "<answer>" + std::to_string(a * b) + "</answer>"}}});
    s += j.dump() + "\n";
  }
  return s;
}

struct Fixture {
  text::Tokenizer tokenizer;
  tracking::ChatFormat format;
};

// A small BPE vocabulary trained on the demos' own text, with the ChatML template.
text::Tokenizer make_tokenizer(const std::string& corpus) {
  text::BpeTrainerOptions o;
  o.vocab_size = 400;
  const text::TrainedBpe t = text::train_bpe(corpus, o);
  return text::Tokenizer::from_json(t.tokenizer_json, "trained",
                                    text::parse_tokenizer_config(t.tokenizer_config_json, "cfg"));
}

void write(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

TEST(SftData, MaskCoversAssistantBodiesAndEndOfTurn) {
  const text::Tokenizer tok = make_tokenizer(demos_text());
  const tracking::ChatFormat format = tracking::ChatFormat::from_tokenizer(tok);
  ScratchDir dir;
  write(dir / "demos.jsonl", demo_line(6, 7));
  const DemoSet set = read_demos_jsonl(dir / "demos.jsonl", format);
  ASSERT_EQ(set.examples.size(), 1u);
  const SftExample& ex = set.examples[0];
  EXPECT_EQ(ex.source, (dir / "demos.jsonl").string() + ":1");
  // The masked tokens, decoded run by run, are exactly the two assistant turns the model writes.
  std::vector<std::string> runs;
  for (size_t i = 0; i < ex.token_ids.size(); ++i) {
    if (!ex.loss_mask[i]) continue;
    if (i == 0 || !ex.loss_mask[i - 1]) runs.emplace_back();
    runs.back() += tok.decode(std::span<const int32_t>(&ex.token_ids[i], 1));
  }
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0],
            "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
            "\"6*7\"}}\n</tool_call><|im_end|>");
  EXPECT_EQ(runs[1], "<answer>42</answer><|im_end|>");
  // The whole rendering is the template's: system, tools block, user, tool result all unmasked.
  const std::string all = tok.decode(ex.token_ids);
  EXPECT_NE(all.find("<tool_response>\n42\n</tool_response>"), std::string::npos);
  EXPECT_NE(all.find("\"name\": \"calculator\""), std::string::npos);
}

TEST(SftData, BadDemoFilesNameLineAndField) {
  const text::Tokenizer tok = make_tokenizer(demos_text());
  const tracking::ChatFormat format = tracking::ChatFormat::from_tokenizer(tok);
  ScratchDir dir;
  auto error_of = [&](const std::string& text) -> std::string {
    write(dir / "d.jsonl", text);
    try {
      read_demos_jsonl(dir / "d.jsonl", format);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string file = (dir / "d.jsonl").string();
  EXPECT_NE(error_of(demo_line(1, 2) + "{oops\n").find(file + ":2: invalid JSON"),
            std::string::npos);
  EXPECT_NE(error_of("\n" + demo_line(1, 2) +
                     R"({"messages": "hi"})"
                     "\n")
                .find(file + ":3: field 'messages'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "x"}]})"
                     "\n")
                .find("no assistant message"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "robot", "content": "x"}]})"
                     "\n")
                .find(file + ":1: messages[0]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"reward": "high", "messages": []})"
                     "\n")
                .find("field 'reward'"),
            std::string::npos);
  // Filters: by reward and by length, counted.
  write(
      dir / "f.jsonl",
      demo_line(1, 2) +
          R"({"reward": 0, "messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "x"}]})"
          "\n");
  const DemoSet kept = read_demos_jsonl(dir / "f.jsonl", format,
                                        DemoReadOptions{.max_tokens = 0, .min_reward = 0.5});
  EXPECT_EQ(kept.examples.size(), 1u);
  EXPECT_EQ(kept.skipped_reward, 1);
  const DemoSet short_only =
      read_demos_jsonl(dir / "f.jsonl", format, DemoReadOptions{.max_tokens = 40});
  EXPECT_EQ(short_only.examples.size(), 1u);
  EXPECT_EQ(short_only.skipped_too_long, 1);
}

// lr 1, warmup 2, cosine to 0.1 over `steps`.
SftOptions schedule(int64_t steps) {
  return SftOptions{.steps = steps, .lr = 1.0, .warmup_steps = 2, .min_lr_ratio = 0.1};
}

TEST(SftSchedule, WarmupThenCosine) {
  const SftOptions o = schedule(11);
  EXPECT_DOUBLE_EQ(sft_learning_rate(o, 0), 0.5);
  EXPECT_DOUBLE_EQ(sft_learning_rate(o, 1), 1.0);
  EXPECT_DOUBLE_EQ(sft_learning_rate(o, 2), 1.0);
  EXPECT_NEAR(sft_learning_rate(o, 10), 0.1, 1e-12);
  EXPECT_LT(sft_learning_rate(o, 6), 1.0);
  EXPECT_GT(sft_learning_rate(o, 6), 0.1);
}

// A schedule fitted to fewer steps (fit_schedule_to_time) decays over those: it reaches the floor
// at its own last step, with the same warmup.
TEST(SftSchedule, AShorterTotalEndsTheCosineSooner) {
  const SftOptions o = schedule(100);
  EXPECT_DOUBLE_EQ(sft_learning_rate(o, 1, 11), 1.0);
  EXPECT_NEAR(sft_learning_rate(o, 10, 11), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(sft_learning_rate(o, 6, 11), sft_learning_rate(schedule(11), 6));
  EXPECT_GT(sft_learning_rate(o, 10), 0.9);  // the full schedule has hardly decayed at step 10
}

model::Qwen2Model micro_model(const text::Tokenizer& tok, uint64_t seed) {
  hf::ModelConfig c = model::preset_config("micro", static_cast<int64_t>(tok.vocab_size()));
  model::Qwen2Model m(c);
  model::init_weights(m, seed);
  return m;
}

// `text` read back as demos through a file, tokenized with the BPE trained on both demo texts.
struct LoadedDemos {
  text::Tokenizer tok;
  DemoSet set;
};

LoadedDemos load_demos(const std::string& text) {
  text::Tokenizer tok = make_tokenizer(demos_text() + short_demos_text());
  const tracking::ChatFormat format = tracking::ChatFormat::from_tokenizer(tok);
  ScratchDir dir;
  write(dir / "demos.jsonl", text);
  DemoSet set = read_demos_jsonl(dir / "demos.jsonl", format);
  return LoadedDemos{std::move(tok), std::move(set)};
}

TEST(Sft, StepsLowerTheDemoLossDeterministicallyAndTheModelSaves) {
  torch::set_num_threads(1);
  const std::string text = short_demos_text();
  const auto [tok, set] = load_demos(text);
  ASSERT_EQ(set.examples.size(), 12u);
  ScratchDir dir;

  SftOptions o;
  o.steps = 25;
  o.lr = 3e-3;
  o.warmup_steps = 3;
  o.batch_tokens = 120;  // several demos per step, packed side by side
  o.seed = 5;

  model::Qwen2Model a = micro_model(tok, 11);
  const double before = sft_loss(a, set.examples);
  int64_t calls = 0;
  const std::vector<SftStep> steps = run_sft(a, set.examples, o, [&](const SftStep&) { ++calls; });
  const double after = sft_loss(a, set.examples);
  std::printf("micro sft: demo loss %.4f -> %.4f in %zu steps\n", before, after, steps.size());
  ASSERT_EQ(steps.size(), 25u);
  EXPECT_EQ(calls, 25);
  EXPECT_GT(steps[0].examples, 1);
  EXPECT_LE(steps[0].tokens, 120);
  EXPECT_GT(steps[0].trained_tokens, 0);
  EXPECT_LT(after, before);
  EXPECT_LT(steps.back().loss, steps.front().loss);

  // Same seed, same start: the same run.
  model::Qwen2Model b = micro_model(tok, 11);
  const std::vector<SftStep> again = run_sft(b, set.examples, o);
  for (size_t i = 0; i < steps.size(); ++i)
    EXPECT_DOUBLE_EQ(again[i].loss, steps[i].loss) << "step " << i + 1;

  // Saved in HF layout, the trained model loads back with the same loss.
  text::BpeTrainerOptions bpe;
  bpe.vocab_size = 400;
  text::write_trained_bpe(text::train_bpe(demos_text() + text, bpe), dir / "tok");
  model::save_model_dir(a, dir / "model", model::SaveOptions{.tokenizer_dir = dir / "tok"});
  model::Qwen2Model loaded = model::load_model_dir(dir / "model");
  EXPECT_NEAR(sft_loss(loaded, set.examples), after, 1e-5);

  // A time limit no step fits in stops after the first step (no step starts that would end after
  // it); fitted to it, that step's schedule is one step long. A limit never reached changes
  // nothing.
  model::Qwen2Model c = micro_model(tok, 11);
  SftOptions timed = o;
  timed.max_seconds = 1e-9;
  timed.fit_schedule_to_time = true;
  const std::vector<SftStep> one = run_sft(c, set.examples, timed);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].planned_steps, 25);  // the first step runs before any time is measured
  model::Qwen2Model d = micro_model(tok, 11);
  timed.max_seconds = 1e9;
  const std::vector<SftStep> untimed = run_sft(d, set.examples, timed);
  ASSERT_EQ(untimed.size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_DOUBLE_EQ(untimed[i].lr, steps[i].lr) << "step " << i + 1;
    EXPECT_EQ(untimed[i].planned_steps, 25);
  }

  // Bad options are named.
  timed.max_seconds = 0;
  EXPECT_THROW(run_sft(a, set.examples, timed), Error);  // fit_schedule_to_time without a limit
  timed.fit_schedule_to_time = false;
  timed.max_seconds = -1;
  EXPECT_THROW(run_sft(a, set.examples, timed), Error);
  o.lr = 0;
  EXPECT_THROW(run_sft(a, set.examples, o), Error);
  o.lr = 1e-3;
  EXPECT_THROW(run_sft(a, {}, o), Error);
}

// Packing the prefix a step's demos share once (the default) trains exactly what packing each demo
// whole does: the same loss and, after a step, the same parameters up to float summation order. The
// step also holds more demos for the same token budget.
TEST(Sft, SharedPrefixPackingMatchesWholeDemos) {
  torch::set_num_threads(1);
  // Every demo starts with the same system prompt + tools block.
  const auto [tok, set] = load_demos(demos_text());
  ASSERT_EQ(set.examples.size(), 12u);

  model::Qwen2Model shared = micro_model(tok, 3);
  model::Qwen2Model whole = micro_model(tok, 3);
  const int64_t all = [&] {
    int64_t n = 0;
    for (const SftExample& ex : set.examples) n += static_cast<int64_t>(ex.token_ids.size());
    return n;
  }();
  EXPECT_NEAR(sft_loss(shared, set.examples, all, true), sft_loss(whole, set.examples, all, false),
              1e-5);

  SftOptions o;
  o.steps = 1;
  o.lr = 1e-2;
  o.batch_tokens = all;  // every demo in the one step, both ways
  o.share_prefix = true;
  const std::vector<SftStep> a = run_sft(shared, set.examples, o);
  o.share_prefix = false;
  const std::vector<SftStep> b = run_sft(whole, set.examples, o);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].examples, 12);
  EXPECT_EQ(b[0].examples, 12);
  EXPECT_GT(a[0].shared_prefix, 10);  // at least the system turn's header and text
  EXPECT_EQ(b[0].shared_prefix, 0);
  EXPECT_EQ(a[0].tokens, b[0].tokens - 11 * a[0].shared_prefix);
  EXPECT_EQ(a[0].trained_tokens, b[0].trained_tokens);
  EXPECT_NEAR(a[0].loss, b[0].loss, 1e-5);
  EXPECT_NEAR(a[0].grad_norm, b[0].grad_norm, 1e-4 * b[0].grad_norm);
  const auto pa = shared->named_parameters(), pb = whole->named_parameters();
  // AdamW moves every weight by about lr (1e-2), so tiny gradient differences show at ~1e-6.
  for (const auto& item : pa) {
    const torch::Tensor& x = item.value();
    const torch::Tensor& y = pb[item.key()];
    EXPECT_TRUE(torch::allclose(x, y, 1e-4, 5e-5))
        << item.key() << " differs by " << (x - y).abs().max().item<double>();
  }

  // With a budget below the whole set, the shared prefix lets a step take more demos than whole
  // packing.
  o.batch_tokens = all / 3;
  o.share_prefix = true;
  const int64_t with_sharing = run_sft(shared, set.examples, o)[0].examples;
  o.share_prefix = false;
  const int64_t without = run_sft(whole, set.examples, o)[0].examples;
  EXPECT_GT(with_sharing, without);
}

// The step laid out since 2026-12-03 (attention blocks that follow the demos, the last layer's MLP
// on the target rows only) computes what the earlier layout (128-row blocks over the packed
// sequence, every row through the last layer) computes: the same loss and gradients up to float
// rounding, with and without the shared prefix, and with blocks smaller than a demo (a demo then
// spans several).
TEST(Sft, DemoBlocksStepMatchesTheEarlierLayout) {
  torch::set_num_threads(1);
  const auto [tok, set] = load_demos(demos_text());
  ASSERT_EQ(set.examples.size(), 12u);
  std::vector<const SftExample*> batch;
  for (const SftExample& ex : set.examples) batch.push_back(&ex);
  model::Qwen2Model m = micro_model(tok, 3);
  auto grads = [&](const SftOptions& o, double& loss) {
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    loss = sft_step_gradients(m, batch, o);
    std::vector<torch::Tensor> g;
    for (const auto& p : m->parameters())
      g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return g;
  };
  for (const bool share : {true, false}) {
    for (const int64_t block : {int64_t{128}, int64_t{16}}) {
      SftOptions o;
      o.share_prefix = share;
      o.attention_block = block;
      o.demo_blocks = false;
      double loss_a = 0, loss_b = 0;
      const auto a = grads(o, loss_a);
      o.demo_blocks = true;
      const auto b = grads(o, loss_b);
      const std::string what = std::string(share ? "shared prefix" : "whole demos") +
                               ", blocks of " + std::to_string(block);
      EXPECT_GT(loss_a, 0) << what;
      EXPECT_NEAR(loss_a, loss_b, 1e-5 * loss_a) << what;
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const double scale = a[i].abs().max().item<double>();
        EXPECT_GT(scale, 0) << what << ": parameter " << i << " has no gradient";
        EXPECT_LE((a[i] - b[i]).abs().max().item<double>(), 1e-5 * scale)
            << what << ": parameter " << i;
      }
    }
  }
  // The step is the one run_sft takes: its first step's loss is this loss.
  SftOptions o;
  o.steps = 1;
  o.batch_tokens = 1 << 20;
  double direct = 0;
  grads(o, direct);
  model::Qwen2Model fresh = micro_model(tok, 3);
  std::vector<SftExample> in_order(set.examples.begin(), set.examples.end());
  EXPECT_NEAR(run_sft(fresh, in_order, o).at(0).loss, direct, 1e-6 * direct);
  EXPECT_THROW(sft_step_gradients(m, {}, o), Error);
}

// Splitting a step's demos over worker threads (each its own packed part with its own shared
// prefix) trains what one part does: the same loss and, after two steps, the same parameters up to
// float summation order; and a split run repeats itself exactly.
TEST(Sft, WorkerThreadsMatchOneThread) {
  torch::set_num_threads(2);
  // Every demo starts with the same system prompt + tools block.
  const auto [tok, set] = load_demos(demos_text());
  ASSERT_EQ(set.examples.size(), 12u);

  SftOptions o;
  o.steps = 2;
  o.lr = 1e-2;
  o.batch_tokens = 700;  // several demos per step (one demo is ~200 tokens, the prefix packed once)
  o.seed = 3;
  model::Qwen2Model one = micro_model(tok, 3);
  const std::vector<SftStep> a = run_sft(one, set.examples, o);
  o.workers = 2;
  model::Qwen2Model split = micro_model(tok, 3);
  const std::vector<SftStep> b = run_sft(split, set.examples, o);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_GT(a[i].examples, 2) << "step " << i + 1;
    EXPECT_EQ(a[i].examples, b[i].examples) << "step " << i + 1;
    EXPECT_EQ(a[i].trained_tokens, b[i].trained_tokens) << "step " << i + 1;
    // Each part packs its own copy of the prefix.
    EXPECT_GT(b[i].shared_prefix, 10) << "step " << i + 1;
    EXPECT_GE(b[i].tokens, a[i].tokens + b[i].shared_prefix / 2) << "step " << i + 1;
    EXPECT_NEAR(a[i].loss, b[i].loss, 1e-5) << "step " << i + 1;
    EXPECT_NEAR(a[i].grad_norm, b[i].grad_norm, 1e-4 * a[i].grad_norm) << "step " << i + 1;
  }
  const auto pa = one->named_parameters(), pb = split->named_parameters();
  for (const auto& item : pa) {
    const torch::Tensor& x = item.value();
    const torch::Tensor& y = pb[item.key()];
    EXPECT_TRUE(torch::allclose(x, y, 1e-4, 5e-5))
        << item.key() << " differs by " << (x - y).abs().max().item<double>();
  }

  model::Qwen2Model again = micro_model(tok, 3);
  const std::vector<SftStep> c = run_sft(again, set.examples, o);
  for (size_t i = 0; i < 2; ++i) EXPECT_DOUBLE_EQ(c[i].loss, b[i].loss) << "step " << i + 1;
  const auto pc = again->named_parameters();
  for (const auto& item : pb) EXPECT_TRUE(torch::equal(item.value(), pc[item.key()])) << item.key();

  o.workers = 0;
  EXPECT_THROW(run_sft(again, set.examples, o), Error);
  torch::set_num_threads(1);
}

}  // namespace
}  // namespace ajet::train
