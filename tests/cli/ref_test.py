#!/usr/bin/env python3
"""ctest: `hla gen --case` and `hla ref` on a user's own inputs.

1. `hla gen --case` writes one fixture of a described case; our own chunked
   form in f32 passes `hla check` against it.
2. Its q, k, v handed to `hla ref` in FLA's [B,T,H,D] layout (--layout bthd)
   with the same options give the same reference, bit for bit (ref_out,
   ref_den, magnitudes, flags): one engine, whichever door the inputs come in.
3. The [B,H,T,D] layout and F16 inputs, and packed sequences through an I32
   cu_seqlens: `hla ref` writes a fixture that a correct candidate passes and
   whose packed reference equals the sequences' references computed alone.
4. An initial state: the state after a prefix, computed here (pure Python,
   exact on small integers), handed to `hla ref` with the rest of the tokens
   as initial_state.<part> tensors, gives the one-pass reference's rows bit
   for bit; our forms continue from it (PASS) and ignoring it FAILs.

Usage: ref_test.py HLA WORK_DIR
"""
import pathlib
import shutil
import struct
import subprocess
import sys

HLA, WORK = sys.argv[1], pathlib.Path(sys.argv[2])
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import hla_fixture_file  # noqa: E402

shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
fails = 0


def run(*argv, status=0, text=""):
    global fails
    r = subprocess.run([HLA, *argv], capture_output=True, text=True)
    out = r.stdout + r.stderr
    ok = r.returncode == status and text in out
    print(("ok" if ok else "FAILED") + f": exit {r.returncode}: hla {' '.join(argv)}")
    if not ok:
        print(out[-3000:])
        fails += 1
    return out


def parts(path):
    return hla_fixture_file.parse(pathlib.Path(path).read_bytes())


def write_inputs(path, tensors):
    pathlib.Path(path).write_bytes(hla_fixture_file.serialize({"tensors": tensors, "metadata": {}}, redigest=False))


def to_bthd(t, esize):
    # [B, H, T, D] bytes -> [B, T, H, D] bytes.
    dtype, (B, H, T, D), data = t
    row = D * esize
    out = bytearray(len(data))
    for b in range(B):
        for h in range(H):
            for s in range(T):
                src = ((b * H + h) * T + s) * row
                dst = ((b * T + s) * H + h) * row
                out[dst:dst + row] = data[src:src + row]
    return [dtype, [B, T, H, D], bytes(out)]


def check(name, cond):
    global fails
    print(("ok" if cond else "FAILED") + ": " + name)
    fails += 0 if cond else 1


# 1. gen --case
case = WORK / "case.safetensors"
run("gen", "--case", "variant=hla2,gamma=7/8,normalize=add,dtype=f32,B=2,H=2,Hkv=1,n=70,d=16,dv=8,seed=5", "--out", str(case),
    "--quiet", text="wrote")
run("eval", str(case), "--form", "chunked_matmul", "--precision", "f32", "--out", str(WORK / "case.cand.safetensors"))
run("check", str(case), str(WORK / "case.cand.safetensors"), "--precision", "f32", text="PASS")
# Deterministic: the same case, the same bytes.
run("gen", "--case", "variant=hla2,gamma=7/8,normalize=add,dtype=f32,B=2,H=2,Hkv=1,n=70,d=16,dv=8,seed=5", "--out",
    str(WORK / "again.safetensors"), "--quiet")
check("gen --case is deterministic", case.read_bytes() == (WORK / "again.safetensors").read_bytes())

# 2. the same inputs through hla ref, FLA layout
p = parts(case)
write_inputs(WORK / "in_bthd.safetensors", {k: to_bthd(p["tensors"][k], 4) for k in ("q", "k", "v")})
ref = WORK / "ref.safetensors"
run("ref", str(WORK / "in_bthd.safetensors"), "--layout", "bthd", "--variant", "hla2", "--gamma", "0.875", "--normalize", "add",
    "--out", str(ref), "--quiet", text="certified")
r = parts(ref)
for name in ("q", "k", "v", "ref_out", "ref_den", "ref_num", "mag_num", "mag_den", "mag_num_unmasked", "mag_den_unmasked", "flags", "den_flags"):
    a, b = p["tensors"].get(name), r["tensors"].get(name)
    check(f"hla ref == hla gen --case: {name}", a == b)
for key in ("variant", "masked", "gamma", "normalize", "eps", "eps_mode", "lambda", "scale", "reference_bits"):
    check(f"hla ref == hla gen --case: metadata {key}", p["metadata"][key] == r["metadata"][key])
