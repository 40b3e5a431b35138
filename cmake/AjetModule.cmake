include(GoogleTest)
# ajet_module(name SOURCES ... DEPS ...): a static library ajet_<name> from src/<name>.
function(ajet_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ajet_${name} STATIC ${M_SOURCES})
  target_include_directories(ajet_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ajet_${name} PUBLIC ${M_DEPS})
endfunction()

# ajet_test(name SOURCES ... DEPS ... [LABELS ...]): one GoogleTest binary, tests discovered by ctest.
function(ajet_test name)
  cmake_parse_arguments(T "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    AJET_SOURCE_DIR="${PROJECT_SOURCE_DIR}" AJET_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set(labels ${T_LABELS})
  if(NOT labels)
    set(labels unit)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 120 PROPERTIES LABELS "${labels}")
endfunction()

# ajet_glob_module(name DEPS ...): ajet_<name> from every *.cc in the current source dir (none: no target).
function(ajet_glob_module name)
  cmake_parse_arguments(M "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  if(srcs)
    ajet_module(${name} SOURCES ${srcs} DEPS ${M_DEPS})
  endif()
endfunction()

# ajet_glob_test(module DEPS ...): test binary <module>_test from tests/<module>/*_test.cc.
function(ajet_glob_test module)
  cmake_parse_arguments(T "" "" "DEPS;LABELS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  if(srcs)
    ajet_test(${module}_test SOURCES ${srcs} DEPS ${T_DEPS} LABELS ${T_LABELS})
  endif()
endfunction()
