// The typed AgentJet configuration: every `ajet.*` YAML key as a struct member with its default.
// Key names follow upstream AgentJet where the meaning is the same; docs/config.md lists them all.
// This header holds data only; parsing lives in config/load.h, the key table in config/schema.h.
// Adding a key: a member here (with its default) + one line in config/schema.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::config {

struct ModelConfig {
  std::string path;  // required: a directory in Hugging Face layout
};

struct DataConfig {
  int64_t max_prompt_length = 3000;
  int64_t max_response_length = 15000;
  int64_t train_batch_size = 32;
};

struct SamplingConfig {  // ajet.rollout.val_kwargs
  double temperature = 0.0;
  int64_t top_k = -1;
  double top_p = 1.0;
  bool do_sample = false;
};

struct MultiTurnConfig {
  int64_t max_sample_per_task = 30;
  int64_t max_steps = 30;
};

// ajet.rollout.madness: the engine's detectors of degenerate generations (batching/madness.h; 0
// turns one off, all off by default) and what training does with an episode one of them stopped.
struct MadnessConfig {
  int64_t repeat_tokens = 0;
  int64_t max_period = 32;
  int64_t entropy_window = 0;
  double min_entropy_bits = 1.5;
  int64_t garbage_run = 0;
  int64_t switch_run = 0;
  // penalize: the episode's reward becomes ajet.rollout.agent_madness_reward; drop: its samples are
  // left out of the batch; keep: trained with the reward its client reported.
  std::string action = "penalize";
};

struct RolloutConfig {
  std::string user_workflow;
  std::string user_workflow_mode = "per_episode";  // per_episode | worker (docs/classic.md)
  int64_t user_workflow_workers = 0;               // worker mode: processes; 0 = max_env_worker
  double user_workflow_timeout = 600;  // seconds an episode's command may take; 0 = no limit
  bool force_disable_toolcalls = false;
  int64_t max_env_worker = 64;
  int64_t max_response_length_in_one_turn = 4096;
  int64_t max_model_len = 18000;
  int64_t max_num_seqs = 64;
  MultiTurnConfig multi_turn;
  int64_t num_repeat = 4;
  double temperature = 0.9;
  double top_p = 1.0;
  int64_t top_k = -1;
  SamplingConfig val_kwargs;
  MadnessConfig madness;
  double agent_madness_reward = -1.0;  // upstream's key: the reward of a penalized episode
};

struct JsonlFileConfig {
  std::string training_file_path;
  std::string validation_file_path;
};

struct BuiltinTasksConfig {
  std::string generator = "calc";
  int64_t num_training_tasks = 1000;
  int64_t num_validation_tasks = 100;
  int64_t seed = 1;
  Json params = Json::object();  // generator-specific, free-form
};

struct TaskFilterConfig {
  std::vector<std::string> include_task_ids;
  std::vector<std::string> exclude_task_ids;
  Json metadata =
      Json::object();  // metadata predicate: key -> value | [values] | {min, max} (docs/tasks.md)
};

// One source of tasks: what ajet.task_reader reads, and each task of a cocktail.
struct TaskSourceConfig {
  std::string type = "random_dummy";  // jsonl_dataset_file | builtin | random_dummy
  JsonlFileConfig jsonl_dataset_file;
  BuiltinTasksConfig builtin;
  double validation_fraction = 0.0;
  bool shuffle = true;
  int64_t shuffle_seed = 42;
  int64_t max_training_tasks = -1;
  int64_t max_validation_tasks = -1;
  TaskFilterConfig filters;
};

// A cocktail holds at most this many task sources (each has its own stream, validation set and
// metrics, and a step draws from each).
inline constexpr size_t kMaxCocktailTasks = 16;
inline constexpr size_t kMaxCocktailNameLength = 48;

inline TaskSourceConfig builtin_task_source() {
  TaskSourceConfig source;
  source.type = "builtin";
  return source;
}

// One task of ajet.task_reader.cocktail.tasks: a name (metrics keys), a weight, and the same reader
// keys as ajet.task_reader (type builtin by default).
struct CocktailTaskConfig {
  std::string name;  // empty: the builtin generator's name
  double weight = 1.0;
  TaskSourceConfig source = builtin_task_source();
};

// The share of the step's tasks that goes to the first task of the cocktail (upstream's cocktail
// v2): fixed: every task by its weight; constant: start; linear: start -> end at end_step; cos: end
// + (start - end) * (1 + cos(pi t)) / 2. The other tasks share the rest by their weights.
struct CocktailScheduleConfig {
  std::string type = "fixed";  // fixed | constant | linear | cos
  std::optional<double> start;
  std::optional<double> end;
  std::optional<int64_t> end_step;
};

