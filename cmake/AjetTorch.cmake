# libtorch, for the engine targets only (src/model, src/infer, src/train, apps/ajet-engine).
# Each translation unit that includes torch/torch.h costs ~20 s and ~1 GB to compile.
find_package(Torch REQUIRED)
find_package(OpenMP)
