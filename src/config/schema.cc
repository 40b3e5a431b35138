#include "config/schema.h"

namespace ajet::config {

namespace {

struct Opt {
  std::vector<std::string> choices = {};
  std::optional<double> min = std::nullopt;
  std::optional<double> max = std::nullopt;
  std::vector<std::pair<std::string, std::string>> aliases = {};
  std::optional<int64_t> auto_value = std::nullopt;
  bool choice_checked_when_used = false;
  bool json_list = false;
};

class Table {
 public:
  template <class T>
  void add(std::string key, T& member, std::string doc, Opt opt = {}) {
    fields.push_back(Field{"ajet." + std::move(key), FieldTarget(&member), std::move(doc),
                           std::move(opt.choices), opt.min, opt.max, std::move(opt.aliases),
                           opt.auto_value, opt.choice_checked_when_used, opt.json_list});
  }
  std::vector<Field> fields;
};

// The reader keys of one task source under `prefix` (ajet.task_reader, or one cocktail task).
void add_task_source_fields(Table& t, const std::string& prefix, TaskSourceConfig& r) {
  const std::string p = prefix + ".";
  t.add(p + "type", r.type, "where tasks come from",
        {.choices = {"jsonl_dataset_file", "builtin", "random_dummy"}});
  t.add(p + "jsonl_dataset_file.training.file_path", r.jsonl_dataset_file.training_file_path,
        "JSONL of training tasks (task_id, main_query, init_messages, metadata)");
  t.add(p + "jsonl_dataset_file.validation.file_path", r.jsonl_dataset_file.validation_file_path,
        "JSONL of validation tasks (empty: none)");
  t.add(p + "builtin.generator", r.builtin.generator, "built-in task generator name");
  t.add(p + "builtin.num_training_tasks", r.builtin.num_training_tasks, "generated training tasks",
        {.min = 1});
  t.add(p + "builtin.num_validation_tasks", r.builtin.num_validation_tasks,
        "generated validation tasks", {.min = 0});
  t.add(p + "builtin.seed", r.builtin.seed, "generator seed");
  t.add(p + "builtin.params", r.builtin.params, "generator-specific settings (a mapping)");
  t.add(p + "validation_fraction", r.validation_fraction,
        "held out from the training tasks when there is no validation file",
        {.min = 0, .max = 0.99});
  t.add(p + "shuffle", r.shuffle, "shuffle training tasks (deterministically)");
  t.add(p + "shuffle_seed", r.shuffle_seed, "seed of the shuffle and of the split");
  t.add(p + "max_training_tasks", r.max_training_tasks, "keep the first N; -1 keeps all",
        {.min = -1});
  t.add(p + "max_validation_tasks", r.max_validation_tasks, "keep the first N; -1 keeps all",
        {.min = -1});
  t.add(p + "filters.include_task_ids", r.filters.include_task_ids,
        "keep only these task ids (empty: all)");
  t.add(p + "filters.exclude_task_ids", r.filters.exclude_task_ids, "drop these task ids");
  t.add(p + "filters.metadata", r.filters.metadata,
        "keep tasks whose metadata matches: key -> value, [values] or {min, max}");
}

}  // namespace

std::vector<Field> cocktail_task_fields(CocktailTaskConfig& task, size_t index) {
  Table t;
  const std::string prefix = "task_reader.cocktail.tasks[" + std::to_string(index) + "]";
  t.add(prefix + ".name", task.name,
        "the task's name in metrics (empty: the builtin generator's name)");
  t.add(prefix + ".weight", task.weight, "the task's weight in the mix", {.min = 0});
  add_task_source_fields(t, prefix, task.source);
  return std::move(t.fields);
}

std::vector<Field> config_fields(Config& c) {
  Table t;
  // Experiment identity.
  t.add("project_name", c.project_name, "project name shown in logs and metrics");
  t.add("experiment_name", c.experiment_name,
        "experiment name; `read_yaml_name` becomes `{yaml basename}_{YYYYMMDD_HHMM}`");
  t.add("experiment_dir", c.experiment_dir,
        "experiment directory; `auto` is `{--exp-dir}/{experiment_name}`");
  t.add("backbone", c.backbone,
        "torch: synchronous RL; async: rollouts continue while training; debug: inference only",
        {.choices = {"torch", "async", "debug"},
         .aliases = {{"verl", "torch"}, {"trinity", "async"}}});
  t.add("deterministic", c.deterministic,
        "same config, seed and machine: the same metrics and weights, bit for bit; auto: where it "
        "costs little (float32 CPU engines of models up to 512 MB)",
        {.choices = {"auto", "true", "false"}});
  t.add("multi_model.workflow", c.multi_model.workflow,
        "the built-in agent of a run with several models", {.choices = {"calc_duo"}});
  t.add("multi_model.models", c.multi_model.models,
        "several models trained together: [{name, path}] (each its own front and engine; "
        "docs/classic.md)",
        {.json_list = true});
  t.add("model.path", c.model.path,
        "model directory in Hugging Face layout (config.json, safetensors, tokenizer)");
  // Lengths and batch.
  t.add("data.max_prompt_length", c.data.max_prompt_length,
        "max tokens of a training sample's prompt", {.min = 1});
  t.add("data.max_response_length", c.data.max_response_length,
        "max tokens of a training sample's response", {.min = 1});
  t.add("data.train_batch_size", c.data.train_batch_size, "tasks per training step", {.min = 1});
  // Rollout.
  t.add("rollout.user_workflow", c.rollout.user_workflow,
        "classic mode: the workflow that runs each episode");
  t.add("rollout.user_workflow_mode", c.rollout.user_workflow_mode,
        "classic mode, a command workflow: per_episode (a process per episode) or worker "
        "(long-lived processes, "
        "an episode per JSON line on stdin)",
        {.choices = {"per_episode", "worker"}});
  t.add("rollout.user_workflow_workers", c.rollout.user_workflow_workers,
        "worker mode: how many worker processes; 0 = max_env_worker", {.min = 0});
  t.add("rollout.user_workflow_timeout", c.rollout.user_workflow_timeout,
        "seconds one episode of a command workflow may take (then reward 0, reason timeout); 0 = "
        "no limit",
        {.min = 0});
  t.add("rollout.force_disable_toolcalls", c.rollout.force_disable_toolcalls,
        "ignore `tools` in chat requests");
  t.add("rollout.max_env_worker", c.rollout.max_env_worker,
        "episodes in flight at once (claimable pool size)", {.min = 1});
  t.add("rollout.max_response_length_in_one_turn", c.rollout.max_response_length_in_one_turn,
        "max generated tokens of one LLM call", {.min = 1});
  t.add("rollout.max_model_len", c.rollout.max_model_len,
        "context window (prompt + generated tokens)", {.min = 1});
  t.add("rollout.max_num_seqs", c.rollout.max_num_seqs, "sequences the engine decodes together",
        {.min = 1});
  t.add("rollout.multi_turn.max_sample_per_task", c.rollout.multi_turn.max_sample_per_task,
        "training samples kept per episode", {.min = 1});
  t.add("rollout.multi_turn.max_steps", c.rollout.multi_turn.max_steps,
        "agent step cap used by workflows", {.min = 1});
  t.add("rollout.num_repeat", c.rollout.num_repeat, "episodes per task (GRPO group size)",
        {.min = 1});
  t.add("rollout.temperature", c.rollout.temperature, "sampling temperature of train episodes",
        {.min = 0});
  t.add("rollout.top_p", c.rollout.top_p, "nucleus sampling of train episodes",
        {.min = 0, .max = 1});
  t.add("rollout.top_k", c.rollout.top_k, "top-k of train episodes; -1 disables", {.min = -1});
  t.add("rollout.val_kwargs.temperature", c.rollout.val_kwargs.temperature,
        "validation temperature", {.min = 0});
  t.add("rollout.val_kwargs.top_k", c.rollout.val_kwargs.top_k, "validation top-k; -1 disables",
        {.min = -1});
  t.add("rollout.madness.repeat_tokens", c.rollout.madness.repeat_tokens,
        "stop a generation whose last N tokens repeat with a period up to max_period (0: off)",
        {.min = 0});
  t.add("rollout.madness.max_period", c.rollout.madness.max_period,
        "longest loop period the repetition detector looks for", {.min = 1, .max = 4096});
  t.add("rollout.madness.entropy_window", c.rollout.madness.entropy_window,
        "stop a generation whose last N tokens have a token-histogram entropy below "
        "min_entropy_bits (0: off)",
        {.min = 0});
  t.add("rollout.madness.min_entropy_bits", c.rollout.madness.min_entropy_bits,
        "entropy threshold of entropy_window, in bits", {.min = 0});
  t.add("rollout.madness.garbage_run", c.rollout.madness.garbage_run,
        "stop after N garbage tokens in a row (control characters, U+FFFD, special tokens; 0: "
        "off)",
        {.min = 0});
  t.add("rollout.madness.switch_run", c.rollout.madness.switch_run,
        "stop after N tokens in a row of a script other than the reply's language (0: off)",
        {.min = 0});
  t.add("rollout.madness.action", c.rollout.madness.action,
        "what training does with an episode a detector stopped",
        {.choices = {"penalize", "drop", "keep"}});
  t.add("rollout.agent_madness_reward", c.rollout.agent_madness_reward,
        "the reward of an episode a madness detector stopped (madness.action penalize)");
  t.add("rollout.val_kwargs.top_p", c.rollout.val_kwargs.top_p, "validation top-p",
        {.min = 0, .max = 1});
  t.add("rollout.val_kwargs.do_sample", c.rollout.val_kwargs.do_sample,
        "sample in validation (false: greedy)");
  // Tasks.
  add_task_source_fields(t, "task_reader", c.task_reader);
  t.add("task_reader.cocktail.tasks", c.task_reader.cocktail.tasks,
        "classic mode: several task sources mixed per step, each {name, weight, <the "
        "ajet.task_reader keys>}");
  const std::string schedule = "task_reader.cocktail.schedule.";
  t.add(schedule + "type", c.task_reader.cocktail.schedule.type,
        "share of the cocktail's first task per step: fixed (the weights), constant, linear, cos",
        {.choices = {"fixed", "constant", "linear", "cos"}});
  t.add(schedule + "start", c.task_reader.cocktail.schedule.start, "first task's share at step 1",
        {.min = 0, .max = 1});
  t.add(schedule + "end", c.task_reader.cocktail.schedule.end,
        "first task's share from end_step + 1 on", {.min = 0, .max = 1});
  t.add(schedule + "end_step", c.task_reader.cocktail.schedule.end_step,
        "steps over which linear / cos go from start to end", {.min = 1});
  t.add("task_judge.judge_type", c.task_judge.judge_type,
        "workflow: the workflow's own reward; builtin: the judge named by judge_protocol; "
        "customized_protocol "
        "(upstream): builtin when judge_protocol is set, else workflow",
        {.choices = {"workflow", "builtin", "customized_protocol"}});
  t.add("task_judge.judge_protocol", c.task_judge.judge_protocol,
        "built-in judge name (null: none)");
  // Tracking.
  t.add("context_tracker.timeline_merging_policy.timeline_compare_level",
        c.context_tracker.timeline_compare_level, "merge timelines by text or by exact token ids",
        {.choices = {"text", "token"}, .aliases = {{"text_and_image", "text"}}});
  t.add("context_tracker.timeline_merging_policy.ignore_tools", c.context_tracker.ignore_tools,
        "ignore tool definitions when comparing timelines");
  t.add("context_tracker.fix_retokenization_drift", c.context_tracker.fix_retokenization_drift,
        "render earlier completions with the ids the model generated");
  t.add("context_tracker.keep_earlier_thinking", c.context_tracker.keep_earlier_thinking,
        "keep the generated <think> block of earlier assistant turns in later prompts, where "
        "Qwen3's template drops it (false: follow the template; the merge then splits the "
        "episode at each new user query)");
  t.add("context_tracker.trainable_agents", c.context_tracker.trainable_agents,
        "agent names whose calls are trained (empty: all)");
  t.add("context_tracker.model_agents", c.context_tracker.model_agents,
        "a request's model name -> the agent its calls belong to; other model names name no agent "
        "unless they "
        "are a known agent (a value here or in trainable_agents)");
  // Training.
  auto& tc = c.trainer_common;
  t.add("trainer_common.val_before_train", tc.val_before_train, "validate before the first step");
  t.add("trainer_common.val_pass_n", tc.val_pass_n, "k of pass@k in validation", {.min = 1});
  t.add("trainer_common.val_only", tc.val_only, "validate, then exit without training");
  t.add("trainer_common.val_max_num_task_each_validation", tc.val_max_num_task_each_validation,
        "validation tasks per validation (null: all)");
  t.add("trainer_common.save_freq", tc.save_freq, "checkpoint every N steps; 0 or -1: only on stop",
        {.min = -1});
  t.add("trainer_common.test_freq", tc.test_freq, "validate every N steps; 0 or -1: never",
        {.min = -1});
  t.add("trainer_common.total_training_steps", tc.total_training_steps,
        "stop after N steps (null: epochs decide)", {.min = 1});
  t.add("trainer_common.max_training_seconds", tc.max_training_seconds,
        "classic mode: start no step that would end after this many seconds (then validate and "
        "end; null: off)",
        {.min = 1});
  t.add("trainer_common.total_epochs", tc.total_epochs, "passes over the training tasks",
        {.min = 1});
  t.add("trainer_common.logger", tc.logger,
        "where metrics go: console, jsonl, tensorboard (a list or one name; upstream's swanlab, "
        "wandb, mlflow: "
        "ignored with a warning)");
  t.add("trainer_common.val_print_to_markdown_file_path", tc.val_print_to_markdown_file_path,
        "classic mode: append each validation's pass@k table here as Markdown (relative: under the "
        "experiment "
        "directory; null: none)");
  t.add("trainer_common.train_print_to_markdown_file_path", tc.train_print_to_markdown_file_path,
        "classic mode: append each step's rollout table here as Markdown (relative: under the "
        "experiment "
        "directory; null: none)");
  t.add("trainer_common.nnodes", tc.nnodes, "machines with engine ranks", {.min = 1});
  t.add("trainer_common.n_gpus_per_node", tc.n_gpus_per_node, "engine ranks per machine",
        {.min = 1});
  t.add("trainer_common.algorithm.adv_estimator", tc.algorithm.adv_estimator, "advantage estimator",
        {.choices = {"grpo", "drgrpo", "rloo", "reinforce_pp"},
         .aliases = {{"reinforce_plus_plus", "reinforce_pp"}, {"dr_grpo", "drgrpo"}}});
  t.add("trainer_common.algorithm.norm_adv_by_std_in_grpo", tc.algorithm.norm_adv_by_std_in_grpo,
        "grpo divides by the group's std; false: Dr.GRPO (verl's switch)");
  t.add("trainer_common.algorithm.drop_zero_variance_groups",
        tc.algorithm.drop_zero_variance_groups,
        "leave out groups whose rewards are all equal (no signal for group estimators; with "
        "reinforce_pp the batch "
        "statistics are then those of the episodes kept)");
  t.add("trainer_common.algorithm.max_num_gen_batches", tc.algorithm.max_num_gen_batches,
        "classic mode with rollout_until_finish_enough_non_dummy_tasks: task batches sampled per "
        "step at most "
        "(dynamic sampling)",
        {.min = 1});
  t.add("trainer_common.algorithm.per_role_advantages", tc.algorithm.per_role_advantages,
        "multi-agent episodes: each role's advantages against the same role's group (and its "
        "reward from metadata.role_rewards when reported)");
  t.add("trainer_common.mini_batch_num", tc.mini_batch_num, "optimizer steps per batch",
        {.min = 1});
  t.add("trainer_common.ppo_epochs", tc.ppo_epochs, "passes over each batch", {.min = 1});
  t.add("trainer_common.use_kl_loss", tc.use_kl_loss, "KL penalty to the frozen reference model");
  t.add("trainer_common.kl_loss_coef", tc.kl_loss_coef, "KL coefficient", {.min = 0});
  t.add("trainer_common.kl_loss_type", tc.kl_loss_type,
        "KL estimator (checked only with use_kl_loss)",
        {.choices = kKlLossTypes, .choice_checked_when_used = true});
  t.add("trainer_common.clip_ratio_low", tc.clip_ratio_low, "PPO clip below 1",
        {.min = 0, .max = 1});
  t.add("trainer_common.clip_ratio_high", tc.clip_ratio_high, "PPO clip above 1", {.min = 0});
  t.add("trainer_common.clip_ratio_c", tc.clip_ratio_c,
        "dual-clip constant for negative advantages", {.min = 1});
  t.add("trainer_common.loss_agg_mode", tc.loss_agg_mode, "how token losses are averaged",
        {.choices = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                     "seq-mean-token-sum-norm"}});
  t.add("trainer_common.entropy_coeff", tc.entropy_coeff, "entropy bonus coefficient", {.min = 0});
  t.add("trainer_common.loss_extra_scale_ratio", tc.loss_extra_scale_ratio, "loss multiplier",
        {.min = 0});
  t.add("trainer_common.ppo_max_token_len_per_gpu", tc.ppo_max_token_len_per_gpu,
        "micro-batch token budget per rank (gradient accumulation beyond it)", {.min = 1});
  t.add("trainer_common.old_logprob_source", tc.old_logprob_source,
        "old-policy logprobs: recomputed before the update, or the rollout's own",
        {.choices = {"recompute", "rollout"}});
  t.add("trainer_common.checkpoint_base_dir", tc.checkpoint_base_dir,
        "where checkpoints are written");
  t.add("trainer_common.max_checkpoints_to_keep", tc.max_checkpoints_to_keep,
        "newest checkpoints kept; -1: all", {.min = -1});
  t.add("trainer_common.record_rollouts", tc.record_rollouts,
        "record what the trainer consumes each step under {experiment dir}/rollouts, for "
        "`ajet replay`");
  t.add("trainer_common.episode_loss_weighting", tc.episode_loss_weighting,
        "weight each sample's loss terms by 1 / (samples of its episode)");
  t.add("trainer_common.sequence_packing", tc.sequence_packing,
        "micro-batch layout: tree (shared prefixes computed once) or plain",
        {.choices = {"tree", "plain"}});
  t.add("trainer_common.activation_checkpointing", tc.activation_checkpointing,
        "keep only each decoder layer's input for the backward pass and recompute the layer there");
  t.add("trainer_common.optim.optimizer", tc.optim.optimizer, "optimizer", {.choices = {"AdamW"}});
  t.add("trainer_common.optim.lr", tc.optim.lr, "peak learning rate", {.min = 0});
  t.add("trainer_common.optim.betas", tc.optim.betas, "AdamW betas [b1, b2]");
  t.add("trainer_common.optim.weight_decay", tc.optim.weight_decay, "AdamW weight decay",
        {.min = 0});
  t.add("trainer_common.optim.lr_warmup_steps", tc.optim.lr_warmup_steps,
        "linear warmup steps; -1: use lr_warmup_steps_ratio", {.min = -1});
  t.add("trainer_common.optim.lr_warmup_steps_ratio", tc.optim.lr_warmup_steps_ratio,
        "warmup as a fraction of total steps", {.min = 0, .max = 1});
  t.add("trainer_common.optim.lr_scheduler_type", tc.optim.lr_scheduler_type,
        "schedule after warmup", {.choices = {"constant", "cosine"}});
  t.add("trainer_common.optim.min_lr_ratio", tc.optim.min_lr_ratio,
        "cosine floor as a fraction of lr", {.min = 0, .max = 1});
  t.add("trainer_common.optim.num_cycles", tc.optim.num_cycles, "cosine cycles", {.min = 0});
  t.add("trainer_common.optim.grad_clip", tc.optim.grad_clip,
        "clip the global gradient norm; 0: off", {.min = 0});
  // LoRA, async.
  t.add("lora.lora_rank", c.lora.lora_rank, "LoRA rank; 0 trains all weights", {.min = 0});
  t.add("lora.lora_alpha", c.lora.lora_alpha, "LoRA alpha (scale = alpha / rank)", {.min = 0});
  t.add("lora.lora_dropout", c.lora.lora_dropout, "dropout on the LoRA input",
        {.min = 0, .max = 1});
  t.add("lora.target_modules", c.lora.target_modules,
        "linear layers with adapters (PEFT names or all-linear)");
  t.add("async.max_staleness", c.async.max_staleness, "async: max policy versions a sample may lag",
        {.min = 0});
  t.add("async.off_policy_correction", c.async.off_policy_correction,
        "async: correction for stale samples", {.choices = {"decoupled_ppo", "tis", "none"}});
  t.add("async.importance_weight_cap", c.async.importance_weight_cap,
        "async: cap of the behaviour-to-proximal importance weight: tis truncates a weight above "
        "it, decoupled_ppo "
        "drops the token; 0: none",
        {.min = 0});
  t.add("async.trainer_threads", c.async.trainer_threads,
        "async: intra-op threads of the trainer while it trains beside the rollouts; 0: half of "
        "engine.threads "
        "(at least 1)",
        {.min = 0});
  t.add("async.decode_threads_while_training", c.async.decode_threads_while_training,
        "async: intra-op threads of the decoder while a step trains; 0: all of engine.threads",
        {.min = 0});
  t.add("async.trainer_nice", c.async.trainer_nice,
        "async: nice value of the trainer's threads (0-19); higher: training takes only what the "
        "rollouts leave idle",
        {.min = 0, .max = 19});
  t.add(
      "store_retention.full_steps", c.store_retention.full_steps,
      "trained steps, the newest, whose episodes keep every LLM call in the store; -1: every step",
      {.min = -1});
  t.add("store_retention.sample_episodes", c.store_retention.sample_episodes,
        "of each older trained step, episodes (the first to end) that keep their calls",
        {.min = 0});
  // Swarm server.
  t.add("interchange_server.interchange_server_port", c.interchange_server.interchange_server_port,
        "swarm server port; `auto` (0): any free port", {.min = 0, .max = 65535, .auto_value = 0});
  t.add("swarm_mode_sample_collection_method", c.swarm_mode_sample_collection_method,
        "batch trigger",
        {.choices = {"rollout_until_finish_enough_tasks", "rollout_until_finish_enough_episodes",
                     "rollout_until_finish_enough_non_dummy_tasks",
                     "rollout_until_any_client_agree_sync_weight",
                     "rollout_until_all_clients_agree_sync_weight"}});
  t.add("swarm_mode_sample_collection_max_cached_episodes",
        c.swarm_mode_sample_collection_max_cached_episodes,
        "warn when a batch holds this many finished episodes", {.min = 1});
  t.add("swarm_mode_drain_idle_grace", c.swarm_mode_drain_idle_grace,
        "seconds since its client's last sign of life after which ROLLING_POST stops waiting for "
        "an episode",
        {.min = 0});
  t.add("swarm_mode_drain_timeout", c.swarm_mode_drain_timeout,
        "most seconds ROLLING_POST waits for live train episodes", {.min = 0});
  t.add("swarm_mode_agree_boundary_dwell", c.swarm_mode_agree_boundary_dwell,
        "agree-based triggers: seconds ROLLING_POST stays visible to the clients that agreed",
        {.min = 0, .max = 60});
  // Engine.
  t.add("engine.threads", c.engine.threads, "compute threads; 0: one per core", {.min = 0});
  t.add("engine.kv_cache_memory_mb", c.engine.kv_cache_memory_mb, "KV cache budget", {.min = 1});
  t.add("engine.adapter_memory_mb", c.engine.adapter_memory_mb,
        "memory for named LoRA adapters in their slots; beyond it the least recently used move "
        "out to disk and come back on demand (0: no limit)",
        {.min = 0});
  // cuda:N places one server's engine on one GPU (multi-model training); checked in validate().
  t.add("engine.device", c.engine.device, "compute device: cpu, cuda, cuda:N (GPU N) or auto");
  t.add("engine.dtype", c.engine.dtype, "weight and activation dtype",
        {.choices = {"float32", "bfloat16", "float16"}});
  t.add("engine.kv_cache_dtype", c.engine.kv_cache_dtype,
        "KV cache element type; auto: the model's. bfloat16 under float32 weights halves what "
        "decode reads",
        {.choices = kKvCacheDtypes});
  t.add("engine.prefill_chunk_tokens", c.engine.prefill_chunk_tokens,
        "prompt tokens prefilled per step", {.min = 1});
  t.add("engine.enable_prefix_caching", c.engine.enable_prefix_caching,
        "reuse the keys/values of prompt prefixes already computed (system prompt, earlier turns)");
  t.add("engine.seed", c.engine.seed, "engine RNG seed");
  auto& d = c.distillation;
  t.add("distillation.base_url", d.base_url,
        "on-policy distillation: the teacher's OpenAI API root (http://host:port/v1) serving "
        "/completions with prompt_logprobs; empty: off");
  t.add("distillation.api_key", d.api_key, "the teacher's key (Authorization: Bearer)");
  t.add("distillation.model", d.model, "the teacher's model name (empty: its default)");
  t.add("distillation.timeout", d.timeout, "seconds one teacher request may take", {.min = 0});
  t.add("distillation.concurrency", d.concurrency, "teacher requests in flight at once",
        {.min = 1, .max = 64});
  t.add("distillation.estimator", d.estimator, "per-token distance to the teacher",
        {.choices = {"k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs", "topk_forward_kl"}});
  t.add("distillation.mode", d.mode,
        "advantage: -coef x estimate joins each token's advantage; loss: coef x estimate is a "
        "loss term",
        {.choices = {"advantage", "loss"}});
  t.add("distillation.coef", d.coef, "weight of the distillation term", {.min = 0});
  t.add("distillation.reward_weight", d.reward_weight,
        "weight of the task reward's advantage next to it (0: distillation alone)", {.min = 0});
  t.add("distillation.top_k", d.top_k,
        "teacher alternatives per position (the top-k overlap metric; topk_forward_kl needs them)",
        {.min = 0, .max = 20});
  return std::move(t.fields);
}

