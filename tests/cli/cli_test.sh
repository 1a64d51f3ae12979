#!/usr/bin/env bash
# ctest: the `hla` command line contract — exit 0 pass, 1 fail, 2 usage or
# input error with a message naming the problem, and no half-written files.
set -u
hla="$1"; fixtures="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work"
fails=0
expect() {  # expect STATUS TEXT-IN-OUTPUT -- command...
  local want="$1" text="$2"; shift 3
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" != "$want" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAILED: $* -> exit $got (want $want), output lacks '$text':"; echo "$out" | head -20; fails=$((fails + 1))
  else
    echo "ok: exit $got: $*"
  fi
}
fx="$fixtures/hla2-raw-f32-gaussian-n37-d8-B1H2K1.safetensors"
exact="$fixtures/hla2-raw-f32-small_int-n20-d8-B1H2K1.safetensors"

expect 0 "wrote" -- "$hla" eval "$fx" --out "$work/good.safetensors" --form streaming
expect 0 "PASS" -- "$hla" check "$fx" "$work/good.safetensors"
expect 0 '"pass": true' -- "$hla" check "$fx" "$work/good.safetensors" --json
"$hla" check "$fx" "$work/good.safetensors" --json | python3 -c "import json,sys; r=json.load(sys.stdin); assert r['pass'] and r['scored'] > 0" \
  || { echo "FAILED: --json is not valid JSON with pass/scored"; fails=$((fails + 1)); }
for e in E1 E2 E5; do
  "$hla" eval "$fx" --paper $e --precision f64 --chunk 16 --out "$work/$e.safetensors" >/dev/null  # n = 37: three chunks
  expect 1 "exceed the a priori bound" -- "$hla" check "$fx" "$work/$e.safetensors"
done
# Exact tier: float evaluation is bit-exact and must be; f16 arithmetic is not.
expect 0 "exact tier: 0 elements differ" -- sh -c "'$hla' eval '$exact' --out '$work/ex.safetensors' >/dev/null && '$hla' check '$exact' '$work/ex.safetensors'"
expect 1 "exact tier demands bit equality" -- sh -c "'$hla' eval '$exact' --precision f16 --out '$work/ex16.safetensors' >/dev/null && '$hla' check '$exact' '$work/ex16.safetensors' --precision f16"
# Lower precision than declared.
"$hla" eval "$fx" --precision f16 --out "$work/f16.safetensors" >/dev/null
expect 1 "the worst of our honest evaluation orders" -- "$hla" check "$fx" "$work/f16.safetensors" --precision f32
# A tensor-core precision: eval rounds its products' operands to bf16 (sums in f32), so the candidate passes as
# bf16+f32 and fails as f32; our other forms have no such rounding and are refused.
"$hla" eval "$fx" --precision bf16+f32 --out "$work/tc.safetensors" >/dev/null
expect 0 "PASS" -- "$hla" check "$fx" "$work/tc.safetensors" --precision bf16+f32
expect 1 "exceed the a priori bound" -- "$hla" check "$fx" "$work/tc.safetensors" --precision f32
expect 2 "our form is chunked_matmul" -- "$hla" eval "$fx" --precision bf16+f32 --form naive --out "$work/tc_naive.safetensors"
expect 2 "the paper's forms run in" -- "$hla" eval "$fx" --precision tf32 --paper E1 --out "$work/tc_paper.safetensors"
# INCONCLUSIVE, exit 4: the la1 golden fixture with q, k, v scaled by 2^-40
# (exact: its reference scales by 2^-120, den by 2^-80, still honest): every
# u·M is then below f32's smallest normal, so nothing is scored.
python3 - "$fixtures/la1-raw-f32-gaussian-n37-d8-B1H2K1.safetensors" "$work/tiny.safetensors" "$(dirname "$0")/../python" <<'PY'
import struct, sys
sys.path.insert(0, sys.argv[3])
import hla_fixture_file as hff
parts = hff.parse(open(sys.argv[1], "rb").read())
def scale(name, s):
    dtype, shape, data = parts["tensors"][name]
    fmt = {"F64": "d", "F32": "f"}[dtype]
    n = len(data) // struct.calcsize(fmt)
    parts["tensors"][name][2] = struct.pack(f"<{n}{fmt}", *(x * s for x in struct.unpack(f"<{n}{fmt}", data)))
for t in ("q", "k", "v"):
    scale(t, 2.0 ** -40)
for t in ("ref_out", "mag_num"):
    scale(t, 2.0 ** -120)
for t in ("ref_den", "mag_den", "state.P", "mag_state.P"):  # the final state: P = sum k v^T, z = sum k
    scale(t, 2.0 ** -80)
for t in ("state.z", "mag_state.z"):
    scale(t, 2.0 ** -40)
open(sys.argv[2], "wb").write(hff.serialize(parts))
PY
"$hla" eval "$work/tiny.safetensors" --precision f64 --out "$work/tiny.candidate.safetensors" >/dev/null
expect 4 "in the underflow regime" -- "$hla" check "$work/tiny.safetensors" "$work/tiny.candidate.safetensors" --precision f32
# --version: the project's version, written once in CMakeLists.txt's project() (the wheel reads it there too).
version=$(sed -n 's/^project(hla_oracle VERSION \([0-9.]*\).*/\1/p' "$(dirname "$0")/../../CMakeLists.txt")
[ -n "$version" ] || { echo "FAILED: no project(hla_oracle VERSION ...) in CMakeLists.txt"; fails=$((fails + 1)); }
expect 0 "hla-oracle $version" -- "$hla" --version
[ "$("$hla" --version)" = "hla-oracle $version" ] || { echo "FAILED: hla --version is not 'hla-oracle $version'"; fails=$((fails + 1)); }
# Input errors: exit 2, message names the problem.
expect 2 "No such file" -- "$hla" check "$work/missing.safetensors" "$work/good.safetensors"
head -c 100 "$fx" > "$work/truncated.safetensors"
expect 2 "truncated.safetensors" -- "$hla" check "$work/truncated.safetensors" "$work/good.safetensors"
other="$fixtures/la1-raw-f32-gaussian-n37-d8-B1H2K1.safetensors"
"$hla" eval "$fixtures/hla2-raw-f32-gaussian-n1-d8-B1H1K1.safetensors" --out "$work/wrongshape.safetensors" >/dev/null
expect 2 "shape" -- "$hla" check "$fx" "$work/wrongshape.safetensors"
expect 2 "precision" -- "$hla" check "$fx" "$work/good.safetensors" --precision f8
expect 2 "required" -- "$hla" check "$fx"
expect 2 "" -- "$hla" frobnicate
expect 2 "suite" -- "$hla" gen --suite nonesuch --out "$work/x"
mkdir -p "$work/foreign" && cp "$other" "$work/foreign/alien.safetensors"
expect 2 "alien.safetensors, which is not in suite" -- "$hla" gen --suite golden --out "$work/foreign"
expect 2 "gamma" -- "$hla" demo --gamma 3/2
expect 0 "agree with the naive definition exactly" -- "$hla" demo --n 6 --d 2 --dv 2
# No temp files left behind by any of the above.
if ls -a "$work" "$work/foreign" | grep -q '\.tmp\.'; then echo "FAILED: temp files left behind"; fails=$((fails + 1)); fi
echo "$fails failure(s)"
exit $((fails > 0))
