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
5. Gradients: a `hla gen --case ...,grad=true` fixture's q, k, v, upstream do,
   dden (and initial_state.<part>) handed to `hla ref` in [B,H,T,D] and in
   [B,T,H,D] give the same fixture tensors, bit for bit (ref_dq, ref_dk,
   ref_dv, ref_dstate.<part>, magnitudes, flags): through the double-double
   engine (n = 70, d = 16) and exact rationals, with GQA, dden, a state, and
   do in another float dtype than the inputs (its values the inputs'); the
   golden packed gradient fixture likewise; packed sequences through the
   engine give each sequence's gradients alone. `hla check` of our own `hla
   eval --grad` candidate against each passes (--require-grad); a dropped
   upstream (dden) changes the reference.

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
    "--no-progress", text="wrote")
run("eval", str(case), "--form", "chunked_matmul", "--precision", "f32", "--out", str(WORK / "case.cand.safetensors"))
run("check", str(case), str(WORK / "case.cand.safetensors"), "--precision", "f32", text="PASS")
# Deterministic: the same case, the same bytes; also with the old spellings (lambda=, unmasked=), which warn.
run("gen", "--case", "variant=hla2,gamma=7/8,normalize=add,dtype=f32,B=2,H=2,Hkv=1,n=70,d=16,dv=8,seed=5,lambda=0,unmasked=false",
    "--out", str(WORK / "again.safetensors"), "--no-progress", text="lambda= is the old spelling of lam=")
check("gen --case is deterministic", case.read_bytes() == (WORK / "again.safetensors").read_bytes())

# 2. the same inputs through hla ref, FLA layout
p = parts(case)
write_inputs(WORK / "in_bthd.safetensors", {k: to_bthd(p["tensors"][k], 4) for k in ("q", "k", "v")})
ref = WORK / "ref.safetensors"
run("ref", str(WORK / "in_bthd.safetensors"), "--layout", "bthd", "--variant", "hla2", "--gamma", "0.875", "--normalize", "add",
    "--out", str(ref), "--no-progress", text="certified")
run("ref", str(WORK / "in_bthd.safetensors"), "--layout", "bthd", "--gamma", "0.875", "--normalize", "add", "--lambda", "0",
    "--out", str(WORK / "ref_old.safetensors"), "--no-progress", text="--lambda is the old spelling of --lam")
check("hla ref --lambda (the old spelling) == --lam", ref.read_bytes() == (WORK / "ref_old.safetensors").read_bytes())
r = parts(ref)
for name in ("q", "k", "v", "ref_out", "ref_den", "ref_num", "mag_num", "mag_den", "mag_num_unmasked", "mag_den_unmasked", "flags", "den_flags"):
    a, b = p["tensors"].get(name), r["tensors"].get(name)
    check(f"hla ref == hla gen --case: {name}", a == b)
for key in ("variant", "masked", "gamma", "normalize", "eps", "eps_mode", "lambda", "scale", "reference_bits"):
    check(f"hla ref == hla gen --case: metadata {key}", p["metadata"][key] == r["metadata"][key])
run("check", str(ref), str(WORK / "case.cand.safetensors"), "--precision", "f32", text="PASS")

# 3. [B,H,T,D], F16, packed sequences (cu_seqlens I32) with GQA
f16 = WORK / "f16case.safetensors"
run("gen", "--case", "variant=ahla,gamma=15/16,dtype=f16,B=1,H=2,Hkv=1,n=50,d=8,dv=8,seed=9", "--out", str(f16), "--no-progress")
p = parts(f16)
qkv = {k: p["tensors"][k] for k in ("q", "k", "v")}
qkv["cu_seqlens"] = ["I32", [3], struct.pack("<3i", 0, 21, 50)]
write_inputs(WORK / "packed.safetensors", qkv)
packed = WORK / "packed_ref.safetensors"
run("ref", str(WORK / "packed.safetensors"), "--variant", "ahla", "--gamma", "15/16", "--out", str(packed), "--no-progress",
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
        str(WORK / f"seq_{tag}_ref.safetensors"), "--no-progress")
    alone = parts(WORK / f"seq_{tag}_ref.safetensors")["tensors"]["ref_out"][2]
    dtype, (B, H, T, DV), data = rp["tensors"]["ref_out"]
    mine = b"".join(data[(h * T + s0) * DV * 8:(h * T + s1) * DV * 8] for h in range(H))
    check(f"packed sequence {tag} equals its reference alone", mine == alone)

# 4. an initial state (masked hla2: S, C/m, F/f after the prefix, SPEC §3), exact on small integers
whole = WORK / "whole.safetensors"
run("gen", "--case", "variant=hla2,gamma=1/2,normalize=add,dist=small_int,dtype=f32,B=1,H=2,Hkv=1,n=20,d=4,dv=3,seed=3",
    "--out", str(whole), "--no-progress")
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
    "--no-progress", text="initial state")
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
    str(WORK / "tail_nostate_ref.safetensors"), "--no-progress")
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
run("gen", "--case", spec, "--out", str(sc), "--no-progress", text="wrote")
run("gen", "--case", spec, "--out", str(WORK / "state_case2.safetensors"), "--no-progress")
check("gen --case state=40 is deterministic", sc.read_bytes() == (WORK / "state_case2.safetensors").read_bytes())
# --quiet, the old spelling of --no-progress, still works for one release and says so.
run("gen", "--case", spec, "--out", str(WORK / "state_case3.safetensors"), "--quiet",
    text="--quiet is the old spelling of --no-progress")
check("gen --quiet writes the same fixture", sc.read_bytes() == (WORK / "state_case3.safetensors").read_bytes())
check("gen --case state=40 carries the hla3 state", all(f"initial_state.{n}" in parts(sc)["tensors"] for n in ("S", "P", "z", "F", "f")))
run("eval", str(sc), "--form", "chunked_matmul", "--precision", "f32", "--out", str(WORK / "state_case.cand.safetensors"))
run("check", str(sc), str(WORK / "state_case.cand.safetensors"), "--precision", "f32", text="PASS")
run("gen", "--case", "variant=hla3,state=4,d=4", "--out", str(WORK / "y.safetensors"), status=0)
run("gen", "--case", "variant=hla3_paper,state=4,d=4", "--out", str(WORK / "z.safetensors"), status=2, text="no streaming state")


# 5. gradients: hla ref with the upstream do, dden == hla gen --case ...,grad=true
ESIZE = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2}


def bthd(t):
    # [B, H, T, W] (or [B, H, T]) -> [B, T, H, W] (or [B, T, H]).
    dtype, shape, data = t
    B, H, T = shape[:3]
    W = shape[3] if len(shape) == 4 else 1
    row = W * ESIZE[dtype]
    out = bytearray(len(data))
    for b in range(B):
        for h in range(H):
            for s in range(T):
                out[((b * T + s) * H + h) * row:((b * T + s) * H + h + 1) * row] = data[((b * H + h) * T + s) * row:((b * H + h) * T + s + 1) * row]
    return [dtype, [B, T, H] + shape[3:], bytes(out)]


def f32_as_f64(t):
    # An F32 tensor as F64 (the same values): an upstream in another dtype than the inputs.
    dtype, shape, data = t
    assert dtype == "F32"
    n = len(data) // 4
    return ["F64", shape, struct.pack(f"<{n}d", *struct.unpack(f"<{n}f", data))]


INPUT_NAMES = ("q", "k", "v", "do", "dden", "offsets")


def grad_inputs(fixture, layout, change=None):
    # The fixture's inputs and upstream (and initial state) as an `hla ref` input file in `layout`.
    t = {k: list(x) for k, x in parts(fixture)["tensors"].items() if k in INPUT_NAMES or k.startswith("initial_state.")}
    if layout == "bthd":
        t.update({k: bthd(t[k]) for k in ("q", "k", "v", "do", "dden") if k in t})
    if change:
        change(t)
    path = WORK / f"{fixture.stem}.{layout}.in.safetensors"
    write_inputs(path, t)
    return path


def ref_args(fixture):
    md = parts(fixture)["metadata"]
    args = ["--variant", md["variant"], "--gamma", md["gamma"], "--lam", md["lambda"], "--scale", md["scale"], "--eps", md["eps"],
            "--normalize", md["eps_mode"] if md["normalize"] == "true" else "none"]
    return args + ([] if md["masked"] == "true" else ["--unmasked"])


def same_fixture_tensors(a, b, what):
    ta, tb = parts(a)["tensors"], parts(b)["tensors"]
    check(f"{what}: the same tensor names", sorted(ta) == sorted(tb))
    differ = sorted(k for k in ta if ta[k] != tb.get(k))
    check(f"{what}: every tensor bit for bit" + (f" (differ: {differ})" if differ else ""), not differ)
    check(f"{what}: carries ref_dq, ref_dk, ref_dv", all(k in tb for k in ("ref_dq", "ref_dk", "ref_dv", "mag_dq", "do")))


def passes_own_backward(fixture, form, tag):
    cand = WORK / f"{tag}.cand.safetensors"
    run("eval", str(fixture), "--out", str(cand), "--precision", "f64", "--dtype", "f64", "--grad", form)
    run("check", str(fixture), str(cand), "--precision", "f64", "--require-grad", text="PASS")


GRAD_CASES = (
    # the double-double engine (n > 48), GQA, normalized with dden; do in F64 (f32 values) in one layout
    ("hla2", "variant=hla2,gamma=7/8,normalize=add,dtype=f32,B=2,H=2,Hkv=1,n=70,d=16,dv=8,seed=11,grad=true", "chunked_matmul"),
    # unnormalized, no dden
    ("la1", "variant=la1,gamma=15/16,dtype=bf16,B=1,H=2,Hkv=2,n=60,d=16,dv=16,seed=12,grad=true", "chunked_matmul"),
    # an initial state (bf16 inputs, f32 state) with clamp normalization
    ("hla3", "variant=hla3,gamma=15/16,normalize=clamp,dtype=bf16,B=2,H=2,Hkv=1,n=14,d=4,dv=3,seed=2,state=9,grad=true", "streaming"),
    # an initial state through the engine, dden without normalize (den is an output)
    ("ahla", "variant=ahla,gamma=31/32,dtype=bf16,B=1,H=2,Hkv=1,n=64,d=16,dv=16,seed=13,state=30,grad=true,dden=true", "chunked"),
)
for tag, spec, form in GRAD_CASES:
    gen_fx = WORK / f"grad_{tag}.safetensors"
    run("gen", "--case", spec, "--out", str(gen_fx), "--no-progress", text="wrote")
    for layout in ("bhtd", "bthd"):
        change = (lambda t: t.__setitem__("do", f32_as_f64(t["do"]))) if layout == "bthd" and parts(gen_fx)["tensors"]["do"][0] == "F32" else None
        src = grad_inputs(gen_fx, layout, change)
        out = WORK / f"grad_{tag}.{layout}.ref.safetensors"
        run("ref", str(src), "--layout", layout, *ref_args(gen_fx), "--out", str(out), "--no-progress",
            text="gradients: ")
        same_fixture_tensors(gen_fx, out, f"hla ref {layout} with do == hla gen --case grad=true ({tag})")
    passes_own_backward(out, form, f"grad_{tag}")
    # Deterministic: the same inputs again, the same bytes.
    again = WORK / f"grad_{tag}.again.safetensors"
    run("ref", str(src), "--layout", "bthd", *ref_args(gen_fx), "--out", str(again), "--no-progress")
    check(f"hla ref with do is deterministic ({tag})", again.read_bytes() == out.read_bytes())

# dden makes a difference (a reference that ignored the upstream would not notice).
hla2 = WORK / "grad_hla2.safetensors"
nodden = grad_inputs(hla2, "bhtd", lambda t: t.pop("dden"))
run("ref", str(nodden), *ref_args(hla2), "--out", str(WORK / "grad_nodden.safetensors"), "--no-progress", text="for the upstream do\n")
check("without dden the reference dq differs", parts(WORK / "grad_nodden.safetensors")["tensors"]["ref_dq"] != parts(hla2)["tensors"]["ref_dq"])

# The golden packed gradient fixture (offsets, exact rationals) through hla ref, both layouts.
golden = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "hla2-raw-f32-gaussian-n37-d8-B1H2K1-varlen-grad.safetensors"
check("the golden packed gradient fixture has offsets", "offsets" in parts(golden)["tensors"])
for layout in ("bhtd", "bthd"):
    out = WORK / f"golden_varlen.{layout}.ref.safetensors"
    run("ref", str(grad_inputs(golden, layout)), "--layout", layout, *ref_args(golden), "--out", str(out), "--no-progress",
        text="packed sequences")
    same_fixture_tensors(golden, out, f"hla ref {layout} == the golden packed gradient fixture")
passes_own_backward(out, "streaming", "golden_varlen")

# Packed sequences through the engine: each sequence's gradients equal those of the sequence alone.
la1 = WORK / "grad_la1.safetensors"
lp = parts(la1)["tensors"]
packed_in = grad_inputs(la1, "bhtd", lambda t: t.__setitem__("cu_seqlens", ["I32", [3], struct.pack("<3i", 0, 23, 60)]))
packed_ref = WORK / "grad_packed.ref.safetensors"
run("ref", str(packed_in), *ref_args(la1), "--out", str(packed_ref), "--no-progress", text="2 packed sequences")
passes_own_backward(packed_ref, "chunked_matmul", "grad_packed")
pr = parts(packed_ref)["tensors"]


def rows(t, s0, s1):
    # Tokens s0..s1 of every head of a [1, H, T, W] tensor.
    dtype, (B, H, T, W), data = t
    e = ESIZE.get(dtype, 1) * W
    return b"".join(data[(h * T + s0) * e:(h * T + s1) * e] for h in range(H))


for s0, s1, tag in ((0, 23, "a"), (23, 60, "b")):
    alone = {k: [lp[k][0], lp[k][1][:2] + [s1 - s0] + lp[k][1][3:], rows(lp[k], s0, s1)] for k in ("q", "k", "v", "do")}
    write_inputs(WORK / f"grad_seq_{tag}.safetensors", alone)
    run("ref", str(WORK / f"grad_seq_{tag}.safetensors"), *ref_args(la1), "--out", str(WORK / f"grad_seq_{tag}.ref.safetensors"), "--no-progress")
    one = parts(WORK / f"grad_seq_{tag}.ref.safetensors")["tensors"]
    for name in ("ref_dq", "ref_dk", "ref_dv", "mag_dq"):
        check(f"packed sequence {tag} has its gradients alone: {name}", rows(pr[name], s0, s1) == one[name][2])

if any(WORK.glob(".*.tmp.*")):
    check("no temporary file left behind", False)
print(f"{fails} failure(s)")
sys.exit(1 if fails else 0)