run("check", str(ref), str(WORK / "case.cand.safetensors"), "--precision", "f32", text="PASS")

# 3. [B,H,T,D], F16, packed sequences (cu_seqlens I32) with GQA
f16 = WORK / "f16case.safetensors"
run("gen", "--case", "variant=ahla,gamma=15/16,dtype=f16,B=1,H=2,Hkv=1,n=50,d=8,dv=8,seed=9", "--out", str(f16), "--quiet")
p = parts(f16)
qkv = {k: p["tensors"][k] for k in ("q", "k", "v")}
qkv["cu_seqlens"] = ["I32", [3], struct.pack("<3i", 0, 21, 50)]
write_inputs(WORK / "packed.safetensors", qkv)
packed = WORK / "packed_ref.safetensors"
run("ref", str(WORK / "packed.safetensors"), "--variant", "ahla", "--gamma", "15/16", "--out", str(packed), "--quiet",
    text="2 packed sequences")
run("eval", str(packed), "--form", "streaming", "--precision", "f32", "--out", str(WORK / "packed.cand.safetensors"))
run("check", str(packed), str(WORK / "packed.cand.safetensors"), "--precision", "f32", text="PASS")
# Each sequence alone gives the same reference rows (no state leaks across the boundary).
rp = parts(packed)
for s0, s1, tag in ((0, 21, "a"), (21, 50, "b")):
    one = {}
    for k in ("q", "k", "v"):
        dtype, (B, H, T, D), data = p["tensors"][k]
        rows = bytearray()
        for h in range(H):
            rows += data[(h * T + s0) * D * 2:(h * T + s1) * D * 2]
        one[k] = [dtype, [B, H, s1 - s0, D], bytes(rows)]
    write_inputs(WORK / f"seq_{tag}.safetensors", one)
    run("ref", str(WORK / f"seq_{tag}.safetensors"), "--variant", "ahla", "--gamma", "15/16", "--out",
        str(WORK / f"seq_{tag}_ref.safetensors"), "--quiet")
    alone = parts(WORK / f"seq_{tag}_ref.safetensors")["tensors"]["ref_out"][2]
    dtype, (B, H, T, DV), data = rp["tensors"]["ref_out"]
    mine = b"".join(data[(h * T + s0) * DV * 8:(h * T + s1) * DV * 8] for h in range(H))
    check(f"packed sequence {tag} equals its reference alone", mine == alone)

# 4. an initial state (masked hla2: S, C/m, F/f after the prefix, SPEC §3), exact on small integers
whole = WORK / "whole.safetensors"
run("gen", "--case", "variant=hla2,gamma=1/2,normalize=add,dist=small_int,dtype=f32,B=1,H=2,Hkv=1,n=20,d=4,dv=3,seed=3",
    "--out", str(whole), "--quiet")
p = parts(whole)


def floats(t):
    dtype, shape, data = t
    return shape, list(struct.unpack(f"<{len(data) // 4}f", data))


(_, H, T, D), q = floats(p["tensors"]["q"])
(_, _, _, _), k = floats(p["tensors"]["k"])
(_, _, _, DV), v = floats(p["tensors"]["v"])
M, g = 8, 0.5
state = {name: [] for name in ("S", "C", "m", "F", "f")}
for h in range(H):
    row = lambda x, t, w, head: x[(head * T + t) * w:(head * T + t + 1) * w]  # noqa: E731
    S = [[0.0] * D for _ in range(D)]
    C = [[0.0] * (DV + 1) for _ in range(D)]
    F = [[0.0] * (DV + 1) for _ in range(D)]
    for t in range(M):
        qt, kt, vt = row(q, t, D, h), row(k, t, D, 0), row(v, t, DV, 0) + [1.0]
        S = [[g * S[i][j] + kt[i] * kt[j] for j in range(D)] for i in range(D)]
        C = [[g * C[i][j] + qt[i] * vt[j] for j in range(DV + 1)] for i in range(D)]
        Sq = [sum(S[i][j] * qt[j] for j in range(D)) for i in range(D)]
        F = [[g * g * F[i][j] + Sq[i] * vt[j] for j in range(DV + 1)] for i in range(D)]
    state["S"] += [x for r in S for x in r]
    state["C"] += [x for r in C for x in r[:DV]]
    state["m"] += [r[DV] for r in C]
    state["F"] += [x for r in F for x in r[:DV]]
    state["f"] += [r[DV] for r in F]
