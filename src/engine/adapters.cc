#include "engine/adapters.h"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "infer/engine.h"
#include "model/compute.h"
#include "model/multi_lora.h"
#include "model/qwen2.h"
#include "rpc/messages.h"
#include "train/lora.h"
#include "train/trainer.h"
#include "train/dist.h"
#include "train_data/batch.h"

namespace ajet::engine {
namespace fs = std::filesystem;

namespace {}  // namespace

struct AdapterSet::Adapter {
  std::string name;
  uint64_t uid = 0;
  int32_t slot = -1;
  train_data::LoraOptions lora;
  uint64_t seed = 0;
  std::string source;                        // "created" or the PEFT directory it was loaded from
  mutable model::Qwen2Model model{nullptr};  // shares the base; carries its train::LoraAdapter
  std::unique_ptr<train::Trainer> trainer;   // built on its first train_step
  std::atomic<int64_t> requests{0};
};

namespace {

std::string adapter_name(const Json& body, std::string_view where) {
  if (!body.is_object()) invalid_argument(std::string(where) + ": the body must be a JSON object");
  std::string name = get_string(body, "name", where);
  if (std::string why = rpc::adapter_name_problem(name); !why.empty())
    invalid_argument(fmt::format("{}: 'name' {}", where, why));
  return name;
}

int64_t tensor_bytes(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  int64_t bytes = 0;
  for (const auto& [name, t] : named) bytes += int64_t(t.nbytes());
  return bytes;
}

}  // namespace

struct AdapterSet::Impl {
  infer::InferenceEngine& engine;
  ModelInfo model_info;
  TrainingOptions options;
  bool attached = false;  // the served model carries the multi-adapter projections
  uint64_t next_uid = 1;

  mutable std::mutex mu;  // guards by_name and slots (resolve and list run on other threads)
  std::map<std::string, std::shared_ptr<Adapter>> by_name;
  std::vector<bool> slots;  // in use

  Impl(infer::InferenceEngine& e, ModelInfo info, TrainingOptions o)
      : engine(e), model_info(std::move(info)), options(std::move(o)) {}

  std::shared_ptr<Adapter> find(const std::string& name, std::string_view where) const {
    std::lock_guard lock(mu);
    auto it = by_name.find(name);
    if (it == by_name.end())
      fail(ErrorCode::kNotFound, fmt::format("{}: {}", where, unknown(name)));
    return it->second;
  }
  // "no adapter 'x' (served: a, b)"; under mu.
  std::string unknown(const std::string& name) const {
    std::string served;
    for (const auto& [n, a] : by_name) served += (served.empty() ? "" : ", ") + n;
    return fmt::format("no adapter '{}' (served: {})", name, served.empty() ? "none" : served);
  }

  Json entry(const Adapter& a) const {
    int64_t bytes = 0;
    int64_t optimizer_bytes = 0;
    bytes = tensor_bytes(train::lora_named_parameters(a.model));
    if (a.trainer) optimizer_bytes = 2 * bytes;  // AdamW's two moments per trained parameter
    return Json{{"name", a.name},
                {"rank", a.lora.rank},
                {"alpha", a.lora.alpha},
                {"dropout", a.lora.dropout},
                {"target_modules", a.lora.target_modules},
                {"slot", a.slot},
                {"seed", a.seed},
                {"source", a.source},
                {"trained_steps", a.trainer ? a.trainer->policy_version() : 0},
                {"global_step", a.trainer ? a.trainer->global_step() : 0},
                {"requests", a.requests.load()},
                {"bytes", bytes},
                {"optimizer_bytes", optimizer_bytes}};
  }

  // Copies the adapter's trained A and B into its slot of the served model (engine thread).
  static void serve_into(model::Qwen2Model& served, Adapter& a) {
    for (int64_t l = 0; l < served->num_layers(); ++l) {
      for (size_t p = 0; p < model::kProjNames.size(); ++p) {
        model::MultiLoraAdapter* multi = model::multi_lora_at(served, l, model::Proj(p));
        if (!multi) fail(ErrorCode::kInternal, "adapters: a projection lacks its multi-adapter");
        auto* own =
            dynamic_cast<train::LoraAdapter*>(a.model->layer(l)->adapter(model::Proj(p)).get());
        if (own) {
          multi->set(a.slot, own->lora_A, own->lora_B, a.lora.scale());
        } else {
          multi->set(a.slot, torch::Tensor(), torch::Tensor(), 0);
        }
      }
    }
  }

