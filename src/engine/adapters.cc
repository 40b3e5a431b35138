#include "engine/adapters.h"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "infer/engine.h"
#include "model/compute.h"
#include "model/multi_lora.h"
#include "model/qwen2.h"
#include "rpc/messages.h"
#include "train/checkpoint.h"
#include "train/lora.h"
#include "train/trainer.h"
#include "train/dist.h"
#include "train_data/batch.h"

namespace ajet::engine {
namespace fs = std::filesystem;

struct AdapterSet::Adapter {
  std::string name;
  uint64_t uid = 0;
  int32_t slot = -1;  // -1 while moved out
  train_data::LoraOptions lora;
  uint64_t seed = 0;
  std::string source;                        // "created" or the PEFT directory it was loaded from
  mutable model::Qwen2Model model{nullptr};  // shares the base; carries its train::LoraAdapter
  std::unique_ptr<train::Trainer> trainer;   // built on its first train_step
  std::atomic<int64_t> requests{0};
  // Under Impl::mu: in its slot (false from the moment it is chosen to move out), when a request
  // last took it, and how many requests hold it (none may while it moves out).
  bool resident = false;
  uint64_t last_used = 0;
  std::atomic<int64_t> pins{0};
  // Known while it is out too (written on the control thread).
  int64_t bytes = 0;          // A and B
  bool trained = false;       // has a trainer (or a saved trainer state while out)
  int64_t trained_steps = 0;  // its trainer's policy version and optimizer steps
  int64_t global_step = 0;
  std::filesystem::path spill;                   // while out: the directory it was written to
  std::vector<std::vector<int64_t>> out_shapes;  // while out: the shapes of its emptied A and B
  int64_t evictions = 0, loads = 0;
  // Its weights (the trained copy and the copy in its slot) and AdamW's two moments.
  int64_t resident_bytes() const { return 2 * bytes + (trained ? 2 * bytes : 0); }
  // Records what its trainer knows, so that the list shows it while the trainer is gone.
  void note_trainer() {
    trained = true;
    trained_steps = trainer->policy_version();
    global_step = trainer->global_step();
  }
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
  std::filesystem::path spill_root;  // where adapters move out to

  // One change of the set at a time: the control thread's calls, and the loader's loads.
  std::mutex control_mu;
  // Guards by_name, slots, each adapter's resident/last_used/slot and the counters (acquire and
  // list run on other threads).
  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<Adapter>> by_name;
  std::vector<bool> slots;  // in use
  uint64_t tick = 0;
  int64_t evictions = 0, loads = 0;
  bool warned_over_budget = false;

  // Requests waiting for an adapter that is out, served by the loader thread.
  struct Waiting {
    std::shared_ptr<Adapter> adapter;
    std::function<void(AdapterLease)> ready;
    std::function<void(const Error&)> failed;
  };
  std::deque<Waiting> waiting;
  std::condition_variable wake;
  bool stopping = false;
  std::thread loader;

  Impl(infer::InferenceEngine& e, ModelInfo info, TrainingOptions o)
      : engine(e), model_info(std::move(info)), options(std::move(o)) {
    spill_root = options.checkpoint_base_dir / "adapters_out";
  }

  // Under mu: a lease on a resident adapter.
  AdapterLease lease_locked(const std::shared_ptr<Adapter>& a) {
    a->pins.fetch_add(1);
    a->last_used = ++tick;
    // An owning pointer to nothing: its deleter drops the pin when the last copy goes.
    return AdapterLease{a->slot, a->uid,
                        std::shared_ptr<void>(nullptr, [a](void*) { a->pins.fetch_sub(1); })};
  }
  // Under mu: the least recently used adapter in its slot that no request holds and `keep` does not
  // name, or null.
  std::shared_ptr<Adapter> lru_victim_locked(const std::vector<std::string>& keep) const {
    std::shared_ptr<Adapter> victim;
    for (const auto& [name, a] : by_name) {
      if (!a->resident || a->pins.load() > 0 ||
          std::find(keep.begin(), keep.end(), name) != keep.end())
        continue;
      if (!victim || a->last_used < victim->last_used) victim = a;
    }
    return victim;
  }
  // Under mu.
  int64_t resident_total_locked() const {
    int64_t total = 0;
    for (const auto& [n, a] : by_name) total += a->resident ? a->resident_bytes() : 0;
    return total;
  }

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

