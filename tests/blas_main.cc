// main() of the test binaries that run libtorch maths: the BLAS-kernel start-up check the engine
// makes (model/blas_kernel.h), then GoogleTest. ajet_test(... BLAS_MAIN) uses it instead of
// gtest_main.
#include <gtest/gtest.h>

#include "model/blas_kernel.h"

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
