#!/usr/bin/env python3
"""Regression test: autograd through log-space decay, exp(b_t - b_j) with b = cumsum(log gamma), at gamma = 1/2
(ahla, n = 65, normalized; campaign.py case 879 of seed 4; and hla3, case 1797 of seed 48), at gamma = 0.9 at scale
(la1, 16 heads of 1024 tokens) and hla3 at n = 300, gamma = 1/2: the fast engine's orders with decay in log space
along the sequence. The kernel's normalized upstream carries its own
log-space forward's error; our log-space backward orders form theirs from the log-space forward of the same width,
so rule 3 compares like with like. Judges `logspace_seq_torch` as it is (torch.cumsum accumulates f32 in double) and
with a sequential f32 cumulative sum (as a C loop or numpy computes it); exits 1 if any output or gradient exceeds rule 3's
limit (before the fix: dk 12.5x our worst for a limit of 9.2).

    PYTHONPATH=build/python .venv/bin/python tests/honest/logspace_grad.py
"""
import argparse
import pathlib
import sys
from fractions import Fraction

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import campaign as C  # noqa: E402


def ratios(case, kernel):
    args = argparse.Namespace(grad_fraction=0.25, exact_max_n=0)
    js = C.judge("logspace_seq_torch", kernel, {}, case, args)["report"].json()
    return [("out", round(js["baseline_ratio"], 2), round(js["ratio_limit"], 2))] + [
        (g["name"], round(g["baseline_ratio"], 2), round(g["ratio_limit"], 2)) for g in js["gradients"]]


def gaussian_case(variant, H, n, d, gamma, seed, scale=Fraction(1)):
    """Gaussian q, k, v, do in f32 (drawn in that order), one batch entry."""
    rng = np.random.default_rng(seed)
    g = lambda: rng.standard_normal((1, H, n, d)).astype(np.float32)
    return dict(index=0, variant=variant, masked=True, n=n, d=d, dv=d, H=H, dist="gaussian", gamma=gamma, dtype="f32",
                normalize=False, scale=scale, eps=Fraction(1, 1000000), q=g(), k=g(), v=g(), grad_u=0.0, do=g())


def sequential_cumsum(x, dim, **_):
    out, acc = torch.empty_like(x), torch.zeros_like(x.select(dim, 0))
    for i in range(x.shape[dim]):
        acc = acc + x.select(dim, i)  # rounded to the tensor's dtype at every step
        out.select(dim, i).copy_(acc)
    return out


def main():
    # Also hla3, n = 61, d = 16, repeated tokens (case 1797 of seed 48): dq and dv at 11x our worst for a limit
    # of 5.5 while our literal sums' log-space backward ran only up to n^4·d = 2^27 (it is hla3's only one).
    # la1, 16 heads of 1024 tokens, γ = 0.9: the fast engine's orders (work above 2^24), where a sequence-wide
    # cumsum's decays (|b_t| up to 108) were judged against powers of γ alone (9-26x our worst; at n = 4096, 20-75x).
    # hla3, n = 300, γ = 1/2: 9.7x with only the summed log-space order (torch.cumsum rounds each b_t once).
    cases = [C.make_case(4, 879, 96), C.make_case(48, 1797, 96), gaussian_case("la1", 16, 1024, 32, 0.9, 7),
             gaussian_case("hla3", 2, 300, 16, 0.5, 8, Fraction(float(np.float32(0.25))))]
    kernel = C._kernels()["logspace_seq_torch"]
    failed = []
    cumsum = torch.cumsum
    for case in cases:
        print(C.describe(case))
        for label in ("torch.cumsum", "sequential f32 cumsum"):
            torch.cumsum = sequential_cumsum if label.startswith("sequential") else cumsum
            rs = ratios(case, kernel)
            print(f"{label + ':':23}", rs)
            failed += [f"{label}: {name} ratio {r} > limit {lim}" for name, r, lim in rs if r > lim]
    for f in failed:
        print("FAIL:", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
