#!/usr/bin/env python3
"""Reproduces the open weak spot of rule 3 on gradients (docs/pass-rule.md "Known weak spot"): autograd through
log-space decay, exp(b_t - b_j) with b = cumsum(log gamma), at gamma = 1/2 (ahla, n = 65, normalized; campaign
case 879 of seed 4). Prints each gradient's rule-3 ratio for `logspace_seq_torch` as it is (torch.cumsum, which
accumulates f32 in double) and with a sequential f32 cumulative sum (as a C loop or numpy computes it): the second
fails dk (ratio above its limit 9.16) although the kernel is correct. Not a ctest: it fails until the oracle has a
backward order that rounds as autograd through a log-space decay matrix does.

    PYTHONPATH=build/python .venv/bin/python tests/honest/repro_logspace_grad.py
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import campaign as C  # noqa: E402


def ratios(case, kernel):
    args = argparse.Namespace(grad_fraction=0.25, exact_max_n=0)
    js = C.judge("logspace_seq_torch", kernel, {}, case, args)["report"].json()
    return [(g["name"], round(g["baseline_ratio"], 2), round(g["ratio_limit"], 2)) for g in js["gradients"]]


def sequential_cumsum(x, dim, **_):
    out, acc = torch.empty_like(x), torch.zeros_like(x.select(dim, 0))
    for i in range(x.shape[dim]):
        acc = acc + x.select(dim, i)  # rounded to the tensor's dtype at every step
        out.select(dim, i).copy_(acc)
    return out


def main():
    case = C.make_case(4, 879, 96)
    kernel = C._kernels()["logspace_seq_torch"]
    print(C.describe(case))
    print("torch.cumsum:          ", ratios(case, kernel))
    torch.cumsum = sequential_cumsum
    print("sequential f32 cumsum: ", ratios(case, kernel))


if __name__ == "__main__":
    main()
