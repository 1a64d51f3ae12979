# install() rules and the CMake package hla_oracle: the static libraries
# hla::reference, hla::io, hla::engine, hla::check, the generator and fuzzer hla::gen and
# hla::fuzz (when built), the header-only C ABI hla::impl_abi, their headers,
# and the `hla` tool.
#
#   find_package(hla_oracle CONFIG REQUIRED)
#   target_link_libraries(my_test PRIVATE hla::check)
include(CMakePackageConfigHelpers)
set(hla_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/hla_oracle)

set(hla_installed_libraries hla_reference hla_io hla_engine hla_check hla_impl_abi)
set(hla_installed_headers ${PROJECT_SOURCE_DIR}/reference/include/ ${PROJECT_SOURCE_DIR}/io/include/
                          ${PROJECT_SOURCE_DIR}/engine/include/ ${PROJECT_SOURCE_DIR}/check/include/)
if(TARGET hla_fuzz)
  list(APPEND hla_installed_libraries hla_gen hla_fuzz)
  list(APPEND hla_installed_headers ${PROJECT_SOURCE_DIR}/fuzz/include/)
endif()
install(TARGETS ${hla_installed_libraries} EXPORT hla_oracleTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})  # include dirs: $<INSTALL_INTERFACE:include> on each target
install(DIRECTORY ${hla_installed_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_SOURCE_DIR}/include/hla_impl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET hla_fuzz)  # hla_add_candidate_fuzzer() and its driver, included by hla_oracleConfig.cmake
  install(FILES ${PROJECT_SOURCE_DIR}/fuzz/candidate_fuzzer/hla_candidate_fuzzer.cmake
                ${PROJECT_SOURCE_DIR}/fuzz/candidate_fuzzer/hla_candidate_fuzzer.cpp DESTINATION ${hla_package_dir})
endif()
if(TARGET hla)
  install(TARGETS hla RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT hla_oracleTargets NAMESPACE hla:: DESTINATION ${hla_package_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/hla_oracleConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hla_oracleConfig.cmake INSTALL_DESTINATION ${hla_package_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hla_oracleConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hla_oracleConfig.cmake ${PROJECT_BINARY_DIR}/hla_oracleConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/hla_oracle_numeric_libraries.cmake
        DESTINATION ${hla_package_dir})
