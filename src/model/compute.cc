#include "model/compute.h"

#include "model/blas_kernel.h"
#include "model/parallel.h"

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <dlfcn.h>

#include <fstream>
#include <mutex>
#include <set>
#include <thread>

namespace ajet::model {

namespace {

// Shared libraries whose path names a BLAS, as mapped into this process right now.
std::string loaded_blas_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    auto base = path.substr(path.rfind('/') + 1);
    if (base.find("blas") != std::string::npos || base.find("mkl_") != std::string::npos)
      found.insert(path);
  }
  std::string out;
  for (const auto& p : found) out += (out.empty() ? "" : ", ") + p;
  return out.empty() ? "none mapped" : out;
}

}  // namespace

void configure_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
}

int own_parallel_for_threads(int64_t items) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  at::parallel_for(0, items, 1, [&](int64_t, int64_t) {
    std::lock_guard lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  return static_cast<int>(seen.size());
}

std::string describe_compute_backend() {
  std::string blas = "BLAS " + loaded_blas_libraries();
  // OpenBLAS reports its build (kernel, threading) when it is the BLAS in use.
  using ConfigFn = char* (*)();
  if (auto fn = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config")))
    blas += " (" + std::string(fn()) + ")";
  if (const std::string was = openblas_core_replaced(); !was.empty()) {
    blas += " [kernel " + openblas_core() + " set by ajet: OpenBLAS picked " + was +
            " for this CPU; blas_kernel.h]";
  }
  std::string parallel = at::get_parallel_info();
  std::string backend = "unknown";
  if (auto pos = parallel.find("ATen parallel backend: "); pos != std::string::npos) {
    backend = parallel.substr(pos + 23, parallel.find('\n', pos) - pos - 23);
  }
  std::string config = at::show_config();
  std::string capability = "unknown";
  if (auto pos = config.find("CPU capability usage: "); pos != std::string::npos) {
    capability = config.substr(pos + 22, config.find('\n', pos) - pos - 22);
  }
  const int own = own_parallel_for_threads(at::get_num_threads());
  const std::string own_note =
      own < at::get_num_threads()
          ? " [this build's own kernels run on " + std::to_string(own) + ": built without OpenMP]"
          : "";
  return blas + ", " + std::to_string(at::get_num_threads()) + " intra-op threads (" + backend +
         ")" + own_note + ", " + std::to_string(at::get_num_interop_threads()) +
         " inter-op, CPU capability " + capability + ", CUDA " +
         (at::globalContext().hasCUDA() ? "available" : "unavailable");
}

}  // namespace ajet::model
