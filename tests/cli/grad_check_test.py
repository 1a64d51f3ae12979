#!/usr/bin/env python3
"""ctest: `hla check` judges gradients (SPEC §9).

A fixture with gradients (`hla gen --case ...,grad=true`: hla2 masked, γ = 7/8,
4 query heads on 2 K/V heads, raw and normalized with dden) is checked against
candidates whose dq, dk, dv come from

  - our chunked matmul backward in float64 (`hla eval --grad`: another form than
    the fixture's exact streaming one)                              -> PASS
  - an independent float64 implementation written here in plain Python (the
    reverse-time recurrence of the corrected-state form, backward.md), which
    shares no code with the oracle                                   -> PASS
  - the same implementation with one planted bug each                -> FAIL, the
    report's worst elements printed:
      * dk without the cross term  k̄ = S̄ k  (instead of (S̄ + S̄ᵀ) k),
      * the adjoint F̄ decayed by γ instead of γ² in the reverse recurrence,
      * GQA: dk, dv of a K/V head taken from its first query head only (not
        summed over the group);
and a fixture whose ref_dq was edited is refused (exit 2): with its digest left
as it was ("digest mismatch"), and with the digest recomputed (the float64
backward of its inputs disagrees: "does not match its inputs").
Also: a candidate without gradients is PASS with "gradients not checked", FAIL
with --require-grad; gradients against a fixture without any are exit 2.
From an initial state (hla3, `state=5,grad=true`): the fixture carries
ref_dstate.<part>; our backward's dstate passes, a dropped one (zeros) fails
naming dstate.S, a missing one fails under --require-grad, a wrong shape is
exit 2, and a forged ref_dstate is refused.
`hla eval --grad chunked --precision bf16` (every operation rounded to bf16)
passes when judged in bf16, its error well above the f64 backward's.

Usage: grad_check_test.py HLA WORK_DIR
"""
import array
import pathlib
import shutil
import subprocess
import sys

HLA, WORK = sys.argv[1], pathlib.Path(sys.argv[2])
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import hla_fixture_file  # noqa: E402

shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
fails = 0


def run(*argv, status=0, text=(), show=False):
    global fails
    r = subprocess.run([HLA, *map(str, argv)], capture_output=True, text=True)
    out = r.stdout + r.stderr
    texts = [text] if isinstance(text, str) else list(text)
    ok = r.returncode == status and all(t in out for t in texts)
    print(("ok" if ok else "FAILED") + f": exit {r.returncode} (want {status}): hla {' '.join(map(str, argv))}")
    if show or not ok:
        print("    " + out[-4000:].replace("\n", "\n    "))
    if not ok:
        print(f"    expected the texts {texts}")
        fails += 1
    return out


# ---- safetensors parts (hla_fixture_file) <-> flat lists of floats ----------
def values(parts, name):
    dtype, shape, data = parts["tensors"][name]
    code = {"F64": "d", "F32": "f"}[dtype]
    a = array.array(code)
    a.frombytes(bytes(data))
    return list(a), shape


def f64_tensor(xs, shape):
    return ["F64", list(shape), array.array("d", xs).tobytes()]


