#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "common/error.h"
#include "common/fs.h"
#include "config/load.h"
#include "config/schema.h"

namespace ajet::config {
namespace {

const char* kMinimal = "ajet:\n  model:\n    path: /models/tiny\n";

// Runs `fn`, expects an Error(kInvalidArgument), returns its message.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ConfigDefaults, MinimalFileKeepsEveryDefault) {
  LoadedConfig loaded = parse_config(kMinimal, "min.yaml");
  EXPECT_TRUE(loaded.warnings.empty());
  Config expected;
  expected.model.path = "/models/tiny";
  EXPECT_EQ(to_json(loaded.config), to_json(expected));
  EXPECT_EQ(loaded.config.backbone, "torch");
  EXPECT_EQ(loaded.config.rollout.num_repeat, 4);
  EXPECT_EQ(loaded.config.data.train_batch_size, 32);
  EXPECT_EQ(loaded.config.swarm_mode_sample_collection_method, "rollout_until_finish_enough_tasks");
  EXPECT_EQ(loaded.config.interchange_server.interchange_server_port, 10086);
  EXPECT_FALSE(loaded.config.trainer_common.total_training_steps.has_value());
}

TEST(ConfigOverrides, NestedKeysOfEveryTypeAreRead) {
  const char* yaml = R"(
ajet:
  backbone: debug
  model: {path: /m}
  data: {train_batch_size: 8, max_prompt_length: 1000, max_response_length: 2000}
  rollout:
    num_repeat: 2
    temperature: 0.7
    max_model_len: 4096
    max_response_length_in_one_turn: 512
    multi_turn: {max_steps: 5}
    val_kwargs: {do_sample: yes}
  lora: {lora_rank: 8, target_modules: [q_proj, v_proj]}
  trainer_common:
    total_training_steps: 12
    optim: {lr: 1.0e-05, betas: [0.9, 0.95], lr_scheduler_type: cosine}
  task_reader:
    type: builtin
    builtin: {generator: frozenlake, params: {size: 4, slippery: false, name: "x"}}
  task_judge: {judge_protocol: calc}
  interchange_server: {interchange_server_port: auto}
)";
  Config c = parse_config(yaml, "o.yaml").config;
  EXPECT_EQ(c.backbone, "debug");
  EXPECT_EQ(c.data.train_batch_size, 8);
  EXPECT_EQ(c.rollout.num_repeat, 2);
  EXPECT_DOUBLE_EQ(c.rollout.temperature, 0.7);
  EXPECT_EQ(c.rollout.multi_turn.max_steps, 5);
  EXPECT_EQ(c.rollout.multi_turn.max_sample_per_task, 30);  // sibling keeps its default
  EXPECT_TRUE(c.rollout.val_kwargs.do_sample);
  EXPECT_EQ(c.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(c.trainer_common.total_training_steps, 12);
  EXPECT_DOUBLE_EQ(c.trainer_common.optim.lr, 1e-5);
  EXPECT_EQ(c.trainer_common.optim.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(c.task_reader.builtin.params,
            Json::parse(R"({"size": 4, "slippery": false, "name": "x"})"));
  EXPECT_EQ(c.task_judge.judge_protocol, "calc");
  EXPECT_EQ(c.interchange_server.interchange_server_port, 0);
}

TEST(ConfigWarnings, UnknownAndUpstreamOnlyKeysAreNamedNotFatal) {
  const char* yaml = R"(
defaults: [verl_default]
hydra: {searchpath: [x]}
trainer: {n_gpus: 8}
ajet:
  model: {path: /m}
  rollout:
    num_repeat: 3
    gpu_memory_utilization: 0.85
    nmu_repeat: 5
  task_reader:
    huggingface_dat_repo: {dataset_path: gsm8k, training_split: train}
  lora: {target_modules: all-linear}
)";
  LoadedConfig loaded = parse_config(yaml, "w.yaml");
  EXPECT_EQ(loaded.config.rollout.num_repeat, 3);
  EXPECT_EQ(loaded.config.lora.target_modules, std::vector<std::string>{"all-linear"});
  ASSERT_EQ(loaded.warnings.size(), 4u) << ::testing::PrintToString(loaded.warnings);
  std::string all;
  for (const auto& w : loaded.warnings) all += w + "\n";
  EXPECT_TRUE(contains(all, "unknown key 'trainer'"));
  EXPECT_TRUE(contains(all, "unknown key 'ajet.rollout.nmu_repeat'"));
  EXPECT_TRUE(
      contains(all, "did you mean 'ajet.rollout.num_repeat'?"));  // a hint for a near spelling
  EXPECT_TRUE(contains(all, "'ajet.rollout.gpu_memory_utilization' is not used here"));
  // One warning for the whole ignored subtree, naming its root.
  EXPECT_TRUE(contains(all, "'ajet.task_reader.huggingface_dat_repo' is not used here"));
  EXPECT_FALSE(contains(all, "hydra"));
  EXPECT_TRUE(contains(all, "w.yaml:"));
}

// The classic launcher syncs the whole resolved config (to_yaml) to its front: every classic run
// (`ajet --conf examples/configs/calc.yaml`) used to print "ajet.task_reader is not used by the
// swarm server" and the same for ajet.task_judge, at "sync_train_config yaml_as_string:65".
TEST(ConfigUpstream, TheConfigAClassicRunSyncsDrawsNoWarningOnTheServer) {
  for (const char* name : {"calc.yaml", "default.yaml"}) {
    const std::filesystem::path file =
        std::filesystem::path(AJET_SOURCE_DIR) / "examples/configs" / name;
    if (!std::filesystem::exists(file)) continue;
    const LoadedConfig classic = load_config_file(file);
    const LoadedConfig server = parse_config(
        to_yaml(classic.config), "sync_train_config yaml_as_string", ConfigUse::kSwarmServer);
    EXPECT_TRUE(server.warnings.empty())
        << name << ": " << ::testing::PrintToString(server.warnings);
  }
}

// Upstream's SwarmClient.sync_train_config(AgentJetJob(...)) sends the whole merged tree of its
// swarm default. Every upstream example failed at that first line: "judge_type is builtin but
// judge_protocol is not set". A key the server does not use is accepted and named in a warning; the
// task reader and judge belong to the clients that sync the config (a classic launcher, a swarm
// client), so the server skips them without one (every classic run used to warn that they were
// ignored).
TEST(ConfigUpstream, AnAgentJetJobDumpLoadsWithWarningsOnly) {
  const std::string yaml = read_file(std::filesystem::path(AJET_SOURCE_DIR) /
                                     "tests/config/data/upstream_swarm_job.yaml");
  LoadedConfig swarm = parse_config(yaml, "job.yaml", ConfigUse::kSwarmServer);
  std::string all;
  for (const auto& w : swarm.warnings) all += w + "\n";
  EXPECT_FALSE(contains(all, "ajet.task_reader")) << all;
  EXPECT_FALSE(contains(all, "ajet.task_judge")) << all;
  EXPECT_TRUE(contains(all, "unknown key 'actor_rollout_ref'")) << all;
  EXPECT_EQ(swarm.config.backbone, "torch");
  EXPECT_EQ(swarm.config.data.train_batch_size, 32);
  EXPECT_EQ(swarm.config.task_judge.judge_type, "workflow");  // left at the default
  EXPECT_FALSE(uses_builtin_judge(swarm.config.task_judge));
  // Classic mode reads both sections: customized_protocol without a protocol means the workflow's
  // reward.
  LoadedConfig classic = parse_config(yaml, "job.yaml");
  EXPECT_EQ(classic.config.task_judge.judge_type, "customized_protocol");
  EXPECT_FALSE(uses_builtin_judge(classic.config.task_judge));
  EXPECT_TRUE(contains(
      error_of([] {
        parse_config("ajet:\n  model: {path: /m}\n  task_judge: {judge_type: builtin}\n", "j.yaml");
      }),
      "judge_type is builtin but ajet.task_judge.judge_protocol is not set"));
  // Upstream's classic default reader is an error where a reader is used, and only there.
  const std::string hf =
      "ajet:\n  model: {path: /m}\n  task_reader: {type: huggingface_dat_repo}\n";
  EXPECT_TRUE(
      contains(error_of([&] { parse_config(hf, "r.yaml"); }),
               "ajet.task_reader.type must be one of [jsonl_dataset_file, builtin, random_dummy]"));
  EXPECT_NO_THROW(parse_config(hf, "r.yaml", ConfigUse::kSwarmServer));
}

// A KL or estimator type this build lacks is an error only where the run would use it, naming the
// supported ones.
TEST(ConfigUpstream, UnsupportedKlTypesMatterOnlyWithTheKlLoss) {
  // verl's `full` (every vocabulary logit) is the one verl estimator this build lacks.
  LoadedConfig off = parse_config(
      "ajet:\n  model: {path: /m}\n  trainer_common: {use_kl_loss: false, kl_loss_type: full}\n",
      "k.yaml");
  EXPECT_EQ(off.config.trainer_common.kl_loss_type, "low_var_kl");
  ASSERT_EQ(off.warnings.size(), 1u);
  EXPECT_TRUE(
      contains(off.warnings[0],
               "kl_loss_type 'full' is not supported here (low_var_kl, k3, k1, kl, k2, mse, abs)"))
      << off.warnings[0];
  EXPECT_TRUE(contains(to_yaml(off.config), "low_var_kl"));
  std::string msg = error_of([] {
    parse_config(
        "ajet:\n  model: {path: /m}\n  trainer_common: {use_kl_loss: true, kl_loss_type: full}\n",
        "k.yaml");
  });
  EXPECT_TRUE(contains(
      msg,
      "kl_loss_type must be one of [low_var_kl, k3, k1, kl, k2, mse, abs] when use_kl_loss is "
      "true, got 'full'"))
      << msg;
  // verl's other names load as they are.
  for (const char* name : {"mse", "k2", "kl", "abs", "k3"}) {
    LoadedConfig on = parse_config(
        std::string("ajet:\n  model: {path: /m}\n  trainer_common: {use_kl_loss: true, "
                    "kl_loss_type: ") +
            name + "}\n",
        "k.yaml");
    EXPECT_EQ(on.config.trainer_common.kl_loss_type, name);
    EXPECT_TRUE(on.warnings.empty()) << name;
  }
  msg = error_of([] {
    parse_config(
        "ajet:\n  model: {path: /m}\n  trainer_common: {algorithm: {adv_estimator: gae}}\n",
        "e.yaml");
  });
  EXPECT_TRUE(
      contains(msg, "adv_estimator must be one of [grpo, drgrpo, rloo, reinforce_pp], got 'gae'"))
      << msg;
}

// vLLM's kv_cache_dtype key: auto by default, the listed types taken, anything else named.
TEST(ConfigEngine, KvCacheDtype) {
  EXPECT_EQ(parse_config("ajet:\n  model: {path: /m}\n", "a.yaml").config.engine.kv_cache_dtype,
            "auto");
  EXPECT_EQ(
      parse_config("ajet:\n  model: {path: /m}\n  engine: {kv_cache_dtype: bfloat16}\n", "b.yaml")
          .config.engine.kv_cache_dtype,
      "bfloat16");
  const std::string msg = error_of([] {
    parse_config("ajet:\n  model: {path: /m}\n  engine: {kv_cache_dtype: fp8}\n", "c.yaml");
  });
  EXPECT_TRUE(
      contains(msg, "ajet.engine.kv_cache_dtype must be one of [auto, float32, bfloat16, float16]"))
      << msg;
}

TEST(ConfigWarnings, UpstreamAliasesMapWithANote) {
  LoadedConfig loaded = parse_config(
      "ajet:\n  model: {path: /m}\n  backbone: verl\n"
      "  context_tracker: {timeline_merging_policy: {timeline_compare_level: text_and_image}}\n",
      "a.yaml");
  EXPECT_EQ(loaded.config.backbone, "torch");
  EXPECT_EQ(loaded.config.context_tracker.timeline_compare_level, "text");
  ASSERT_EQ(loaded.warnings.size(), 2u);
  EXPECT_TRUE(
      contains(loaded.warnings[0], "ajet.backbone: 'verl' is upstream's name; using 'torch'"));
}

// The trainer forms softmax(logits / T); top-p/top-k train episodes come from something else, which
// matters where the loss divides by their logprobs.
TEST(ConfigWarnings, TruncatedTrainSamplingIsNamedWhereTheLossUsesItsLogprobs) {
  auto warnings_of = [](const std::string& extra) {
    return parse_config("ajet:\n  model: {path: /m}\n" + extra, "t.yaml").warnings;
  };
  // The async backbone's correction divides by the rollout logprobs.
  auto w = warnings_of("  backbone: async\n  rollout: {top_p: 0.9}\n");
  ASSERT_EQ(w.size(), 1u) << ::testing::PrintToString(w);
  EXPECT_TRUE(contains(
      w[0], "t.yaml: ajet.rollout.top_p 0.9 / top_k -1: train episodes come from a truncated"))
      << w[0];
  EXPECT_TRUE(contains(w[0], "ajet.async.off_policy_correction")) << w[0];
  w = warnings_of("  trainer_common: {old_logprob_source: rollout}\n  rollout: {top_k: 20}\n");
  ASSERT_EQ(w.size(), 1u) << ::testing::PrintToString(w);
  EXPECT_TRUE(contains(w[0], "old_logprob_source: rollout")) << w[0];
  // Recomputed old logprobs, no correction, or nothing truncated: nothing to say.
  EXPECT_TRUE(warnings_of("  rollout: {top_p: 0.9}\n").empty());
  EXPECT_TRUE(
      warnings_of(
          "  backbone: async\n  async: {off_policy_correction: none}\n  rollout: {top_p: 0.9}\n")
          .empty());
  EXPECT_TRUE(warnings_of("  backbone: async\n  rollout: {top_p: 1.0, top_k: -1}\n").empty());
}

TEST(ConfigErrors, WrongTypesNameKeyTypeFileAndLine) {
  std::string msg = error_of([] {
    parse_config("ajet:\n  model: {path: /m}\n  data:\n    train_batch_size: abc\n", "t.yaml");
  });
  EXPECT_EQ(msg, "t.yaml:4: ajet.data.train_batch_size must be an integer, got 'abc'");
  msg = error_of([] {
    parse_config("ajet:\n  model: {path: /m}\n  rollout: {temperature: [1]}\n", "t.yaml");
  });
  EXPECT_TRUE(contains(msg, "ajet.rollout.temperature must be a number, got a list")) << msg;
  msg = error_of(
      [] { parse_config("ajet:\n  model: {path: /m}\n  rollout: {num_repeat: 2.5}\n", "t.yaml"); });
  EXPECT_TRUE(contains(msg, "ajet.rollout.num_repeat must be an integer, got '2.5'")) << msg;
  msg = error_of([] {
    parse_config(
        "ajet:\n  model: {path: /m}\n  use_kl: 1\n  trainer_common: {use_kl_loss: maybe}\n",
        "t.yaml");
  });
  EXPECT_TRUE(contains(msg, "ajet.trainer_common.use_kl_loss must be a boolean, got 'maybe'"))
      << msg;
  msg = error_of([] { parse_config("ajet:\n  model: {path: /m}\n  rollout: 5\n", "t.yaml"); });
  EXPECT_TRUE(contains(msg, "ajet.rollout must be a mapping, got '5'")) << msg;
  msg = error_of([] {
    parse_config("ajet:\n  model: {path: /m}\n  task_reader: {builtin: {params: 3}}\n", "t.yaml");
  });
  EXPECT_TRUE(contains(msg, "ajet.task_reader.builtin.params must be a mapping")) << msg;
  msg = error_of([] { parse_config("ajet:\n  model: {path: /m}\n  backbone: jax\n", "t.yaml"); });
  EXPECT_TRUE(contains(msg, "ajet.backbone must be one of [torch, async, debug], got 'jax'"))
      << msg;
  msg = error_of([] { parse_config("ajet: [1, 2\n", "broken.yaml"); });
  EXPECT_TRUE(contains(msg, "broken.yaml:")) << msg;
  EXPECT_TRUE(contains(msg, "invalid YAML")) << msg;
}

TEST(ConfigErrors, AliasesThatExpandBeyondTheLimitAreRefusedNamingTheKey) {
  // Nine levels of nine aliases: ~600 bytes of YAML that name one string 9^9 (~387 million) times.
  std::string yaml = "unused:\n  a0: &a0 \"lol\"\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "  a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) yaml += std::string(j ? ", " : "") + "*a" + std::to_string(i - 1);
    yaml += "]\n";
  }
  yaml += "ajet:\n  model: {path: /m}\n  task_reader:\n    builtin:\n      params: {bomb: *a9}\n";
  ASSERT_LT(yaml.size(), 700u);
  const std::string msg = error_of([&] { parse_config(yaml, "bomb.yaml"); });
  EXPECT_TRUE(contains(msg, "bomb.yaml:")) << msg;
  EXPECT_TRUE(contains(msg, "ajet.task_reader.builtin.params expands to more than 16 MiB")) << msg;
  // A few aliases are fine and expand as YAML says.
  LoadedConfig ok = parse_config(
      "defs:\n  common: &c {k: 2}\najet:\n  model: {path: /m}\n  task_reader:\n    builtin:\n      "
      "params: {x: *c, y: *c}\n",
      "ok.yaml");
  EXPECT_EQ(ok.config.task_reader.builtin.params, Json::parse(R"({"x": {"k": 2}, "y": {"k": 2}})"));
  // Deep nesting in a free-form mapping is refused too (what later walks it recurses).
  std::string deep = "ajet:\n  model: {path: /m}\n  task_reader:\n    builtin:\n      params: ";
  for (int i = 0; i < 200; ++i) deep += "{a: ";
  deep += "1" + std::string(200, '}') + "\n";
  const std::string deep_msg = error_of([&] { parse_config(deep, "deep.yaml"); });
  EXPECT_TRUE(contains(deep_msg, "ajet.task_reader.builtin.params nests deeper than 128 levels"))
      << deep_msg;
}