  train_data::TrainerOptions trainer_options(const Adapter& a) const {
    train_data::TrainerOptions o = options.trainer;
    o.lora = a.lora;
    o.seed = a.seed;
    return o;
  }
};

AdapterSet::AdapterSet(infer::InferenceEngine& engine, ModelInfo model, TrainingOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(model), std::move(options))) {}
AdapterSet::~AdapterSet() = default;

std::pair<int32_t, uint64_t> AdapterSet::resolve(const std::string& name) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) fail(ErrorCode::kNotFound, "generate: " + impl_->unknown(name));
  it->second->requests.fetch_add(1);
  return {it->second->slot, it->second->uid};
}

bool AdapterSet::empty() const {
  std::lock_guard lock(impl_->mu);
  return impl_->by_name.empty();
}

Json AdapterSet::list() const {
  std::lock_guard lock(impl_->mu);
  Json out = Json::array();
  for (const auto& [name, a] : impl_->by_name) out.push_back(impl_->entry(*a));
  return Json{{"adapters", std::move(out)}};
}

Json AdapterSet::create(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "adapter_create";
  auto a = std::make_shared<Adapter>();
  a->name = adapter_name(body, where);
  {
    std::lock_guard lock(s.mu);
    if (s.by_name.count(a->name))
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("{}: an adapter named '{}' exists already", where, a->name));
    if (int(s.by_name.size()) >= kMaxAdapters)
      fail(ErrorCode::kResourceExhausted,
           fmt::format("{}: {} adapters are served, the most one engine holds", where,
                       kMaxAdapters));
  }
  std::optional<fs::path> path;
  if (auto p = get_optional_string(body, "path", where)) path = fs::path(*p);
  if (path) {
    for (const char* key : {"rank", "alpha", "dropout", "target_modules"}) {
      if (body.contains(key))
        invalid_argument(fmt::format(
            "{}: '{}' comes from the adapter's adapter_config.json when 'path' is given", where,
            key));
    }
    a->lora = train::read_peft_config(*path);
    a->source = fs::absolute(*path).lexically_normal().string();
  } else {
    const train_data::LoraOptions& d = s.options.trainer.lora;
    a->lora.rank =
        body.contains("rank") ? get_int(body, "rank", where) : (d.enabled() ? d.rank : 8);
    a->lora.alpha = body.contains("alpha") ? get_number(body, "alpha", where) : d.alpha;
    a->lora.dropout = body.contains("dropout") ? get_number(body, "dropout", where) : d.dropout;
    a->lora.target_modules = d.target_modules;
    if (body.contains("target_modules")) {
      const Json& t = body.at("target_modules");
      if (!t.is_array() || t.empty())
        invalid_argument(
            fmt::format("{}: 'target_modules' must be a non-empty array of names", where));
      a->lora.target_modules.clear();
      for (const Json& name : t) {
        if (!name.is_string())
          invalid_argument(fmt::format("{}: 'target_modules' must hold strings", where));
        a->lora.target_modules.push_back(name.get<std::string>());
      }
    }
    a->source = "created";
  }
  const hf::ModelConfig& mc = s.model_info.config;
  const int64_t max_rank = std::min<int64_t>(1024, mc.hidden_size);
  if (a->lora.rank < 1 || a->lora.rank > max_rank)
    invalid_argument(
        fmt::format("{}: 'rank' must be in [1, {}], got {}", where, max_rank, a->lora.rank));
  if (!(a->lora.alpha > 0) || !std::isfinite(a->lora.alpha))
    invalid_argument(fmt::format("{}: 'alpha' must be > 0", where));
  if (!(a->lora.dropout >= 0 && a->lora.dropout < 1))
    invalid_argument(fmt::format("{}: 'dropout' must be in [0, 1)", where));
  train::resolve_lora_targets(a->lora.target_modules);  // names the unknown ones

  {
    // Reserves the slot and the identity; the adapter is registered once it is served.
    std::lock_guard lock(s.mu);
    a->uid = s.next_uid++;
    a->slot = 0;
    while (size_t(a->slot) < s.slots.size() && s.slots[size_t(a->slot)]) ++a->slot;
    if (size_t(a->slot) >= s.slots.size()) s.slots.resize(size_t(a->slot) + 1);
    s.slots[size_t(a->slot)] = true;
  }
  if (auto seed = get_optional_int(body, "seed", where)) {
    a->seed = uint64_t(*seed);
  } else {
    a->seed = s.options.trainer.seed + a->uid;
  }
  try {
    build(a, path);
  } catch (...) {
    std::lock_guard lock(s.mu);
    s.slots[size_t(a->slot)] = false;
    throw;
  }
  {
    std::lock_guard lock(s.mu);
    s.by_name[a->name] = a;
  }
  log().info("adapter '{}' served in slot {} (rank {}, alpha {}, {}; {})", a->name, a->slot,
             a->lora.rank, a->lora.alpha, fmt::join(a->lora.target_modules, ","), a->source);
  std::lock_guard lock(s.mu);
  return s.entry(*a);
}

