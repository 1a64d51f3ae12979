# GMP and MPFR (Debian: libgmp-dev, libmpfr-dev) as imported targets hla::gmp
# and hla::mpfr. Neither ships a CMake package; this file is included by the
# project and, installed next to hla_oracleConfig.cmake, by the package, so
# that the exported targets name these libraries where the consumer finds them.
# libquadmath comes with GCC and is linked by name (quadmath). Sets
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
