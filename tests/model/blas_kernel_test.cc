// The start-up choice of OpenBLAS kernel (model/blas_kernel.h): the decision rule, what this very
// test binary (which links ajet_model, so the start-up check ran in it) ends up using, and what a
// fresh process (blas_kernel_probe) picks under each setting.
#include "model/blas_kernel.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ajet::model {
namespace {

CpuFeatures avx512() {
  return CpuFeatures{.avx2 = true,
                     .fma = true,
                     .avx512f = true,
                     .avx512cd = true,
                     .avx512bw = true,
                     .avx512dq = true,
                     .avx512vl = true};
}

TEST(BlasKernel, GenericFallbackKernelsAreReplacedByWhatTheCpuRuns) {
  EXPECT_EQ(better_openblas_core("Prescott", avx512()), "SkylakeX");
  EXPECT_EQ(better_openblas_core("prescott", avx512()), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Nehalem", avx512()), "SkylakeX");
  CpuFeatures avx2{.avx2 = true, .fma = true};
  EXPECT_EQ(better_openblas_core("Prescott", avx2), "Haswell");
  CpuFeatures partial = avx512();
  partial.avx512vl = false;  // AVX-512 without VL: SkylakeX's kernels would fault
  EXPECT_EQ(better_openblas_core("Prescott", partial), "Haswell");
  CpuFeatures avx2_without_fma{.avx2 = true};
  EXPECT_EQ(better_openblas_core("Prescott", avx2_without_fma), "");
  EXPECT_EQ(better_openblas_core("Prescott", CpuFeatures{}), "");
}

TEST(BlasKernel, KernelsThatAlreadyUseAvx2AreKept) {
  for (const char* core :
       {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SAPPHIRERAPIDS", "Excavator"}) {
    EXPECT_EQ(better_openblas_core(core, avx512()), "") << core;
  }
  EXPECT_EQ(better_openblas_core("", avx512()), "") << "no OpenBLAS: nothing to choose";
}

// Runs the probe (a fresh process linking ajet_model) with `env` (a shell prefix) on top of an
// environment without any kernel setting; what it prints: "<core> <core replaced, or ->".
std::string probe(const std::string& env) {
  const std::string cmd =
      "env -u OPENBLAS_CORETYPE -u AJET_BLAS_KERNEL_REPLACED -u AJET_BLAS_KERNEL " + env + " '" +
      AJET_BINARY_DIR "/bin/blas_kernel_probe' 2>/dev/null";
  std::string out;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
    EXPECT_EQ(pclose(pipe), 0) << cmd;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// The OPENBLAS_CORETYPE a user set for this test run (one our own re-exec set comes with
// AJET_BLAS_KERNEL_REPLACED), as a probe prefix: it applies to the probe as to this process.
std::string users_setting() {
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  if (core == nullptr || std::getenv("AJET_BLAS_KERNEL_REPLACED") != nullptr) return "";
  return std::string("OPENBLAS_CORETYPE=") + core;
}

TEST(BlasKernel, ThisProcessRunsAKernelTheCpuSupportsBest) {
  const std::string core = openblas_core();
  if (core.empty()) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  EXPECT_EQ(better_openblas_core(core, detect_cpu_features()), "")
      << "still on OpenBLAS's " << core << " kernel";
  // A fresh start without any setting picks the same kernel again, and says whether it replaced
  // one.
  const std::string replaced = openblas_core_replaced();
  EXPECT_EQ(probe(users_setting()), core + " " + (replaced.empty() ? "-" : replaced));
}

TEST(BlasKernel, AUsersSettingIsNeverOverridden) {
  if (openblas_core().empty()) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  EXPECT_EQ(probe("OPENBLAS_CORETYPE=Prescott"), "Prescott -");
}

TEST(BlasKernel, KeepTurnsTheCheckOff) {
  if (openblas_core().empty()) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  const std::string replaced =
      openblas_core_replaced();  // what OpenBLAS picks by itself on this CPU
  const std::string own = replaced.empty() ? openblas_core() : replaced;
  EXPECT_EQ(probe(users_setting() + " AJET_BLAS_KERNEL=keep"), own + " -");
}

}  // namespace
}  // namespace ajet::model