# ---- an independent float64 hla2 (masked, λ = 0, scale 1) backward -----------
def hla2_head_grad(q, k, v, gamma, dout, dden, eps, normalize, bug=None):
    """One head: q, k n×d, v n×dv (lists of rows), dout n×dv, dden n (or None).
    Returns dq, dk, dv (lists of rows). Forward: S_t = γS + k kᵀ,
    F_t = γ²F + (S_t q_t) v̂_tᵀ with v̂ = [v | 1], y_t = q_tᵀ F_t = [num | den]."""
    n, d, dv = len(q), len(q[0]), len(v[0])
    vh = [row + [1.0] for row in v]
    S = [[0.0] * d for _ in range(d)]
    F = [[0.0] * (dv + 1) for _ in range(d)]
    Ss, Fs, Y = [], [], []
    for t in range(n):
        S = [[gamma * S[a][b] + k[t][a] * k[t][b] for b in range(d)] for a in range(d)]
        Sq = [sum(S[a][b] * q[t][b] for b in range(d)) for a in range(d)]
        F = [[gamma * gamma * F[a][c] + Sq[a] * vh[t][c] for c in range(dv + 1)] for a in range(d)]
        Ss.append(S)
        Fs.append(F)
        Y.append([sum(q[t][a] * F[a][c] for a in range(d)) for c in range(dv + 1)])
    # ∂L/∂Y_t (SPEC §9): [do | dden] raw; normalized (add): [do/D | dden − ⟨do, num⟩/D²], D = den + ε.
    yb = []
    for t in range(n):
        dd = dden[t] if dden else 0.0
        if normalize:
            D = Y[t][dv] + eps
            yb.append([x / D for x in dout[t]] + [dd - sum(dout[t][c] * Y[t][c] for c in range(dv)) / (D * D)])
        else:
            yb.append(list(dout[t]) + [dd])
    # Reverse time: F̄_t = γ²F̄_{t+1} + q_t ȳ_t, S̄_t = γS̄_{t+1} + (F̄_t v̂_t) q_tᵀ.
    decay_F = gamma if bug == "decay" else gamma * gamma
    Fb = [[0.0] * (dv + 1) for _ in range(d)]
    Sb = [[0.0] * d for _ in range(d)]
    dq, dk, dvv = [None] * n, [None] * n, [None] * n
    for t in reversed(range(n)):
        S, F = Ss[t], Fs[t]
        Fb = [[decay_F * Fb[a][c] + q[t][a] * yb[t][c] for c in range(dv + 1)] for a in range(d)]
        Fv = [sum(Fb[a][c] * vh[t][c] for c in range(dv + 1)) for a in range(d)]
        Sq = [sum(S[a][b] * q[t][b] for b in range(d)) for a in range(d)]
        dq[t] = [sum(F[a][c] * yb[t][c] for c in range(dv + 1)) + sum(S[b][a] * Fv[b] for b in range(d)) for a in range(d)]
        dvv[t] = [sum(Fb[a][c] * Sq[a] for a in range(d)) for c in range(dv)]
        Sb = [[gamma * Sb[a][b] + Fv[a] * q[t][b] for b in range(d)] for a in range(d)]
        if bug == "cross":  # k̄ = S̄ k: the (S̄ᵀ k) cross term dropped
            dk[t] = [sum(Sb[a][b] * k[t][b] for b in range(d)) for a in range(d)]
        else:
            dk[t] = [sum((Sb[a][b] + Sb[b][a]) * k[t][b] for b in range(d)) for a in range(d)]
    return dq, dk, dvv


def candidate_gradients(fixture, bug=None):
    """dq, dk, dv of the whole fixture by hla2_head_grad, flat in the fixture's layouts."""
    parts = hla_fixture_file.parse(fixture.read_bytes())
    md = parts["metadata"]
    assert md["variant"] == "hla2" and md["masked"] == "true" and md["lambda"] == "0" and md["scale"] == "1"
    num, den = (int(x) for x in md["gamma"].split("/"))
    gamma = num / den
    normalize = md["normalize"] == "true"
    assert not normalize or md["eps_mode"] == "add"
    en, ed = (int(x) for x in (md["eps"].split("/") + ["1"])[:2])
    eps = en / ed
    B, H, Hkv, n, d, dv = (int(md[x]) for x in ("batch", "heads", "kv_heads", "n", "d", "dv"))
    q, _ = values(parts, "q")
    k, _ = values(parts, "k")
    v, _ = values(parts, "v")
    do, _ = values(parts, "do")
    dden = values(parts, "dden")[0] if "dden" in parts["tensors"] else None
    rows = lambda x, base, m: [x[base + t * m: base + (t + 1) * m] for t in range(n)]  # noqa: E731
    dq = [0.0] * (B * H * n * d)
    dk = [0.0] * (B * Hkv * n * d)
    dvv = [0.0] * (B * Hkv * n * dv)
    group = H // Hkv
    for b in range(B):
        for h in range(H):
            g = h // group
            gq, gk, gv = hla2_head_grad(rows(q, (b * H + h) * n * d, d), rows(k, (b * Hkv + g) * n * d, d),
                                        rows(v, (b * Hkv + g) * n * dv, dv), gamma, rows(do, (b * H + h) * n * dv, dv),
                                        dden[(b * H + h) * n:(b * H + h + 1) * n] if dden else None, eps, normalize, bug)
            for t in range(n):
                for c in range(d):
                    dq[((b * H + h) * n + t) * d + c] = gq[t][c]
                    if bug == "gqa" and h % group != 0:
                        continue  # dk, dv of the group's first query head only
                    dk[((b * Hkv + g) * n + t) * d + c] += gk[t][c]
                for c in range(dv):
                    if bug == "gqa" and h % group != 0:
                        continue
                    dvv[((b * Hkv + g) * n + t) * dv + c] += gv[t][c]
    return {"dq": f64_tensor(dq, [B, H, n, d]), "dk": f64_tensor(dk, [B, Hkv, n, d]), "dv": f64_tensor(dvv, [B, Hkv, n, dv])}


