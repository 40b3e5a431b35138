#include "train/dist.h"

#include <c10/util/Exception.h>
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
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/log.h"

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

 private:
  train_data::DistPlacement placement_;
  c10::intrusive_ptr<c10d::Store> store_;  // rank 0 serves it; kept for the group's lifetime
  c10::intrusive_ptr<CollectiveGroup> group_;
};

#ifdef AJET_HAVE_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(const train_data::DistPlacement& p) {
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

std::shared_ptr<Collective> make_collective(const train_data::DistPlacement& p) {
  if (p.world_size == 1) return std::make_shared<SingleRank>();
  const std::string where = "rank " + std::to_string(p.rank) + " of " +
                            std::to_string(p.world_size) + ", master " + p.master();
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
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("ajet_default_pg", store);
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
      opts->devices.push_back(gloo_device(p));
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

}  // namespace ajet::train
