#!/usr/bin/env bash
# Adding a variant takes the edits docs/contributing.md "Adding a variant" and
# "Full parity" list, and no other: applies la1_twin.patch (a test-only
# variant, la1 under another name, with full parity: an initial state, the
# fast engine, a backward) to a copy of the sources and checks that
#   1. the patch touches exactly the files those two sections list (and no
#      test, fixture, tool or Python file), no more than the number of source
#      files the docs state (and says how many);
#   2. the project builds with it;
#   3. the per-variant property suites register and pass for it (every form
#      equals naive exactly, operator laws, the binary128 bound) and the suites
#      over all variants (causality, homogeneity, scale) include it;
#   4. `hla gen --suite golden` writes its fixtures, and `hla check` passes our
#      f32 chunked form on each of them;
#   5. parity: a fixture from an initial state with gradients, at a head size
#      the fast engine takes (d > 16), is written, and our f32 forward and
#      float64 backward pass on it; the Python package's default variants
#      (hla_oracle.Support) include it.
# Usage: tests/add_variant/check.sh [WORK_DIR]   (default: a new temporary folder)
# When an edit to one of the listed files makes the patch stop applying, make
# the la1_twin edits again in a copy and save its `git diff` as la1_twin.patch.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
patch="$root/tests/add_variant/la1_twin.patch"
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/hla-add-variant-XXXXXX")}
mkdir -p "$work"
echo "add_variant: work folder $work"

# 1. Exactly the files docs/contributing.md's "Adding a variant" and "Full
#    parity" name (their tables' paths under include/ or reference/, from each
#    heading to the next; <name> stands for the new variant's), at most as many
#    as it states.
doc="$root/docs/contributing.md"
for h in '## Adding a variant' '## Full parity: state, fast engine, backward, Python'; do
  grep -qx "$h" "$doc" || { echo "add_variant: FAIL: no section \"$h\" in $doc"; exit 1; }
done
section() { awk -v h="$1" '$0 == h {on = 1; next} on && /^## / {exit} on' "$doc"; }
listed=$( (section '## Adding a variant'; section '## Full parity: state, fast engine, backward, Python') |
         grep -o '`[a-z_/]*\(include\|reference\)/[a-z_/<>.]*`' | tr -d '`' | sed 's|<name>|la1_twin|' | sort -u)
touched=$(grep '^+++ b/' "$patch" | sed 's|^+++ b/||' | sort -u)
if [ "$listed" != "$touched" ]; then
  echo "add_variant: FAIL: the patch touches"; echo "$touched" | sed 's/^/  /'
  echo "but docs/contributing.md \"Adding a variant\" and \"Full parity\" list"; echo "$listed" | sed 's/^/  /'
  exit 1
fi
count=$(echo "$touched" | wc -l)
stated=$(grep -o 'full parity takes [0-9]* source files' "$doc" | grep -o '[0-9][0-9]*' || true)
[ -n "$stated" ] || { echo "add_variant: FAIL: docs/contributing.md states no \"full parity takes N source files\""; exit 1; }
[ "$count" -le "$stated" ] ||
  { echo "add_variant: FAIL: a variant with full parity touched $count files, docs/contributing.md states $stated"; exit 1; }
echo "add_variant: a variant with full parity touched $count files (docs/contributing.md: $stated), exactly the ones it lists"

