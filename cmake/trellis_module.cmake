# trellis_module(NAME [TORCH] DEPS ...): one static library per src/ folder.
# Sources are every .cpp in the folder and its subfolders; TORCH modules get libtorch and a shared precompiled header
# so that its (slow) headers are parsed once per module rather than once per file.
function(trellis_module name)
  cmake_parse_arguments(ARG "TORCH" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  add_library(trellis_${name} STATIC ${srcs})
  target_include_directories(trellis_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(trellis_${name} PUBLIC ${ARG_DEPS})
  target_compile_options(trellis_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(ARG_TORCH)
    # OpenMP is public: every target that includes torch headers must compile at::parallel_for
    # with it (see CMakeLists.txt).
    target_link_libraries(trellis_${name} PUBLIC ${TORCH_LIBRARIES} OpenMP::OpenMP_CXX)
    target_precompile_headers(trellis_${name} REUSE_FROM trellis_torch_pch)
  endif()
endfunction()

# trellis_tests(NAME [TORCH] [NEEDS_BINARY] DEPS ...): one gtest binary per tests/ folder.
function(trellis_tests name)
  cmake_parse_arguments(ARG "TORCH;NEEDS_BINARY" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  add_executable(${name}_tests ${srcs})
  target_link_libraries(${name}_tests PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name}_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name}_tests PRIVATE TRELLIS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(ARG_TORCH)
    target_precompile_headers(${name}_tests REUSE_FROM trellis_torch_pch)
  endif()
  if(ARG_NEEDS_BINARY)  # integration tests run the real `trellis` binary
    target_compile_definitions(${name}_tests PRIVATE TRELLIS_BIN="$<TARGET_FILE:trellis>")
    add_dependencies(${name}_tests trellis)
  endif()
  # The RL integration test trains for ~5 minutes beside other tests on 2 cores; the timeout only
  # catches hangs, so it leaves that room to spare on a slower machine.
  gtest_discover_tests(${name}_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 1200)
endfunction()
