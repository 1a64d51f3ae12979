#!/usr/bin/env bash
# CI sanitizer job: builds the I/O, check, fuzzer and bug-zoo tests
# with clang -fsanitize=address,undefined (HLA_SANITIZE=ON: every target, the
# zoo's dlopen()ed libraries too) in build-asan/, runs them and a short zoo
# campaign, and fails on any test failure or any sanitizer report — also on a
# report from a forked child whose crash the fuzzer would otherwise just record.
#
#   scripts/sanitize.sh            (after scripts/setup.sh; run from anywhere)
#
# HLA_SAN_RC_PARAMS overrides the RapidCheck parameters of the property tests.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
dir=${HLA_SAN_DIR:-build-asan}  # HLA_SAN_DIR: another build folder
jobs=$(nproc)

# The reference instantiations (most of a build, tested by the properties) and
# the tests' Catch main come from the main build, uninstrumented; everything of io/engine/check/fuzz/tools and
# the zoo is compiled with the sanitizers.
# clang, not GCC: the same build takes about 30% less compile time (measured
# 2026-12-04: 509 s of CPU against 693 s over the same units); GCC still
# compiles a consumer of the installed package in CI (consumer_package). clang's sanitizer runtimes are Debian's libclang-rt-14-dev.
bash scripts/apt_install.sh sanitize clang libclang-rt-14-dev ninja-build
ref=build/reference/libhla_reference.a
main=build/properties/CMakeFiles/hla_test_main.dir/main.cpp.o  # the tests' Catch main, uninstrumented too
for f in "$ref" "$main"; do [ -f "$f" ] || { echo "sanitize: $f missing: run scripts/setup.sh first" >&2; exit 2; }; done
# Ninja: it compiles the check library's sources while the engine's are still compiling, where make waits for the
# engine library (measured 2026-12-06: this build took 167 s against 220 s with make).
# A folder configured with another compiler (GCC, before) or generator starts afresh.
if [ -f "$dir/CMakeCache.txt" ] && ! { grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$dir/CMakeCache.txt" &&
                                      grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; }; then rm -rf "$dir"; fi
cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DHLA_SANITIZE=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DHLA_REFERENCE_LIBRARY=$PWD/$ref" "-DHLA_TEST_MAIN_OBJECT=$PWD/$main" "-DHLA_RC_EXTRA=${HLA_SAN_RC_PARAMS:-max_success=25}" >/dev/null
cmake --build "$dir" -j"$jobs" --target props_io props_check props_state hla zoo zoo_selftest example_cabi_la1 \
  fuzz_exact_tier_test fuzz_fixture_reader_replay fuzz_candidate_reader_replay
built=$(date +%s)
echo "sanitize: build took $((built - start)) s"

# Every report goes to a file (pid-suffixed): a child of `hla fuzz` that dies
# of a sanitizer report looks like a crash finding to the fuzzer, so the files,
# not the exit codes alone, decide. Leak checking is on; the fuzzer's forked
# children end with _exit(), which skips LeakSanitizer, so only whole processes
# are leak-checked. The zoo's crash_long member writes through a null pointer
# on purpose: its report is expected and allowed below, nothing else is.
logs="$(cd "$dir" && pwd)/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$logs/ubsan"

status=0
# Not hla_fuzz_cli: 6 minutes under ASan (repeated campaigns with shrinking);
# the campaign, shrinking and finding-file paths it takes run below in the zoo
# campaign and in example_cabi_la1_fuzz.
tests='^(props_io|props_check|props_state|fuzz_exact_tier):|^(hla_cli|hla_bad_input|hla_ref_cli|zoo_selftest|example_cabi_la1_fuzz|fuzz_readers_corpus)$'
ctest --test-dir "$dir" -j"$jobs" --output-on-failure -R "$tests" | tee "$dir/ctest.log" || status=1
ran=$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$dir/ctest.log")

# A short zoo campaign: two correct members (a few cases each) and the buggy
# members whose bugs touch memory layout (GQA, packed sequences, state, crash).
zoo_start=$(date +%s)
python3 tests/zoo/zoo_campaigns.py "$dir/tools/hla" tests/zoo/zoo.json "$dir/tests/zoo/zoo_paths.json" "$PWD" \
  "$dir/fuzz_zoo" --correct-cases 30 \
  --only correct_streaming,correct_chunked,correct_state_difference,e1_decay,ragged_dropped,state_not_reset,gqa_wrong_group,state_incomplete,crash_long \
  || status=1
echo "sanitize: zoo campaign took $(( $(date +%s) - zoo_start )) s"

reports=0
for f in "$logs"/*; do
  [ -e "$f" ] || continue
  # crash_long's deliberate write through null: a null store (UBSan) or a SEGV at address 0 (ASan)
  # in the zoo's source. The other zoo bugs are arithmetic, so no other report can match this.
  if grep -q "tests/zoo/cabi/zoo_impl.cpp" "$f" && grep -Eq "store to null pointer|SEGV on unknown address 0x0+ " "$f"; then
    continue
  fi
  echo "sanitize: report in $f:"; cat "$f"; reports=$((reports + 1))
done
[ "$reports" -eq 0 ] || status=1
echo "sanitize: $([ $status -eq 0 ] && echo PASS || echo FAIL): ${ran:-?} ctest tests + zoo campaign, $reports sanitizer reports, $(( $(date +%s) - start )) s (build $((built - start)) s)"
exit $status
