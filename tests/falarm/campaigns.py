"""Fuzz campaigns of the correct kernels of tests/falarm (README.md here):
hla_oracle.fuzz with their backward over --cases cases each, inside the
support each declares, and a table per kernel: cases run, gradient-judged
cases, findings by kind (any finding on these correct kernels is a false alarm
of the judge, except the example chunk form's known gradient NaN-causality
leak: README.md), and the worst gradient margins seen — rule 2 (score / a
priori bound K_g+1) and rule 3 (ratio to our own orders / R(N)) — found by
judging every finite-upstream gradient case again with hla_oracle.check
(the default reference, as the fuzzer judged with; --no-margins skips
it). The campaign runs without shrinking (every backward call is one of its
cases); where it finds something, a second pass over the same cases shrinks
the findings into <findings>/<kernel>/ (unshrunk ones: .../unshrunk/).

    PYTHONPATH=build/python .venv/bin/python tests/falarm/campaigns.py --cases 2000 --seed 1
    ... --kernels adjoint_la1,paper_state --max-n 300 --findings /tmp/falarm --json out.json

Deterministic: the same --seed, --cases and --max-n give the same cases.
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import falarm_kernels as K  # noqa: E402

import hla_oracle  # noqa: E402


def _copy(x):
    if x is None:
        return None
    if type(x).__module__.split(".")[0] == "torch":
        return x.detach().clone()
    return np.array(x, copy=True)


def _finite(x):
    if x is None:
        return True
    if type(x).__module__.split(".")[0] == "torch":
        import torch
        return bool(torch.isfinite(x.float()).all())
    return bool(np.isfinite(np.asarray(x, dtype=np.float64)).all())


class Recorder:
    """Wraps a backward; keeps every call with a finite upstream for the margins."""

    def __init__(self, backward):
        self.backward = backward
        self.records = []
        self.calls = 0
        self.__qualname__ = getattr(backward, "__qualname__", repr(backward))

    def __call__(self, q, k, v, do, dden, o):
        self.calls += 1
        g = self.backward(q, k, v, do, dden, o)
        if _finite(do) and _finite(dden):
            self.records.append(tuple(_copy(x) for x in (q, k, v, do, dden)) + (o, tuple(_copy(x) for x in g)))
        return g


def describe(q, k, v, o, layout):
    B = q.shape[0]
    H, T = (q.shape[1], q.shape[2]) if layout == "bhtd" else (q.shape[2], q.shape[1])
    Hkv = k.shape[1] if layout == "bhtd" else k.shape[2]
    norm = f"{o.normalize} eps={o.eps_exact}" if o.normalize != "none" else "raw"
    seqs = "" if o.cu_seqlens is None else f" cu_seqlens={[int(x) for x in o.cu_seqlens]}"
    return (f"{o.variant}{'' if o.masked else ' unmasked'} {norm} gamma={o.gamma_exact} lam={o.lam_exact} "
            f"scale={o.scale_exact} {o.dtype} B={B} H={H} Hkv={Hkv} n={T} d={q.shape[-1]} dv={v.shape[-1]}{seqs}")


def margins(kern, sup, rec):
    """Judges each recorded gradient case again (hla_oracle.check): the worst rule 2 and rule 3 margins."""
    worst = {"rule2": (0.0, None), "rule3": (0.0, None)}
    rechecked = failed = inconclusive = 0
    by_class = {}
    for q, k, v, do, dden, o, (dq, dk, dv) in rec.records:
        res = kern.fn(q, k, v, o)
        out, den = res[0], res[1]
        r = hla_oracle.check(out, q, k, v, den=den if dden is not None else None, layout=kern.layout,
                             cu_seqlens=o.cu_seqlens, precision=sup.precision, form_class=sup.form_class,
                             do=do, dden=dden, dq=dq, dk=dk, dv=dv, **o.kwargs)
        js = r.json()
        rechecked += 1
        failed += r.verdict == "FAIL"
        inconclusive += r.inconclusive
        key = f"{'norm' if o.normalize != 'none' else 'raw'}/{'f64' if o.dtype == 'f64' else 'f32-compute'}"
        for g in js["gradients"]:
            if not g["checked"] or not g["scored"]:
                continue
            ms = g["max_score"] if isinstance(g["max_score"], (int, float)) else math.inf
            m2 = ms / js["gradient_bound"]
            m3 = (g["baseline_ratio"] / g["ratio_limit"]) if g["baseline_applied"] and g["ratio_limit"] else 0.0
            if not isinstance(m3, (int, float)):
                m3 = math.inf
            bc = by_class.setdefault(key, [0, 0.0, 0.0])
            bc[1], bc[2] = max(bc[1], m2), max(bc[2], m3)
            where = (g["name"], describe(q, k, v, o, kern.layout), ms, js["gradient_bound"], g["baseline_ratio"],
                     g["ratio_limit"], g["baseline_max_score"], g["baseline_worst_form"], g["scored"])
            if m2 > worst["rule2"][0]:
                worst["rule2"] = (m2, where)
            if m3 > worst["rule3"][0]:
                worst["rule3"] = (m3, where)
        by_class.setdefault(key, [0, 0.0, 0.0])[0] += 1
    return rechecked, failed, inconclusive, worst, by_class


# Findings expected on a kernel, not false alarms of the judge (README.md): the example's chunk form
# lets a NaN of do reach later tokens of its chunk through autograd's masked products.
KNOWN = {"example_chunk": {"gradient_nan_causality"}}


def _fuzz(kern, sup, fn, bwd, args, findings, shrink_attempts):
    return hla_oracle.fuzz(fn, sup, max_cases=args.cases, seed=args.seed, layout=kern.layout, framework=kern.framework,
                           findings=str(findings), progress=False, backward=bwd, shrink_attempts=shrink_attempts)


def campaign(name, args):
    """Pass 1 without shrinking (so that every backward call is a case of the campaign: the margins
    and counts are the campaign's own); pass 2, only where pass 1 found something not KNOWN, the same
    cases again with the shrinker, for minimal reproductions."""
    kern = K.kernels()[name]
    fields = dict(kern.support, max_n=args.max_n, name=f"tests/falarm {name}")
    sup = hla_oracle.Support(**fields)
    fn = kern.fn
    bwd = hla_oracle.autograd_backward(fn) if kern.backward == "autograd" else kern.backward
    rec = Recorder(bwd)
    if kern.framework == "torch":
        import torch
        torch.set_num_threads(1)
    t0 = time.time()
    r = _fuzz(kern, sup, fn, rec, args, Path(args.findings) / name / "unshrunk", 0)
    t_fuzz = time.time() - t0
    row = {"kernel": name, "note": kern.note, "seed": args.seed, "max_n": args.max_n, "cases": r.cases,
           "seconds": r.seconds, "cases_per_s": r.cases_per_second, "gradient_cases": r.probes.get("gradients", 0),
           "grad_nan_causality_cases": r.probes.get("grad_nan_causality", 0), "probes": r.probes,
           "inconclusive": r.inconclusive, "by_kind": r.by_kind, "backward_calls": rec.calls,
           "known_kinds": sorted(KNOWN.get(name, ())), "fuzz_wall_seconds": t_fuzz}
    findings = r.findings
    unknown = set(r.by_kind) - KNOWN.get(name, set())
    if unknown and args.shrink:
        t2 = time.time()
        r2 = _fuzz(kern, sup, fn, bwd, args, Path(args.findings) / name, 300)
        row["shrink_seconds"] = time.time() - t2
        assert r2.by_kind == r.by_kind, (r.by_kind, r2.by_kind)  # the same cases, the same verdicts
        findings = r2.findings
    row["findings"] = [{k: f[k] for k in ("kind", "message", "original", "shrunk", "fixture", "candidate", "precision",
                                          "form_class", "needs", "case_index")} for f in findings]
    if args.margins:
        t1 = time.time()
        n, failed, inconclusive, worst, by_class = margins(kern, sup, rec)
        row.update(margins_rechecked=n, margins_failed=failed, margins_inconclusive=inconclusive,
                   margins_seconds=time.time() - t1, worst_rule2=worst["rule2"], worst_rule3=worst["rule3"],
                   margins_by_class=by_class)
    row["wall_seconds"] = time.time() - t0
    return r, row


def print_row(row, hla):
    print(f"== {row['kernel']}: {row['note']}")
    print(f"   seed {row['seed']}: {row['cases']} cases in {row['seconds']:.1f} s ({row['cases_per_s']:.2f} cases/s); "
          f"gradient cases {row['gradient_cases']} (+{row['grad_nan_causality_cases']} gradient NaN-causality); "
          f"inconclusive {row['inconclusive']}; probes {row['probes']}")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(row["by_kind"].items())) or "none"
    known = row["known_kinds"]
    print(f"   findings: {sum(row['by_kind'].values())} ({kinds})" + (f"; known on this kernel: {', '.join(known)}" if known else ""))
    shown = {}
    for f in row["findings"]:
        shown[f["kind"]] = shown.get(f["kind"], 0) + 1
        if f["kind"] in known and shown[f["kind"]] > 2:
            continue
        print(f"   - [{f['kind']}] {f['shrunk']}\n     {f['message'].strip().splitlines()[0][:400]}")
        print(f"     reproduce: {hla} check {f['fixture']} {f['candidate']} --precision {f['precision']} "
              f"--form-class {f['form_class']} --require-grad")
    if "margins_rechecked" in row:
        print(f"   margins: {row['margins_rechecked']} finite-upstream gradient cases judged again "
              f"({row['margins_failed']} FAIL, {row['margins_inconclusive']} INCONCLUSIVE) in {row['margins_seconds']:.1f} s")
        for rule, what in (("worst_rule2", "score/(K_g+1)"), ("worst_rule3", "ratio/R(N)")):
            m, w = row[rule]
            if w is None:
                print(f"   {rule}: none scored")
                continue
            name, case, ms, bound, ratio, limit, ours, form, scored = w
            print(f"   {rule} {what} = {m:.4g}: {name} score {ms:.4g} (bound {bound:.4g}), ratio {ratio:.4g} "
                  f"(limit {limit:.4g}, N={scored}, ours {ours:.4g} by {form}); {case}")
        for key, (n, m2, m3) in sorted(row["margins_by_class"].items()):
            print(f"     {key}: {n} cases, worst score/(K_g+1) {m2:.4g}, worst ratio/R(N) {m3:.4g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-n", type=int, default=300, help="the support's max_n (default 300: the fuzzer's short, chunk-boundary and medium lengths; long ones clamped to it)")
    ap.add_argument("--kernels", default=",".join(K.kernels()), help="comma list (default: all)")
    ap.add_argument("--findings", default="hla-findings-falarm")
    ap.add_argument("--no-margins", dest="margins", action="store_false")
    ap.add_argument("--no-shrink", dest="shrink", action="store_false",
                    help="do not rerun a campaign with findings to shrink them (pass 1 writes them unshrunk)")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--hla", default="build/tools/hla", help="the hla binary named in reproduction commands")
    args = ap.parse_args()
    names = [s for s in args.kernels.split(",") if s]
    unknown = set(names) - set(K.kernels())
    if unknown:
        ap.error(f"unknown kernels {sorted(unknown)}; known: {sorted(K.kernels())}")
    print(f"tests/falarm campaigns: seed {args.seed}, {args.cases} cases per kernel, max_n {args.max_n}", flush=True)
    rows = []
    for name in names:
        _, row = campaign(name, args)
        print_row(row, args.hla)
        sys.stdout.flush()
        rows.append(row)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
