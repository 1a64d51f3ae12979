"""A complete candidate for `hla fuzz --exec`: la1 with decay, grouped heads,
packed sequences and normalization, in numpy float64.
  build/tools/hla fuzz --exec '.venv/bin/python examples/exec_la1.py {in} {out}' \
      --variants la1 --dtypes f32,f64 --features decay,gqa,varlen,normalize,clamp,scale,den --precision f64
It reads the fixture {in} with the PyPI safetensors package and writes `out`
(and `den`) to {out}."""
import sys
from fractions import Fraction

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

with safe_open(sys.argv[1], framework="np") as f:
    md = f.metadata()
    q, k, v = (f.get_tensor(x).astype(np.float64) for x in ("q", "k", "v"))  # f32/f64 inputs
    offsets = f.get_tensor("offsets") if "offsets" in f.keys() else None
opt = {x: float(Fraction(md[x])) for x in ("gamma", "eps", "scale")}
B, H, n, d = q.shape
group = H // k.shape[1]
num = np.zeros((B, H, n, v.shape[3]))
den = np.zeros((B, H, n))
seqs = [(0, n)] if offsets is None else list(zip(offsets[:-1], offsets[1:]))
for b in range(B):
    for h in range(H):
        for t0, t1 in seqs:
            qq, kk, vv = opt["scale"] * q[b, h, t0:t1], k[b, h // group, t0:t1], v[b, h // group, t0:t1]
            L = t1 - t0
            lag = np.arange(L)[:, None] - np.arange(L)[None, :]
            # Mask with where() and sum only over j <= t: multiplying by a 0/1 mask would
            # let a NaN/Inf in a later token reach earlier outputs (0 * NaN is NaN) —
            # exactly what hla fuzz's nan_causality probe found in the first version.
            w = np.where(lag >= 0, opt["gamma"] ** np.maximum(lag, 0) * (qq @ kk.T), 0.0)
            for t in range(L):
                num[b, h, t0 + t] = w[t, :t + 1] @ vv[:t + 1]
                den[b, h, t0 + t] = w[t, :t + 1].sum()
out = num
if md["normalize"] == "true":
    D = den + opt["eps"] if md["eps_mode"] == "add" else np.where(den < 0, -1.0, 1.0) * np.maximum(np.abs(den), opt["eps"])
    out = num / D[..., None]
save_file({"out": out, "den": den}, sys.argv[2])