def write_candidate(fixture, path, bug=None):
    """Outputs by our streaming form (`hla eval`), gradients by the Python implementation above."""
    base = WORK / "base.candidate.safetensors"
    run("eval", fixture, "--out", base, "--form", "streaming", "--precision", "f64")
    parts = hla_fixture_file.parse(base.read_bytes())
    parts["tensors"].update(candidate_gradients(fixture, bug))
    path.write_bytes(hla_fixture_file.serialize(parts, redigest=False))


# ---- fixtures -------------------------------------------------------------
cases = {
    "raw": "variant=hla2,gamma=7/8,B=1,H=4,Hkv=2,n=24,d=8,dv=4,seed=3,grad=true",
    "add": "variant=hla2,gamma=7/8,normalize=add,B=1,H=4,Hkv=2,n=24,d=8,dv=4,seed=4,grad=true",
}
fx = {}
for name, spec in cases.items():
    fx[name] = WORK / f"{name}.safetensors"
    run("gen", "--case", spec, "--out", fx[name], text="wrote")

for name, f in fx.items():
    print(f"\n== {name}: correct candidates")
    ours = WORK / f"{name}.ours.safetensors"
    run("eval", f, "--out", ours, "--precision", "f64", "--grad", "chunked_matmul", "--chunk", "5", text="chunked_matmul")
    run("check", f, ours, "--precision", "f64", "--require-grad", text=["PASS", "dq: ok", "dk: ok", "dv: ok"])
    run("check", f, ours, "--precision", "f32", text=["PASS", "dq: ok"])
    indep = WORK / f"{name}.independent.safetensors"
    write_candidate(f, indep)
    out = run("check", f, indep, "--precision", "f64", "--require-grad", text=["PASS", "dq: ok", "dk: ok", "dv: ok"])
    # The independent implementation is judged, not waved through: its scores are not all 0.
    if "worst elements of dq" not in out:
        print("FAILED: the independent candidate's dq scores are all 0 (nothing measured)")
        fails += 1

    print(f"\n== {name}: planted bugs must FAIL, with the worst elements shown")
    for bug, tensor in (("cross", "dk"), ("decay", "dq"), ("gqa", "dk")):
        bad = WORK / f"{name}.{bug}.safetensors"
        write_candidate(f, bad, bug)
        run("check", f, bad, "--precision", "f64", status=1,
            text=["FAIL", f"{tensor}: ", "elements exceed the a priori gradient bound", f"worst elements of {tensor}:"], show=True)
        # Judged in f32 too (a larger bound): still caught.
        run("check", f, bad, "--precision", "f32", status=1, text=["FAIL", "exceed the a priori gradient bound"])

print("\n== candidates without gradients, fixtures without gradients")
plain = WORK / "plain.candidate.safetensors"
run("eval", fx["raw"], "--out", plain, "--precision", "f64")
run("check", fx["raw"], plain, "--precision", "f64", text=["PASS", "gradients not checked: the candidate has no dq, dk, dv"])
run("check", fx["raw"], plain, "--precision", "f64", "--require-grad", status=1,
    text=["FAIL", "the candidate lacks dq, dk, dv, required by --require-grad"])
nograd = WORK / "nograd.safetensors"
run("gen", "--case", cases["raw"].replace(",grad=true", ""), "--out", nograd)
run("check", nograd, WORK / "raw.ours.safetensors", "--precision", "f64", status=2,
    text="is a gradient, but the fixture carries no gradients")
run("check", nograd, plain, "--precision", "f64", "--require-grad", status=2, text="the fixture carries none")

