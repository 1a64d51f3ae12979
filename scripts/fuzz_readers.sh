#!/usr/bin/env bash
# CI libFuzzer job: builds the fixture and candidate reader targets
# with clang -fsanitize=fuzzer,address,undefined in build-fuzz/ and runs each
# for a bounded time from the committed seed corpus (tests/fuzz_readers/corpus),
# both at once (one core each). Fails on any crash, sanitizer report, uncaught
# exception other than hla::InputError, timeout or out-of-memory; the input is
# then in build-fuzz/artifacts/.
#
#   scripts/fuzz_readers.sh [SECONDS]      (default 60 per target)
#
# Uses Debian's clang (14) with libFuzzer's runtime (libclang-rt-14-dev),
# installed when missing: only this job needs them.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
start=$(date +%s)

bash scripts/apt_install.sh fuzz_readers clang libclang-rt-14-dev

dir=build-fuzz
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DHLA_LIBFUZZER=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$dir" -j"$(nproc)" --target fuzz_fixture_reader fuzz_candidate_reader
built=$(date +%s)
echo "fuzz_readers: build took $((built - start)) s"

# libFuzzer adds what it finds to the first corpus directory: a scratch copy,
# so that the committed seeds stay as they are. -seed fixes the mutation order
# (the number of executions in a fixed time still varies with the machine).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"
mkdir -p "$dir/artifacts"
pids=()
for t in fixture candidate; do
  rm -rf "$dir/corpus-$t" && mkdir -p "$dir/corpus-$t"
  "$dir/tests/fuzz_readers/fuzz_${t}_reader" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" "$dir/corpus-$t" "tests/fuzz_readers/corpus/$t" \
    > "$dir/fuzz-$t.log" 2>&1 &
  pids+=($!)
done
status=0
summary=""
for i in 0 1; do
  t=$([ $i -eq 0 ] && echo fixture || echo candidate)
  rc=0; wait "${pids[$i]}" || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz-$t.log")
  cov=$(grep -o 'cov: [0-9]*' "$dir/fuzz-$t.log" | tail -1)
  if [ $rc -ne 0 ]; then
    status=1
    echo "fuzz_readers: fuzz_${t}_reader FAILED (exit $rc); its log:"; tail -60 "$dir/fuzz-$t.log"
  fi
  summary+=" $t: ${execs:-?} executions (${cov:-cov: ?}, exit $rc);"
done
echo "fuzz_readers: $([ $status -eq 0 ] && echo PASS || echo FAIL):$summary ${seconds} s each, total $(( $(date +%s) - start )) s (build $((built - start)) s)"
exit $status
