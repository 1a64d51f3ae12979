#!/usr/bin/env bash
# Adding a variant takes the edits docs/contributing.md "Adding a variant"
# lists, and no other: applies la1_twin.patch (a test-only variant, la1 under
# another name) to a copy of the sources and checks that
#   1. the patch touches exactly the files that section lists (and no test,
#      fixture or tool file);
#   2. the project builds with it;
#   3. the per-variant property suites register and pass for it (every form
#      equals naive exactly, operator laws, the binary128 bound) and the suites
#      over all variants (causality, homogeneity, scale) include it;
#   4. `hla gen --suite golden` writes its fixtures, and `hla check` passes our
#      f32 chunked form on each of them.
# Usage: tests/add_variant/check.sh [WORK_DIR]   (default: a new temporary folder)
# When an edit to one of the four files makes the patch stop applying, make
# the la1_twin edits again in a copy and save its `git diff` as la1_twin.patch.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
patch="$root/tests/add_variant/la1_twin.patch"
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/hla-add-variant-XXXXXX")}
mkdir -p "$work"
echo "add_variant: work folder $work"

# 1. Exactly the files docs/contributing.md's "Adding a variant" names (its
#    table's paths, from its heading to the next heading; ops/<name>.hpp stands
#    for the new operator's header).
doc="$root/docs/contributing.md"
grep -q '^## Adding a variant$' "$doc" || { echo "add_variant: FAIL: no section \"## Adding a variant\" in $doc"; exit 1; }
listed=$(sed -n '/^## Adding a variant$/,/^#/p' "$doc" | grep -o '`[a-z_/]*\(include\|reference\)/[a-z_/<>.]*`' |
         tr -d '`' | sed 's|<name>|la1_twin|' | sort -u)
touched=$(grep '^+++ b/' "$patch" | sed 's|^+++ b/||' | sort -u)
if [ "$listed" != "$touched" ]; then
  echo "add_variant: FAIL: the patch touches"; echo "$touched" | sed 's/^/  /'
  echo "but docs/contributing.md \"Adding a variant\" lists"; echo "$listed" | sed 's/^/  /'
  exit 1
fi
echo "add_variant: the patch touches exactly the $(echo "$touched" | wc -l) files docs/contributing.md lists"

# 2. A copy of the tracked sources, patched, built.
rm -rf "$work/src" && mkdir -p "$work/src"
(cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$work/src")
ln -sfn "$root/.venv" "$work/src/.venv"
(cd "$work/src" && git apply --whitespace=nowarn "$patch")
# -O1: the same IEEE arithmetic as the default -O3 (no fast-math, no FMA contraction in ISO C++), a third less compile time;
# clang: a third less again than GCC (scripts/setup.sh), which scripts/sanitize.sh keeps building and testing.
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target props_forms props_scan props_float113 props_invariants hla >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; echo "add_variant: FAIL: the build"; exit 1; }

# 3. The property suites, for the new variant.
props="$work/build/tests/properties"
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
"$hla" gen --suite golden --out "$work/golden" >"$work/gen.log" 2>&1
fixtures=("$work"/golden/la1_twin-*.safetensors)
[ -e "${fixtures[0]}" ] || { echo "add_variant: FAIL: hla gen wrote no la1_twin fixture"; exit 1; }
for f in "${fixtures[@]}"; do
  "$hla" eval "$f" --out "$work/candidate.safetensors" --precision f32 >/dev/null
  "$hla" check "$f" "$work/candidate.safetensors" --precision f32 >"$work/check.log" 2>&1 ||
    { cat "$work/check.log"; echo "add_variant: FAIL: hla check $f"; exit 1; }
done
echo "add_variant: hla gen wrote ${#fixtures[@]} la1_twin fixtures; hla check passes our f32 chunked form on each"
echo "add_variant: PASS"
