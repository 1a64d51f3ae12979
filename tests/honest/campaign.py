#!/usr/bin/env python3
"""Honest-kernel campaign: correct HLA kernels, written from SPEC.md alone in the
styles real users write them (tests/honest/README.md), judged by hla_oracle.check
on adversarial cases this script generates. Every FAIL is a false alarm of the
oracle (or a kernel bug: each failing kernel is rerun in float64, where a
correct algorithm matches the reference to ~1e-12 of the magnitude).

  PYTHONPATH=build/python .venv/bin/python tests/honest/campaign.py --cases 200 --seed 1
  ... --kernels flat_fwd,tree_np --max-n 64 --json summary.json --lib-dir build/tests/honest
  ... --seed 1 --case 17 --kernels flat_fwd        (one case again, as a FAIL prints it)

Exit status: 0 no false alarm, 1 at least one FAIL, 2 usage error.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import hla_oracle  # noqa: E402

import cabi  # noqa: E402
import kernels_np as KN  # noqa: E402

VARIANTS = ("la1", "hla2", "ahla", "hla3")
ALL = [("la1", True), ("hla2", True), ("hla2", False), ("ahla", True), ("hla3", True), ("hla3", False)]
MASKED4 = [("la1", True), ("hla2", True), ("ahla", True), ("hla3", True)]
MASKED3 = [("la1", True), ("hla2", True), ("ahla", True)]
F32 = "bf16=f32,f32=f32"
F64 = "bf16=f64,f32=f64"
# Tensor-core operands, f32 accumulation. By the case's dtype: the check reads every case's inputs as f32 (bf16
# values held in f32), so a declaration per input dtype would not tell the two apart.
TC = {"bf16": "bf16+f32", "f32": "tf32"}


def precision_for(K, c):
    """The kernel's declared precision for case c."""
    return K["precision"][c["dtype"]] if isinstance(K["precision"], dict) else K["precision"]


# ---------------------------------------------------------------------------
# The kernels: name -> declaration. kind c: a shared library (C ABI); numpy, torch:
# run(q, k, v, opts, ct) -> (num, den) before normalization, in compute type ct.
# ---------------------------------------------------------------------------
def _np_heads(head):
    def run(q, k, v, o, ct):
        q = q.astype(ct) * ct(o["scale"])  # scale multiplies q first, in the compute type
        B, H = q.shape[:2]
        res = [[head(q[b, h], k[b, h], v[b, h], o, ct) for h in range(H)] for b in range(B)]
        num = np.stack([np.stack([r[0] for r in row]) for row in res])
        den = np.stack([np.stack([r[1] for r in row]) for row in res])
        return num, den
    return run


def _np_op(fn, **kw):
    """A numpy head kernel fn(q, k, v, variant, masked, gamma, ct) as run(q, k, v, opts, ct)."""
    return _np_heads(lambda q, k, v, o, ct: fn(q, k, v, o["variant"], o["masked"], o["gamma"], ct, **kw))


def _torch(fn):
    def run(q, k, v, o, ct):
        import torch
        tt = torch.float64 if ct == np.float64 else torch.float32
        q, k, v = q.to(tt), k.to(tt), v.to(tt)
        q = q * torch.tensor(o["scale"], dtype=tt)
        return fn(q, k, v, o)
    return run


def _torch_tc(variant_fn):
    """As _torch, for a tensor-core kernel variant_fn(q, k, v, o, mm): operands rounded to bf16 on bf16 inputs, to
    tf32 on f32 ones; not in the float64 rerun (the algorithm alone)."""
    def run(q, k, v, o, ct):
        import torch
        import kernels_torch as KT
        rnd = None if ct == np.float64 else KT.round_bf16 if q.dtype == torch.bfloat16 else KT.round_tf32
        mm = KT.tensor_core_mm(rnd) if rnd else torch.matmul
        return _torch(lambda q, k, v, o: variant_fn(q, k, v, o, mm))(q, k, v, o, ct)
    return run


