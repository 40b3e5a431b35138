#include "engine/train_methods.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "engine/adapters.h"
#include "engine/service.h"
#include "infer/engine.h"
#include "model/compute.h"
#include "model/model_source.h"
#include "model/qwen2.h"
#include "rpc/messages.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/lora.h"
#include "train/trainer.h"
#include "train_data/batch.h"

namespace ajet::engine {
namespace fs = std::filesystem;

namespace {

// A checkpoint directory as given, or the latest one under a base directory.
fs::path resolve_checkpoint(const fs::path& dir) {
  if (fs::is_regular_file(dir / "trainer_state.json")) return dir;
  if (!fs::is_directory(dir))
    fail(ErrorCode::kNotFound, "load_checkpoint: " + dir.string() + ": no such directory");
  std::optional<fs::path> latest = train::latest_checkpoint(dir);
  if (!latest) {
    fail(ErrorCode::kNotFound,
         "load_checkpoint: " + dir.string() +
             " holds no checkpoint (neither trainer_state.json nor a global_step_* directory)");
  }
  return *latest;
}

// A rendezvous store on a port the OS picks, waiting `timeout_s` (default 300) of the body for the
// group's members (open_group, open_push).
std::shared_ptr<train::RendezvousStore> serve_store(const Json& body) {
  const double timeout_s = body.value("timeout_s", 300.0);
  return train::RendezvousStore::serve(
      std::chrono::milliseconds(int64_t(std::max(1.0, timeout_s) * 1000)));
}

// Where this engine sits in a group the front forms (join_group, push_weights): rank, world_size
// (at least `min_world`; `why_min` says why in the error), master_addr, master_port (at least
// `min_port`), timeout_s; and bind_addr.
std::pair<train_data::DistPlacement, std::string> group_placement(const Json& body,
                                                                  std::string_view where,
                                                                  int min_world,
                                                                  std::string_view why_min,
                                                                  int64_t min_port) {
  train_data::DistPlacement p;
  p.rank = int(get_int(body, "rank", where));
  p.world_size = int(get_int(body, "world_size", where));
  if (p.world_size < min_world || p.rank < 0 || p.rank >= p.world_size) {
    invalid_argument(
        fmt::format("{}: rank {} of world_size {}{}", where, p.rank, p.world_size, why_min));
  }
  p.master_addr = get_string(body, "master_addr", where);
  const int64_t port = get_int(body, "master_port", where);
  if (port < min_port || port > 65535)
    invalid_argument(fmt::format("{}: master_port out of range", where));
  p.master_port = uint16_t(port);
  p.timeout =
      std::chrono::milliseconds(int64_t(std::max(1.0, body.value("timeout_s", 300.0)) * 1000));
  return {p, body.value("bind_addr", std::string())};
}

}  // namespace

TrainingOptions training_options(const EngineOptions& options) {
  TrainingOptions t;
  t.threads = options.threads;
  if (!options.config) return t;
  const config::Config& c = *options.config;
  t.backbone = config::backbone_of(c);
  t.async_trainer_threads = int(c.async.trainer_threads);
  t.async_decode_threads = int(c.async.decode_threads_while_training);
  t.async_trainer_nice = int(c.async.trainer_nice);
  t.trainer = train_data::TrainerOptions::from_config(c);
  t.checkpoint_base_dir = c.trainer_common.checkpoint_base_dir;
  t.keep_last = c.trainer_common.max_checkpoints_to_keep;
  t.adapter_memory_bytes = int64_t(c.engine.adapter_memory_mb * 1024.0 * 1024.0);
  return t;
}

struct TrainMethods::Impl {
  infer::InferenceEngine& engine;
  ModelInfo model_info;
  TrainingOptions options;
  bool async = false;
  std::unique_ptr<train::Trainer> trainer;  // built on first use, then only on the caller's thread
  // Elastic groups: the store this engine serves as the next generation's rank 0.
  std::shared_ptr<train::RendezvousStore> store;
  int64_t store_generation = -1;
  // Weight pushes: the store this engine serves as the next push's sender.
  std::shared_ptr<train::RendezvousStore> push_store;
  int64_t push_store_id = -1;
  // Receive buffers and the sets' checksums, kept from one push to the next.
  train::PushState push_state;
  // Named LoRA adapters on the served base (engine/adapters.h).
  AdapterSet adapters;