  // Under mu.
  Json entry(const Adapter& a) const {
    const int64_t optimizer_bytes = a.trained ? 2 * a.bytes : 0;  // AdamW's two moments
    return Json{{"name", a.name},
                {"rank", a.lora.rank},
                {"alpha", a.lora.alpha},
                {"dropout", a.lora.dropout},
                {"target_modules", a.lora.target_modules},
                {"slot", a.slot},
                {"seed", a.seed},
                {"source", a.source},
                {"resident", a.resident},
                {"trained_steps", a.trained_steps},
                {"global_step", a.global_step},
                {"requests", a.requests.load()},
                {"bytes", a.bytes},
                {"optimizer_bytes", optimizer_bytes},
                {"resident_bytes", a.resident ? a.resident_bytes() : 0},
                {"evictions", a.evictions},
                {"loads", a.loads}};
  }

  // Empties the adapter's slot between two engine steps (no request holds it).
  void clear_slot(const Adapter& a, bool drained) {
    auto clear = [&](model::Qwen2Model& served) {
      for (int64_t l = 0; l < served->num_layers(); ++l) {
        for (size_t p = 0; p < model::kProjNames.size(); ++p) {
          if (auto* multi = model::multi_lora_at(served, l, model::Proj(p))) multi->clear(a.slot);
        }
      }
      engine.set_adapter(a.slot, 0);
    };
    if (drained) {
      // Requests already running on the slot end on its weights first.
      engine.run_drained_at_version(clear, engine.policy_version()).get();
    } else {
      engine.run_adapter_update(clear, false).get();
    }
  }