def _kernels():
    import kernels_torch as KT
    return {
        "flat_fwd": dict(kind="c", src="c/flat_fwd.c", style="1 flat literal, natural order", form_class="flat",
                         precision=F32, support=ALL, max_n={"hla3": 64}),
        "flat_rev": dict(kind="c", src="c/flat_rev.c", style="2 flat literal, reverse order", form_class="flat",
                         precision=F32, support=ALL, max_n={"hla3": 64}),
        "chunk_pairs32": dict(kind="c", src="c/chunk_pairs.c", style="3 chunked w=32, intra-chunk pair by pair",
                              form_class="flat:32", precision=F32, support=MASKED4, max_n={}),
        "recurrent_c": dict(kind="c", src="c/recurrent.c", style="6 streaming recurrence (C)", form_class="masked",
                            precision=F32, support=ALL, max_n={}),
        "chunk_pairs64_np": dict(kind="numpy", src="kernels_np.py", style="3 chunked w=64, intra-chunk pair by pair",
                                 form_class="flat:64", precision=F32, support=MASKED4, max_n={"hla3": 64},
                                 run=_np_heads(lambda q, k, v, o, ct: KN.chunk_pairs64_head(q, k, v, o["variant"], o["gamma"], ct))),
        "tree_np": dict(kind="numpy", src="kernels_np.py", style="7 Blelloch scan of segment summaries (f32)",
                        form_class="masked", precision=F32, support=[x for x in ALL if x != ("hla3", False)], max_n={},
                        run=_np_op(KN.tree_head)),
        "tree_np_f64": dict(kind="numpy", src="kernels_np.py", style="7 Blelloch scan in f64, output rounded",
                            form_class="masked", precision=F64, compute=np.float64,
                            support=[x for x in ALL if x != ("hla3", False)], max_n={},
                            run=_np_op(KN.tree_head)),
        "f64_round_np": dict(kind="numpy", src="kernels_np.py", style="9 masked matrix forms in f64, output rounded",
                             form_class="masked", precision=F64, compute=np.float64, support=ALL, max_n={},
                             run=_np_op(KN.matrix_forms_head)),
        "logspace_chunk_torch": dict(kind="torch", src="kernels_torch.py", style="4 chunked w=64, log-space decay per chunk",
                                     form_class="masked", precision=F32, support=MASKED3, max_n={},
                                     run=_torch(lambda q, k, v, o: KT.chunked(q, k, v, o["variant"], o["gamma"], 64, "log"))),
        "logspace_seq_torch": dict(kind="torch", src="kernels_torch.py",
                                   style="5 naive masked matmul, log-space decay per sequence",
                                   form_class="masked", precision=F32,
                                   support=[("la1", True), ("hla2", True), ("hla2", False), ("ahla", True), ("hla3", True)],
                                   max_n={},
                                   run=_torch(lambda q, k, v, o: KT.logspace_seq(q, k, v, o["variant"], o["masked"], o["gamma"]))),
        "recurrent_torch": dict(kind="torch", src="kernels_torch.py", style="6 streaming recurrence (torch)",
                                form_class="masked", precision=F32, support=ALL, max_n={},
                                run=_torch(lambda q, k, v, o: KT.recurrent(q, k, v, o["variant"], o["masked"], o["gamma"]))),
        "state_diff_torch": dict(kind="torch", src="kernels_torch.py", style="8 paper state q^T(S C - G)",
                                 form_class="state_difference", precision=F32, support=[("hla2", True)], max_n={},
                                 run=_torch(lambda q, k, v, o: KT.state_difference(q, k, v, o["gamma"]))),
        # The control: a WRONG kernel (the diagonal term i = j = t dropped: a strict causal mask), which the
        # oracle must fail; it keeps this campaign from passing when the oracle passes everything.
        "control_strict_mask": dict(kind="numpy", src="kernels_np.py", style="control: strict mask (wrong)",
                                    form_class="masked", precision=F32, support=ALL, max_n={}, control=True,
                                    run=_np_op(KN.matrix_forms_head, strict=True)),
        "matmul_chunk_torch": dict(kind="torch", src="kernels_torch.py", style="10 chunked w=16, W⊙D masked matmuls, powers",
                                   form_class="masked", precision=F32, support=MASKED3, max_n={},
                                   run=_torch(lambda q, k, v, o: KT.chunked(q, k, v, o["variant"], o["gamma"], 16, "pow"))),
        "tc_chunk_torch": dict(kind="torch", src="kernels_torch.py",
                               style="11 chunked w=64, log-space, tensor-core operands (bf16 / tf32), f32 accumulation",
                               form_class="masked", precision=TC, support=MASKED3, max_n={},
                               run=_torch_tc(lambda q, k, v, o, mm: KT.chunked(q, k, v, o["variant"], o["gamma"], 64, "log", mm))),
        "tc_seq_torch": dict(kind="torch", src="kernels_torch.py",
                             style="12 naive masked matmul, log-space per sequence, tensor-core operands, f32 accumulation",
                             form_class="masked", precision=TC,
                             support=[("la1", True), ("hla2", True), ("hla2", False), ("ahla", True), ("hla3", True)], max_n={},
                             run=_torch_tc(lambda q, k, v, o, mm: KT.logspace_seq(q, k, v, o["variant"], o["masked"], o["gamma"], mm))),
    }


