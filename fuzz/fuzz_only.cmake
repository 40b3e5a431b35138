# Included by the top-level CMakeLists.txt when AJET_FUZZ_ONLY=ON: only the libraries the fuzz targets
# link (never libtorch), then the targets. Under clang every object is built with ASan, UBSan (which
# aborts, so libFuzzer sees it) and libFuzzer's coverage instrumentation.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  add_compile_options(-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g -O1)
  add_link_options(-fsanitize=address,undefined)
endif()
foreach(module common config hf text)  # in dependency order
  add_subdirectory(${PROJECT_SOURCE_DIR}/src/${module} ${PROJECT_BINARY_DIR}/src/${module})
endforeach()
add_subdirectory(${PROJECT_SOURCE_DIR}/fuzz ${PROJECT_BINARY_DIR}/fuzz)