TEST(ConfigErrors, ATextOverSixteenMibIsRefusedBeforeParsing) {
  const std::string big = std::string(kMinimal) + std::string(size_t(16) << 20, '#');
  const std::string msg = error_of([&] { parse_config(big, "big.yaml"); });
  EXPECT_TRUE(contains(msg, "big.yaml: a config must be under 16 MiB")) << msg;
}

TEST(ConfigErrors, RelationsAndBoundsListEveryViolation) {
  const char* yaml = R"(
ajet:
  model: {path: /m}
  data: {train_batch_size: 0, max_prompt_length: 100, max_response_length: 1000}
  rollout: {max_model_len: 1024, max_response_length_in_one_turn: 2048, top_p: 1.5}
)";
  std::string msg = error_of([&] { parse_config(yaml, "r.yaml"); });
  EXPECT_TRUE(contains(msg, "r.yaml: invalid config:")) << msg;
  EXPECT_TRUE(contains(msg, "ajet.data.train_batch_size must be >= 1, got 0")) << msg;
  EXPECT_TRUE(contains(msg, "ajet.rollout.top_p must be <= 1, got 1.5")) << msg;
  EXPECT_TRUE(contains(msg,
                       "ajet.rollout.max_response_length_in_one_turn (2048) must be <= "
                       "ajet.rollout.max_model_len (1024)"))
      << msg;
  EXPECT_TRUE(contains(msg,
                       "ajet.rollout.max_response_length_in_one_turn (2048) must be <= "
                       "ajet.data.max_response_length (1000)"))
      << msg;
  EXPECT_TRUE(contains(msg, "(100 + 1000) must be <= ajet.rollout.max_model_len (1024)")) << msg;
  msg = error_of([] { parse_config("ajet: {}\n", "e.yaml"); });
  EXPECT_TRUE(contains(msg, "ajet.model.path is required")) << msg;
  msg = error_of([] {
    parse_config("ajet: {model: {path: /m}, task_reader: {type: jsonl_dataset_file}}", "j.yaml");
  });
  EXPECT_TRUE(contains(msg, "ajet.task_reader.jsonl_dataset_file.training.file_path is empty"))
      << msg;
}

