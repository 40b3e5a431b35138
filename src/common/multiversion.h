// The engine's hand-written CPU kernels (model/linear_kernel.cc, model/row_kernels.cc,
// infer/attention_kernel.cc, batching/sampler.cc) are built for AVX-512, AVX2+FMA and baseline
// x86-64 and picked at load time (GCC's target_clones), so one binary is fast on the machine it
// runs on without -march=native. Their vector helpers are always inlined, so each clone's calling
// convention for vector arguments never matters (hence -Wpsabi is silenced where they are defined).
#pragma once

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define AJET_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AJET_MULTIVERSION
#endif
#define AJET_INLINE inline __attribute__((always_inline))
