#!/usr/bin/env bash
# CI stage "wheel": builds the repaired wheel (scripts/build_wheel.sh, linking
# the main build's reference library) and installs and tests it where no
# compiler can be reached (tests/wheel/install_test.sh). Run after
# scripts/setup.sh; fails when either fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash scripts/build_wheel.sh | tee "$log"
wheel=$(sed -n 's/^build_wheel: \(dist\/[^ ]*\.whl\) .*/\1/p' "$log" | tail -1)
[ -f "$wheel" ] || { echo "wheel check: build_wheel.sh named no wheel" >&2; exit 1; }
built=$(date +%s)
bash tests/wheel/install_test.sh "$wheel"
echo "wheel check: PASS: $wheel, built in $((built - start)) s, installed and tested in $(( $(date +%s) - built )) s"