C_DEFINES = {"chunk_pairs32": ["-DHK_W=32"]}


def c_libraries(names, kernels, lib_dir, work):
    """{name: (Library f32, Library f64)}: from lib_dir (the CMake build) or compiled with cc into work/lib."""
    libs = {}
    for name in names:
        if kernels[name]["kind"] != "c":
            continue
        paths = []
        for suffix, real in (("", "float"), ("_f64", "double")):
            fname = f"libhonest_{name}{suffix}.so"
            if lib_dir:
                path = Path(lib_dir) / fname
            else:
                path = Path(work) / "lib" / fname
                src = HERE / kernels[name]["src"]
                deps = [src, HERE / "c" / "honest_cabi.h", HERE / "c" / "recur_state.h"]
                if not path.exists() or path.stat().st_mtime < max(p.stat().st_mtime for p in deps):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    cmd = [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", f"-DHK_REAL={real}",
                           *C_DEFINES.get(name, []), f"-I{HERE.parent.parent / 'include'}", str(src), "-o", str(path), "-lm"]
                    subprocess.run(cmd, check=True)
            paths.append(path)
        libs[name] = tuple(cabi.Library(p) for p in paths)
        declared = libs[name][0].form_class()
        if declared != kernels[name]["form_class"]:
            raise SystemExit(f"{name}: the library declares {declared}, the campaign {kernels[name]['form_class']}")
    return libs


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
GAMMAS = [Fraction(1), Fraction(99, 100), Fraction(9, 10), Fraction(1, 2)]
DISTS = ["gaussian", "repeated", "few_repeated", "positive_abs", "positive_elu", "alternating", "low_rank"]
DIMS = [1, 2, 3, 4, 8, 16]


def to_bf16_values(x):
    """float64/float32 -> the nearest bf16 values (round to nearest even), as float32."""
    x = np.asarray(x, np.float64)
    m, e = np.frexp(x)
    r = np.ldexp(np.rint(m * 256.0) / 256.0, e)  # 8 significant bits, ties to even
    return r.astype(np.float32)