# 2. A copy of the tracked sources, patched, built.
rm -rf "$work/src" && mkdir -p "$work/src"
(cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$work/src")
ln -sfn "$root/.venv" "$work/src/.venv"
(cd "$work/src" && git apply --whitespace=nowarn "$patch")
# Unoptimized (build type None: no -O flag), with NDEBUG as in Release: the same IEEE arithmetic as the
# default -O3 (no fast-math, no FMA contraction in ISO C++), and what is run here is small; measured
# 2026-12-05 on two cores, the whole check took 204 s against 267 s at -O1. clang, as scripts/setup.sh.
t=$(date +%s)
# Ninja where installed (setup.sh installs it): it compiles a target's sources while the libraries it links are still
# being built, where make waits for them.
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
rm -rf "$work/build"
cmake "${gen[@]}" -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-DNDEBUG" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target props_forms props_scan props_float113 props_invariants hla hla_oracle_core \
  >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; echo "add_variant: FAIL: the build"; exit 1; }
echo "add_variant: built in $(( $(date +%s) - t )) s"

# 3. The property suites, for the new variant.
props="$work/build/properties"
for suite in props_forms props_scan props_float113; do
  out=$("$props/$suite" "la1_twin:*" 2>&1) || { echo "$out" | tail -30; echo "add_variant: FAIL: $suite"; exit 1; }
  cases=$(echo "$out" | grep -o "All tests passed ([0-9]* assertions\? in [0-9]* test case" | grep -o "[0-9]* test case" | grep -o "[0-9]*")
  [ "${cases:-0}" -ge 1 ] || { echo "$out" | tail -5; echo "add_variant: FAIL: $suite has no la1_twin test case"; exit 1; }
  echo "add_variant: $suite: $cases la1_twin test case(s) passed"
done
out=$("$props/props_invariants" 2>&1) || { echo "$out" | tail -30; echo "add_variant: FAIL: props_invariants"; exit 1; }
n=$(echo "$out" | grep -c "^\[property\] la1_twin" || true)
[ "$n" -ge 3 ] || { echo "add_variant: FAIL: props_invariants ran $n properties of la1_twin"; exit 1; }
echo "add_variant: props_invariants: $n la1_twin properties passed"

# 4. Fixtures follow: the golden suite writes them, and our own output passes.
hla="$work/build/tools/hla"
"$hla" gen --suite golden --filter la1_twin- --out "$work/golden" >"$work/gen.log" 2>&1 ||
  { cat "$work/gen.log"; echo "add_variant: FAIL: hla gen --suite golden --filter la1_twin-"; exit 1; }
fixtures=("$work"/golden/la1_twin-*.safetensors)
[ -e "${fixtures[0]}" ] || { echo "add_variant: FAIL: hla gen wrote no la1_twin fixture"; exit 1; }
for f in "${fixtures[@]}"; do
  "$hla" eval "$f" --out "$work/candidate.safetensors" --precision f32 >/dev/null
  "$hla" check "$f" "$work/candidate.safetensors" --precision f32 >"$work/check.log" 2>&1 ||
    { cat "$work/check.log"; echo "add_variant: FAIL: hla check $f"; exit 1; }
done
echo "add_variant: hla gen wrote ${#fixtures[@]} la1_twin fixtures; hla check passes our f32 chunked form on each"

# 5. Parity: from an initial state, with gradients, on heads the fast engine
#    takes (d > 16 is beyond exact rationals); the Python package's variants.
case_=variant=la1_twin,gamma=15/16,dtype=f32,B=1,H=2,Hkv=2,n=40,d=24,dv=8,seed=3,state=8,grad=true
"$hla" gen --case "$case_" --out "$work/parity.safetensors" >"$work/gen.log" 2>&1 ||
  { cat "$work/gen.log"; echo "add_variant: FAIL: hla gen --case $case_"; exit 1; }
"$hla" eval "$work/parity.safetensors" --out "$work/candidate.safetensors" --precision f32 --dtype f64 --grad chunked_matmul >/dev/null
"$hla" check "$work/parity.safetensors" "$work/candidate.safetensors" --precision f32 --require-grad >"$work/check.log" 2>&1 ||
  { cat "$work/check.log"; echo "add_variant: FAIL: hla check on $case_"; exit 1; }
grep -q "dstate\.[A-Za-z]*: ok" "$work/check.log" || { cat "$work/check.log"; echo "add_variant: FAIL: no state gradient checked"; exit 1; }
echo "add_variant: from a state with gradients ($case_): hla check passes our forward and backward"
PYTHONPATH="$work/build/python" "$root/.venv/bin/python" -c \
  'import hla_oracle; v = hla_oracle.Support().variants; assert "la1_twin" in v, v; print("add_variant: hla_oracle.Support() selects", v)'
echo "add_variant: PASS"
