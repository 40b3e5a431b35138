// `ajet-engine replay RECORD` (what `ajet replay` runs): trains again from a rollout record
// (ajet.trainer_common.record_rollouts, docs/determinism.md "Rollout record and replay") without an
// engine, a front or clients. The trainer is built as the engine built it (the record's config, the
// same start weights, threads and kernels), each recorded train_step batch goes through it in
// order, and each step's loss, gradient norm and weights checksum are compared with what the run's
// trainer answered. With a deterministic run on the same machine they agree bit for bit; after a
// change to the trainer the table shows where it starts to differ.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "command.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "config/load.h"
#include "engine/runtime.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/model_source.h"
#include "rpc/frame.h"
#include "rpc/messages.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_data/batch.h"
#include "train_data/options.h"

namespace ajet::engine_cli {
namespace {

namespace fs = std::filesystem;

struct ReplayArgs {
  std::string record;
  std::string from;
  std::string out;
  int64_t steps = 0;
  bool expect_identical = false;
};

struct RecordedStep {
  int64_t step = 0;
  fs::path batch;
  Json reply;
};

// The record's steps in order: every step_N.json with its step_N.batch.
std::vector<RecordedStep> read_steps(const fs::path& dir) {
  std::map<int64_t, RecordedStep> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || e.path().extension() != ".json") continue;
    const Json j = parse_json(read_file(e.path()), e.path().string());
    RecordedStep s;
    s.step = get_int(j, "step", e.path().string());
    if (!j.contains("reply") || !j["reply"].is_object())
      invalid_argument(e.path().string() + ": 'reply' must be an object");
    s.reply = j["reply"];
    s.batch = e.path();
    s.batch.replace_extension(".batch");
    if (!fs::exists(s.batch))
      fail(ErrorCode::kNotFound, s.batch.string() + ": missing (the step's batch)");
    steps[s.step] = std::move(s);
  }
  std::vector<RecordedStep> out;
  for (auto& [step, s] : steps) out.push_back(std::move(s));
  return out;
}

std::string number(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? fmt::format("{:.9g}", j[key].get<double>()) : "-";
}