def make_case(seed, index, max_n):
    """The case `index` of campaign `seed`: the same arrays on every machine."""
    rng = np.random.default_rng([seed, index])
    variant = VARIANTS[rng.integers(4)]
    masked = not (variant in ("hla2", "hla3") and rng.random() < 0.2)
    cap = min(max_n, 64) if variant == "hla3" else max_n
    if rng.random() < 0.3:  # around the chunk widths 16, 32, 64
        n = int(rng.choice([15, 16, 17, 31, 32, 33, 63, 64, 65]))
    else:
        n = int(rng.integers(1, cap + 1))
    n = max(1, min(n, cap))
    d, dv = int(rng.choice(DIMS)), int(rng.choice(DIMS))
    H = int(rng.integers(1, 3))
    dist = DISTS[rng.integers(len(DISTS))]
    gamma = GAMMAS[rng.integers(len(GAMMAS))]
    dtype = "bf16" if rng.random() < 0.3 else "f32"
    normalize = bool(rng.random() < 0.25)
    scale = Fraction(1)
    if rng.random() < 0.25:
        scale = Fraction(float(np.float32(d ** -0.5))) if rng.random() < 0.5 else Fraction(1, 2)
    shape = lambda w: (1, H, n, w)
    g = lambda w: rng.standard_normal(shape(w))
    if dist in ("repeated", "few_repeated"):
        m = 2 if dist == "few_repeated" else int(rng.integers(3, 6))
        base = [rng.standard_normal((H, m, w)) for w in (d, d, dv)]
        idx = rng.integers(m, size=n)
        q, k, v = (b[None][:, :, idx] for b in base)
    else:
        q, k, v = g(d), g(d), g(dv)
        if dist == "positive_abs":
            q, k = np.abs(q), np.abs(k)
        elif dist == "positive_elu":
            elu1 = lambda x: np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))
            q, k = elu1(q), elu1(k)
        elif dist == "alternating":
            sign = (-1.0) ** np.arange(n)[None, None, :, None]
            k, v = k * sign, v * sign
        elif dist == "low_rank":
            r = int(rng.integers(1, 3))
            basis = rng.standard_normal((1, H, r, d))
            k = rng.standard_normal((1, H, n, r)) @ basis
    cast = to_bf16_values if dtype == "bf16" else (lambda x: np.asarray(x, np.float32))
    q, k, v = cast(q), cast(k), cast(v)
    return dict(index=index, variant=variant, masked=masked, n=n, d=d, dv=dv, H=H, dist=dist, gamma=gamma,
                dtype=dtype, normalize=normalize, scale=scale, eps=Fraction(1, 1000000), q=q, k=k, v=v,
                grad_u=float(rng.random()), do=cast(rng.standard_normal((1, H, n, dv))))


def describe(c):
    scale = f" scale={c['scale']}" if c["scale"] != 1 else ""
    return (f"{c['variant']}{'' if c['masked'] else ' unmasked'} gamma={c['gamma']} n={c['n']} d={c['d']} dv={c['dv']} "
            f"H={c['H']} {c['dtype']} {c['dist']}{' normalize' if c['normalize'] else ''}{scale}")


# ---------------------------------------------------------------------------
# Running and judging
# ---------------------------------------------------------------------------
def opts_of(c):
    return dict(variant=c["variant"], masked=c["masked"], gamma=float(c["gamma"]), scale=float(c["scale"]),
                normalize=c["normalize"], eps=float(c["eps"]), dtype=c["dtype"])


def check_kwargs(c):
    return dict(variant=c["variant"], masked=c["masked"], gamma=c["gamma"], normalize="add" if c["normalize"] else "none",
                eps=c["eps"], scale=c["scale"])


def round_out(x, dtype):
    """The kernel's output in the input dtype: float32, or bf16 (a torch tensor)."""
    import torch
    x = np.asarray(x)
    if dtype == "bf16":
        return torch.from_numpy(to_bf16_values(x)).to(torch.bfloat16)  # exact: already bf16 values
    return x.astype(np.float32)


