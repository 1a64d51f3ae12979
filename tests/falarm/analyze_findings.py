"""Tells a gradient finding on a tests/falarm kernel apart: kernel or judge?

For each finding fixture FOLDER/<kind>-<i>.safetensors (with its .candidate)
written by campaigns.py under FOLDER = <findings>/<kernel>, it
  1. reruns the kernel on the fixture's inputs and upstream (a NaN upstream
     entry of a gradient-NaN probe is 0 in the fixture) in its precision and
     says whether that reproduces the candidate's finite elements bit for bit;
  2. reruns the same kernel in float64 (the inputs are exact there), judges it
     in f64 (a pass with small scores: the kernel's mathematics is the
     reference's) and gives the largest differences candidate−f64 rerun and
     candidate−reference (equal: the candidate's error is its own rounding);
  3. judges, with the fixture (as `hla check`), the candidate recomputed on the
     finite upstream and other honest evaluations of the same problem in the
     same precision: the same kernel with the feature order reversed (q, k along
     d, v, do along dv; the gradients reversed back), and the masked-class numpy
     adjoint (adjoint_np); for each gradient row its worst score, our forms'
     worst, the ratio and R(N).

    PYTHONPATH=build/python .venv/bin/python tests/falarm/analyze_findings.py FOLDER [FOLDER ...]
"""
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import adjoint_np  # noqa: E402
import falarm_kernels as K  # noqa: E402

import hla_oracle  # noqa: E402
from hla_oracle._fuzz import CaseOptions  # noqa: E402


def options_of(fx, dtype, cu):
    kw = fx.kwargs
    return CaseOptions(variant=kw["variant"], masked=kw["masked"], normalize=kw["normalize"],
                       gamma=float(kw["gamma"]), eps=float(kw["eps"]), lam=float(kw["lam"]), scale=float(kw["scale"]),
                       gamma_exact=kw["gamma"], eps_exact=kw["eps"], lam_exact=kw["lam"], scale_exact=kw["scale"],
                       dtype=dtype, layout="bhtd", cu_seqlens=cu, initial_state=None, want_state=False)


def np_of(x):
    """A kernel's result as numpy (torch bf16/f32 as float32, f64 as float64)."""
    if x is None or type(x).__module__.split(".")[0] != "torch":
        return None if x is None else np.asarray(x)
    import torch
    return x.detach().numpy() if x.dtype == torch.float64 else x.detach().float().numpy()


def run(kern, q, k, v, do, dden, o, framework):
    """(out, den, dq, dk, dv) of the kernel as numpy [B,H,T,·], for numpy inputs [B,H,T,·]."""
    def swap(a):  # [B,H,T,·] <-> [B,T,H,·] (and [B,H,T] <-> [B,T,H]) for a bthd kernel
        return a if a is None or kern.layout == "bhtd" else np.ascontiguousarray(np.swapaxes(a, 1, 2))
    args = [swap(x) for x in (q, k, v, do, dden)]
    if framework == "torch":
        import torch
        args = [None if a is None else torch.from_numpy(np.ascontiguousarray(a)) for a in args]
        if o.cu_seqlens is not None:
            o = CaseOptions(**{**o.__dict__, "cu_seqlens": torch.from_numpy(np.asarray(o.cu_seqlens))})
    bwd = hla_oracle.autograd_backward(kern.fn) if kern.backward == "autograd" else kern.backward
    out, den = kern.fn(*args[:3], o)[:2]
    return [swap(np_of(x)) for x in (out, den, *bwd(*args, o))]


def rows(report):
    js = report.json()
    out = []
    for g in js["gradients"]:
        if g["checked"]:
            out.append(f"{g['name']} {'ok' if g['pass'] else 'FAIL'} score {g['max_score']:.4g} "
                       f"ours {g['baseline_max_score']:.4g} ({g['baseline_worst_form']}) "
                       f"ratio {g['baseline_ratio']:.4g}/R(N) {g['ratio_limit']:.4g} N={g['scored']}")
    return f"{report.verdict} (bound K_g+1 {js['gradient_bound']:.4g}): " + "; ".join(out)