void run_replay(const ReplayArgs& args) {
  fs::path dir = args.record;
  if (!fs::exists(dir / "record.json") && fs::exists(dir / "rollouts" / "record.json"))
    dir = dir / "rollouts";
  if (!fs::exists(dir / "record.json")) {
    fail(ErrorCode::kNotFound,
         args.record +
             ": no record.json here or in rollouts/ (a run records its rollouts with "
             "ajet.trainer_common.record_rollouts: true)");
  }
  const Json header = parse_json(read_file(dir / "record.json"), (dir / "record.json").string());
  if (header.value("format", "") != "ajet rollout record 1") {
    invalid_argument((dir / "record.json").string() +
                     ": not an ajet rollout record (format 'ajet rollout record 1')");
  }
  const config::Config c =
      config::parse_config(get_string(header, "config_yaml", "record.json"), "record.json config")
          .config;
  std::vector<RecordedStep> steps = read_steps(dir);
  if (steps.empty()) fail(ErrorCode::kNotFound, dir.string() + ": the record holds no step");
  if (args.steps > 0 && int64_t(steps.size()) > args.steps) steps.resize(size_t(args.steps));
  for (size_t i = 1; i < steps.size(); ++i) {
    if (steps[i].step != steps[i - 1].step + 1) {
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("{}: step {} follows step {}: the record has a gap (a step the run did "
                       "not record); replay the steps before it with --steps {}",
                       dir.string(), steps[i].step, steps[i - 1].step, i));
    }
  }
  const int64_t first_version = steps.front().reply.value("trainer_policy_version", int64_t(1)) - 1;
  if (first_version != 0 && args.from.empty()) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("{}: the record starts at policy version {} (a resumed run): give --from the "
                     "checkpoint it resumed from (global_step_{})",
                     dir.string(), first_version, first_version));
  }

  // The engine's setup: its threads (the trainer's share under async), dtype, kernels and seed.
  const int threads = int(steps.front().reply.value(
      "trainer_threads", c.engine.threads > 0 ? c.engine.threads : int64_t(0)));
  model::configure_threads(threads > 0 ? threads : int(std::thread::hardware_concurrency()));
  const torch::ScalarType dtype = model::parse_dtype(c.engine.dtype);
  const torch::Device device(torch::kCPU);
  const fs::path start = args.from.empty() ? fs::path(get_string(header, "model_path", "record"))
                                           : fs::path(args.from) / "model";
  model::Qwen2Model m = model::load_model_dir(start, model::LoadOptions{dtype, device});
  const bool invariant =
      engine::apply_determinism(c.deterministic, m, device, dtype, c.engine.seed);
  train::Trainer trainer(m, train_data::TrainerOptions::from_config(c));
  if (!args.from.empty()) {
    train::load_checkpoint(trainer, args.from);
  } else {
    train::Trainer::State state = trainer.state();
    state.policy_version = 0;
    trainer.load_state(state);
  }
  std::cout << fmt::format(
                   "replay: {} steps ({} to {}) of {}, from {}; {} threads, deterministic {}",
                   steps.size(), steps.front().step, steps.back().step, dir.string(),
                   args.from.empty() ? start.string() : args.from, threads,
                   invariant ? "on" : "off")
            << std::endl;
  std::cout << "step | loss recorded | loss replayed | grad norm recorded | grad norm replayed | "
               "weights"
            << std::endl;
  int64_t identical = 0;
  Json replayed = Json::array();
  for (const RecordedStep& s : steps) {
    const std::string bytes = read_file(s.batch);
    const rpc::Frame frame = rpc::decode_frame_bytes(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
        rpc::FrameLimits{});
    const train_data::Batch batch = train_data::batch_from_rpc(rpc::decode_train_batch(frame));
    train_data::validate_batch(batch, m->config().vocab_size);
    const train_data::TrainMetrics metrics = trainer.train_step(batch);
    Json mine = metrics.to_json();
    mine["weights_checksum"] = fmt::format("{:016x}", train::parameter_checksum(trainer.model()));
    const bool same = mine["weights_checksum"] == s.reply.value("weights_checksum", Json()) &&
                      mine.value("loss", Json()) == s.reply.value("loss", Json()) &&
                      mine.value("grad_norm", Json()) == s.reply.value("grad_norm", Json());
    identical += same;
    std::cout << fmt::format("{} | {} | {} | {} | {} | {}", s.step, number(s.reply, "loss"),
                             number(mine, "loss"), number(s.reply, "grad_norm"),
                             number(mine, "grad_norm"), same ? "same bits" : "DIFFERENT")
              << std::endl;
    mine["step"] = s.step;
    mine["identical"] = same;
    replayed.push_back(std::move(mine));
  }
  if (!args.out.empty()) {
    train::CheckpointOptions o;
    o.base_dir = args.out;
    o.keep_last = 0;
    o.tokenizer_dir = model::resolve_model_source(start).tokenizer_dir;
    o.base_model_name_or_path = start.string();
    const fs::path saved = train::save_checkpoint(trainer, o, Json{{"replay_of", dir.string()}});
    std::string lines;
    for (const Json& r : replayed) lines += r.dump() + "\n";
    write_file_atomic(fs::path(args.out) / "replay.jsonl", lines);
    std::cout << "replay: weights and optimizer state in " << saved.string()
              << ", per-step metrics in " << (fs::path(args.out) / "replay.jsonl").string()
              << std::endl;
  }
  std::cout << fmt::format("replay: {} of {} steps the same bits as the run", identical,
                           steps.size())
            << std::endl;
  if (args.expect_identical && identical != int64_t(steps.size())) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("--expect-identical: {} of {} steps differ from the run",
                     int64_t(steps.size()) - identical, steps.size()));
  }
}

const CommandRegistration kReplay("replay", [](CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Train again from a run's rollout record (ajet.trainer_common.record_rollouts), without an "
      "engine or clients, and compare each step with the run");
  cmd->add_option("record", args->record,
                  "The record: an experiment directory or its rollouts/ directory")
      ->required();
  cmd->add_option("--from", args->from,
                  "The checkpoint the recorded run resumed from (global_step_N), when it did");
  cmd->add_option("--steps", args->steps, "Replay only the first N recorded steps (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", args->out,
                  "Write the replayed weights and optimizer state (a checkpoint) and replay.jsonl "
                  "here");
  cmd->add_flag("--expect-identical", args->expect_identical,
                "Exit 1 unless every step gives the run's loss, gradient norm and weights bit for "
                "bit");
  cmd->callback([args] { run_replay(*args); });
});

}  // namespace
}  // namespace ajet::engine_cli
