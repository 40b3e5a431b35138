#include "train/dist.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#ifdef AJET_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "common/clock.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "common/mix.h"

namespace ajet::train {

namespace {

// What runs the collectives: c10d's ProcessGroupGloo / ProcessGroupNCCL are ProcessGroups in
// libtorch 1.x and Backends (which a ProcessGroup wraps) since 2.0, the libtorch of a CUDA build
// (docs/engine.md, "GPU"); both have the allreduce used here.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif

// A c10 error's message without the C++ stack trace torch appends.
std::string describe(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << static_cast<double>(t.count()) / 1000.0;
  return s.str();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

class SingleRank : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(std::vector<torch::Tensor>&) override {}
  void broadcast(std::vector<torch::Tensor>&, int) override {}
};

class C10dCollective : public Collective {
 public:
  C10dCollective(train_data::DistPlacement placement, c10::intrusive_ptr<c10d::Store> store,
                 c10::intrusive_ptr<CollectiveGroup> group)
      : placement_(std::move(placement)), store_(std::move(store)), group_(std::move(group)) {}

  int rank() const override { return placement_.rank; }
  int world_size() const override { return placement_.world_size; }

  // One collective per dtype: the tensors of that dtype are flattened into one buffer (gradients of
  // a whole model are one all-reduce, not one per parameter), summed, and copied back.
  void all_reduce_sum(std::vector<torch::Tensor>& tensors) override {
    torch::NoGradGuard no_grad;
    std::map<torch::ScalarType, std::vector<size_t>> by_dtype;
    for (size_t i = 0; i < tensors.size(); ++i) by_dtype[tensors[i].scalar_type()].push_back(i);
    for (auto& [dtype, indices] : by_dtype) {
      std::vector<torch::Tensor> flat;
      for (size_t i : indices) flat.push_back(tensors[i].reshape({-1}));
      std::vector<torch::Tensor> buffer = {flat.size() == 1 ? flat[0].contiguous().clone()
                                                            : torch::cat(flat)};
      try {
        c10d::AllreduceOptions opts;
        opts.reduceOp = c10d::ReduceOp::SUM;
        opts.timeout = placement_.timeout;
        group_->allreduce(buffer, opts)->wait(placement_.timeout);
      } catch (const std::exception& e) {
        fail(ErrorCode::kUnavailable, "data parallel all-reduce failed on rank " +
                                          std::to_string(placement_.rank) + " of " +
                                          std::to_string(placement_.world_size) + " (group at " +
                                          placement_.master() + "): " + describe(e));
      }
      int64_t offset = 0;
      for (size_t i : indices) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(buffer[0].narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }

  // One collective per tensor, in place (a contiguous tensor is sent from and received into its
  // own storage: a model's weights are not copied twice more, as a flattened buffer would need).
  void broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& t : tensors) {
      std::vector<torch::Tensor> buffer = {t.is_contiguous() ? t : t.contiguous()};
      try {
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        opts.timeout = placement_.timeout;
        group_->broadcast(buffer, opts)->wait(placement_.timeout);
      } catch (const std::exception& e) {
        fail(ErrorCode::kUnavailable,
             "data parallel broadcast from rank " + std::to_string(root) + " failed on rank " +
                 std::to_string(placement_.rank) + " of " + std::to_string(placement_.world_size) +
                 " (group at " + placement_.master() + "): " + describe(e));
      }
      if (!buffer[0].is_same(t)) t.copy_(buffer[0]);
    }
  }