def run_kernel(name, K, libs, c, ct=None):
    """(out in the output dtype, den) of kernel `name` on case c (ct: compute type override, for f64 checks)."""
    o = opts_of(c)
    if K["kind"] == "c":
        lib = libs[name][1 if ct == np.float64 else 0]
        dt = "f64" if ct == np.float64 else c["dtype"]
        q, k, v = (x.astype(np.float64) if dt == "f64" else x for x in (c["q"], c["k"], c["v"]))
        out, den = lib.run(q, k, v, variant=c["variant"], masked=c["masked"], gamma=c["gamma"], normalize=c["normalize"],
                           eps=c["eps"], scale=c["scale"], dtype=dt)
        if dt == "bf16":
            import torch
            out = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
        return out, den
    ct = ct or K.get("compute", np.float32)
    if K["kind"] == "numpy":
        num, den = K["run"](c["q"], c["k"], c["v"], o, ct)
        out = num / (den[..., None] + ct(o["eps"])) if o["normalize"] else num
        return round_out(out, c["dtype"]), den
    import torch
    tin = lambda x: torch.from_numpy(x).to(torch.bfloat16 if c["dtype"] == "bf16" else torch.float32)
    num, den = K["run"](tin(c["q"]), tin(c["k"]), tin(c["v"]), o, ct)
    out = num / (den[..., None] + o["eps"]) if o["normalize"] else num
    return out.to(torch.bfloat16 if c["dtype"] == "bf16" else torch.float32) if ct == np.float32 else out, den


def torch_backward(K, c):
    """out, dq, dk, dv by torch.autograd through the kernel, for the case's upstream do."""
    import torch
    tdt = torch.bfloat16 if c["dtype"] == "bf16" else torch.float32
    q, k, v = (torch.from_numpy(x).to(tdt).requires_grad_(True) for x in (c["q"], c["k"], c["v"]))
    o = opts_of(c)
    num, den = K["run"](q, k, v, o, np.float32)
    out = num / (den[..., None] + o["eps"]) if o["normalize"] else num
    out = out.to(tdt)
    do = torch.from_numpy(c["do"]).to(tdt)
    dq, dk, dv = torch.autograd.grad(out, [q, k, v], do)
    return out.detach(), den.detach(), do, dq, dk, dv


def verify_f64(name, K, libs, c):
    """The kernel's algorithm in float64 against the reference: max |num - ref| / mag, |den - ref| / mag."""
    if K["kind"] == "c":
        out, den = run_kernel(name, K, libs, dict(c, normalize=False), ct=np.float64)
    else:
        num, den = K["run"](*(
            (x.astype(np.float64) if K["kind"] == "numpy" else __import__("torch").from_numpy(x.astype(np.float64)))
            for x in (c["q"], c["k"], c["v"])), opts_of(c), np.float64)
        out = num
    out, den = np.asarray(out, np.float64), np.asarray(den, np.float64)
    ref = hla_oracle.reference(c["q"], c["k"], c["v"], **dict(check_kwargs(c), normalize="none"))
    mag = np.maximum(ref.mag_num, 1e-300)
    return float(max(np.max(np.abs(out - ref.num) / mag, initial=0),
                     np.max(np.abs(den - ref.den) / np.maximum(ref.mag_den, 1e-300), initial=0)))


def judge(name, K, libs, c, args):
    """Runs and judges one kernel on one case: a dict of the verdict and its margins."""
    grad = K["kind"] == "torch" and c["grad_u"] < args.grad_fraction
    kw = dict(check_kwargs(c), precision=precision_for(K, c), form_class=K["form_class"], exact_max_n=args.exact_max_n)
    t0 = time.perf_counter()
    if grad:
        out, den, do, dq, dk, dv = torch_backward(K, c)
        rep = hla_oracle.check(out, c["q"], c["k"], c["v"], den=den, do=do, dq=dq, dk=dk, dv=dv, **kw)
    else:
        out, den = run_kernel(name, K, libs, c)
        rep = hla_oracle.check(out, c["q"], c["k"], c["v"], den=den, **kw)
    js = rep.json()
    rows = [dict(part="out", ratio=js["baseline_ratio"], limit=js["ratio_limit"], score=js["max_score"],
                 bound=js["bound"], ours=js.get("baseline_worst_form", ""))]
    for g in js.get("gradients", []):
        if g.get("checked", True):
            applied = g.get("baseline_applied", True)
            rows.append(dict(part=g["name"], ratio=g["baseline_ratio"] if applied else 0.0, limit=g["ratio_limit"] or 1, score=g["max_score"],
                             bound=js["gradient_bound"], ours=g.get("baseline_worst_form", "")))
    return dict(verdict=rep.verdict, rows=rows, report=rep, seconds=time.perf_counter() - t0, grad=grad)


