# GMP and MPFR (Debian: libgmp-dev, libmpfr-dev) as imported targets hla::gmp
# and hla::mpfr, and libquadmath as hla::quadmath. None ships a CMake package;
# this file is included by the project and, installed next to
# hla_oracleConfig.cmake, by the package, so that the exported targets name
# these libraries where the consumer finds them. Sets
# HLA_NUMERIC_LIBRARIES_MISSING to a message when one is not found. The
# project's own build sets HLA_NUMERIC_LIBRARIES_SCOPE to GLOBAL (visible to a
# parent project that adds it with add_subdirectory).
set(HLA_NUMERIC_LIBRARIES_MISSING "")
foreach(lib gmp mpfr)
  if(TARGET hla::${lib})
    continue()
  endif()
  find_path(HLA_${lib}_INCLUDE_DIR ${lib}.h)
  find_library(HLA_${lib}_LIBRARY ${lib})
  if(NOT HLA_${lib}_INCLUDE_DIR OR NOT HLA_${lib}_LIBRARY)
    string(APPEND HLA_NUMERIC_LIBRARIES_MISSING "${lib} not found (Debian: lib${lib}-dev): "
           "${lib}.h in '${HLA_${lib}_INCLUDE_DIR}', library '${HLA_${lib}_LIBRARY}'. ")
    continue()
  endif()
  add_library(hla::${lib} UNKNOWN IMPORTED ${HLA_NUMERIC_LIBRARIES_SCOPE})
  set_target_properties(hla::${lib} PROPERTIES
    IMPORTED_LOCATION "${HLA_${lib}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${HLA_${lib}_INCLUDE_DIR}")
endforeach()

# libquadmath (Boost's float128) comes with GCC and is linked by name. Its
# header lies in GCC's own include directory, which clang does not search and
# which cannot be added whole (GCC's intrinsics headers there would shadow
# clang's): under clang, a directory holding just the quadmath headers, copied
# from the GCC installation clang links with, is added (SYSTEM: imported).
if(NOT TARGET hla::quadmath)
  add_library(hla::quadmath INTERFACE IMPORTED ${HLA_NUMERIC_LIBRARIES_SCOPE})
  set_target_properties(hla::quadmath PROPERTIES INTERFACE_LINK_LIBRARIES quadmath)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-libgcc-file-name OUTPUT_VARIABLE hla_libgcc
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    get_filename_component(hla_gcc_include "${hla_libgcc}" DIRECTORY)
    file(GLOB hla_quadmath_headers "${hla_gcc_include}/include/quadmath*.h")
    if(NOT hla_quadmath_headers)
      string(APPEND HLA_NUMERIC_LIBRARIES_MISSING "quadmath.h not found in the include directory of the GCC "
             "installation clang uses ('${hla_gcc_include}/include'; Debian: g++). ")
    else()
      file(COPY ${hla_quadmath_headers} DESTINATION ${CMAKE_BINARY_DIR}/hla_quadmath)
      set_target_properties(hla::quadmath PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${CMAKE_BINARY_DIR}/hla_quadmath)
    endif()
  endif()
endif()
