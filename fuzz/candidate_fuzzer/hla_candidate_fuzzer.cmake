# hla_add_candidate_fuzzer(TARGET LIB): a libFuzzer executable TARGET that
# fuzzes LIB, a library target implementing the C ABI (include/hla_impl.h),
# in its own process: each input's bytes select a case of `hla fuzz`'s stream
# inside what LIB declares (the same bytes, the same case), LIB computes it,
# and the case is judged as `hla fuzz` judges it; a failure prints its finding
# (shrunk; files in $HLA_FINDINGS, default hla-findings/) and aborts, so that
# the engine records the input. ClusterFuzzLite or OSS-Fuzz then run it on
# many machines, with a corpus, deduplication and minimization
# (docs/fuzzing.md "A kernel on ClusterFuzzLite or OSS-Fuzz").
#
#   find_package(hla_oracle CONFIG REQUIRED)
#   hla_add_candidate_fuzzer(my_kernel_fuzzer my_kernel)   # my_kernel: a STATIC or SHARED library
#
# Needs clang. The engine: $LIB_FUZZING_ENGINE when the environment sets it
# at configure time (ClusterFuzzLite, OSS-Fuzz: their CFLAGS and CXXFLAGS
# carry the sanitizers and the coverage instrumentation), else the cache
# variable HLA_LIB_FUZZING_ENGINE, else libFuzzer (-fsanitize=fuzzer). Compile
# LIB with -fsanitize=fuzzer-no-link for coverage of its own code (the
# engines' CFLAGS do). Installed with the package (hla_oracleConfig.cmake
# includes it), the driver source beside it.
set_property(GLOBAL PROPERTY HLA_CANDIDATE_FUZZER_DRIVER ${CMAKE_CURRENT_LIST_DIR}/hla_candidate_fuzzer.cpp)

function(hla_add_candidate_fuzzer target lib)
  if(NOT TARGET ${lib})
    message(FATAL_ERROR "hla_add_candidate_fuzzer(${target} ${lib}): ${lib} is not a target (the C ABI library to fuzz)")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "hla_add_candidate_fuzzer(${target} ${lib}): needs clang (libFuzzer); "
                        "the C++ compiler is ${CMAKE_CXX_COMPILER_ID}")
  endif()
  get_property(driver GLOBAL PROPERTY HLA_CANDIDATE_FUZZER_DRIVER)
  add_executable(${target} ${driver})
  # The optional entry points are weak references, which take no member out
  # of an archive: a static LIB is linked whole.
  get_target_property(type ${lib} TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${lib}>")
  else()
    target_link_libraries(${target} PRIVATE ${lib})
  endif()
  target_link_libraries(${target} PRIVATE hla::fuzz)
  if(DEFINED ENV{LIB_FUZZING_ENGINE})
    separate_arguments(engine UNIX_COMMAND "$ENV{LIB_FUZZING_ENGINE}")
  elseif(HLA_LIB_FUZZING_ENGINE)
    separate_arguments(engine UNIX_COMMAND "${HLA_LIB_FUZZING_ENGINE}")
  else()
    # Linked with libFuzzer, the driver itself not instrumented: its coverage
    # would only add noise to the kinds of case it counts (and LIB's own).
    set(engine -fsanitize=fuzzer)
  endif()
  target_link_options(${target} PRIVATE ${engine})
  # Compiled with other flags than a precompiled header of the project that calls it.
  set_target_properties(${target} PROPERTIES DISABLE_PRECOMPILE_HEADERS ON)
endfunction()
