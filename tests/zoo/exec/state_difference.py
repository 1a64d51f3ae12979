"""Zoo exec candidates `exec_state_difference_f32` / `_f64`: hla2 in the paper's
state-difference form (correct), in numpy.

    python state_difference.py IN OUT [--compute float32|float64]
    python state_difference.py --serve [--compute float32|float64]   (hla fuzz --exec-server)

What a user who follows the paper writes (Alg. 1, decay of the masked
correction as SPEC §3 corrects erratum E1), per head and token t:
    S = γS + k kᵀ,  C|m = γC|m + q [v|1]ᵀ,  G|h = γ²G|h + γ k (kᵀ C|m)_{t−1},
    u = qᵀS + λqᵀ,  [num | den] = u·C|m − qᵀG|h   (unmasked: no G|h).
u·C sums every pair i, j ≤ t and qᵀG takes the pairs i > j away, so the
rounding error scales with the unmasked magnitude: declare the class
`state_difference` to the fuzzer. Everything (inputs, scale, states,
normalization) is computed in the --compute dtype (default float64) and written
as F32 / F64 `out` and `den`. Variant hla2 only; every option, grouped heads,
packed sequences. Only past tokens enter each output (NaN causality).
"""

import argparse
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import correct  # noqa: E402  (fixture reading, writing, the server loop)


def hla2_state_difference(q, k, v1, gamma, masked, lam):
    """[num | den] rows for one sequence; every array and scalar in one dtype."""
    L, d = q.shape
    S = np.zeros((d, d), q.dtype)
    C = np.zeros((d, v1.shape[1]), q.dtype)  # C|m
    G = np.zeros_like(C)                     # G|h
    num = np.zeros((L, v1.shape[1]), q.dtype)
    for t in range(L):
        if masked:  # needs C_{t−1}: before C is updated
            G = gamma * gamma * G + gamma * np.outer(k[t], k[t] @ C)
        S = gamma * S + np.outer(k[t], k[t])
        C = gamma * C + np.outer(q[t], v1[t])
        u = q[t] @ S + lam * q[t]
        num[t] = u @ C - (q[t] @ G if masked else 0)
    return num


def compute(path, dtype=np.float64):
    """(out [B,H,n,dv], den [B,H,n]) in dtype for the fixture at path."""
    t, md = correct.read(path)
    if md["variant"] != "hla2":
        raise SystemExit(f"state_difference.py: variant {md['variant']!r} not supported (hla2 only)")
    masked = md.get("masked", "true") == "true"
    normalize = md.get("normalize", "false") == "true"
    eps_mode = md.get("eps_mode", "add")
    gamma, eps, lam, scale = (dtype(float(Fraction(md.get(key, dflt)))) for key, dflt in
                              (("gamma", "1"), ("eps", "1/1000000"), ("lambda", "0"), ("scale", "1")))
    q, k, v = (t[x].astype(dtype) for x in ("q", "k", "v"))  # bf16/f16 widen exactly; f64 -> f32 rounds
    B, H, n, d = q.shape
    Hkv, dv = k.shape[1], v.shape[3]
    if H % Hkv:
        raise SystemExit(f"state_difference.py: heads {H} is not a multiple of kv_heads {Hkv}")
    offsets = t["offsets"] if "offsets" in t else np.array([0, n])
    out = np.zeros((B, H, n, dv), dtype)
    den = np.zeros((B, H, n), dtype)
    one = dtype(1)
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            for t0, t1 in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                v1 = np.concatenate([v[b, hk, t0:t1], np.ones((t1 - t0, 1), dtype)], axis=1)  # last column: den
                num = hla2_state_difference(q[b, h, t0:t1] * scale, k[b, hk, t0:t1], v1, gamma, masked, lam)
                dn = num[:, -1]
                if normalize:
                    D = dn + eps if eps_mode == "add" else np.where(dn < 0, -one, one) * np.maximum(np.abs(dn), eps)
                    out[b, h, t0:t1] = num[:, :-1] / D[:, None]
                else:
                    out[b, h, t0:t1] = num[:, :-1]
                den[b, h, t0:t1] = dn
    return out, den


def run(in_path, out_path, dtype):
    with np.errstate(all="ignore"):  # NaN/Inf inputs propagate as they should
        out, den = compute(in_path, dtype)
    correct.write(out_path, out, den)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compute", choices=("float32", "float64"), default="float64", help="compute (and output) dtype")
    a, rest = ap.parse_known_args(argv[1:])
    dtype = np.dtype(a.compute).type
    return correct.main([argv[0], *rest], run_case=lambda i, o, _: run(i, o, dtype),
                        usage="IN OUT [--compute float32|float64] | --serve [--compute float32|float64]")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
