"""Zoo exec candidates with a backward (`hla fuzz --exec ... --features backward`):
la1 forward and gradients in float64 numpy, written apart from the reference.

    python backward.py IN OUT [--bug gqa_unsummed]
    python backward.py --serve [--bug gqa_unsummed]

The forward is correct.py's. Where the fixture carries the upstream gradient
`do` (and `dden`), OUT also gets dq, dk, dv of L = Σ ⟨do_t, o_t⟩ + Σ dden_t·den_t
(SPEC §9). Per sequence, with Q = scale·q, v1_j = [v_j | 1], A_tj = γ^(t−j) q_t·k_j
(j ≤ t) and Ȳ_t = ∂L/∂[num_t | den_t]:

    dq_t = scale · Σ_{j≤t} γ^(t−j) (Ȳ_t·v1_j) k_j
    dk_j = Σ_{t≥j} γ^(t−j) (Ȳ_t·v1_j) Q_t           summed over the query heads of j's group
    dv_j = Σ_{t≥j} A_tj Ȳ_t[:dv]                     likewise

Ȳ_t = [do_t | dden_t] without normalize; normalized, o_t = num_t / D_t with
D_t = den_t + ε (add) or sign(den_t)·max(|den_t|, ε) (clamp), so
Ȳ_t = [do_t / D_t | dden_t − D'_t ⟨do_t, num_t⟩ / D_t²], D' = 1 (0 where the clamp holds).
Sums run over causal index ranges only (slices, never a 0/1 mask times a
value), so a NaN in do_t reaches gradients of tokens ≤ t only.

--bug gqa_unsummed: dk, dv of a kv head from the last query head of its group
only (the others overwritten, not added).
"""

import sys
from fractions import Fraction

import numpy as np
from safetensors.numpy import save_file

import correct


def upstream_factor(num, do, dden, normalize, eps_mode, eps):
    """Ȳ [n, dv+1] of one head's sequence from num [n, dv+1] (last column den)."""
    dn = num[:, -1]
    if not normalize:
        return np.concatenate([do, dden[:, None]], axis=1)
    if eps_mode == "add":
        D, dD = dn + eps, np.ones_like(dn)
    else:
        D = np.where(dn < 0, -1.0, 1.0) * np.maximum(np.abs(dn), eps)
        dD = (np.abs(dn) >= eps).astype(np.float64)
    inner = np.einsum("tc,tc->t", do, num[:, :-1])
    return np.concatenate([do / D[:, None], (dden - dD * inner / (D * D))[:, None]], axis=1)


def la1_backward(Q, K, V1, Y, gamma):
    """dQ (w.r.t. the scaled q), dK, dV1 of Σ_t Σ_{j≤t} γ^(t−j) (Q_t·K_j) (Y_t·V1_j)."""
    n = Q.shape[0]
    dQ, dK, dV1 = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V1)
    for t in range(n):
        g = gamma ** np.arange(t, -1, -1.0)  # γ^(t−j), j = 0..t
        dQ[t] = (g * (V1[: t + 1] @ Y[t])) @ K[: t + 1]
    for j in range(n):
        g = gamma ** np.arange(0, n - j, 1.0)  # γ^(t−j), t = j..n−1
        dK[j] = (g * (Y[j:] @ V1[j])) @ Q[j:]
        dV1[j] = (g * (Q[j:] @ K[j])) @ Y[j:]
    return dQ, dK, dV1


def la1_gradients(q, k, v, do, dden, gamma, scale, normalize, eps_mode, eps, offsets=None, bug=None):
    """(dq, dk, dv) of la1 for float64 arrays q [B,H,n,d], k [B,Hkv,n,d],
    v [B,Hkv,n,dv], do [B,H,n,dv], dden [B,H,n] or None; offsets: packed
    sequences (B = 1) or None."""
    B, H, n, d = q.shape
    Hkv = k.shape[1]
    dden = np.zeros((B, H, n)) if dden is None else dden
    offsets = np.array([0, n]) if offsets is None else np.asarray(offsets)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            for t0, t1 in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                Q, K = q[b, h, t0:t1] * scale, k[b, hk, t0:t1]
                V1 = np.concatenate([v[b, hk, t0:t1], np.ones((t1 - t0, 1))], axis=1)
                num = correct.la1(Q, K, V1, gamma, True)
                Y = upstream_factor(num, do[b, h, t0:t1], dden[b, h, t0:t1], normalize, eps_mode, eps)
                dQ, dK, dV1 = la1_backward(Q, K, V1, Y, gamma)
                dq[b, h, t0:t1] = scale * dQ
                if bug == "gqa_unsummed":
                    dk[b, hk, t0:t1], dv[b, hk, t0:t1] = dK, dV1[:, :-1]
                else:
                    dk[b, hk, t0:t1] += dK
                    dv[b, hk, t0:t1] += dV1[:, :-1]
    return dq, dk, dv


def gradients(path, bug):
    """la1_gradients of the fixture at path, or None when it carries no do."""
    t, md = correct.read(path)
    if "do" not in t:
        return None
    if md["variant"] != "la1":
        raise SystemExit(f"backward.py: variant {md['variant']!r} not supported (la1 only)")
    gamma, eps, scale = (float(Fraction(md.get(key, dflt))) for key, dflt in
                         (("gamma", "1"), ("eps", "1/1000000"), ("scale", "1")))
    q, k, v, do = (t[x].astype(np.float64) for x in ("q", "k", "v", "do"))
    dden = t["dden"].astype(np.float64) if "dden" in t else None
    return la1_gradients(q, k, v, do, dden, gamma, scale, md.get("normalize", "false") == "true",
                         md.get("eps_mode", "add"), eps, t.get("offsets"), bug)


def run(in_path, out_path, bug):
    with np.errstate(all="ignore"):  # NaN/Inf propagate as they should
        out, den = correct.compute(in_path)
        grads = gradients(in_path, bug)
    tensors = {"out": np.ascontiguousarray(out), "den": np.ascontiguousarray(den)}
    if grads is not None:
        tensors.update(zip(("dq", "dk", "dv"), (np.ascontiguousarray(g) for g in grads)))
    save_file(tensors, out_path)


def main(argv):
    bug = None
    if len(argv) >= 3 and argv[-2] == "--bug":
        bug, argv = argv[-1], argv[:-2]
        if bug != "gqa_unsummed":
            print(f"backward.py: unknown --bug {bug!r}", file=sys.stderr)
            return 2
    return correct.main(argv, run_case=lambda i, o, _: run(i, o, bug),
                        usage="IN OUT [--bug gqa_unsummed] | --serve [--bug gqa_unsummed]")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