void AdapterSet::build(const std::shared_ptr<Adapter>& a, const std::optional<fs::path>& path) {
  Impl& s = *impl_;
  // The served model gets its multi-adapter projections with the first adapter; the adapter's own
  // model shares the base with it. Built between two engine steps: nothing reads the modules then.
  s.engine
      .run_exclusive(
          [&](model::Qwen2Model& served) {
            if (!s.attached) {
              if (train::has_lora(served)) {
                fail(ErrorCode::kFailedPrecondition,
                     "adapter_create: the engine's own trainer already put a LoRA adapter on the "
                     "model (ajet.lora); named adapters need an engine without one");
              }
              model::attach_multi_lora(served, train::resolve_lora_targets({"all-linear"}));
              s.attached = true;
            }
            a->model = model::share_base_weights(served);
          },
          false)
      .get();
  // Building it held one more set of weights for a moment; give the pages back to the system.
  ::malloc_trim(0);
  train::attach_lora(a->model, a->lora, a->seed);
  if (path) train::load_peft_adapter(a->model, *path);
  s.engine
      .run_adapter_update(
          [&](model::Qwen2Model& served) {
            Impl::serve_into(served, *a);
            s.engine.set_adapter(a->slot, a->uid);
          },
          false)
      .get();
}

Json AdapterSet::save(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "adapter_save";
  const std::string name = adapter_name(body, where);
  const std::string dir_text = get_string(body, "dir", where);
  if (dir_text.empty()) invalid_argument("adapter_save: 'dir' is empty");
  const bool merged = get_optional_bool(body, "merged", where).value_or(false);
  std::shared_ptr<Adapter> a = s.find(name, where);
  const fs::path dir = dir_text;
  // The adapter's model changes only in train_step, which runs on this same thread.
  if (merged) {
    train::save_merged_model(a->model, dir, a->lora, s.model_info.path.string());
  } else {
    train::save_peft_adapter(a->model, dir, a->lora, s.model_info.path.string());
  }
  log().info("adapter '{}' saved to {}{}", name, dir.string(), merged ? " (merged)" : "");
  return Json{
      {"name", name}, {"path", fs::absolute(dir).lexically_normal().string()}, {"merged", merged}};
}

Json AdapterSet::remove(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "adapter_remove";
  const std::string name = adapter_name(body, where);
  std::shared_ptr<Adapter> a;
  {
    std::lock_guard lock(s.mu);
    auto it = s.by_name.find(name);
    if (it == s.by_name.end())
      fail(ErrorCode::kNotFound, fmt::format("{}: {}", where, s.unknown(name)));
    a = it->second;
    s.by_name.erase(it);  // new requests for it are refused from now
  }
  // Requests already running on the slot end on its weights; then it is emptied.
  s.engine
      .run_drained_at_version(
          [&](model::Qwen2Model& served) {
            for (int64_t l = 0; l < served->num_layers(); ++l) {
              for (size_t p = 0; p < model::kProjNames.size(); ++p) {
                if (auto* multi = model::multi_lora_at(served, l, model::Proj(p)))
                  multi->clear(a->slot);
              }
            }
            s.engine.set_adapter(a->slot, 0);
          },
          s.engine.policy_version())
      .get();
  {
    std::lock_guard lock(s.mu);
    s.slots[size_t(a->slot)] = false;
  }
  log().info("adapter '{}' removed (slot {} free)", name, a->slot);
  return Json{{"name", name}, {"removed", true}};
}