struct CocktailConfig {
  std::vector<CocktailTaskConfig> tasks;  // empty: no cocktail (ajet.task_reader is the one source)
  CocktailScheduleConfig schedule;
};

// The name a cocktail task goes by in metrics: its `name`, else its builtin generator's name.
inline std::string cocktail_task_name(const CocktailTaskConfig& task) {
  if (task.name.empty() && task.source.type == "builtin") return task.source.builtin.generator;
  return task.name;
}

struct TaskReaderConfig : TaskSourceConfig {
  CocktailConfig cocktail;  // classic mode: several task sources mixed per step
};

struct TaskJudgeConfig {
  std::string judge_type = "workflow";  // workflow | builtin | customized_protocol (upstream)
  std::optional<std::string> judge_protocol;
};

// Whether a built-in judge gives the reward: judge_type builtin, or upstream's customized_protocol
// naming a judge. Upstream's swarm default, customized_protocol with judge_protocol null, means the
// workflow (in swarm mode: the client) reports the reward, as judge_type workflow does.
inline bool uses_builtin_judge(const TaskJudgeConfig& judge) {
  return judge.judge_type == "builtin" ||
         (judge.judge_type == "customized_protocol" && judge.judge_protocol);
}

struct ContextTrackerConfig {
  std::string timeline_compare_level =
      "token";  // token (exact ids, default) | text (upstream fallback)
  bool ignore_tools = true;
  bool fix_retokenization_drift = true;
  // Qwen3-style templates drop the <think> block of assistant turns before the last user query.
  // true: the next prompts keep the generated ids, thinking included (the engine sees its earlier
  // thinking; the episode stays one sample); false: prompts follow the template (the engine sees
  // the turn without thinking; each new query starts a new sample).
  bool keep_earlier_thinking = false;
  std::vector<std::string> trainable_agents;  // empty: every agent is trained
  // A request's `model` -> the agent its calls belong to (docs/protocol.md "The agent of a call").
  // A `model` that is neither a key here nor a known agent name does not name an agent.
  Json model_agents = Json::object();
};

struct OptimConfig {
  std::string optimizer = "AdamW";
  double lr = 1e-6;
  std::vector<double> betas = {0.9, 0.999};
  double weight_decay = 0.01;
  int64_t lr_warmup_steps = -1;
  double lr_warmup_steps_ratio = 0.0;
  std::string lr_scheduler_type = "constant";  // constant | cosine
  double min_lr_ratio = 0.0;
  double num_cycles = 0.5;
  double grad_clip = 20.0;
};

struct AlgorithmConfig {
  std::string adv_estimator = "grpo";  // grpo | drgrpo | rloo | reinforce_pp
  // verl's switch: false turns grpo into Dr.GRPO (no division by the group's std).
  bool norm_adv_by_std_in_grpo = true;
  bool drop_zero_variance_groups = false;
  // Dynamic sampling (DAPO) in classic mode, on with swarm_mode_sample_collection_method
  // rollout_until_finish_enough_non_dummy_tasks: a step samples batches of train_batch_size tasks
  // until train_batch_size groups have unequal rewards, at most this many batches.
  int64_t max_num_gen_batches = 4;
  // Multi-agent episodes: each role (agent name) forms its own advantage groups (its baseline from
  // the same role in the task's other episodes), and a role's samples take its reward from the
  // episode's metadata.role_rewards when the client reported one (docs/training.md).
  bool per_role_advantages = false;
};