  Impl(infer::InferenceEngine& e, ModelInfo info, TrainingOptions o)
      : engine(e),
        model_info(std::move(info)),
        options(std::move(o)),
        async(options.backbone == config::Backbone::kAsync),
        adapters(e, model_info, options) {}

  int all_threads() const {
    return options.threads > 0 ? options.threads
                               : int(std::max(1u, std::thread::hardware_concurrency()));
  }
  // async: {trainer, decoder} intra-op threads while a step trains beside the rollouts.
  std::pair<int, int> thread_split() const {
    const int all = all_threads();
    const int trainer =
        options.async_trainer_threads > 0 ? options.async_trainer_threads : std::max(1, all / 2);
    const int decode = options.async_decode_threads > 0 ? options.async_decode_threads : all;
    return {trainer, decode};
  }

  // async: the calling (control) thread, which trains, and the OpenMP threads it starts later get
  // the trainer's nice value once. Linux nice is per thread; a failure only costs speed.
  bool niced = false;
  void lower_trainer_priority() {
    if (niced || options.async_trainer_nice <= 0) return;
    niced = true;
    const pid_t tid = pid_t(::syscall(SYS_gettid));
    if (::setpriority(PRIO_PROCESS, id_t(tid), options.async_trainer_nice) != 0) {
      log().warn("async trainer: setpriority({}) failed: {}", options.async_trainer_nice,
                 std::strerror(errno));
    }
  }

  void require_training(std::string_view method) const {
    if (!config::trains(options.backbone)) {
      fail(ErrorCode::kFailedPrecondition,
           std::string(method) +
               ": the engine runs backbone 'debug' (inference only, never trains)");
    }
  }