def save_finding(args, name, K, libs, c, res):
    folder = Path(args.findings) / f"{name}-case{c['index']}"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "case.npz", q=c["q"], k=c["k"], v=c["v"], do=c["do"])
    rel = verify_f64(name, K, libs, c)
    repro = (f"PYTHONPATH=build/python .venv/bin/python tests/honest/campaign.py --seed {args.seed} --case {c['index']} "
             f"--kernels {name} --max-n {args.max_n}")
    # the same outputs again, dumped as a fixture + candidate pair that `hla check` reproduces
    grads = {}
    if res["grad"]:
        out, den, do, dq, dk, dv = torch_backward(K, c)
        grads = dict(do=do, dq=dq, dk=dk, dv=dv)
    else:
        out, den = run_kernel(name, K, libs, c)
    again = hla_oracle.check(out, c["q"], c["k"], c["v"], den=den, dump=str(folder / "case"), precision=precision_for(K, c),
                             form_class=K["form_class"], exact_max_n=args.exact_max_n, **check_kwargs(c), **grads)
    (folder / "report.txt").write_text(f"kernel {name} ({K['style']}, class {K['form_class']}, precision "
                                       f"{precision_for(K, c)})\ncase: {describe(c)}\nreproduce: {repro}\n"
                                       f"f64 run of the same algorithm: max error / magnitude = {rel:.3g}\n\n"
                                       f"{again.text}\n")
    return folder, repro, rel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--case", type=int, default=None, help="run only this case index")
    ap.add_argument("--kernels", default="all")
    ap.add_argument("--max-n", type=int, default=96)
    ap.add_argument("--grad-fraction", type=float, default=0.25, help="torch kernels: share of cases judged with gradients")
    ap.add_argument("--exact-max-n", type=int, default=0, help="as hla_oracle.check (0: the double-double engine)")
    ap.add_argument("--lib-dir", default=None, help="the built C kernels (libhonest_*.so); default: compile with cc")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), f"hla-honest-{os.getuid()}"))
    ap.add_argument("--findings", default="honest-findings")
    ap.add_argument("--json", default=None)
    ap.add_argument("--time", type=float, default=0, help="stop starting cases after this many seconds")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    kernels = _kernels()
    names = list(kernels) if args.kernels == "all" else [s.strip() for s in args.kernels.split(",") if s.strip()]
    unknown = [n for n in names if n not in kernels]
    if unknown:
        print(f"unknown kernel(s) {unknown}; known: {', '.join(kernels)}", file=sys.stderr)
        return 2
    libs = c_libraries(names, kernels, args.lib_dir, args.work)
    stats = {n: dict(cases=0, fail=0, inconclusive=0, grad_cases=0, worst_ratio=None, worst_score=None, seconds=0.0,
                     failures=[]) for n in names}
    indices = [args.case] if args.case is not None else range(args.cases)
    start = time.perf_counter()
    print(f"honest campaign: seed {args.seed}, {len(indices)} case(s), max n {args.max_n}, kernels {', '.join(names)}")
    for i in indices:
        if args.time and time.perf_counter() - start > args.time:
            print(f"time limit {args.time} s reached after {i} cases")
            break
        c = make_case(args.seed, i, args.max_n)
        for name in names:
            K = kernels[name]
            if (c["variant"], c["masked"]) not in K["support"] or c["n"] > K["max_n"].get(c["variant"], 10 ** 9):
                continue
            res = judge(name, K, libs, c, args)
            s = stats[name]
            s["cases"] += 1
            s["grad_cases"] += res["grad"]
            s["seconds"] += res["seconds"]
            for r in res["rows"]:
                tag = dict(r, case=i)
                if s["worst_ratio"] is None or r["ratio"] / r["limit"] > s["worst_ratio"]["ratio"] / s["worst_ratio"]["limit"]:
                    s["worst_ratio"] = tag
                if s["worst_score"] is None or r["score"] / r["bound"] > s["worst_score"]["score"] / s["worst_score"]["bound"]:
                    s["worst_score"] = tag
            if res["verdict"] == "INCONCLUSIVE":
                s["inconclusive"] += 1
            elif K.get("control"):
                s["fail"] += res["verdict"] != "PASS"
            elif res["verdict"] != "PASS":
                s["fail"] += 1
                folder, repro, rel = save_finding(args, name, K, libs, c, res)
                reasons = "; ".join(res["report"].reasons)
                s["failures"].append(dict(case=i, describe=describe(c), reasons=reasons, folder=str(folder),
                                          reproduce=repro, f64_error=rel))
                print(f"FAIL {name} case {i}: {describe(c)}\n  {reasons}\n  f64 run of the algorithm: max error/magnitude "
                      f"{rel:.3g}\n  report: {folder}/report.txt\n  reproduce: {repro}")
            if args.verbose:
                print(f"  case {i} {name}: {res['verdict']} {describe(c)} "
                      + " ".join(f"{r['part']} {r['ratio']:.2f}/{r['limit']:.1f} {r['score']:.1f}/{r['bound']:.0f} [{r['ours']}]"
                                 for r in res["rows"]))
    total = time.perf_counter() - start
    print(f"\n{'kernel':22} {'class':17} cases  grad  FAIL  INC  worst ratio/limit (case part)   worst score/bound (case part)   s")
    for name in names:
        s, K = stats[name], kernels[name]
        wr, ws = s["worst_ratio"], s["worst_score"]
        fr = f"{wr['ratio']:.2f}/{wr['limit']:.1f} ({wr['case']} {wr['part']})" if wr else "-"
        fs = f"{ws['score']:.1f}/{ws['bound']:.0f} ({ws['case']} {ws['part']})" if ws else "-"
        print(f"{name:22} {K['form_class']:17} {s['cases']:5} {s['grad_cases']:5} {s['fail']:5} {s['inconclusive']:4}  "
              f"{fr:31} {fs:31} {s['seconds']:.0f}")
    by_class = {}
    honest = [n for n in names if not kernels[n].get("control")]
    for name in honest:
        cl = by_class.setdefault(kernels[name]["form_class"], dict(cases=0, fail=0, inconclusive=0, worst_ratio=0.0,
                                                                    worst_score=0.0))
        for key in ("cases", "fail", "inconclusive"):
            cl[key] += stats[name][key]
        wr, ws = stats[name]["worst_ratio"], stats[name]["worst_score"]
        if wr:
            cl["worst_ratio"] = max(cl["worst_ratio"], wr["ratio"] / wr["limit"])
            cl["worst_score"] = max(cl["worst_score"], ws["score"] / ws["bound"])
    print("by class (worst ratio/limit, worst score/bound): " + "; ".join(
        f"{k}: {v['cases']} cases, {v['fail']} FAIL, {v['inconclusive']} INCONCLUSIVE, {v['worst_ratio']:.2f}, {v['worst_score']:.3f}"
        for k, v in by_class.items()))
    fails = sum(stats[n]["fail"] for n in honest)
    status = 1 if fails else 0
    print(f"{fails} false alarm(s) in {total:.0f} s (seed {args.seed})")
    for name in names:
        s = stats[name]
        if kernels[name].get("control") and s["cases"] and s["fail"] < 0.9 * (s["cases"] - s["inconclusive"]):
            print(f"CONTROL {name}: the oracle failed the wrong kernel on only {s['fail']} of {s['cases']} cases "
                  "(expected at least 90%): it passes wrong kernels", file=sys.stderr)
            status = 1
    if args.json:
        summary = dict(seed=args.seed, cases=len(indices), max_n=args.max_n, seconds=total, by_class=by_class,
                       kernels={n: dict(stats[n], style=kernels[n]["style"], form_class=kernels[n]["form_class"],
                                        precision=kernels[n]["precision"]) for n in names})
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
    return status


if __name__ == "__main__":
    sys.exit(main())