struct TrainerCommonConfig {
  bool val_before_train = false;
  int64_t val_pass_n = 4;
  bool val_only = false;
  std::optional<int64_t> val_max_num_task_each_validation;
  int64_t save_freq = 20;
  int64_t test_freq = 20;
  std::optional<int64_t> total_training_steps;
  // Classic mode: no step starts that would end after this many seconds since `ajet` started (the
  // run then validates and ends); null: off. Not an upstream key.
  std::optional<int64_t> max_training_seconds;
  int64_t total_epochs = 50;
  // Where metrics go (upstream's list, a single name too): console (classic mode's per-step lines),
  // jsonl (classic mode's metrics.jsonl), tensorboard (event files in the experiment directory).
  // Upstream's swanlab / wandb / mlflow … are dropped with a warning (kUnavailableLoggers).
  std::vector<std::string> logger = {"console", "jsonl", "tensorboard"};
  // Classic mode: Markdown tables appended per validation / per step (upstream's names; relative
  // paths are under the experiment directory; null: none).
  std::optional<std::string> val_print_to_markdown_file_path;
  std::optional<std::string> train_print_to_markdown_file_path;
  int64_t nnodes = 1;
  int64_t n_gpus_per_node = 1;
  AlgorithmConfig algorithm;
  int64_t mini_batch_num = 1;
  int64_t ppo_epochs = 1;
  bool use_kl_loss = true;
  double kl_loss_coef = 0.002;
  std::string kl_loss_type = "low_var_kl";  // low_var_kl (= k3) | k1 (= kl) | k2 (= mse) | abs
  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;
  std::string loss_agg_mode = "token-mean";
  double entropy_coeff = 0.0;
  double loss_extra_scale_ratio = 1.0;
  int64_t ppo_max_token_len_per_gpu = 16384;
  std::string old_logprob_source = "recompute";  // recompute | rollout
  std::string checkpoint_base_dir = "./saved_checkpoints";
  int64_t max_checkpoints_to_keep = 3;  // -1: all
  // Every train_step batch and its reply under {experiment dir}/rollouts (`ajet replay`).
  bool record_rollouts = false;
  bool episode_loss_weighting = true;
  std::string sequence_packing = "tree";  // tree | plain
  bool activation_checkpointing =
      false;  // keep each layer's input only; recompute the layer in backward
  OptimConfig optim;
};

struct LoraConfig {
  int64_t lora_rank = 0;  // 0: LoRA off
  double lora_alpha = 16;
  double lora_dropout = 0.0;
  std::vector<std::string> target_modules = {"all-linear"};
};

struct AsyncConfig {
  int64_t max_staleness = 1;
  std::string off_policy_correction = "decoupled_ppo";  // decoupled_ppo | tis | none
  double importance_weight_cap = 2.0;                   // 0: no truncation
  // While a step trains beside the rollouts: the trainer's intra-op threads (0: half of
  // ajet.engine.threads, at least 1) and the decoder's (0: all of ajet.engine.threads); a narrower
  // decoder gets all of them back when the step's weights are in.
  int64_t trainer_threads = 0;
  int64_t decode_threads_while_training = 0;
  // The trainer thread's nice value (Linux, per thread): above the decoder's, the trainer runs on
  // what the rollouts leave idle instead of preempting the decoder's threads.
  int64_t trainer_nice = 19;
};

// What the front's store keeps of trained steps' LLM calls (the token records behind GET
// /episodes/{uuid} and `ajet episode show`): every call of the newest `full_steps` trained steps,
// and of each earlier step the calls of its first `sample_episodes` episodes; the rest are deleted
// once a step falls behind (episode rows, rewards and batch stats stay). -1 keeps every call.
struct StoreRetentionConfig {
  int64_t full_steps = 5;
  int64_t sample_episodes = 4;
};

struct InterchangeServerConfig {
  int64_t interchange_server_port = 10086;  // 0 ("auto"): any free port
};

// The KV cache budget when the config does not set ajet.engine.kv_cache_memory_mb (and
// ajet-engine's
// --kv-cache-mb default): the one place this default is written.
inline constexpr int64_t kDefaultKvCacheMemoryMb = 1024;
// ajet.engine.kv_cache_dtype's values (and `ajet-engine serve --kv-cache-dtype`'s).
inline const std::vector<std::string> kKvCacheDtypes = {"auto", "float32", "bfloat16", "float16"};

struct EngineConfig {
  int64_t threads = 0;  // 0: one per core
  int64_t kv_cache_memory_mb = kDefaultKvCacheMemoryMb;
  // Named LoRA adapters kept in their slots (weights, serving copy, optimizer moments); beyond it
  // the least recently used move out to disk and come back on demand. 0: no limit.
  double adapter_memory_mb = 0;
  std::string device = "cpu";     // cpu | cuda | auto
  std::string dtype = "float32";  // float32 | bfloat16 | float16
  std::string kv_cache_dtype =
      "auto";  // vLLM's name: auto (the model's dtype) | float32 | bfloat16 | float16
  int64_t prefill_chunk_tokens = 512;
  bool enable_prefix_caching = true;  // vLLM's name: reuse keys/values of shared prompt prefixes
  int64_t seed = 0;
};