  // Builds the trainer. torch: on the served model itself, on the engine thread (attaching LoRA or
  // setting requires_grad must not race a forward). async: on a copy taken between two steps. The
  // trainer's policy version starts at the served one, so checkpoints are named after served
  // versions.
  train::Trainer& ensure_trainer() {
    if (trainer) return *trainer;
    if (!adapters.empty()) {
      fail(ErrorCode::kFailedPrecondition,
           "this engine serves named adapters: every train_step sample names its adapter "
           "(meta.adapters), and the base model is not trained");
    }
    const int64_t served_version = engine.policy_version();
    if (!async) {
      engine
          .run_exclusive(
              [&](model::Qwen2Model& served) {
                trainer = std::make_unique<train::Trainer>(served, options.trainer);
              },
              false)
          .get();
      trainer->set_collective(options.collective);
    } else {
      model::configure_threads(options.threads);
      engine
          .run_exclusive(
              [&](model::Qwen2Model& served) {
                model::Qwen2Model copy(served->config());
                copy->to(served->options().device(), served->options().dtype().toScalarType());
                train::copy_parameters(served, copy);
                trainer = std::make_unique<train::Trainer>(copy, options.trainer);
                // The served model gets the same (zero-delta) adapters, so every later copy is name
                // for name.
                if (options.trainer.lora.enabled() && !train::has_lora(served)) {
                  train::attach_lora(served, options.trainer.lora, options.trainer.seed);
                  train::copy_parameters(trainer->model(), served);
                }
              },
              false)
          .get();
      trainer->set_collective(options.collective);
    }
    // Elastic: a member that dies mid-step fails the others' all-reduce, possibly after some of the
    // step's optimizer updates; they go back to the state before the step, so the front can train
    // the batch again on the group it re-forms.
    trainer->set_rollback_on_failure(options.elastic);
    train::Trainer::State state = trainer->state();
    state.policy_version = served_version;
    trainer->load_state(state);
    log().info("trainer ready (backbone {}, {}, policy version {})",
               config::backbone_name(options.backbone),
               options.trainer.lora.enabled()
                   ? "LoRA rank " + std::to_string(options.trainer.lora.rank)
                   : std::string("full fine-tuning"),
               served_version);
    return *trainer;
  }
};

TrainMethods::TrainMethods(EngineService& service, ModelInfo model, TrainingOptions options)
    : impl_(std::make_unique<Impl>(service.engine(), std::move(model), std::move(options))) {
  service.add_control_method(std::string(rpc::kMethodTrainStep), [this](const rpc::Frame& request) {
    rpc::Frame reply;
    reply.body = train_step(rpc::decode_train_batch(request));
    return reply;
  });
  service.add_control_method(
      std::string(rpc::kMethodSaveCheckpoint), [this](const rpc::Frame& request) {
        constexpr std::string_view where = "save_checkpoint";
        if (!request.body.is_object())
          invalid_argument("save_checkpoint: the body must be a JSON object");
        std::optional<fs::path> dir;
        if (auto d = get_optional_string(request.body, "dir", where)) dir = *d;
        const auto cursor = request.body.find("front_cursor");
        rpc::Frame reply;
        reply.body = save_checkpoint(dir, cursor == request.body.end() ? Json(nullptr) : *cursor);
        return reply;
      });
  service.add_control_method(
      std::string(rpc::kMethodLoadCheckpoint), [this](const rpc::Frame& request) {
        if (!request.body.is_object())
          invalid_argument("load_checkpoint: the body must be a JSON object");
        rpc::Frame reply;
        reply.body = load_checkpoint(get_string(request.body, "dir", "load_checkpoint"));
        return reply;
      });
  AdapterSet& adapters = impl_->adapters;
  service.set_adapter_resolver([&adapters](const std::string& name,
                                           std::function<void(AdapterLease)> ready,
                                           std::function<void(const Error&)> failed) {
    adapters.acquire(name, std::move(ready), std::move(failed));
  });
  service.set_status_extra([&adapters] { return adapters.list(); });
  service.router().add_call(std::string(rpc::kMethodAdapters), [&adapters](const rpc::Frame&) {
    rpc::Frame reply;
    reply.body = adapters.list();
    return reply;
  });
  service.add_control_method(std::string(rpc::kMethodAdapterCreate), [this](const rpc::Frame& req) {
    if (impl_->trainer) {
      fail(ErrorCode::kFailedPrecondition,
           "adapter_create: this engine already trains its whole model (or its one ajet.lora "
           "adapter); named adapters need an engine whose base stays frozen");
    }
    rpc::Frame reply;
    reply.body = impl_->adapters.create(req.body);
    return reply;
  });
  service.add_control_method(std::string(rpc::kMethodAdapterSave), [this](const rpc::Frame& req) {
    rpc::Frame reply;
    reply.body = impl_->adapters.save(req.body);
    return reply;
  });
  service.add_control_method(std::string(rpc::kMethodAdapterRemove), [this](const rpc::Frame& req) {
    rpc::Frame reply;
    reply.body = impl_->adapters.remove(req.body);
    return reply;
  });
  service.add_control_method(std::string(rpc::kMethodAdapterEvict), [this](const rpc::Frame& req) {
    rpc::Frame reply;
    reply.body = impl_->adapters.evict(req.body);
    return reply;
  });
  if (impl_->options.elastic) {
    service.add_control_method(std::string(rpc::kMethodOpenGroup), [this](const rpc::Frame& req) {
      rpc::Frame reply;
      reply.body = open_group(req.body);
      return reply;
    });
    service.add_control_method(std::string(rpc::kMethodJoinGroup), [this](const rpc::Frame& req) {
      rpc::Frame reply;
      reply.body = join_group(req.body);
      return reply;
    });
    service.add_control_method(std::string(rpc::kMethodOpenPush), [this](const rpc::Frame& req) {
      rpc::Frame reply;
      reply.body = open_push(req.body);
      return reply;
    });
    service.add_control_method(std::string(rpc::kMethodPushWeights), [this](const rpc::Frame& req) {
      rpc::Frame reply;
      reply.body = push_weights(req.body);
      return reply;
    });
  }
}

TrainMethods::~TrainMethods() = default;

Json TrainMethods::train_step(const rpc::TrainBatch& rpc_batch) {
  Impl& s = *impl_;
  s.require_training("train_step");
  // Every check happens before the engine pauses or any weight changes.
  const train_data::Batch batch = train_data::batch_from_rpc(rpc_batch);
  if (const auto names = rpc_batch.meta.find("adapters"); names != rpc_batch.meta.end()) {
    std::vector<std::string> adapter_of_sample;
    if (!names->is_array()) invalid_argument("train_step batch: meta.adapters must be an array");
    for (const Json& n : *names) {
      if (!n.is_string())
        invalid_argument("train_step batch: meta.adapters must hold one adapter name per sample");
      adapter_of_sample.push_back(n.get<std::string>());
    }
    train_data::validate_batch(batch, s.model_info.config.vocab_size);
    return s.adapters.train_step(batch, adapter_of_sample);
  }
  // One of several ranks may get no samples (fewer groups than ranks); it still takes part in the
  // step's all-reduces, so the group stays in step.
  const bool data_parallel = s.options.collective && s.options.collective->world_size() > 1;
  if (batch.samples.empty() && !data_parallel) invalid_argument("train_step batch: no samples");
  train_data::validate_batch(batch, s.model_info.config.vocab_size);
  train::Trainer& trainer = s.ensure_trainer();

  const auto start = std::chrono::steady_clock::now();
  train_data::TrainMetrics metrics;
  double paused = 0;
  Json reply_extra = Json::object();
  if (!s.async) {
    // Inference waits while the served weights themselves are trained.
    s.engine
        .run_exclusive(
            [&](model::Qwen2Model&) {
              const auto pause = std::chrono::steady_clock::now();
              metrics = trainer.train_step(batch);
              paused = seconds_since(pause);
            },
            true)
        .get();
  } else {
    // Inference continues on the current weights; only the copy into the served model pauses it.
    // Trainer and decoder share the cores meanwhile. Two OpenMP teams as wide as the machine wait
    // at every barrier for a thread that is not running: on 2 cores the rollout beside a step took
    // 2-3x as long as alone. The trainer takes half the threads; the decoder keeps all of them
    // (measured on the main command's config, 10 steps each: trainer 1 + decoder 2 23.4 s, 2 +
    // 2 25.7 s, 1 + 1 36.8 s, torch 28.7-33.5 s). A smaller decoder share is set on the engine
    // thread (OpenMP thread counts belong to the calling thread) in a task that changes no weights
    // but still forgets the prefix cache, so only when asked for; the decoder gets every thread
    // back in the task that swaps the weights in.
    const auto [trainer_threads, decode_threads] = s.thread_split();
    const bool narrow_decode = decode_threads != s.all_threads();
    auto set_decode_threads = [&](int n) {
      s.engine.run_exclusive([n](model::Qwen2Model&) { model::configure_threads(n); }, false).get();
    };
    if (narrow_decode) set_decode_threads(decode_threads);
    model::configure_threads(trainer_threads);
    s.lower_trainer_priority();
    try {
      metrics = trainer.train_step(batch);
    } catch (...) {
      if (narrow_decode) set_decode_threads(s.all_threads());
      throw;
    }
    s.engine
        .run_exclusive(
            [&](model::Qwen2Model& served) {
              const auto pause = std::chrono::steady_clock::now();
              train::copy_parameters(trainer.model(), served);
              if (narrow_decode) model::configure_threads(s.all_threads());
              paused = seconds_since(pause);
            },
            true)
        .get();
    reply_extra = Json{{"trainer_threads", trainer_threads},
                       {"decode_threads_while_training", decode_threads}};
  }
  Json reply = metrics.to_json();
  reply["trainer_policy_version"] = metrics.policy_version;
  reply["policy_version"] = s.engine.policy_version();  // the version now served
  reply["backbone"] = std::string(config::backbone_name(s.options.backbone));
  reply["step_time_s"] = seconds_since(start);
  reply["inference_paused_s"] = paused;
  // Hex: a JSON number would lose the low bits. Data-parallel ranks must agree (batch_runner.cc).
  reply["weights_checksum"] = fmt::format("{:016x}", train::parameter_checksum(trainer.model()));
  reply.update(reply_extra);
  log().info(
      "train_step: {} samples, {} tokens, loss {:.5f}, grad norm {:.4f}, {:.2f} s; serving policy "
      "version {}",
      metrics.samples, metrics.tokens, metrics.loss, metrics.grad_norm,
      reply["step_time_s"].get<double>(), reply["policy_version"].get<int64_t>());
  return reply;
}

Json TrainMethods::save_checkpoint(const std::optional<fs::path>& base_dir,
                                   const Json& front_cursor) {
  Impl& s = *impl_;
  s.require_training("save_checkpoint");
  if (!s.adapters.empty() && !s.trainer) {
    return s.adapters.save_checkpoint(base_dir ? *base_dir : s.options.checkpoint_base_dir);
  }
  train::Trainer& trainer = s.ensure_trainer();
  train::CheckpointOptions o;
  o.base_dir = base_dir ? *base_dir : s.options.checkpoint_base_dir;
  if (o.base_dir.empty()) invalid_argument("save_checkpoint: 'dir' is empty");
  o.keep_last = s.options.keep_last;
  o.tokenizer_dir =
      model::resolve_model_source(s.model_info.path).tokenizer_dir;  // --model may be a checkpoint
  o.base_model_name_or_path = s.model_info.path.string();
  // torch: the served model is the trainer's; saving only reads it, which inference may do
  // meanwhile.
  const fs::path dir = train::save_checkpoint(trainer, o, Json{{"front_cursor", front_cursor}});
  log().info("checkpoint saved: {} (policy version {}, global step {})", dir.string(),
             trainer.policy_version(), trainer.global_step());
  return Json{{"path", fs::absolute(dir).lexically_normal().string()},
              {"policy_version", trainer.policy_version()},
              {"global_step", trainer.global_step()}};
}

Json TrainMethods::load_checkpoint(const fs::path& dir) {
  Impl& s = *impl_;
  s.require_training("load_checkpoint");
  const fs::path checkpoint = resolve_checkpoint(dir);
  // The version the restored weights are served at, read first so that weights and version change
  // in the same exclusive task.
  const Json state = parse_json(read_file(checkpoint / "trainer_state.json"),
                                (checkpoint / "trainer_state.json").string());
  const int64_t version =
      get_int(state, "policy_version", (checkpoint / "trainer_state.json").string());
  train::Trainer& trainer = s.ensure_trainer();
  train::LoadedCheckpoint loaded;
  if (!s.async) {
    s.engine
        .run_exclusive_at_version(
            [&](model::Qwen2Model&) { loaded = train::load_checkpoint(trainer, checkpoint); },
            version)
        .get();
  } else {
    loaded = train::load_checkpoint(trainer, checkpoint);
    s.engine
        .run_exclusive_at_version(
            [&](model::Qwen2Model& served) { train::copy_parameters(trainer.model(), served); },
            version)
        .get();
  }
  log().info("checkpoint loaded: {} (policy version {}, global step {})", loaded.dir.string(),
             loaded.policy_version, loaded.global_step);
  const auto cursor = loaded.user.find("front_cursor");
  return Json{{"path", fs::absolute(loaded.dir).lexically_normal().string()},
              {"policy_version", s.engine.policy_version()},
              {"global_step", loaded.global_step},
              {"front_cursor", cursor == loaded.user.end() ? Json(nullptr) : *cursor}};
}

Json TrainMethods::open_group(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "open_group";
  if (!body.is_object()) invalid_argument("open_group: the body must be a JSON object");
  const int64_t generation = get_int(body, "generation", where);
  s.store.reset();
  s.store = serve_store(body);
  s.store_generation = generation;
  log().info("elastic group: generation {} meets at port {} of this host", generation,
             s.store->port());
  return Json{{"port", s.store->port()}, {"generation", generation}};
}

Json TrainMethods::join_group(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "join_group";
  if (!body.is_object()) invalid_argument("join_group: the body must be a JSON object");
  const int64_t generation = get_int(body, "generation", where);
  const auto [p, bind_addr] = group_placement(body, where, 1, "", 0);
  const int64_t version = get_int(body, "policy_version", where);
  std::shared_ptr<train::RendezvousStore> served;
  if (p.rank == 0 && p.world_size > 1) {
    if (!s.store || s.store_generation != generation) {
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("join_group: rank 0 of generation {} needs open_group first", generation));
    }
    served = s.store;
  }
  train::Trainer* trainer = config::trains(s.options.backbone) ? &s.ensure_trainer() : nullptr;
  // The previous group goes first: its peers may be gone.
  if (trainer) trainer->set_collective(nullptr);
  s.options.collective.reset();
  const auto joining = std::chrono::steady_clock::now();
  std::shared_ptr<train::Collective> group =
      train::join_collective(p, fmt::format("ajet_g{}", generation), served, bind_addr);
  const double joined_s = seconds_since(joining);
  const auto syncing = std::chrono::steady_clock::now();
  s.store.reset();
  s.store_generation = -1;
  if (trainer) {
    // Everyone takes rank 0's weights and state, served at its version (a member already equal to
    // it changes nothing).
    if (!s.async) {
      s.engine
          .run_exclusive_at_version(
              [&](model::Qwen2Model&) { train::broadcast_trainer(*trainer, *group, 0); }, version)
          .get();
    } else {
      train::broadcast_trainer(*trainer, *group, 0);
      s.engine
          .run_exclusive_at_version(
              [&](model::Qwen2Model& served_model) {
                train::copy_parameters(trainer->model(), served_model);
              },
              version)
          .get();
    }
    trainer->set_collective(group);
    if (trainer->policy_version() != version) {
      log().warn("join_group: rank 0's trainer is at policy version {}, the front said {}",
                 trainer->policy_version(), version);
    }
  }
  s.options.collective = p.world_size > 1 ? group : nullptr;
  const std::string checksum =
      trainer ? fmt::format("{:016x}", train::parameter_checksum(trainer->model())) : "";
  log().info(
      "elastic group: rank {} of {} (generation {}), policy version {}, weights_checksum {}; "
      "joined in {:.2f} s, rank 0's state taken in {:.2f} s",
      p.rank, p.world_size, generation, s.engine.policy_version(), checksum, joined_s,
      seconds_since(syncing));
  return Json{{"rank", p.rank},
              {"join_s", joined_s},
              {"sync_s", seconds_since(syncing)},
              {"world_size", p.world_size},
              {"generation", generation},
              {"policy_version", s.engine.policy_version()},
              {"global_step", trainer ? trainer->global_step() : int64_t(0)},
              {"weights_checksum", checksum}};
}

