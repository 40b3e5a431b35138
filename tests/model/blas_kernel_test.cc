// The start-up choice of OpenBLAS kernel (model/blas_kernel.h): the decision rule, and what this very
// test binary (which links ajet_model, so the start-up check ran in it) ends up using.
#include "model/blas_kernel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ajet::model {
namespace {

CpuFeatures avx512() {
  return CpuFeatures{.avx2 = true, .fma = true, .avx512f = true, .avx512cd = true, .avx512bw = true, .avx512dq = true,
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
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SAPPHIRERAPIDS", "Excavator"}) {
    EXPECT_EQ(better_openblas_core(core, avx512()), "") << core;
  }
  EXPECT_EQ(better_openblas_core("", avx512()), "") << "no OpenBLAS: nothing to choose";
}

// Runs this binary again with `env` (a shell prefix) on one test; its exit status.
int run_self(const std::string& env, const std::string& test) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "env -u OPENBLAS_CORETYPE -u AJET_BLAS_KERNEL_REPLACED -u AJET_BLAS_KERNEL " + env + " '" +
                          self + "' --gtest_filter=" + test + " > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Only meaningful when started by the tests below, which set AJET_TEST_EXPECT_CORE.
TEST(BlasKernel, ChildReportsItsKernel) {
  const char* expect = std::getenv("AJET_TEST_EXPECT_CORE");
  if (expect == nullptr) GTEST_SKIP() << "run by BlasKernel.* tests in a child process";
  const char* replaced = std::getenv("AJET_TEST_EXPECT_REPLACED");
  EXPECT_EQ(openblas_core(), expect);
  EXPECT_EQ(openblas_core_replaced(), replaced == nullptr ? "" : replaced);
}

TEST(BlasKernel, ThisProcessRunsAKernelTheCpuSupportsBest) {
  const std::string core = openblas_core();
  if (core.empty()) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  EXPECT_EQ(better_openblas_core(core, detect_cpu_features()), "") << "still on OpenBLAS's " << core << " kernel";
  // A fresh start without any setting picks the same kernel again, and says whether it replaced one.
  const std::string replaced = openblas_core_replaced();
  EXPECT_EQ(run_self("AJET_TEST_EXPECT_CORE=" + core + (replaced.empty() ? "" : " AJET_TEST_EXPECT_REPLACED=" + replaced),
                     "BlasKernel.ChildReportsItsKernel"),
            0);
}

TEST(BlasKernel, AUsersSettingIsNeverOverridden) {
  if (openblas_core().empty()) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  EXPECT_EQ(run_self("OPENBLAS_CORETYPE=Prescott AJET_TEST_EXPECT_CORE=Prescott", "BlasKernel.ChildReportsItsKernel"), 0);
}

TEST(BlasKernel, KeepTurnsTheCheckOff) {
  if (openblas_core().empty()) GTEST_SKIP() << "the BLAS in use is not OpenBLAS";
  const std::string replaced = openblas_core_replaced();  // what OpenBLAS picks by itself on this CPU
  const std::string own = replaced.empty() ? openblas_core() : replaced;
  EXPECT_EQ(run_self("AJET_BLAS_KERNEL=keep AJET_TEST_EXPECT_CORE=" + own, "BlasKernel.ChildReportsItsKernel"), 0);
}

}  // namespace
}  // namespace ajet::model