  // The adapter's checkpoint in `dir`: its PEFT files, and its trainer state once it trained.
  void write_adapter(const Adapter& a, const std::filesystem::path& dir) const {
    train::save_peft_adapter(a.model, dir, a.lora, model_info.path.string());
    if (a.trainer) train::write_trainer_state(*a.trainer, dir, Json{{"lora", true}});
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
    : impl_(std::make_unique<Impl>(engine, std::move(model), std::move(options))) {
  impl_->loader = std::thread([this] { loader_loop(); });
}

AdapterSet::~AdapterSet() {
  std::deque<Impl::Waiting> left;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    left.swap(impl_->waiting);
  }
  impl_->wake.notify_all();
  if (impl_->loader.joinable()) impl_->loader.join();
  for (Impl::Waiting& w : left)
    w.failed(Error(ErrorCode::kUnavailable,
                   "the engine stopped before adapter '" + w.adapter->name + "' was back"));
}

void AdapterSet::acquire(const std::string& name, std::function<void(AdapterLease)> ready,
                         std::function<void(const Error&)> failed) {
  Impl& s = *impl_;
  AdapterLease lease;
  {
    std::lock_guard lock(s.mu);
    auto it = s.by_name.find(name);
    if (it == s.by_name.end()) fail(ErrorCode::kNotFound, "generate: " + s.unknown(name));
    const std::shared_ptr<Adapter>& a = it->second;
    a->requests.fetch_add(1);
    if (!a->resident) {
      // Out (or on its way out): the loader brings it back, then the request goes on.
      s.waiting.push_back(Impl::Waiting{a, std::move(ready), std::move(failed)});
      s.wake.notify_one();
      return;
    }
    lease = s.lease_locked(a);
  }
  ready(std::move(lease));
}

void AdapterSet::loader_loop() {
  Impl& s = *impl_;
  while (true) {
    Impl::Waiting w;
    bool trim = false;
    {
      std::unique_lock lock(s.mu);
      s.wake.wait_for(lock, std::chrono::milliseconds(500),
                      [&] { return s.stopping || !s.waiting.empty(); });
      if (s.stopping) return;
      if (s.waiting.empty()) {
        // Requests that held every adapter in use may have brought the set over its budget; once
        // they ended, the least recently used move out again.
        const int64_t budget = s.options.adapter_memory_bytes;
        trim = budget > 0 && s.resident_total_locked() > budget;
        if (!trim) continue;
      } else {
        w = std::move(s.waiting.front());
        s.waiting.pop_front();
      }
    }
    if (trim) {
      try {
        std::lock_guard control(s.control_mu);
        fit(0, {});
      } catch (const std::exception& e) {
        log().warn("adapters: moving adapters out to the budget failed: {}", e.what());
      }
      continue;
    }
    std::optional<AdapterLease> lease;
    try {
      std::lock_guard control(s.control_mu);
      {
        std::lock_guard lock(s.mu);
        auto it = s.by_name.find(w.adapter->name);
        if (it == s.by_name.end() || it->second != w.adapter)
          fail(ErrorCode::kNotFound,
               "generate: adapter '" + w.adapter->name + "' was removed before it was back");
      }
      if (!w.adapter->resident) make_resident(w.adapter, {w.adapter->name});
      std::lock_guard lock(s.mu);
      lease = s.lease_locked(w.adapter);
    } catch (const Error& e) {
      log().warn("adapter '{}': a request waiting for it failed: {}", w.adapter->name, e.what());
      w.failed(e);
      continue;
    } catch (const std::exception& e) {
      w.failed(Error(ErrorCode::kInternal,
                     "adapter '" + w.adapter->name + "' could not be brought back: " + e.what()));
      continue;
    }
    w.ready(std::move(*lease));
  }
}

void AdapterSet::fit(int64_t need, const std::vector<std::string>& keep) {
  Impl& s = *impl_;
  const int64_t budget = s.options.adapter_memory_bytes;
  if (budget <= 0) return;
  while (true) {
    std::shared_ptr<Adapter> victim;
    {
      std::lock_guard lock(s.mu);
      const int64_t total = s.resident_total_locked();
      if (total + need <= budget) {
        s.warned_over_budget = false;
        return;
      }
      victim = s.lru_victim_locked(keep);
      if (!victim) {
        if (!s.warned_over_budget) {
          log().warn(
              "adapters: {:.1f} MB resident, over the budget of {:.1f} MB "
              "(ajet.engine.adapter_memory_mb): every other adapter is in use",
              double(total + need) / 1048576.0, double(budget) / 1048576.0);
          s.warned_over_budget = true;
        }
        return;
      }
      victim->resident = false;  // from now on, requests for it wait for the loader
    }
    move_out(victim);
  }
}

void AdapterSet::move_out(const std::shared_ptr<Adapter>& a) {
  Impl& s = *impl_;
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = s.spill_root / fmt::format("{}-{}", a->name, a->uid);
  std::error_code ec;
  fs::remove_all(dir, ec);
  try {
    s.write_adapter(*a, dir);
  } catch (...) {
    std::lock_guard lock(s.mu);
    a->resident = true;  // could not be written: it stays
    throw;
  }
  s.clear_slot(*a, false);
  {
    std::lock_guard lock(s.mu);
    s.slots[size_t(a->slot)] = false;
    a->slot = -1;
    a->spill = dir;
    a->evictions += 1;
    s.evictions += 1;
  }
  // Its trainer (AdamW moments, gradients) goes; its model stays without A and B (it shares the
  // base: a module tree of references), so that coming back does not build one again.
  a->trainer.reset();
  {
    torch::NoGradGuard no_grad;
    a->out_shapes.clear();
    for (auto& [name, t] : train::lora_named_parameters(a->model)) {
      a->out_shapes.push_back(t.sizes().vec());
      t.set_data(torch::empty({0}, t.options()));
    }
  }
  ::malloc_trim(0);
  log().info("adapter '{}' moved out to {} in {:.2f} s (its slot is free)", a->name, dir.string(),
             seconds_since(start));
}

void AdapterSet::reserve_slot(const std::shared_ptr<Adapter>& a,
                              const std::vector<std::string>& keep) {
  Impl& s = *impl_;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Adapter> victim;
    {
      std::lock_guard lock(s.mu);
      int32_t slot = 0;
      while (size_t(slot) < s.slots.size() && s.slots[size_t(slot)]) ++slot;
      if (slot < kMaxResident) {
        if (size_t(slot) >= s.slots.size()) s.slots.resize(size_t(slot) + 1);
        s.slots[size_t(slot)] = true;
        a->slot = slot;
        return;
      }
      victim = s.lru_victim_locked(keep);
      if (victim) victim->resident = false;
    }
    if (!victim) break;
    move_out(victim);
  }
  fail(ErrorCode::kResourceExhausted,
       fmt::format("adapters: all {} slots hold adapters that requests are using", kMaxResident));
}

void AdapterSet::make_resident(const std::shared_ptr<Adapter>& a,
                               const std::vector<std::string>& keep) {
  Impl& s = *impl_;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> kept = keep;
  kept.push_back(a->name);
  fit(a->resident_bytes(), kept);
  reserve_slot(a, kept);
  try {
    build(a, a->spill);
  } catch (...) {
    std::lock_guard lock(s.mu);
    s.slots[size_t(a->slot)] = false;
    a->slot = -1;
    throw;
  }
  const fs::path spilled = a->spill;
  {
    std::lock_guard lock(s.mu);
    a->resident = true;
    a->last_used = ++s.tick;
    a->loads += 1;
    s.loads += 1;
    a->spill.clear();
  }
  std::error_code ec;
  fs::remove_all(spilled, ec);
  log().info("adapter '{}' back in slot {} in {:.2f} s", a->name, a->slot, seconds_since(start));
}

void AdapterSet::set_memory_budget(int64_t bytes) {
  std::lock_guard control(impl_->control_mu);
  {
    std::lock_guard lock(impl_->mu);
    impl_->options.adapter_memory_bytes = std::max<int64_t>(0, bytes);
    impl_->warned_over_budget = false;
  }
  fit(0, {});
}

bool AdapterSet::empty() const {
  std::lock_guard lock(impl_->mu);
  return impl_->by_name.empty();
}

Json AdapterSet::list() const {
  std::lock_guard lock(impl_->mu);
  Json out = Json::array();
  for (const auto& [name, a] : impl_->by_name) out.push_back(impl_->entry(*a));
  return Json{{"adapters", std::move(out)},
              {"adapter_memory",
               {{"budget_bytes", impl_->options.adapter_memory_bytes},
                {"resident_bytes", impl_->resident_total_locked()},
                {"evictions", impl_->evictions},
                {"loads", impl_->loads}}}};
}

Json AdapterSet::create(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "adapter_create";
  auto a = std::make_shared<Adapter>();
  a->name = adapter_name(body, where);
  std::lock_guard control(s.control_mu);
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
    // The identity; the adapter is registered once it is served in its slot.
    std::lock_guard lock(s.mu);
    a->uid = s.next_uid++;
  }
  reserve_slot(a, {});
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
    a->resident = true;
    a->last_used = ++s.tick;
    s.by_name[a->name] = a;
  }
  log().info("adapter '{}' served in slot {} (rank {}, alpha {}, {}; {}{})", a->name, a->slot,
             a->lora.rank, a->lora.alpha, fmt::join(a->lora.target_modules, ","), a->source,
             a->trained ? fmt::format(", trained {} steps", a->trained_steps) : "");
  fit(0, {a->name});  // over the budget now: others move out
  std::lock_guard lock(s.mu);
  return s.entry(*a);
}