Json TrainMethods::open_push(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "open_push";
  if (!body.is_object()) invalid_argument("open_push: the body must be a JSON object");
  s.require_training("open_push");
  const int64_t id = get_int(body, "push_id", where);
  s.push_store.reset();
  s.push_store = serve_store(body);
  s.push_store_id = id;
  return Json{{"port", s.push_store->port()}, {"push_id", id}};
}

Json TrainMethods::push_weights(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "push_weights";
  if (!body.is_object()) invalid_argument("push_weights: the body must be a JSON object");
  const int64_t id = get_int(body, "push_id", where);
  const auto [p, bind_addr] =
      group_placement(body, where, 2, " (a push needs the trainer and at least one replica)", 1);
  const auto start = std::chrono::steady_clock::now();
  const std::string name = fmt::format("ajet_push{}", id);
  if (p.rank == 0) {
    // The trainer: its trainer's weights (the served model's under backbone torch; the copy it
    // trains under async), read on this control thread, where no train_step runs meanwhile.
    s.require_training("push_weights");
    if (!s.push_store || s.push_store_id != id)
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("push_weights: the sender of push {} needs open_push first", id));
    train::Trainer& trainer = s.ensure_trainer();
    std::shared_ptr<train::RendezvousStore> store = std::move(s.push_store);
    s.push_store_id = -1;
    std::shared_ptr<train::Collective> group = train::join_collective(p, name, store, bind_addr);
    const train::PushedWeights pushed =
        train::push_parameters(trainer.model(), trainer.policy_version(), *group, 0, &s.push_state);
    log().info("weight push {}: policy version {} to {} replica(s), {:.1f} MB ({}) in {:.2f} s", id,
               pushed.policy_version, p.world_size - 1, double(pushed.bytes) / 1e6,
               pushed.sent_frozen      ? "every parameter"
               : pushed.sent_trainable ? "the trained parameters"
                                       : "nothing: the replicas hold these weights",
               seconds_since(start));
    return Json{{"policy_version", pushed.policy_version},
                {"weights_checksum", fmt::format("{:016x}", pushed.checksum)},
                {"bytes", pushed.bytes},
                {"sent_trainable", pushed.sent_trainable},
                {"sent_frozen", pushed.sent_frozen},
                {"push_s", seconds_since(start)},
                {"swap_wait_s", 0.0}};
  }
  // A replica: the served model, read here while inference goes on, gets LoRA attached as the
  // trainer's (zero adapters change nothing served), then the received values once drained.
  model::Qwen2Model served{nullptr};
  const train_data::LoraOptions& lora = s.options.trainer.lora;
  s.engine
      .run_exclusive(
          [&](model::Qwen2Model& m) {
            if (lora.enabled() && !train::has_lora(m))
              train::attach_lora(m, lora, s.options.trainer.seed);
            served = m;
          },
          false)
      .get();
  std::shared_ptr<train::Collective> group = train::join_collective(p, name, nullptr, bind_addr);
  const train::PushedWeights pushed = train::push_parameters(served, -1, *group, 0, &s.push_state);
  group.reset();
  const double received_s = seconds_since(start);
  const auto swapping = std::chrono::steady_clock::now();
  if (!pushed.staged.empty() || pushed.policy_version != s.engine.policy_version()) {
    s.engine
        .run_drained_at_version(
            [&](model::Qwen2Model& m) { train::apply_pushed_weights(m, pushed); },
            pushed.policy_version)
        .get();
  }
  const double swap_wait_s = seconds_since(swapping);
  log().info(
      "weight push {}: serving policy version {} (weights_checksum {:016x}); {:.1f} MB received "
      "in {:.2f} s (checksums compared {:.2f} s, transfer {:.2f} s, verified {:.2f} s), swapped "
      "in after {:.2f} s of waiting for in-flight requests",
      id, pushed.policy_version, pushed.checksum, double(pushed.bytes) / 1e6, received_s,
      pushed.compare_s, pushed.transfer_s, pushed.verify_s, swap_wait_s);
  return Json{{"policy_version", s.engine.policy_version()},
              {"weights_checksum", fmt::format("{:016x}", pushed.checksum)},
              {"bytes", pushed.bytes},
              {"sent_trainable", pushed.sent_trainable},
              {"sent_frozen", pushed.sent_frozen},
              {"push_s", seconds_since(start)},
              {"swap_wait_s", swap_wait_s}};
}

}  // namespace ajet::engine
