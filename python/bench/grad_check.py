"""Wall time of hla_oracle.check on gradients at a production shape, without files:
hla2 (γ = 255/256, unnormalized), bf16 inputs in FLA's [B,T,H,D], f32 compute; the
kernel is tests/python/package/torch_hla2.py (chunked hla2, torch.autograd backward).

  PYTHONPATH=build/python .venv/bin/python python/bench/grad_check.py [B H T D]   (default 2 8 4096 128)

Prints the kernel's time, the check's (reference, gradient reference and judging
together), the forward reference's alone (hla_oracle.reference) and the verdict."""
import sys
import time
from fractions import Fraction
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python" / "package"))
import hla_oracle  # noqa: E402
import torch_hla2  # noqa: E402

B, H, T, D = (int(x) for x in sys.argv[1:5]) if len(sys.argv) > 4 else (2, 8, 4096, 128)
gamma = Fraction(255, 256)
g = torch.Generator().manual_seed(1)
q, k, v, do = (torch.randn(B, T, H, D, generator=g).to(torch.bfloat16) for _ in range(4))
t0 = time.perf_counter()
out, dq, dk, dv = torch_hla2.forward_backward(q, k, v, do, float(gamma), layout="bthd")
t1 = time.perf_counter()
r = hla_oracle.check(out, q, k, v, variant="hla2", gamma=gamma, precision="f32", layout="bthd", do=do, dq=dq, dk=dk, dv=dv)
t2 = time.perf_counter()
hla_oracle.reference(q, k, v, variant="hla2", gamma=gamma, layout="bthd")
t3 = time.perf_counter()
print(f"[B,T,H,D] = [{B},{T},{H},{D}] bf16, hla2 γ=255/256, f32 compute")
print(f"kernel (torch forward + autograd backward): {t1 - t0:.1f} s")
print(f"hla_oracle.check with do, dq, dk, dv: {t2 - t1:.1f} s; the forward reference alone: {t3 - t2:.1f} s")
print(r.verdict)
print("\n".join(line for line in r.text.splitlines() if line.strip().startswith(("elements", "dq:", "dk:", "dv:"))))