void AdapterSet::build(const std::shared_ptr<Adapter>& a, const std::optional<fs::path>& path) {
  Impl& s = *impl_;
  // The served model gets its multi-adapter projections with the first adapter; the adapter's own
  // model shares the base with it. Built between two engine steps: nothing reads the modules then.
  if (a->model && !a->out_shapes.empty()) {
    // Coming back: its model (sharing the base) was kept without its A and B; they get their
    // shapes back and the values from `path`.
    torch::NoGradGuard no_grad;
    auto params = train::lora_named_parameters(a->model);
    if (params.size() != a->out_shapes.size())
      fail(ErrorCode::kInternal, "adapters: '" + a->name + "' lost track of its LoRA tensors");
    for (size_t i = 0; i < params.size(); ++i)
      params[i].second.set_data(torch::zeros(a->out_shapes[i], params[i].second.options()));
    a->out_shapes.clear();
  } else {
    build_model(a);
  }
  if (path) train::load_peft_adapter(a->model, *path);
  a->bytes = tensor_bytes(train::lora_named_parameters(a->model));
  if (path && fs::exists(*path / "trainer_state.json")) {
    // An adapter checkpoint (or one moved out after it trained): its optimizer and counters too.
    train::Trainer::State state = train::read_trainer_state(*path);
    a->trainer = std::make_unique<train::Trainer>(a->model, s.trainer_options(*a));
    a->trainer->load_state(state);
    a->note_trainer();
  }
  s.engine
      .run_adapter_update(
          [&](model::Qwen2Model& served) {
            Impl::serve_into(served, *a);
            s.engine.set_adapter(a->slot, a->uid);
          },
          false)
      .get();
}

void AdapterSet::build_model(const std::shared_ptr<Adapter>& a) {
  Impl& s = *impl_;
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
}

Json AdapterSet::save(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "adapter_save";
  const std::string name = adapter_name(body, where);
  const std::string dir_text = get_string(body, "dir", where);
  if (dir_text.empty()) invalid_argument("adapter_save: 'dir' is empty");
  const bool merged = get_optional_bool(body, "merged", where).value_or(false);
  std::lock_guard control(s.control_mu);
  std::shared_ptr<Adapter> a = s.find(name, where);
  const fs::path dir = dir_text;
  if (!a->resident) make_resident(a, {});
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
  std::lock_guard control(s.control_mu);
  std::shared_ptr<Adapter> a;
  {
    std::lock_guard lock(s.mu);
    auto it = s.by_name.find(name);
    if (it == s.by_name.end())
      fail(ErrorCode::kNotFound, fmt::format("{}: {}", where, s.unknown(name)));
    a = it->second;
    s.by_name.erase(it);  // new requests for it are refused from now
  }
  if (a->resident) {
    // Requests already running on the slot end on its weights; then it is emptied.
    s.clear_slot(*a, true);
    std::lock_guard lock(s.mu);
    s.slots[size_t(a->slot)] = false;
    a->resident = false;
  }
  std::error_code ec;
  if (!a->spill.empty()) fs::remove_all(a->spill, ec);
  a->trainer.reset();
  a->model = model::Qwen2Model(nullptr);
  log().info("adapter '{}' removed", name);
  return Json{{"name", name}, {"removed", true}};
}

