// Picks OpenBLAS's compute kernel when OpenBLAS does not know the CPU. A DYNAMIC_ARCH OpenBLAS
// (Debian's) chooses its kernel from the CPU model number and falls back to the SSE3 "Prescott"
// kernel for models newer than it knows: Debian 12's 0.3.21 does so on this project's Xeons (family
// 6, model 207), where an SFT step then runs 2-2.7x slower than with the AVX-512 kernel
// (docs/benchmarks.md). OpenBLAS reads its kernel once, at load, from OPENBLAS_CORETYPE; so a
// binary that runs BLAS calls pick_blas_kernel(argc, argv) first in main, which, when the kernel in
// use is weaker than what the CPU (and OS) support, sets OPENBLAS_CORETYPE and re-executes the
// process (same pid, same argv). It never overrides a user's OPENBLAS_CORETYPE, never picks a
// kernel the CPU cannot run, and AJET_BLAS_KERNEL=keep turns it off.
#pragma once

#include <string>
#include <string_view>

namespace ajet::model {

struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
};

// This machine's features, as usable under the running OS (the compiler runtime checks XCR0).
CpuFeatures detect_cpu_features();

// The OpenBLAS core name to force instead of `current` (openblas_get_corename()), or "" to keep it:
// "SkylakeX" on AVX-512 (F, CD, BW, DQ, VL), else "Haswell" on AVX2 + FMA, and only when `current`
// is a kernel without AVX2 (the generic fallbacks). Case-insensitive.
std::string better_openblas_core(std::string_view current, const CpuFeatures& cpu);

// The start-up check: call it first in main, before any thread or file exists. It returns when the
// kernel is kept (the user set OPENBLAS_CORETYPE or AJET_BLAS_KERNEL=keep, the kernel is good
// enough, or the re-exec failed, which it reports on stderr); otherwise the process continues as
// its re-executed self.
void pick_blas_kernel(int argc, char** argv);

// The kernel OpenBLAS uses in this process ("" when OpenBLAS is not the BLAS), and, when the
// start-up check changed it, the one OpenBLAS had picked itself (else "").
std::string openblas_core();
std::string openblas_core_replaced();

}  // namespace ajet::model
