"""Zoo exec candidate `exec_correct`: a correct HLA implementation in float64 numpy.

    python correct.py IN OUT
    python correct.py --serve        (hla fuzz --exec-server: one process, many cases)

IN is a fixture file (safetensors: q [B,H,n,d], k [B,Hkv,n,d], v [B,Hkv,n,dv] in
the problem dtype, optional offsets I64, options in __metadata__; reference
tensors are ignored). OUT gets `out` [B,H,n,dv] and `den` [B,H,n] as F64.

Variants la1 (prefix sums per token, O(n²)), hla2, ahla and hla3 (SPEC §3
recurrences, O(n·d²)), with every option: masked/unmasked, γ, λ, scale,
normalize add/clamp, grouped heads, packed sequences. Only past tokens enter
each output, so a NaN at token j cannot reach t < j.

The buggy exec members import this module and switch one thing (`Bugs`).
"""

import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "U8": "u1"}


@dataclass
class Bugs:
    ridge_extra_decay: bool = False  # ridge term weighted γ^(t−j+1) instead of γ^(t−j)


def decode(dtype, shape, data):
    if dtype == "BF16":  # the top half of a float32
        return (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype=NUMPY[dtype]).reshape(shape)


def read(path):
    with open(path, "rb") as f:
        raw = safetensors.deserialize(f.read())
    tensors = {name: decode(t["dtype"], t["shape"], t["data"]) for name, t in raw}
    with safe_open(path, framework="np") as f:
        md = f.metadata() or {}
    return tensors, md


def la1(q, k, v1, gamma, masked):
    L = q.shape[0]
    num = np.zeros((L, v1.shape[1]))
    for t in range(L):
        w = (q[t] @ k[: t + 1].T) * gamma ** np.arange(t, -1, -1.0)
        num[t] = w @ v1[: t + 1]
    return num


def hla2(q, k, v1, gamma, masked, lam, bugs):
    L, d = q.shape
    S, C, F = np.zeros((d, d)), np.zeros((d, v1.shape[1])), np.zeros((d, v1.shape[1]))
    num = np.zeros((L, v1.shape[1]))
    ridge_weight = lam * (gamma if bugs.ridge_extra_decay else 1.0)
    for t in range(L):
        S = gamma * S + np.outer(k[t], k[t])
        C = gamma * C + np.outer(q[t], v1[t])
        Sq = S @ q[t]
        if masked:  # corrected state F_t = γ²F_{t−1} + (S_t q_t) v_tᵀ
            F = gamma * gamma * F + np.outer(Sq, v1[t])
            num[t] = q[t] @ F
        else:
            num[t] = Sq @ C
        num[t] += ridge_weight * (q[t] @ C)
    return num


def ahla(q, k, v1, gamma, masked):
    L, d = q.shape
    P, E = np.zeros((d, v1.shape[1])), np.zeros((d, v1.shape[1]))
    num = np.zeros((L, v1.shape[1]))
    for t in range(L):
        P = gamma * P + np.outer(k[t], v1[t])
        E = gamma * E + np.outer(k[t], q[t] @ P)
        num[t] = q[t] @ E
    return num


def hla3(q, k, v1, gamma, masked):
    L, d = q.shape
    S, SQ = np.zeros((d, d)), np.zeros((d, d))
    P, F = np.zeros((d, v1.shape[1])), np.zeros((d, v1.shape[1]))
    num = np.zeros((L, v1.shape[1]))
    for t in range(L):
        S = gamma * S + np.outer(k[t], k[t])
        P = gamma * P + np.outer(k[t], v1[t])
        if masked:
            F = gamma**3 * F + np.outer(S @ q[t], q[t] @ P)
            num[t] = q[t] @ F
        else:
            SQ = gamma * SQ + np.outer(q[t], q[t])
            num[t] = ((q[t] @ S) @ SQ) @ P
    return num


def compute(path, bugs=Bugs()):
    """(out [B,H,n,dv], den [B,H,n]) for the fixture at path."""
    t, md = read(path)
    variant = md["variant"]
    masked = md.get("masked", "true") == "true"
    normalize = md.get("normalize", "false") == "true"
    eps_mode = md.get("eps_mode", "add")
    gamma, eps, lam, scale = (float(Fraction(md.get(key, dflt))) for key, dflt in
                              (("gamma", "1"), ("eps", "1/1000000"), ("lambda", "0"), ("scale", "1")))
    q, k, v = (t[x].astype(np.float64) for x in ("q", "k", "v"))
    B, H, n, d = q.shape
    Hkv, dv = k.shape[1], v.shape[3]
    if variant not in ("la1", "hla2", "ahla", "hla3"):
        raise SystemExit(f"correct.py: variant {variant!r} not supported")
    if H % Hkv:
        raise SystemExit(f"correct.py: heads {H} is not a multiple of kv_heads {Hkv}")
    offsets = t["offsets"] if "offsets" in t else np.array([0, n])
    out = np.zeros((B, H, n, dv))
    den = np.zeros((B, H, n))
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            for t0, t1 in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                qs, ks = q[b, h, t0:t1] * scale, k[b, hk, t0:t1]
                v1 = np.concatenate([v[b, hk, t0:t1], np.ones((t1 - t0, 1))], axis=1)  # last column: den
                if variant == "la1":
                    num = la1(qs, ks, v1, gamma, masked)
                elif variant == "hla2":
                    num = hla2(qs, ks, v1, gamma, masked, lam, bugs)
                elif variant == "ahla":
                    num = ahla(qs, ks, v1, gamma, masked)
                else:
                    num = hla3(qs, ks, v1, gamma, masked)
                dn = num[:, -1]
                if normalize:
                    D = dn + eps if eps_mode == "add" else np.where(dn < 0, -1.0, 1.0) * np.maximum(np.abs(dn), eps)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        out[b, h, t0:t1] = num[:, :-1] / D[:, None]
                else:
                    out[b, h, t0:t1] = num[:, :-1]
                den[b, h, t0:t1] = dn
    return out, den


def write(path, out, den):
    save_file({"out": np.ascontiguousarray(out), "den": np.ascontiguousarray(den)}, path)


def run(in_path, out_path, bugs=Bugs()):
    with np.errstate(all="ignore"):  # NaN/Inf inputs propagate as they should
        out, den = compute(in_path, bugs)
    write(out_path, out, den)


def serve(bugs=Bugs(), before=None, run_case=run):
    """hla fuzz --exec-server: the package's protocol helper (python/hla_oracle)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
    from hla_oracle.exec_server import serve as serve_requests

    def handle(in_path, out_path):
        if before:
            before(in_path)
        run_case(in_path, out_path, bugs)

    serve_requests(handle)
    return 0


def main(argv, bugs=Bugs(), run_case=run, usage="IN OUT"):
    """IN OUT, or --serve; run_case(in, out, bugs) computes one case (another member's)."""
    if argv[1:] == ["--serve"]:
        return serve(bugs, run_case=run_case)
    if len(argv) != 3:
        print(f"usage: {argv[0]} {usage}", file=sys.stderr)
        return 2
    run_case(argv[1], argv[2], bugs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