TEST(ConfigRoundTrip, DumpedYamlParsesBackToTheSameConfig) {
  Config c = parse_config(kMinimal, "m.yaml").config;
  c.trainer_common.total_training_steps = 7;
  c.task_judge.judge_protocol = "true";  // a string that looks like a bool must stay a string
  c.project_name = "123";
  c.task_reader.builtin.params = Json::parse(R"({"size": 4, "odds": [0.5, 0.25]})");
  c.trainer_common.optim.lr = 3e-7;
  LoadedConfig back = parse_config(to_yaml(c), "dump.yaml");
  EXPECT_TRUE(back.warnings.empty()) << ::testing::PrintToString(back.warnings);
  EXPECT_EQ(to_json(back.config), to_json(c)) << to_yaml(c);
}

TEST(ConfigOverrides, SetValueByDottedKey) {
  Config c = parse_config(kMinimal, "m.yaml").config;
  set_config_value(c, "ajet.backbone", "async");
  set_config_value(c, "trainer_common.optim.betas", "[0.8, 0.9]");
  set_config_value(c, "ajet.trainer_common.total_training_steps", "null");
  EXPECT_EQ(c.backbone, "async");
  EXPECT_EQ(c.trainer_common.optim.betas, (std::vector<double>{0.8, 0.9}));
  EXPECT_FALSE(c.trainer_common.total_training_steps.has_value());
  EXPECT_TRUE(contains(error_of([&] { set_config_value(c, "ajet.rollout.nmu_repeat", "1"); }),
                       "did you mean 'ajet.rollout.num_repeat'?"));
  EXPECT_TRUE(contains(error_of([&] { set_config_value(c, "ajet.nope", "1"); }),
                       "unknown config key 'ajet.nope'"));
  EXPECT_TRUE(contains(error_of([&] { set_config_value(c, "ajet.rollout.num_repeat", "many"); }),
                       "ajet.rollout.num_repeat must be an integer"));
  c.rollout.max_model_len = 10;
  EXPECT_TRUE(contains(error_of([&] { validate(c, "cli"); }), "cli: invalid config"));
}