 private:
  train_data::DistPlacement placement_;
  c10::intrusive_ptr<c10d::Store> store_;  // rank 0 serves it; kept for the group's lifetime
  c10::intrusive_ptr<CollectiveGroup> group_;
};

#ifdef AJET_HAVE_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(const train_data::DistPlacement& p,
                                                       const std::string& bind_addr = "") {
  if (!bind_addr.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(bind_addr);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      ifname != nullptr && *ifname != '\0') {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // On one machine (loopback master) every rank binds to loopback; otherwise to this host's
  // address.
  if (is_loopback(p.master_addr))
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

}  // namespace

namespace {

// Whether the group runs on NCCL (else Gloo); refuses a backend this build lacks.
bool use_nccl(const train_data::DistPlacement& p) {
  bool nccl = p.backend == "nccl";
#ifdef USE_C10D_NCCL
  if (p.backend == "auto") nccl = torch::cuda::is_available();
#else
  if (nccl)
    invalid_argument("distributed backend nccl: this libtorch was built without NCCL (use gloo)");
#endif
#ifndef AJET_HAVE_GLOO
  if (!nccl) {
    invalid_argument("distributed backend " + p.backend +
                     ": this build has no Gloo (its libtorch ships no Gloo headers "
                     "and libgloo-dev was missing at build time); use nccl on GPUs, or rebuild "
                     "with libgloo-dev");
  }
#endif
  return nccl;
}

std::string where_of(const train_data::DistPlacement& p) {
  return "rank " + std::to_string(p.rank) + " of " + std::to_string(p.world_size) + ", master " +
         p.master();
}

// The process group over `store` under `prefix`: every rank connects to every other.
std::shared_ptr<Collective> make_group(const train_data::DistPlacement& p,
                                       c10::intrusive_ptr<c10d::Store> store,
                                       const std::string& prefix, const std::string& bind_addr) {
  const bool nccl = use_nccl(p);
  const std::string where = where_of(p);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  c10::intrusive_ptr<CollectiveGroup> group;
  try {
    if (nccl) {
#ifdef USE_C10D_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = p.timeout;
      group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, p.rank, p.world_size, opts);
#endif
    } else {
#ifdef AJET_HAVE_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create(p.timeout);
      opts->devices.push_back(gloo_device(p, bind_addr));
      opts->threads = 2;
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, p.rank, p.world_size, opts);
#endif
    }
  } catch (const std::exception& e) {
    fail(ErrorCode::kUnavailable,
         std::string("distributed ") + (nccl ? "NCCL" : "Gloo") + " group (" + where +
             "): not every rank joined within " + seconds(p.timeout) +
             " s, or the ranks could not connect to each other: " + describe(e));
  }
  log().info("data parallel: {} joined the {} group", where, nccl ? "NCCL" : "Gloo");
  return std::make_shared<C10dCollective>(p, store, group);
}

}  // namespace

std::shared_ptr<Collective> make_collective(const train_data::DistPlacement& p) {
  if (p.world_size == 1) return std::make_shared<SingleRank>();
  use_nccl(p);  // a backend this build lacks fails before the rendezvous
  const std::string where = where_of(p);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions so;
    so.port = p.master_port;
    so.isServer = p.rank == 0;
    so.numWorkers = static_cast<size_t>(p.world_size);
    so.waitWorkers = true;
    so.timeout = p.timeout;
    store = c10::make_intrusive<c10d::TCPStore>(p.master_addr, so);
  } catch (const std::exception& e) {
    const std::string why = describe(e);
    const std::string within = " within " + seconds(p.timeout) + " s";
    if (p.rank == 0) {
      const bool bind = why.find("failed to listen") != std::string::npos ||
                        why.find("failed to bind") != std::string::npos;
      fail(ErrorCode::kUnavailable, "distributed rendezvous (" + where + "): " +
                                        (bind ? "could not serve the store: port " +
                                                    std::to_string(p.master_port) + " is in use"
                                              : "not every rank joined the store" + within) +
                                        ": " + why);
    }
    fail(ErrorCode::kUnavailable, "distributed rendezvous (" + where +
                                      "): could not reach the store at " + p.master() +
                                      " or not every rank joined" + within + ": " + why);
  }
  return make_group(p, store, "ajet_default_pg", "");
}

struct RendezvousStore::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

RendezvousStore::RendezvousStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousStore::~RendezvousStore() = default;

uint16_t RendezvousStore::port() const { return impl_->store->getPort(); }

