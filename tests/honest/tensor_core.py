#!/usr/bin/env python3
"""Tensor-core kernels (precisions bf16+f32, f16+f32, tf32): tc_chunk_torch, the chunked kernel with every product's
operands rounded to bf16 (bf16 inputs) or tf32 (f32 inputs) and f32 sums, as Triton's tl.dot and FLA's chunk kernels
compute. Exits 1 unless:
- it passes rule 3 on the campaign cases that failed while our orders did not round operands (seed 60, cases 293 and
  75: ahla, gamma = 1/2, tf32: 6.6x and 5.9x our worst for limits of 5.4 and 5.2);
- at [1, 2, 1024, 64] bf16, gamma = 0.99, la1, hla2 and ahla PASS declared bf16+f32, and FAIL declared f32 (the
  declaration, not a loose bar, makes the PASS);
- the same kernel with the state not carried across chunks of 64 FAILs declared bf16+f32 (la1, hla2);
- tc_seq_torch, the naive masked matmul on tensor-core operands, PASSes hla3 at [1, 2, 256, 32] bf16, gamma = 0.99,
  declared bf16+f32 and FAILs declared f32 (tc_chunk_torch has no hla3).
- on the inputs most adversarial to a bound (one repeated token, gamma = 1, heads of size 1), at users' lengths
  (la1, hla2, ahla chunked at n = 4096; hla3 naive at n = 512), both kernels PASS as bf16+f32 and as tf32. (A sweep
  of 240 such checks, d in {1, 2, 16}, gamma in {1, 0.99}, repeated, 3 repeated tokens, elu + 1 and Gaussian
  features, bf16 and f32 inputs, 2026-12-06: 0 FAIL, worst 0.32 of the limit.)

    PYTHONPATH=build/python .venv/bin/python tests/honest/tensor_core.py
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import campaign as C  # noqa: E402
import kernels_torch as KT  # noqa: E402

import hla_oracle  # noqa: E402


def judge(failed, what, out, q, k, v, variant, gamma, precision, want):
    """hla_oracle.check of one output, printed; a verdict other than want is recorded in failed."""
    r = hla_oracle.check(out, q, k, v, variant=variant, gamma=gamma, precision=precision)
    js = r.json()
    print(f"{variant} {what}, declared {precision}: {r.verdict} (want {want}), worst {js['max_score']:.3g},"
          f" ours {js['baseline_max_score']:.3g}, ratio {js['baseline_ratio']:.3g} of {js['ratio_limit']:.3g}")
    if r.verdict != want:
        failed.append(f"{variant} {what} {precision}")


def campaign_cases(failed):
    kernel = C._kernels()["tc_chunk_torch"]
    args = argparse.Namespace(grad_fraction=0.25, exact_max_n=0)
    for seed, index in [(60, 293), (60, 75)]:
        case = C.make_case(seed, index, 96)
        js = C.judge("tc_chunk_torch", kernel, {}, case, args)["report"].json()
        rows = [("out", js["baseline_ratio"], js["ratio_limit"])] + [
            (g["name"], g["baseline_ratio"], g["ratio_limit"]) for g in js["gradients"]]
        print(f"seed {seed} case {index}: {C.describe(case)}: {js['verdict']}",
              ", ".join(f"{p} {r:.2f}/{lim:.2f}" for p, r, lim in rows))
        if js["verdict"] != "PASS":
            failed.append(f"seed {seed} case {index}")


def at_scale(failed):
    torch.manual_seed(2026)
    B, H, n, d = 1, 2, 1024, 64
    q, k, v = ((torch.randn(B, H, n, d) / d ** 0.5).to(torch.bfloat16) for _ in range(3))
    mm = KT.tensor_core_mm(KT.round_bf16)

    def run(variant, carry=True):
        if carry:
            return KT.chunked(q.float(), k.float(), v.float(), variant, 0.99, 64, "log", mm)[0]
        return torch.cat([KT.chunked(q[:, :, i:i + 64].float(), k[:, :, i:i + 64].float(), v[:, :, i:i + 64].float(),
                                     variant, 0.99, 64, "log", mm)[0] for i in range(0, n, 64)], 2)

    for variant in ["la1", "hla2", "ahla"]:
        honest = run(variant).to(torch.bfloat16)
        trials = [("honest", honest, "bf16+f32", "PASS"), ("honest", honest, "f32", "FAIL")]
        if variant != "ahla":  # ahla's carry is within bf16's noise here (3.8x our worst, limit 4): see pass-rule.md
            trials.append(("state not carried", run(variant, carry=False).to(torch.bfloat16), "bf16+f32", "FAIL"))
        for what, out, precision, want in trials:
            judge(failed, f"[1, 2, 1024, 64] bf16, {what}", out, q, k, v, variant, "0.99", precision, want)


def hla3_naive(failed):
    torch.manual_seed(2027)
    q, k, v = ((torch.randn(1, 2, 256, 32) / 32 ** 0.5).to(torch.bfloat16) for _ in range(3))
    out = KT.logspace_seq(q.float(), k.float(), v.float(), "hla3", True, 0.99, KT.tensor_core_mm(KT.round_bf16))[0]
    for precision, want in [("bf16+f32", "PASS"), ("f32", "FAIL")]:
        judge(failed, "[1, 2, 256, 32] bf16, naive masked matmul", out.to(torch.bfloat16), q, k, v, "hla3", "0.99", precision, want)


def adversarial(failed):
    torch.manual_seed(2028)
    for variant, n in [("la1", 4096), ("hla2", 4096), ("ahla", 4096), ("hla3", 512)]:
        for dt, rnd, precision in [(torch.bfloat16, KT.round_bf16, "bf16+f32"), (torch.float32, KT.round_tf32, "tf32")]:
            x = torch.randn(1, 2, 1, 1)
            q = x.expand(1, 2, n, 1).to(dt)
            v = x.abs().expand(1, 2, n, 1).to(dt)
            mm = KT.tensor_core_mm(rnd)
            with torch.no_grad():
                if variant == "hla3":
                    out = KT.logspace_seq(q.float(), q.float(), v.float(), variant, True, 1.0, mm)[0]
                else:
                    out = KT.chunked(q.float(), q.float(), v.float(), variant, 1.0, 64, "log", mm)[0]
            judge(failed, f"n = {n}, d = 1, one repeated token, gamma = 1", out.to(dt), q, q, v, variant, "1", precision, "PASS")


def main():
    failed = []
    campaign_cases(failed)
    at_scale(failed)
    hla3_naive(failed)
    adversarial(failed)
    if failed:
        print("FAIL:", "; ".join(failed))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