print("\n== a fixture whose ref_dq was edited is refused")
parts = hla_fixture_file.parse(fx["raw"].read_bytes())
dq, shape = values(parts, "ref_dq")
i = max(range(len(dq)), key=lambda j: abs(dq[j]))
dq[i] *= 1 + 1e-6  # far below any kernel's f32 error, far above the reference's
parts["tensors"]["ref_dq"] = f64_tensor(dq, shape)
stale = WORK / "edited-stale-digest.safetensors"
stale.write_bytes(hla_fixture_file.serialize(parts, redigest=False))
run("check", stale, WORK / "raw.ours.safetensors", "--precision", "f64", status=2, text="digest mismatch", show=True)
forged = WORK / "edited-forged-digest.safetensors"
forged.write_bytes(hla_fixture_file.serialize(parts, redigest=True))
run("check", forged, WORK / "raw.ours.safetensors", "--precision", "f64", status=2,
    text=["does not match its inputs", "ref_dq"], show=True)
# The upstream is an input like q: an edited `do` (digest recomputed) no longer gives the stored gradients.
parts = hla_fixture_file.parse(fx["raw"].read_bytes())
dt, shape, data = parts["tensors"]["do"]
a = array.array("f")
a.frombytes(bytes(data))
a[0] = -a[0]
parts["tensors"]["do"] = [dt, shape, a.tobytes()]
edited_do = WORK / "edited-do.safetensors"
edited_do.write_bytes(hla_fixture_file.serialize(parts, redigest=True))
run("check", edited_do, WORK / "raw.ours.safetensors", "--precision", "f64", status=2, text=["does not match its inputs", "ref_d"])

print("\n== at scale (the engine proves it): a forged ref_dq, mag_dk or dstate is refused")
# n > 48: the double-double engine wrote it and the double engine's backward proves it on read.
big = WORK / "big.safetensors"
run("gen", "--case", "variant=hla2,gamma=99/100,normalize=add,dtype=f32,B=1,H=2,Hkv=1,n=200,d=16,dv=8,seed=4,state=30,grad=true",
    "--out", big)
bours = WORK / "big.ours.safetensors"
run("eval", big, "--out", bours, "--precision", "f64", "--grad", "chunked_matmul")
run("check", big, bours, "--precision", "f64", "--require-grad", text="PASS")
for name, factor, what in (("ref_dq", 1 + 1e-6, "ref_dq"), ("mag_dk", 1 + 1e-9, "mag_dk"), ("ref_dstate.F", 1 + 1e-9, "ref_dstate")):
    parts = hla_fixture_file.parse(big.read_bytes())
    xs, shape = values(parts, name)
    i = max(range(len(xs)), key=lambda j: abs(xs[j]))
    xs[i] *= factor  # far below any kernel's f32 error, far above the reference's
    parts["tensors"][name] = f64_tensor(xs, shape)
    forged = WORK / f"big-forged-{name}.safetensors"
    forged.write_bytes(hla_fixture_file.serialize(parts, redigest=True))
    run("check", forged, bours, "--precision", "f64", status=2, text=["does not match its inputs", what])

print("\n== gradients from an initial state: dstate (SPEC §8, §9)")
# hla3 masked, normalized, GQA, two batch entries, from the state after 5 earlier tokens.
sfx = WORK / "state.safetensors"
run("gen", "--case", "variant=hla3,gamma=7/8,normalize=add,B=2,H=2,Hkv=1,n=12,d=4,dv=3,seed=6,state=5,grad=true", "--out", sfx,
    text="wrote")
again = WORK / "state-again.safetensors"  # the same description gives the same bytes
run("gen", "--case", "variant=hla3,gamma=7/8,normalize=add,B=2,H=2,Hkv=1,n=12,d=4,dv=3,seed=6,state=5,grad=true", "--out", again)
if again.read_bytes() != sfx.read_bytes():
    print("FAILED: hla gen --case with state and grad is not deterministic")
    fails += 1
sparts = hla_fixture_file.parse(sfx.read_bytes())
for name in ("ref_dstate.S", "ref_dstate.P", "ref_dstate.z", "ref_dstate.F", "ref_dstate.f", "mag_dstate.S"):
    if name not in sparts["tensors"]:
        print(f"FAILED: the fixture lacks {name}")
        fails += 1