std::shared_ptr<RendezvousStore> RendezvousStore::serve(std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  try {
    c10d::TCPStoreOptions so;
    so.port = 0;  // the OS picks; the front hands it to the other ranks
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = timeout;
    impl->store = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", so);
  } catch (const std::exception& e) {
    fail(ErrorCode::kUnavailable, "could not serve a rendezvous store: " + describe(e));
  }
  return std::make_shared<RendezvousStore>(std::move(impl));
}

std::shared_ptr<Collective> join_collective(const train_data::DistPlacement& p,
                                            const std::string& name,
                                            std::shared_ptr<RendezvousStore> served,
                                            const std::string& bind_addr) {
  if (p.world_size == 1) return std::make_shared<SingleRank>();
  use_nccl(p);
  c10::intrusive_ptr<c10d::Store> store;
  if (p.rank == 0) {
    if (!served) invalid_argument("join_collective: rank 0 must serve the rendezvous store");
    store = served->impl().store;
  } else {
    try {
      c10d::TCPStoreOptions so;
      so.port = p.master_port;
      so.isServer = false;
      so.waitWorkers = false;
      so.timeout = p.timeout;
      store = c10::make_intrusive<c10d::TCPStore>(p.master_addr, so);
    } catch (const std::exception& e) {
      fail(ErrorCode::kUnavailable, "distributed rendezvous (" + where_of(p) +
                                        "): could not reach the store at " + p.master() + ": " +
                                        describe(e));
    }
  }
  return make_group(p, store, name, bind_addr);
}

namespace {

// One int64 tensor of `values` from root to every rank.
std::vector<int64_t> broadcast_ints(Collective& c, std::vector<int64_t> values, int root) {
  std::vector<torch::Tensor> t = {torch::tensor(values, torch::kInt64)};
  c.broadcast(t, root);
  const int64_t* data = t[0].data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + t[0].numel());
}

// Root's `value` goes to every rank; answers, on every rank alike, how many ranks hold another.
int64_t ranks_differing(Collective& c, int64_t value, int root) {
  const int64_t roots = broadcast_ints(c, {value}, root)[0];
  std::vector<torch::Tensor> differs = {torch::tensor({int64_t(value != roots)}, torch::kInt64)};
  c.all_reduce_sum(differs);
  return differs[0].item<int64_t>();
}

// Broadcasts `tensors` from root unless every rank already holds root's values (by checksum).
// Returns whether it sent them.
bool broadcast_unless_equal(Collective& c, std::vector<torch::Tensor>& tensors, int root) {
  if (ranks_differing(c, int64_t(tensors_checksum(tensors)), root) == 0) return false;
  c.broadcast(tensors, root);
  return true;
}

std::string broadcast_text(Collective& c, const std::string& text, int root) {
  const int64_t n = broadcast_ints(c, {int64_t(text.size())}, root)[0];
  std::vector<torch::Tensor> t = {torch::zeros({n}, torch::kUInt8)};
  if (c.rank() == root && n > 0) std::memcpy(t[0].data_ptr(), text.data(), size_t(n));
  c.broadcast(t, root);
  return std::string(static_cast<const char*>(t[0].data_ptr()), size_t(n));
}

}  // namespace