def analyze(path, kern_name):
    kern = K.kernels()[kern_name]
    fx = hla_oracle.load_fixture(path)
    cand = load_file(str(path).replace(".safetensors", ".candidate.safetensors"))
    sup = kern.support
    prec = sup["precision"]
    prec = prec.get(fx.dtype) if isinstance(prec, dict) else dict(x.split("=") for x in prec.split(","))[fx.dtype]
    cls = sup.get("form_class", "masked")
    cu = fx.cu_seqlens
    q, k, v = fx.inputs()
    do, dden = fx.upstream()
    print(f"== {path}\n   {fx.case}\n   precision {prec}, form class {cls}")
    o = options_of(fx, fx.dtype, cu)
    out, den, dq, dk, dv = run(kern, q, k, v, do, dden, o, kern.framework)
    same = []
    for name, mine in (("dq", dq), ("dk", dk), ("dv", dv)):
        c = cand[name].astype(np.float64)
        fin = np.isfinite(c)
        same.append(f"{name}: {int((~fin).sum())} non-finite in the candidate; finite elements "
                    f"{'identical' if np.array_equal(c[fin], mine.astype(np.float64)[fin]) else 'DIFFER'}")
    print("   rerun vs candidate: " + "; ".join(same))
    kw = dict(precision=prec, form_class=cls)
    print(f"   rerun (finite upstream), judged: {rows(fx.check(out, den, dq=dq, dk=dk, dv=dv, **kw))}")
    # float64: the kernel's mathematics against the reference.
    o64 = options_of(fx, "f64", cu)
    q64, k64, v64, do64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v, do))
    dden64 = None if dden is None else np.asarray(dden, dtype=np.float64)
    out64, den64, gq, gk, gv = run(kern, q64, k64, v64, do64, dden64, o64, kern.framework)
    print(f"   float64 rerun, judged in f64: {rows(fx.check(out64, den64, dq=gq, dk=gk, dv=gv, precision='f64', form_class=cls))}")
    dist = []
    for name, g64, g32 in (("dq", gq, dq), ("dk", gk, dk), ("dv", gv, dv)):
        ref = fx._get("ref_" + name)
        dist.append(f"{name} |f64−ref| {np.abs(g64 - ref).max():.3g}, |cand−f64| {np.abs(g32 - g64).max():.3g}, "
                    f"|cand−ref| {np.abs(g32 - ref).max():.3g}")
    print("   max differences: " + "; ".join(dist))
    # Other honest evaluations in the same precision.
    rq, rk, rv, rdo = q[..., ::-1].copy(), k[..., ::-1].copy(), v[..., ::-1].copy(), do[..., ::-1].copy()
    out_r, den_r, dq_r, dk_r, dv_r = run(kern, rq, rk, rv, rdo, dden, o, kern.framework)
    flip = lambda a: np.ascontiguousarray(a[..., ::-1])  # noqa: E731
    print(f"   same kernel, features reversed: {rows(fx.check(flip(out_r), den_r, dq=flip(dq_r), dk=flip(dk_r), dv=flip(dv_r), **kw))}")
    if fx.kwargs["variant"] in adjoint_np.FORMS:
        ct = np.float64 if prec == "f64" else np.float32
        a = [np.asarray(x, dtype=ct) for x in (q, k, v, do)] + [None if dden is None else np.asarray(dden, dtype=ct)]
        o_np = options_of(fx, fx.dtype, cu)
        aout, aden = adjoint_np.forward(*a[:3], o_np)
        adq, adk, adv = adjoint_np.backward(*a, o_np)
        print(f"   masked numpy adjoint (adjoint_np), judged as {cls}: "
              f"{rows(fx.check(aout, aden, dq=adq, dk=adk, dv=adv, **kw))}")


def main():
    for folder in sys.argv[1:]:
        folder = Path(folder)
        for p in sorted(folder.rglob("*.safetensors")):  # findings sit in one folder per group
            if p.name.endswith(".candidate.safetensors"):
                continue
            analyze(p, folder.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
