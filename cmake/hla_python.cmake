# Finds nanobind for the Python extension (python/CMakeLists.txt): sets
# <out> to ON when found (then Python and nanobind's CMake package are loaded),
# OFF otherwise, with a message saying why. The interpreter: Python_EXECUTABLE
# when given (scikit-build-core passes it), else the project's .venv, else python3.
function(hla_find_nanobind out)
  if(NOT Python_EXECUTABLE AND EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(Python_EXECUTABLE ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH "Python interpreter for hla_oracle._core")
  endif()
  find_package(Python 3.8 COMPONENTS Interpreter Development.Module QUIET)
  if(NOT Python_FOUND)
    message(STATUS "hla_oracle Python module: off (no Python interpreter with development headers)")
    set(${out} OFF PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir OUTPUT_VARIABLE nb_dir
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${nb_dir}")
    message(STATUS "hla_oracle Python module: off (no nanobind for ${Python_EXECUTABLE}; pip install nanobind)")
    set(${out} OFF PARENT_SCOPE)
    return()
  endif()
  set(nanobind_DIR ${nb_dir} CACHE PATH "nanobind's CMake package" FORCE)
  message(STATUS "hla_oracle Python module: on (${Python_EXECUTABLE}, nanobind ${nb_dir})")
  set(${out} ON PARENT_SCOPE)
endfunction()