void broadcast_trainer(Trainer& trainer, Collective& c, int root) {
  torch::NoGradGuard no_grad;
  const bool is_root = c.rank() == root;
  // The header: counters, the shuffle RNG, and which optimizer entries exist (a rank that never
  // stepped has none).
  // Only root's own state is read (a copy of its optimizer moments); the others receive.
  Trainer::State mine;
  if (is_root) mine = trainer.state();
  Json header = Json::object();
  if (is_root) {
    Json entries = Json::array();
    for (const auto& e : mine.optimizer)
      entries.push_back(Json{{"name", e.name}, {"step", e.step}});
    header = Json{{"global_step", mine.global_step},
                  {"policy_version", mine.policy_version},
                  {"shuffle_rng", mine.shuffle_rng},
                  {"torch_rng", mine.torch_rng.defined() ? mine.torch_rng.numel() : int64_t(-1)},
                  {"optimizer", entries}};
  }
  header = parse_json(broadcast_text(c, header.dump(), root), "the broadcast trainer header");

  // Every model parameter, then the KL reference's, in place; each set only when some rank's
  // differs from root's (a re-forming of members that hold the same weights sends none, and a
  // joiner that loaded the same base model receives no reference).
  std::vector<torch::Tensor> params_now;
  for (auto& item : trainer.model()->named_parameters(/*recurse=*/true))
    params_now.push_back(item.value().detach());
  broadcast_unless_equal(c, params_now, root);
  if (auto reference = trainer.reference_model()) {
    std::vector<torch::Tensor> frozen;
    for (auto& item : (*reference)->named_parameters(/*recurse=*/true))
      frozen.push_back(item.value().detach());
    broadcast_unless_equal(c, frozen, root);
  }

  // The optimizer's moments, shaped like their parameters.
  std::map<std::string, torch::Tensor> params;
  for (auto& [name, p] : trainer.trainable_parameters()) params[name] = p;
  std::map<std::string, const Trainer::OptimizerEntry*> own;
  for (const auto& e : mine.optimizer) own[e.name] = &e;
  Trainer::State st;
  st.global_step = header.at("global_step").get<int64_t>();
  st.policy_version = header.at("policy_version").get<int64_t>();
  st.shuffle_rng = header.at("shuffle_rng").get<std::string>();
  std::vector<torch::Tensor> moments;
  for (const Json& e : header.at("optimizer")) {
    const std::string name = e.at("name").get<std::string>();
    auto p = params.find(name);
    if (p == params.end()) {
      fail(ErrorCode::kFailedPrecondition,
           "broadcast_trainer: rank " + std::to_string(root) + "'s optimizer entry '" + name +
               "' is not a trainable parameter here (the ranks' models differ)");
    }
    Trainer::OptimizerEntry entry;
    entry.name = name;
    entry.step = e.at("step").get<int64_t>();
    if (is_root) {
      entry.exp_avg = own.at(name)->exp_avg;
      entry.exp_avg_sq = own.at(name)->exp_avg_sq;
    } else {
      entry.exp_avg = torch::zeros_like(p->second);
      entry.exp_avg_sq = torch::zeros_like(p->second);
    }
    moments.push_back(entry.exp_avg);
    moments.push_back(entry.exp_avg_sq);
    st.optimizer.push_back(std::move(entry));
  }
  const int64_t rng_bytes = header.at("torch_rng").get<int64_t>();
  if (rng_bytes >= 0) {
    st.torch_rng = is_root ? mine.torch_rng.clone() : torch::zeros({rng_bytes}, torch::kUInt8);
    moments.push_back(st.torch_rng);
  }
  if (!moments.empty()) c.broadcast(moments, root);
  if (!is_root) trainer.load_state(st);
}

