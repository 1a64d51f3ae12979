#!/usr/bin/env bash
# CI job for fuzzing on engines that scale out (ClusterFuzzLite, OSS-Fuzz):
# runs .clusterfuzzlite/build.sh on this machine the way ClusterFuzzLite runs
# it in its container (the repository in $SRC/hla-oracle; CC, CXX, CFLAGS,
# CXXFLAGS, LIB_FUZZING_ENGINE, SANITIZER, FUZZING_ENGINE, ARCHITECTURE set as
# its address-sanitizer libFuzzer build sets them; OUT and WORK in
# build-cfl/), then checks what it left in $OUT (each target with its seed
# corpus and dictionary, no shared library the runner image lacks) and runs
# each target the way ClusterFuzzLite does: over its unpacked seed corpus,
# then fuzzing for SECONDS with its dictionary. Fails on a build error, a
# missing file, a crash or a sanitizer report (the input is then in
# build-cfl/artifacts/).
#
#   scripts/fuzz_scaleout.sh [SECONDS]     (default 10 per target)
#
# Docker images cannot be pulled here, so the container itself is not built:
# .clusterfuzzlite/Dockerfile installs the same packages on the base builder.
# Like scripts/fuzz_readers.sh, needs clang with libFuzzer's runtime
# (libclang-rt-14-dev), installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
start=$(date +%s)

bash scripts/apt_install.sh fuzz_scaleout clang libclang-rt-14-dev zip unzip

dir="$PWD/build-cfl"
rm -rf "$dir/src" "$dir/out" "$dir/artifacts" "$dir/corpus"
mkdir -p "$dir/src" "$dir/out" "$dir/work" "$dir/artifacts"
ln -s "$PWD" "$dir/src/hla-oracle"  # the container's $SRC/hla-oracle

# ClusterFuzzLite's address + libFuzzer build (OSS-Fuzz's base-builder
# defaults, without -stdlib=libc++: its libc++ is part of the base image only).
flags="-O1 -fno-omit-frame-pointer -gline-tables-only -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION"
flags+=" -fsanitize=address -fsanitize-address-use-after-scope -fsanitize=fuzzer-no-link"
(
  cd "$dir/src/hla-oracle"
  env CC=clang CXX=clang++ CFLAGS="$flags" CXXFLAGS="$flags" LIB_FUZZING_ENGINE=-fsanitize=fuzzer \
    SRC="$dir/src" OUT="$dir/out" WORK="$dir/work" SANITIZER=address FUZZING_ENGINE=libfuzzer ARCHITECTURE=x86_64 \
    bash "$PWD/.clusterfuzzlite/build.sh"
) > "$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; echo "fuzz_scaleout: build.sh FAILED (log: $dir/build.log)"; exit 1; }
built=$(date +%s)
echo "fuzz_scaleout: build.sh took $((built - start)) s"

# What $OUT must hold, and the shared libraries a target may need: those of
# the runner image (glibc, libstdc++, libgcc_s).
status=0
targets=(fuzz_fixture_reader fuzz_candidate_reader)
for t in "${targets[@]}"; do
  for f in "$t" "${t}_seed_corpus.zip" "$t.dict"; do
    [ -s "$dir/out/$f" ] || { echo "fuzz_scaleout: build.sh left no $f in \$OUT"; status=1; }
  done
  [ -x "$dir/out/$t" ] || continue
  extra=$(readelf -d "$dir/out/$t" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
          grep -Ev '^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so' || true)
  [ -z "$extra" ] || { echo "fuzz_scaleout: $t needs shared libraries the runner lacks: $extra"; status=1; }
done
[ $status -eq 0 ] || exit 1

# Each target over its seed corpus (every seed once), then fuzzing, both at
# once (one core each). -seed fixes the mutation order.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
pids=()
for t in "${targets[@]}"; do
  mkdir -p "$dir/corpus/$t"
  unzip -q "$dir/out/${t}_seed_corpus.zip" -d "$dir/corpus/$t"
  (
    "$dir/out/$t" -runs=0 -artifact_prefix="$dir/artifacts/$t-" "$dir/corpus/$t" &&
    "$dir/out/$t" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -dict="$dir/out/$t.dict" \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" "$dir/corpus/$t"
  ) > "$dir/$t.log" 2>&1 &
  pids+=($!)
done
summary=""
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  rc=0; wait "${pids[$i]}" || rc=$?
  if [ $rc -ne 0 ]; then
    status=1
    echo "fuzz_scaleout: $t FAILED (exit $rc); its log:"; tail -60 "$dir/$t.log"
  fi
  seeds=$(find "$dir/corpus/$t" -type f | wc -l)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/$t.log")
  entries=$(sed -n 's/^Dictionary: \([0-9]*\) entries.*/\1/p' "$dir/$t.log" | head -1)
  if [ $rc -eq 0 ] && [ "${entries:-0}" -eq 0 ]; then
    status=1; echo "fuzz_scaleout: $t did not load its dictionary $t.dict"
  fi
  summary+=" $t: ${execs:-?} executions, corpus ${seeds} files, dictionary ${entries:-0} entries (exit $rc);"
done
echo "fuzz_scaleout: $([ $status -eq 0 ] && echo PASS || echo FAIL):$summary ${seconds} s each, total $(( $(date +%s) - start )) s (build $((built - start)) s)"
exit $status