Json AdapterSet::train_step(const train_data::Batch& batch,
                            const std::vector<std::string>& adapter_of_sample) {
  Impl& s = *impl_;
  if (adapter_of_sample.size() != batch.samples.size()) {
    invalid_argument(fmt::format("train_step: meta.adapters has {} names for {} samples",
                                 adapter_of_sample.size(), batch.samples.size()));
  }
  // Each adapter's samples, in batch order; every name checked before anything trains.
  std::map<std::string, train_data::Batch> parts;
  std::map<std::string, std::shared_ptr<Adapter>> adapters;
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const std::string& name = adapter_of_sample[i];
    if (!adapters.count(name))
      adapters[name] = s.find(name, "train_step: sample " + std::to_string(i));
    parts[name].samples.push_back(batch.samples[i]);
  }
  if (parts.empty()) invalid_argument("train_step batch: no samples");
  if (s.options.collective && s.options.collective->world_size() > 1) {
    fail(ErrorCode::kFailedPrecondition,
         "train_step: named adapters train on one engine, not in a data-parallel group");
  }
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, train_data::TrainMetrics> metrics;
  auto train_all = [&] {
    for (auto& [name, part] : parts) {
      Adapter& a = *adapters[name];
      if (!a.trainer) a.trainer = std::make_unique<train::Trainer>(a.model, s.trainer_options(a));
      metrics[name] = a.trainer->train_step(part);
    }
  };
  double paused = 0;
  const bool async = s.options.backbone == config::Backbone::kAsync;
  if (!async) {
    // torch: inference waits while the adapters train (as the one-model backbone does).
    s.engine
        .run_adapter_update(
            [&](model::Qwen2Model& served) {
              const auto pause = std::chrono::steady_clock::now();
              train_all();
              for (auto& [name, a] : adapters) {
                Impl::serve_into(served, *a);
                s.engine.set_adapter(a->slot, a->uid);
              }
              paused = seconds_since(pause);
            },
            true)
        .get();
  } else {
    // async: inference goes on (the base is shared read-only); only the copy into the slots pauses.
    train_all();
    s.engine
        .run_adapter_update(
            [&](model::Qwen2Model& served) {
              const auto pause = std::chrono::steady_clock::now();
              for (auto& [name, a] : adapters) {
                Impl::serve_into(served, *a);
                s.engine.set_adapter(a->slot, a->uid);
              }
              paused = seconds_since(pause);
            },
            true)
        .get();
  }
  // The batch's totals: counters summed, the rest weighted by each adapter's samples.
  static const char* const kSummed[] = {
      "tokens", "trained_tokens",       "packed_tokens",   "samples",       "dropped_samples",
      "groups", "zero_variance_groups", "optimizer_steps", "skipped_steps", "micro_batches"};
  Json reply = Json::object();
  Json per = Json::object();
  double weight_sum = 0;
  for (auto& [name, m] : metrics) {
    Json j = m.to_json();
    j["trained_steps"] = m.policy_version;
    const double w = double(std::max<int64_t>(1, m.samples));
    for (auto& [key, value] : j.items()) {
      if (!value.is_number()) continue;
      const bool summed = std::find_if(std::begin(kSummed), std::end(kSummed), [&](const char* k) {
                            return key == k;
                          }) != std::end(kSummed);
      const double add = summed ? value.get<double>() : w * value.get<double>();
      reply[key] = reply.value(key, 0.0) + add;
    }
    weight_sum += w;
    per[name] = std::move(j);
  }
  for (auto& [key, value] : reply.items()) {
    const bool summed = std::find_if(std::begin(kSummed), std::end(kSummed),
                                     [&](const char* k) { return key == k; }) != std::end(kSummed);
    if (summed) {
      value = int64_t(value.get<double>());
    } else {
      value = value.get<double>() / weight_sum;
    }
  }
  reply.erase("trained_steps");
  reply.erase("global_step");
  reply["adapters"] = std::move(per);
  reply["policy_version"] = s.engine.policy_version();
  reply["trainer_policy_version"] = s.engine.policy_version();
  reply["backbone"] = std::string(config::backbone_name(s.options.backbone));
  reply["step_time_s"] = seconds_since(start);
  reply["inference_paused_s"] = paused;
  std::string names;
  for (const auto& [name, m] : metrics) names += (names.empty() ? "" : ", ") + name;
  log().info("train_step: {} adapters ({}), {} samples, {:.2f} s; serving policy version {}",
             metrics.size(), names, reply.value("samples", int64_t(0)),
             reply["step_time_s"].get<double>(), s.engine.policy_version());
  return reply;
}

Json AdapterSet::save_checkpoint(const fs::path& base_dir) {
  Impl& s = *impl_;
  const int64_t version = s.engine.policy_version();
  const fs::path dir = base_dir / fmt::format("adapters_step_{}", version);
  std::vector<std::shared_ptr<Adapter>> all;
  {
    std::lock_guard lock(s.mu);
    for (const auto& [name, a] : s.by_name) all.push_back(a);
  }
  Json names = Json::array();
  for (const auto& a : all) {
    train::save_peft_adapter(a->model, dir / a->name, a->lora, s.model_info.path.string());
    names.push_back(a->name);
  }
  log().info("adapters saved: {} ({} adapters, policy version {})", dir.string(), all.size(),
             version);
  return Json{{"path", ""},
              {"adapters_path", fs::absolute(dir).lexically_normal().string()},
              {"adapters", std::move(names)},
              {"policy_version", version}};
}

}  // namespace ajet::engine