PushedWeights push_parameters(model::Qwen2Model& model, int64_t policy_version, Collective& c,
                              int root, PushState* state) {
  std::vector<torch::Tensor>* buffers = state ? &state->buffers : nullptr;
  torch::NoGradGuard no_grad;
  const bool is_root = c.rank() == root;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& item : model->named_parameters(/*recurse=*/true))
    named.emplace_back(item.key(), item.value().detach());
  // The same parameters by name, shape and dtype on every rank, or nobody goes on.
  uint64_t layout = fnv1a64("ajet parameter layout");
  for (const auto& [name, t] : named) {
    std::string key = name + ":" + std::string(c10::toString(t.scalar_type()));
    for (int64_t d : t.sizes()) key += "," + std::to_string(d);
    layout = (layout ^ fnv1a64(key)) * 0x100000001b3ULL;
  }
  PushedWeights out;
  const std::vector<int64_t> header =
      broadcast_ints(c, {policy_version, int64_t(named.size())}, root);
  out.policy_version = header[0];
  if (const int64_t n = ranks_differing(c, int64_t(layout), root); n > 0) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("weight push: the parameters of {} receiver(s) differ from the trainer's "
                     "(names, shapes or dtypes; the trainer has {}, {} here): start every "
                     "replica with the same base model, dtype and ajet.lora settings",
                     n, header[1], named.size()));
  }
  // Which parameters root trains, as a 0/1 mask in parameter order.
  std::vector<int64_t> mask(named.size(), 0);
  if (is_root) {
    size_t i = 0;  // from the parameters themselves: `named` holds detached views
    for (auto& item : model->named_parameters(/*recurse=*/true))
      mask[i++] = item.value().requires_grad() ? 1 : 0;
  }
  mask = broadcast_ints(c, mask, root);
  for (int trainable = 1; trainable >= 0; --trainable) {
    std::vector<size_t> index;
    std::vector<torch::Tensor> mine;
    for (size_t i = 0; i < named.size(); ++i) {
      if (mask[i] != trainable) continue;
      index.push_back(i);
      mine.push_back(named[i].second);
    }
    if (index.empty()) continue;
    auto started = std::chrono::steady_clock::now();
    std::vector<std::pair<const void*, uint32_t>> key;
    for (const torch::Tensor& t : mine) key.emplace_back(t.data_ptr(), t._version());
    PushState::Sum* cached = state ? &state->sums[trainable] : nullptr;
    if (cached && cached->key != key) *cached = PushState::Sum{key, tensors_checksum(mine)};
    const int64_t sum = int64_t(cached ? cached->value : tensors_checksum(mine));
    const int64_t differing = ranks_differing(c, sum, root);
    out.compare_s += seconds_since(started);
    if (differing == 0) continue;
    started = std::chrono::steady_clock::now();
    std::vector<torch::Tensor> tensors;
    if (buffers && buffers->size() != named.size()) buffers->assign(named.size(), torch::Tensor());
    for (size_t k = 0; k < index.size(); ++k) {
      out.bytes += int64_t(mine[k].numel() * mine[k].element_size());
      if (is_root) {
        tensors.push_back(mine[k].contiguous());
        continue;
      }
      torch::Tensor* kept = buffers ? &(*buffers)[index[k]] : nullptr;
      if (kept && kept->defined() && kept->sizes().equals(mine[k].sizes()) &&
          kept->scalar_type() == mine[k].scalar_type() && kept->device() == mine[k].device()) {
        tensors.push_back(*kept);
        continue;
      }
      tensors.push_back(torch::empty_like(mine[k], torch::MemoryFormat::Contiguous));
      if (kept) *kept = tensors.back();
    }
    c.broadcast(tensors, root);
    out.transfer_s += seconds_since(started);
    (trainable ? out.sent_trainable : out.sent_frozen) = true;
    if (!is_root) {
      for (size_t k = 0; k < index.size(); ++k) out.staged.emplace_back(index[k], tensors[k]);
    }
  }
  // Root's checksum, and a receiver's after the swap, computed before it.
  const auto verifying = std::chrono::steady_clock::now();
  const uint64_t mine = is_root ? named_tensors_checksum(named) : 0;
  out.checksum = uint64_t(broadcast_ints(c, {int64_t(mine)}, root)[0]);
  if (!is_root) {
    std::vector<std::pair<std::string, torch::Tensor>> after = named;
    for (const auto& [i, t] : out.staged) after[i].second = t;
    const uint64_t got = named_tensors_checksum(after);
    if (got != out.checksum) {
      fail(ErrorCode::kDataLoss,
           fmt::format("weight push: the received weights have checksum {:016x}, the trainer's "
                       "{:016x}; they are not used",
                       got, out.checksum));
    }
  }
  out.verify_s = seconds_since(verifying);
  return out;
}

void apply_pushed_weights(model::Qwen2Model& model, const PushedWeights& pushed) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params;
  for (auto& item : model->named_parameters(/*recurse=*/true)) params.push_back(item.value());
  for (const auto& [i, t] : pushed.staged) {
    if (i >= params.size() || !params[i].sizes().equals(t.sizes())) {
      fail(ErrorCode::kFailedPrecondition,
           "apply_pushed_weights: the model's parameters changed since the push");
    }
    params[i].copy_(t);
  }
}

}  // namespace ajet::train