TEST(ConfigFiles, MissingFileIsAnIoErrorNamingThePath) {
  try {
    load_config_file("/nonexistent/dir/x.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_TRUE(contains(e.what(), "/nonexistent/dir/x.yaml"));
  }
}

TEST(ConfigNames, AutoNamesFollowUpstream) {
  Config c;
  // 2024-03-05 07:08 UTC
  auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1709622480));
  resolve_auto_names(c, "/x/my_exp.yaml", now, "runs");
  EXPECT_EQ(c.experiment_name, "my_exp_20240305_0708");
  EXPECT_EQ(c.experiment_dir, "runs/my_exp_20240305_0708");
  c.experiment_name = "fixed";
  c.experiment_dir = "/abs/dir";
  resolve_auto_names(c, "/x/other.yaml", now, "runs");
  EXPECT_EQ(c.experiment_dir, "/abs/dir");
}

// The documented default config and docs/config.md cover every key, and the YAML states the
// defaults.
TEST(ConfigDocs, DefaultYamlAndDocsCoverEveryKey) {
  std::filesystem::path root = AJET_SOURCE_DIR;
  auto yaml_path = root / "examples/configs/default.yaml";
  LoadedConfig loaded = load_config_file(yaml_path);
  EXPECT_TRUE(loaded.warnings.empty()) << ::testing::PrintToString(loaded.warnings);
  Config expected;
  expected.model.path = loaded.config.model.path;
  EXPECT_EQ(to_json(loaded.config), to_json(expected));

  YAML::Node tree = YAML::LoadFile(yaml_path.string());
  std::string docs = read_file(root / "docs/config.md");
  Config c;
  for (const Field& f : config_fields(c)) {
    YAML::Node node = YAML::Clone(tree);
    std::string key = f.key;
    size_t start = 0;
    bool found = true;
    while (found) {
      size_t dot = key.find('.', start);
      std::string part =
          key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!node.IsMap() || !node[part]) {
        found = false;
        break;
      }
      node.reset(node[part]);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    EXPECT_TRUE(found) << f.key << " is missing from examples/configs/default.yaml";
    EXPECT_TRUE(contains(docs, "`" + f.key + "`")) << f.key << " is missing from docs/config.md";
  }
}

}  // namespace
}  // namespace ajet::config

namespace ajet::config {
namespace {

// Multi-model training places each server's engine on its own GPU: cuda:N is a device name.
TEST(ConfigDevice, CudaWithAnIndexIsAcceptedAndNonsenseNamesTheKey) {
  for (const char* ok : {"cpu", "cuda", "auto", "cuda:0", "cuda:7", "cuda:123"}) {
    Config c =
        parse_config(std::string("ajet:\n  model: {path: /m}\n  engine: {device: '") + ok + "'}\n",
                     "d.yaml")
            .config;
    EXPECT_EQ(c.engine.device, ok);
  }
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:1234", "cuda:-1", "CUDA"}) {
    std::string message;
    try {
      parse_config(std::string("ajet:\n  model: {path: /m}\n  engine: {device: '") + bad + "'}\n",
                   "d.yaml");
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("ajet.engine.device must be cpu, cuda, cuda:N"), std::string::npos)
        << bad << ": " << message;
  }
}

}  // namespace
}  // namespace ajet::config
