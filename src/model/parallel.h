// at::parallel_for for this project's own kernels. It is a header template: under libtorch's OpenMP
// backend a translation unit compiled without -fopenmp gets a serial loop, whatever the thread count
// (the engine's kernels once ran on one thread of two that way). Include this instead of
// <ATen/Parallel.h> where at::parallel_for is called, and link the module with ajet_link_openmp
// (cmake/AjetTorch.cmake); compute.h's own_parallel_for_threads() checks the result at run time.
#pragma once

#include <ATen/Parallel.h>

#if AT_PARALLEL_OPENMP && !defined(INTRA_OP_PARALLEL)
#error "compile with OpenMP (ajet_link_openmp): at::parallel_for would run on one thread"
#endif