const std::vector<std::pair<std::string, std::string>>& ignored_upstream_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"ajet.enable_swarm_mode", "the swarm server is always available"},
      {"ajet.enable_interchange_server", "the swarm server is always available"},
      {"ajet.enable_experimental_interchange_server", "the swarm server is always available"},
      {"ajet.interchange_server.interchange_method", "no ZeroMQ here"},
      {"ajet.interchange_server.num_fastapi_process", "one process with a few I/O threads"},
      {"ajet.interchange_server.max_fastapi_threads", "one process with a few I/O threads"},
      {"ajet.interchange_server.max_inference_tracker_threads", "tracking runs in the front"},
      {"ajet.interchange_server.already_started", "internal to upstream's launcher"},
      {"ajet.task_runner", "workflows are external commands or built-in agents"},
      {"ajet.execute_test", "upstream robot testing"},
      {"ajet.execute_testing_lambda", "upstream robot testing"},
      {"ajet.debug", "use ajet.backbone: debug"},
      {"ajet.rollout.gamma", "step rewards are not supported (gamma is 1)"},
      {"ajet.rollout.compute_madness_checklist", "the detectors are ajet.rollout.madness.*"},
      {"ajet.rollout.agent_madness_termination",
       "a detector always stops the generation; ajet.rollout.madness.action decides the rest"},
      {"ajet.rollout.multi_turn.expected_steps", "Trinity batch planning"},
      {"ajet.rollout.tensor_model_parallel_size", "no tensor parallelism"},
      {"ajet.rollout.n_vllm_engine", "no vLLM"},
      {"ajet.rollout.name", "the built-in engine serves the model"},
      {"ajet.rollout.gpu_memory_utilization", "use ajet.engine.kv_cache_memory_mb"},
      {"ajet.task_reader.env_service", "task reader type not supported"},
      {"ajet.task_reader.huggingface_dat_repo", "task reader type not supported"},
      {"ajet.task_reader.data_generation", "task reader type not supported"},
      {"ajet.task_judge.alien_llm_model", "no LLM-as-judge"},
      {"ajet.task_judge.alien_llm_response_length", "no LLM-as-judge"},
      {"ajet.task_judge.rubrics_auto_grader", "no LLM-as-judge"},
      {"ajet.context_tracker.log_tool_format_check", "not implemented"},
      {"ajet.context_tracker.log_tool_format_error_detail", "not implemented"},
      {"ajet.context_tracker.detect_timeline_snap", "not implemented"},
      {"ajet.context_tracker.alien_llm_model", "deprecated upstream"},
      {"ajet.context_tracker.alien_llm_response_length", "deprecated upstream"},
      {"ajet.trainer_common.val_max_num_task_clip_method", "validation takes the first tasks"},
      {"ajet.trainer_common.fsdp_config", "no FSDP"},
      {"ajet.trainer_common.ulysses_sequence_parallel_size", "no sequence parallelism"},
      {"ajet.trainer_common.save_trajectory_as_json_file", "episodes and calls are in the store"},
      {"ajet.trainer_common.algorithm.use_kl_in_reward", "KL is a loss term only"},
      {"ajet.trainer_common.optim.optimizer_impl", "AdamW is built in"},
      {"ajet.trainer_common.optim.total_training_steps",
       "use ajet.trainer_common.total_training_steps"},
      {"ajet.trainer_common.optim.zero_indexed_step", "steps are zero-indexed"},
      {"ajet.lora.load_format", "adapters load from safetensors"},
      {"ajet.lora.layered_summon", "no FSDP"},
  };
  return keys;
}

std::string_view field_type_name(const FieldTarget& target) {
  struct Name {
    std::string_view operator()(bool*) const { return "a boolean"; }
    std::string_view operator()(int64_t*) const { return "an integer"; }
    std::string_view operator()(double*) const { return "a number"; }
    std::string_view operator()(std::string*) const { return "a string"; }
    std::string_view operator()(std::vector<std::string>*) const { return "a list of strings"; }
    std::string_view operator()(std::vector<double>*) const { return "a list of numbers"; }
    std::string_view operator()(std::optional<int64_t>*) const { return "an integer or null"; }
    std::string_view operator()(std::optional<double>*) const { return "a number or null"; }
    std::string_view operator()(std::optional<std::string>*) const { return "a string or null"; }
    std::string_view operator()(Json*) const { return "a mapping"; }
    std::string_view operator()(std::vector<CocktailTaskConfig>*) const {
      return "a list of task sources";
    }
  };
  return std::visit(Name{}, target);
}

}  // namespace ajet::config
