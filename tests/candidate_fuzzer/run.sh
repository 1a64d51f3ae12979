#!/usr/bin/env bash
# ctest candidate_fuzzer_*: a fuzzer built by hla_add_candidate_fuzzer, run
# as an engine runs it (libFuzzer, an empty corpus, -seed=1).
#
#   run.sh finds KIND FUZZER HLA WORK   a buggy library: within 60 s the fuzzer
#       aborts with a KIND finding; the crash input replays to the same case and
#       verdict; `hla check` fails the finding's fixture and candidate files.
#   run.sh clean FUZZER WORK            a correct library: 20 s without a finding,
#       the corpus keeping inputs for many kinds of case.
set -euo pipefail
mode=$1
if [ "$mode" = finds ]; then kind=$2 fuzzer=$3 hla=$4 work=$5 limit=60; else fuzzer=$2 work=$3 limit=20; fi
rm -rf "$work" && mkdir -p "$work/corpus"
cd "$work"
start=$(date +%s)
rc=0
HLA_FINDINGS="$work/findings" "$fuzzer" -seed=1 -max_total_time=$limit -print_final_stats=1 -artifact_prefix="$work/" \
  corpus > fuzz.log 2>&1 || rc=$?
secs=$(( $(date +%s) - start ))
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' fuzz.log)
fail() { echo "FAIL: $*"; echo "--- fuzzer log (tail):"; tail -40 fuzz.log; exit 1; }

if [ "$mode" = clean ]; then
  [ $rc -eq 0 ] || fail "the fuzzer of a correct library exited $rc after $secs s"
  grep -q '^hla candidate fuzzer: .*; n <= 256)' fuzz.log || fail "the cases are not capped at n <= 256"
  # Enough cases to mean something (a few hundred per minute on a loaded core).
  [ "${execs:-0}" -ge 50 ] || fail "only ${execs:-0} cases in $secs s"
  # The corpus keeps an input per pair of case traits reached (the driver's
  # extra counters, its only coverage here: the driver and the zoo library are
  # not instrumented): dozens (83 in 20 s, measured), else one.
  corpus=$(find corpus -type f | wc -l)
  [ "$corpus" -ge 20 ] || fail "the corpus kept $corpus inputs of $execs cases: the kinds of case are not counted"
  echo "PASS: $execs cases in $secs s, no finding; the corpus kept $corpus inputs"
  exit 0
fi

[ $rc -ne 0 ] || fail "no finding within 60 s ($execs cases)"
line=$(grep -m1 '^hla candidate fuzzer: \[' fuzz.log || true)
[ -n "$line" ] || fail "the fuzzer exited $rc without a finding line"
case "$line" in "hla candidate fuzzer: [$kind] on "*) ;; *) fail "expected a $kind finding, got: $line" ;; esac
grep -q "shrunk in" fuzz.log || fail "no shrunk finding text"
crash=$(ls "$work"/crash-* 2>/dev/null | head -1)
[ -n "$crash" ] || fail "libFuzzer wrote no crash input"
# The same bytes, the same case: the crash input alone gives the same finding line.
rc2=0
HLA_FINDINGS="$work/replay-findings" "$fuzzer" "$crash" > replay.log 2>&1 || rc2=$?
line2=$(grep -m1 '^hla candidate fuzzer: \[' replay.log || true)
[ $rc2 -ne 0 ] && [ "$line2" = "$line" ] || fail "replaying $crash (exit $rc2) gave '$line2', expected '$line'"
# The finding's files reproduce the failure with the CLI.
cmd=$(sed -n 's/^ *reproduce: hla check //p' fuzz.log | head -1)
[ -n "$cmd" ] || fail "the finding names no reproduce command"
rc3=0
# shellcheck disable=SC2086  # the command's words
"$hla" check $cmd > check.log 2>&1 || rc3=$?
[ $rc3 -eq 1 ] || { cat check.log; fail "hla check $cmd exited $rc3, expected 1 (FAIL)"; }
echo "PASS: ${line#hla candidate fuzzer: } after ${execs:-?} cases, $secs s; replayed; hla check fails it"
