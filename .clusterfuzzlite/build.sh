#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build of hla-oracle's fuzz targets: the fixture
# and candidate readers' libFuzzer targets (tests/fuzz_readers), compiled with
# the engine's $CC $CXX $CFLAGS $CXXFLAGS and linked with $LIB_FUZZING_ENGINE,
# into $OUT with their seed corpora (<target>_seed_corpus.zip) and dictionary
# (<target>.dict). Runs in the image of .clusterfuzzlite/Dockerfile (the
# repository in $SRC/hla-oracle, scratch space in $WORK); ctest
# clusterfuzzlite_build runs it on the host with the variables set as
# ClusterFuzzLite sets them (scripts/fuzz_scaleout.sh).
set -euo pipefail
# The physical path, as the working directory too: CMake configured from a
# path through a symlink cannot find the project's subdirectories.
repo=$(cd "$SRC/hla-oracle" && pwd -P)
cd "$repo"
build="$WORK/hla-oracle-build"

# GMP, MPFR and libquadmath linked statically: the runner image that executes
# the targets has none of them. find_library is given the archives; -lquadmath
# finds its archive first in a folder that holds only archives.
static="$WORK/hla-oracle-static-libs"
mkdir -p "$static"
for lib in gmp mpfr quadmath; do
  archive=$($CC -print-file-name="lib$lib.a")
  if [ ! -f "$archive" ]; then
    echo "build.sh: lib$lib.a not found by $CC (Debian/Ubuntu: libgmp-dev, libmpfr-dev, libgcc-*-dev)" >&2
    exit 1
  fi
  ln -sf "$archive" "$static/lib$lib.a"
done

# CMAKE_BUILD_TYPE=None: no flags beyond the engine's. BUILD_TESTING and the
# tools off: only the fuzz targets are configured (HLA_LIBFUZZER).
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=None -DBUILD_TESTING=OFF -DHLA_BUILD_TOOLS=OFF \
  -DHLA_BUILD_GPU=OFF -DHLA_INSTALL=OFF -DHLA_LIBFUZZER=ON "-DHLA_LIB_FUZZING_ENGINE=$LIB_FUZZING_ENGINE" \
  "-DHLA_gmp_LIBRARY=$static/libgmp.a" "-DHLA_mpfr_LIBRARY=$static/libmpfr.a" "-DCMAKE_EXE_LINKER_FLAGS=-L$static"
cmake --build "$build" -j"$(nproc)" --target fuzz_fixture_reader fuzz_candidate_reader

for t in fixture candidate; do
  name="fuzz_${t}_reader"
  cp "$build/tests/fuzz_readers/$name" "$OUT/"
  rm -f "$OUT/${name}_seed_corpus.zip"
  (cd "$repo/tests/fuzz_readers/corpus/$t" && zip -q -X -r "$OUT/${name}_seed_corpus.zip" .)
  cp "$repo/tests/fuzz_readers/safetensors.dict" "$OUT/$name.dict"
done