Json AdapterSet::evict(const Json& body) {
  Impl& s = *impl_;
  constexpr std::string_view where = "adapter_evict";
  const std::string name = adapter_name(body, where);
  std::lock_guard control(s.control_mu);
  std::shared_ptr<Adapter> a = s.find(name, where);
  {
    std::lock_guard lock(s.mu);
    if (a->resident) {
      if (const int64_t held = a->pins.load(); held > 0)
        fail(ErrorCode::kFailedPrecondition,
             fmt::format("{}: adapter '{}' is in use by {} requests; try again once they ended",
                         where, name, held));
      a->resident = false;  // from now on, requests for it wait for the loader
    } else {
      return s.entry(*a);  // out already
    }
  }
  move_out(a);
  std::lock_guard lock(s.mu);
  return s.entry(*a);
}

Json AdapterSet::train_step(const train_data::Batch& batch,
                            const std::vector<std::string>& adapter_of_sample) {
  Impl& s = *impl_;
  std::lock_guard control(s.control_mu);
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
  // Every adapter of the step in its slot first (moved-out ones come back).
  std::vector<std::string> keep;
  for (const auto& [name, a] : adapters) keep.push_back(name);
  for (auto& [name, a] : adapters) {
    if (!a->resident) make_resident(a, keep);
  }
  std::map<std::string, train_data::TrainMetrics> metrics;
  auto train_all = [&] {
    for (auto& [name, part] : parts) {
      Adapter& a = *adapters[name];
      if (!a.trainer) a.trainer = std::make_unique<train::Trainer>(a.model, s.trainer_options(a));
      metrics[name] = a.trainer->train_step(part);
      a.note_trainer();
    }
  };
  double paused = 0;
  const bool async = s.options.backbone == config::Backbone::kAsync;
  // torch: inference waits while the adapters train (as the one-model backbone does); async:
  // inference goes on beside the training (the base is shared read-only) and only the copy of the
  // trained adapters into their slots pauses it.
  if (async) train_all();
  s.engine
      .run_adapter_update(
          [&](model::Qwen2Model& served) {
            const auto pause = std::chrono::steady_clock::now();
            if (!async) train_all();
            for (auto& [name, a] : adapters) {
              Impl::serve_into(served, *a);
              s.engine.set_adapter(a->slot, a->uid);
            }
            paused = seconds_since(pause);
          },
          true)
      .get();
  // The batch's totals: counters summed, the rest weighted by each adapter's samples.
  static const std::set<std::string, std::less<>> kSummed = {
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
      const double add = kSummed.count(key) ? value.get<double>() : w * value.get<double>();
      reply[key] = reply.value(key, 0.0) + add;
    }
    weight_sum += w;
    per[name] = std::move(j);
  }
  for (auto& [key, value] : reply.items()) {
    if (kSummed.count(key)) {
      value = int64_t(value.get<double>());
    } else {
      value = value.get<double>() / weight_sum;
    }
  }
  reply.erase("trained_steps");
  reply.erase("global_step");
  fit(0, keep);  // their optimizer moments may have taken the budget: others move out
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
  std::lock_guard control(s.control_mu);
  const int64_t version = s.engine.policy_version();
  const fs::path dir = base_dir / fmt::format("adapters_step_{}", version);
  std::vector<std::shared_ptr<Adapter>> all;
  {
    std::lock_guard lock(s.mu);
    for (const auto& [name, a] : s.by_name) all.push_back(a);
  }
  Json names = Json::array();
  for (const auto& a : all) {
    const fs::path out = dir / a->name;
    if (!a->resident && !a->spill.empty()) {
      // Out: its files are the checkpoint's.
      std::error_code ec;
      fs::create_directories(out, ec);
      fs::copy(a->spill, out, fs::copy_options::overwrite_existing | fs::copy_options::recursive);
    } else {
      s.write_adapter(*a, out);
    }
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