tail = {}
for name, w, heads in (("q", D, H), ("k", D, 1), ("v", DV, 1)):
    dtype, shape, data = p["tensors"][name]
    rows = b"".join(data[(hh * T + M) * w * 4:(hh * T + T) * w * 4] for hh in range(heads))
    tail[name] = [dtype, [1, heads, T - M, w], rows]
for name, x in state.items():
    shape = [1, H, D, D] if name == "S" else [1, H, D, DV] if name in ("C", "F") else [1, H, D]
    tail["initial_state." + name] = ["F64", shape, struct.pack(f"<{len(x)}d", *x)]
write_inputs(WORK / "tail.safetensors", tail)
cont = WORK / "tail_ref.safetensors"
run("ref", str(WORK / "tail.safetensors"), "--variant", "hla2", "--gamma", "1/2", "--normalize", "add", "--out", str(cont),
    "--quiet", text="initial state")
c = parts(cont)
for name, w in (("ref_out", DV), ("ref_den", 1), ("mag_num", DV)):
    dtype, shape, data = p["tensors"][name]
    rows = b"".join(data[(hh * T + M) * w * 8:(hh * T + T) * w * 8] for hh in range(H))
    if name == "mag_num":  # the state's entries are inputs: its magnitude is |state|, not the prefix's terms
        check("continued magnitude >= 0 and finite", all(x >= 0 for x in struct.unpack(f"<{len(c['tensors'][name][2]) // 8}d", c["tensors"][name][2])))
        continue
    check(f"continued from the prefix's state == one pass: {name}", c["tensors"][name][2] == rows)
check("the fixture carries the initial state", all("initial_state." + n in c["tensors"] for n in state))
for form in ("streaming", "chunked_matmul"):
    run("eval", str(cont), "--form", form, "--precision", "f32", "--out", str(WORK / f"tail.{form}.safetensors"))
    run("check", str(cont), str(WORK / f"tail.{form}.safetensors"), "--precision", "f32", text="PASS")
run("eval", str(cont), "--form", "blelloch", "--precision", "f32", "--out", str(WORK / "tail.bad.safetensors"), status=2,
    text="does not start from an initial state")
# A kernel that ignores the state: our form on the tail alone (the fixture without its state).
write_inputs(WORK / "tail_nostate.safetensors", {k: tail[k] for k in ("q", "k", "v")})
run("ref", str(WORK / "tail_nostate.safetensors"), "--variant", "hla2", "--gamma", "1/2", "--normalize", "add", "--out",
    str(WORK / "tail_nostate_ref.safetensors"), "--quiet")
run("eval", str(WORK / "tail_nostate_ref.safetensors"), "--form", "streaming", "--precision", "f32", "--out",
    str(WORK / "tail.ignored.safetensors"))
run("check", str(cont), str(WORK / "tail.ignored.safetensors"), "--precision", "f32", status=1, text="FAIL")
bad = dict(tail)
del bad["initial_state.F"]
write_inputs(WORK / "tail_missing.safetensors", bad)
run("ref", str(WORK / "tail_missing.safetensors"), "--variant", "hla2", "--gamma", "1/2", "--out", str(WORK / "x.safetensors"),
    status=2, text="without 'initial_state.F'")
# gen --case with state=M: the state after M earlier tokens, in the fixture; our forms continue from it.
sc = WORK / "state_case.safetensors"
spec = "variant=hla3,gamma=15/16,normalize=clamp,dtype=bf16,B=2,H=2,Hkv=1,n=33,d=8,dv=4,seed=2,state=40"
run("gen", "--case", spec, "--out", str(sc), "--quiet", text="wrote")
run("gen", "--case", spec, "--out", str(WORK / "state_case2.safetensors"), "--quiet")
check("gen --case state=40 is deterministic", sc.read_bytes() == (WORK / "state_case2.safetensors").read_bytes())
check("gen --case state=40 carries the hla3 state", all(f"initial_state.{n}" in parts(sc)["tensors"] for n in ("S", "P", "z", "F", "f")))
run("eval", str(sc), "--form", "chunked_matmul", "--precision", "f32", "--out", str(WORK / "state_case.cand.safetensors"))
run("check", str(sc), str(WORK / "state_case.cand.safetensors"), "--precision", "f32", text="PASS")
run("gen", "--case", "variant=hla3,state=4,d=4", "--out", str(WORK / "y.safetensors"), status=0)
run("gen", "--case", "variant=hla3_paper,state=4,d=4", "--out", str(WORK / "z.safetensors"), status=2, text="no streaming state")

if any(WORK.glob(".*.tmp.*")):
    check("no temporary file left behind", False)
print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