// ajet.multi_model: several models trained together (classic mode; docs/classic.md "Several
// models"): each with its own front and engine ({name, path}), or each a LoRA adapter of the one
// model one engine serves ({name, adapter}). Empty `models`: a run of one model.
struct MultiModelConfig {
  std::string workflow = "calc_duo";  // the built-in multi-model agent
  Json models = Json::array();  // [{name, path} or {name, adapter}]; multi_model_members() checks
  bool enabled() const { return !models.empty(); }
};

struct MultiModelMember {
  std::string name;  // metric prefix and experiment subdirectory: a-z, 0-9, _ and -
  std::string path;  // a server member: its model directory (relative to the config file's dir)
  // An adapter member: the POST /adapters body less its name ({rank?, alpha?, dropout?,
  // target_modules?, seed?} or {path}: a PEFT directory, relative to the config file's directory);
  // null for a server member.
  Json adapter;
  bool is_adapter() const { return !adapter.is_null(); }
};
inline constexpr size_t kMaxMultiModelMembers = 8;
// The members of ajet.multi_model. Problems go to `problems`, or (null) throw
// Error(kInvalidArgument) naming the key.
std::vector<MultiModelMember> multi_model_members(const MultiModelConfig& mm,
                                                  std::vector<std::string>* problems = nullptr);

// ajet.distillation: on-policy distillation from a teacher (docs/training.md "Distillation"). Off
// while teacher.base_url is empty.
struct DistillationConfig {
  std::string base_url;  // the teacher's OpenAI API root, "http://host:port/v1"
  std::string api_key;
  std::string model;        // sent as `model` ("" : the teacher's default)
  double timeout = 120;     // seconds per teacher request
  int64_t concurrency = 4;  // teacher requests in flight at once
  // k1 (kl), k2 (mse), k3 (low_var_kl), abs, or topk_forward_kl (KL(teacher || student) over the
  // teacher's top_k tokens; loss mode only).
  std::string estimator = "k1";
  std::string mode = "advantage";  // advantage: -coef * estimate added per token; loss: a loss term
  double coef = 1.0;
  double reward_weight = 1.0;  // multiplies the task reward's advantage (0: distillation alone)
  int64_t top_k = 0;  // the teacher's alternatives per position (overlap metric, topk_forward_kl)
  bool enabled() const { return !base_url.empty(); }
};

struct Config {
  std::string project_name = "ajet_default_project";
  std::string experiment_name = "read_yaml_name";
  std::string experiment_dir = "auto";
  std::string backbone = "torch";  // torch | async | debug (config/backbone.h: the typed view)
  // Same config, seed and machine → the same bits (docs/determinism.md): batch-invariant engine
  // kernels and train batches in a canonical order. auto: on where it costs little (a float32 CPU
  // engine whose weights fit the packed-copy budget; the canonical order always); true: always
  // (larger models then keep a packed copy too); false: off.
  std::string deterministic = "auto";
  MultiModelConfig multi_model;
  ModelConfig model;
  DataConfig data;
  RolloutConfig rollout;
  TaskReaderConfig task_reader;
  TaskJudgeConfig task_judge;
  ContextTrackerConfig context_tracker;
  TrainerCommonConfig trainer_common;
  LoraConfig lora;
  AsyncConfig async;
  StoreRetentionConfig store_retention;
  InterchangeServerConfig interchange_server;
  EngineConfig engine;
  DistillationConfig distillation;
  std::string swarm_mode_sample_collection_method = "rollout_until_finish_enough_tasks";
  int64_t swarm_mode_sample_collection_max_cached_episodes = 9999;
  double swarm_mode_drain_timeout =
      600.0;  // most seconds ROLLING_POST waits for live train episodes
  double swarm_mode_drain_idle_grace =
      0.5;  // an episode idle longer is not waited for (it carries over)
  // With an agree-based trigger, seconds the boundary (ROLLING_POST) stays visible for clients that
  // agreed and poll the status for it; 0 when the only client waits on global_step (classic mode).
  double swarm_mode_agree_boundary_dwell = 2.0;
};

// The loggers this build writes, and upstream's (VERL's Tracking backends) that it has not.
inline const std::vector<std::string> kLoggers = {"console", "jsonl", "tensorboard"};
inline const std::vector<std::string> kUnavailableLoggers = {"swanlab", "wandb", "mlflow",
                                                             "vemlp_wandb", "clearml"};

// Whether ajet.trainer_common.logger names `name`.
inline bool logger_enabled(const Config& config, const std::string& name) {
  for (const std::string& l : config.trainer_common.logger) {
    if (l == name) return true;
  }
  return false;
}

}  // namespace ajet::config