sours = WORK / "state.ours.safetensors"
run("eval", sfx, "--out", sours, "--precision", "f64", "--grad", "chunked", "--chunk", "5")
run("check", sfx, sours, "--precision", "f64", "--require-grad", text=["PASS", "dq: ok", "dstate.S: ok", "dstate.F: ok", "dstate.f: ok"])
cparts = hla_fixture_file.parse(sours.read_bytes())
# The state's gradient dropped (zeros): FAIL, naming it.
dropped = dict(cparts, tensors=dict(cparts["tensors"]))
for name, (dt, shape, data) in cparts["tensors"].items():
    if name.startswith("dstate."):
        dropped["tensors"][name] = [dt, shape, bytes(len(data))]
zeros = WORK / "state.dropped.safetensors"
zeros.write_bytes(hla_fixture_file.serialize(dropped, redigest=False))
run("check", sfx, zeros, "--precision", "f64", status=1,
    text=["FAIL", "dstate.S: ", "elements exceed the a priori gradient bound", "worst elements of dstate.S"], show=True)
# Without dstate: not checked, FAIL with --require-grad.
nost = dict(cparts, tensors={k: t for k, t in cparts["tensors"].items() if not k.startswith("dstate.")})
nostate = WORK / "state.nodstate.safetensors"
nostate.write_bytes(hla_fixture_file.serialize(nost, redigest=False))
run("check", sfx, nostate, "--precision", "f64", text=["PASS", "not checked: the candidate has no dstate.S"])
run("check", sfx, nostate, "--precision", "f64", "--require-grad", status=1, text=["FAIL", "required by --require-grad"])
# A bad shape: exit 2, naming the tensor and the shape expected.
badshape = dict(cparts, tensors=dict(cparts["tensors"]))
dt, shape, data = cparts["tensors"]["dstate.S"]
badshape["tensors"]["dstate.S"] = [dt, shape[:-1], bytes(len(data) // shape[-1])]
wrong = WORK / "state.badshape.safetensors"
wrong.write_bytes(hla_fixture_file.serialize(badshape, redigest=False))
run("check", sfx, wrong, "--precision", "f64", status=2, text=["dstate.S has shape [2, 2, 4]; expected [2, 2, 4, 4]"], show=True)
# An edited ref_dstate (digest recomputed) is refused.
ep = hla_fixture_file.parse(sfx.read_bytes())
ds, shape = values(ep, "ref_dstate.F")
i = max(range(len(ds)), key=lambda j: abs(ds[j]))
ds[i] *= 1 + 1e-6
ep["tensors"]["ref_dstate.F"] = f64_tensor(ds, shape)
forged_state = WORK / "state.forged.safetensors"
forged_state.write_bytes(hla_fixture_file.serialize(ep, redigest=True))
run("check", forged_state, sours, "--precision", "f64", status=2, text=["does not match its inputs", "ref_dstate"], show=True)

print("\n== hla eval --grad in bf16: an honest low-precision backward passes, its error above f64's")
low = WORK / "bf16.safetensors"
run("gen", "--case", "variant=hla2,gamma=7/8,dtype=bf16,B=1,H=2,Hkv=1,n=40,d=8,dv=8,seed=6,grad=true", "--out", low, text="wrote")
worst = {}
for prec in ("bf16", "f64"):
    cand = WORK / f"bf16.{prec}.safetensors"
    run("eval", low, "--out", cand, "--precision", prec, "--dtype", "f64", "--grad", "chunked", "--chunk", "16", text=f"in {prec}")
    run("check", low, cand, "--precision", prec, "--require-grad", text=["PASS", "dq: ok", "dk: ok", "dv: ok"])
    fp, cp = hla_fixture_file.parse(low.read_bytes()), hla_fixture_file.parse(cand.read_bytes())
    worst[prec] = max(abs(a - b) for g in ("dq", "dk", "dv") for a, b in zip(values(cp, g)[0], values(fp, "ref_" + g)[0]))
print(f"worst |error| of dq, dk, dv: bf16 {worst['bf16']:.3g}, f64 {worst['f64']:.3g}")
if not worst["bf16"] > 100 * worst["f64"]:
    print("FAILED: the bf16 backward is not less accurate than the f64 one (not evaluated in bf16)")
    fails += 1

print(f"\n{fails} failure(s)")
sys.exit(1 if fails else 0)
