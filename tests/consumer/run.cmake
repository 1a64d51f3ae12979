# ctest consumer_package: installs the built project into a temporary prefix,
# then configures, builds and runs tests/consumer against it, as a separate
# project that finds the package with find_package(hla_oracle CONFIG).
# Variables: BUILD_DIR (the project's build), WORK (scratch), SOURCE
# (tests/consumer), CONFIG (build type), CXX (compiler), LINK_FLAGS (optional),
# LIBDIR, INCLUDEDIR, BINDIR (the install layout, relative to the prefix).
set(prefix "${WORK}/prefix")
set(build "${WORK}/build")
file(REMOVE_RECURSE "${WORK}")

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer_package: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "consumer_package: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(config_args)
if(CONFIG)
  list(APPEND config_args --config "${CONFIG}")
endif()
step("install into ${prefix}" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})
foreach(f ${LIBDIR}/libhla_reference.a ${LIBDIR}/libhla_io.a ${LIBDIR}/libhla_engine.a ${LIBDIR}/libhla_check.a
          ${INCLUDEDIR}/hla_impl.h ${INCLUDEDIR}/hla/check/check.hpp ${INCLUDEDIR}/hla/engine/reference.hpp ${INCLUDEDIR}/hla/io/fixture.hpp
          ${INCLUDEDIR}/hla/fuzz/campaign.hpp ${INCLUDEDIR}/hla/gen/suite.hpp ${LIBDIR}/libhla_fuzz.a ${LIBDIR}/libhla_gen.a ${INCLUDEDIR}/hla/ops/hla2.hpp ${BINDIR}/hla
          ${LIBDIR}/cmake/hla_oracle/hla_oracleConfig.cmake ${LIBDIR}/cmake/hla_oracle/hla_oracleConfigVersion.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "consumer_package: the install lacks ${f}")
  endif()
endforeach()
step("configure" "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${build}" "-DCMAKE_PREFIX_PATH=${prefix}"
     "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}")
step("build" "${CMAKE_COMMAND}" --build "${build}" ${config_args})
step("run" "${build}/consumer" "${WORK}/findings")
message(STATUS "${step_output}")
# The candidate fuzzer (built where clang has libFuzzer): 100 cases of the example kernel, none failing.
if(EXISTS "${build}/consumer_candidate_fuzzer")
  file(MAKE_DIRECTORY "${WORK}/fuzz-corpus")
  step("candidate fuzzer" "${build}/consumer_candidate_fuzzer" -seed=1 -runs=100 "${WORK}/fuzz-corpus")
else()
  message(STATUS "consumer_package: candidate fuzzer: skipped (no clang with libFuzzer)")
endif()
