# libtorch, for the engine targets only (src/model, src/infer, src/train, apps/ajet-engine).
# Each translation unit that includes torch/torch.h costs ~20 s and ~1 GB to compile.
#
# Which libtorch. By default the one find_package finds on the system (Debian's CPU libtorch here).
# AJET_TORCH_PREFIX names another: an unpacked libtorch archive, or the share/cmake folder inside a
# PyTorch wheel. AJET_TORCH_FROM_PYTHON=ON asks AJET_TORCH_PYTHON's torch for that folder
# (torch.utils.cmake_prefix_path), which is how a GPU machine with a CUDA PyTorch but no libtorch
# package builds the engine with CUDA (scripts/gpu-check.sh, docs/engine.md "GPU"); the same happens
# on its own when the system has no libtorch at all. Switching libtorch needs a fresh build folder:
# Torch_DIR stays cached. Included by each libtorch directory (and, with either setting, once by the
# top-level CMakeLists.txt first), so everything here is idempotent.
set(AJET_TORCH_PREFIX "" CACHE PATH "libtorch to build against (a prefix holding share/cmake/Torch); empty: the system's")
option(AJET_TORCH_FROM_PYTHON "Build against the libtorch inside AJET_TORCH_PYTHON's PyTorch" OFF)
set(AJET_TORCH_PYTHON "python3" CACHE STRING "Python whose torch AJET_TORCH_FROM_PYTHON (or the fallback) uses")

function(_ajet_torch_prefix_from_python out)
  execute_process(
    COMMAND ${AJET_TORCH_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE prefix ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(${out} "" PARENT_SCOPE)
  if(NOT rc EQUAL 0)
    set(_AJET_TORCH_PYTHON_ERROR "${AJET_TORCH_PYTHON}: ${rc} ${err}" PARENT_SCOPE)
  elseif(NOT EXISTS "${prefix}/Torch/TorchConfig.cmake")
    set(_AJET_TORCH_PYTHON_ERROR "${AJET_TORCH_PYTHON}'s torch has no ${prefix}/Torch/TorchConfig.cmake" PARENT_SCOPE)
  else()
    set(${out} "${prefix}" PARENT_SCOPE)
  endif()
endfunction()

if(NOT Torch_FOUND)
  set(_ajet_torch_prefix "${AJET_TORCH_PREFIX}")
  if(NOT _ajet_torch_prefix AND AJET_TORCH_FROM_PYTHON)
    _ajet_torch_prefix_from_python(_ajet_torch_prefix)
    if(NOT _ajet_torch_prefix)
      message(FATAL_ERROR "AJET_TORCH_FROM_PYTHON: no libtorch from torch.utils.cmake_prefix_path: "
                          "${_AJET_TORCH_PYTHON_ERROR}")
    endif()
  endif()
  if(_ajet_torch_prefix)
    find_package(Torch REQUIRED PATHS "${_ajet_torch_prefix}" "${_ajet_torch_prefix}/share/cmake" NO_DEFAULT_PATH)
  else()
    find_package(Torch QUIET)
    if(NOT Torch_FOUND)
      # No system libtorch: a PyTorch install has one inside.
      _ajet_torch_prefix_from_python(_ajet_torch_prefix)
      if(NOT _ajet_torch_prefix)
        message(FATAL_ERROR "No libtorch: install libtorch-dev (scripts/setup.sh), set AJET_TORCH_PREFIX, or make "
                            "AJET_TORCH_PYTHON a Python with torch (${_AJET_TORCH_PYTHON_ERROR})")
      endif()
      find_package(Torch REQUIRED PATHS "${_ajet_torch_prefix}" NO_DEFAULT_PATH)
    endif()
  endif()
endif()
find_package(OpenMP)
# Modules that call at::parallel_for must compile with the OpenMP libtorch uses, or the call is a serial
# loop: libtorch's own ops stay parallel, ours do not.
function(ajet_link_openmp target)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  else()
    message(WARNING "OpenMP not found: ${target}'s at::parallel_for loops run on one thread")
  endif()
endfunction()

# Our other libraries come from Debian, built with the C++11 std::string ABI: a libtorch built with the
# old one (PyTorch wheels before 2.7, "pre-cxx11" libtorch archives) would link against them only to
# fail on the first std::string crossing. Say so at configure time.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR "libtorch at ${Torch_DIR} is built with the pre-C++11 string ABI (${TORCH_CXX_FLAGS}); "
                      "use PyTorch >= 2.7 or a cxx11-abi libtorch archive")
endif()

# AJET_TORCH_CUDA: this libtorch has CUDA (its CUDA libraries are linked through TORCH_LIBRARIES). The
# engine then reports `cuda` on a machine without a GPU as a missing GPU, not as a CPU-only build.
if(TARGET torch_cuda OR TARGET c10_cuda OR C10_CUDA_LIBRARY)
  set(AJET_TORCH_CUDA ON)
  get_directory_property(_ajet_defs COMPILE_DEFINITIONS)
  if(NOT "AJET_TORCH_CUDA=1" IN_LIST _ajet_defs)  # once per directory tree
    add_compile_definitions(AJET_TORCH_CUDA=1)
  endif()
else()
  set(AJET_TORCH_CUDA OFF)
endif()
get_property(_ajet_torch_reported GLOBAL PROPERTY AJET_TORCH_REPORTED)
if(NOT _ajet_torch_reported)
  set_property(GLOBAL PROPERTY AJET_TORCH_REPORTED ON)
  message(STATUS "libtorch ${Torch_VERSION} at ${Torch_DIR}, CUDA ${AJET_TORCH_CUDA}")
endif()
