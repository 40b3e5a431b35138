// A process that makes the start-up check as ajet-engine does and prints the OpenBLAS kernel it
// ended up with, for blas_kernel_test.cc: "<core> <core OpenBLAS had picked itself, or ->". Exit 0.
#include <cstdio>
#include <string>

#include "model/blas_kernel.h"

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);
  const std::string replaced = ajet::model::openblas_core_replaced();
  std::printf("%s %s\n", ajet::model::openblas_core().c_str(),
              replaced.empty() ? "-" : replaced.c_str());
  return 0;
}
