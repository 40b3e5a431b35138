#include "model/blas_kernel.h"

#include "common/strings.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ajet::model {

namespace {

constexpr const char* kReplacedEnv =
    "AJET_BLAS_KERNEL_REPLACED";  // the kernel OpenBLAS had picked itself

}  // namespace

CpuFeatures detect_cpu_features() {
  __builtin_cpu_init();  // harmless after the runtime's own initialisation; needed if called
                         // earlier
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  return f;
}

std::string better_openblas_core(std::string_view current, const CpuFeatures& cpu) {
  // OpenBLAS x86-64 kernels that already use AVX2 (or more): nothing to gain.
  static constexpr std::array<std::string_view, 6> kAvx2Kernels = {
      "haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
  const std::string name = ascii_lower(current);
  if (name.empty() ||
      std::find(kAvx2Kernels.begin(), kAvx2Kernels.end(), name) != kAvx2Kernels.end())
    return "";
  if (cpu.avx512f && cpu.avx512cd && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl)
    return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

std::string openblas_core() {
  using CoreNameFn = char* (*)();
  auto fn = reinterpret_cast<CoreNameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name == nullptr ? "" : name;
}

std::string openblas_core_replaced() {
  const char* was = std::getenv(kReplacedEnv);
  return was == nullptr ? "" : was;
}

void pick_blas_kernel(int argc, char** argv) {
  if (argc < 1 || argv == nullptr || argv[0] == nullptr) return;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's (or our re-exec's) choice
  if (const char* mode = std::getenv("AJET_BLAS_KERNEL");
      mode != nullptr && std::strcmp(mode, "keep") == 0)
    return;
  const std::string current = openblas_core();
  const std::string better = better_openblas_core(current, detect_cpu_features());
  if (better.empty()) return;
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv(kReplacedEnv, current.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Still here: the re-exec failed. Carry on with OpenBLAS's own kernel (slower; results differ
  // only in float rounding).
  std::fprintf(
      stderr,
      "ajet: could not re-execute with OPENBLAS_CORETYPE=%s (%s); keeping OpenBLAS's %s kernel\n",
      better.c_str(), std::strerror(errno), current.c_str());
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kReplacedEnv);
}

}  // namespace ajet::model
