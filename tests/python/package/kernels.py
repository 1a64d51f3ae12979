"""Numpy kernels for the package's tests: written from SPEC §2's definitions
for these tests (not the project's code), fast enough to fuzz. Computes in
float32 for f32/bf16/f16 inputs and float64 for f64, layout [B,H,T,D].

Planted bugs (keyword `bug`) make the wrong kernels whose reports must fail:
  "strict_mask"  i < j instead of i ≤ j (hla2)   "decay_once" γ^{t−j} instead of γ^{(t−i)+(t−j)}
  "no_state"     ignores options.initial_state (la1 with state)
  "no_scale"     never multiplies q by options.scale
"""
import numpy as np

PRECISION = "bf16=f32,f16=f32,f32=f32,f64=f64"


def _ct(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def _gqa(k, H):
    return np.repeat(k, H // k.shape[1], axis=1) if k.shape[1] != H else k


def _weights(A, gamma, ct, bug=None):
    """P[t, j] of one head (zero for j > t): la1 A itself; hla2 from SPEC §2."""
    n = A.shape[0]
    t = np.arange(n)
    diff = t[:, None] - t[None, :]
    L = diff >= 0
    G = np.where(L, np.power(ct(gamma), np.maximum(diff, 0), dtype=ct), ct(0))
    return L, G


def head_outputs(variant, q, k, v, gamma, bug=None):
    """num [n, dv], den [n] of one head and sequence (q [n,d] already scaled)."""
    ct = q.dtype.type
    n = q.shape[0]
    A = q @ k.T  # a_tj = q_t·k_j
    L, G = _weights(A, gamma, ct)
    if variant == "la1":
        P = np.where(L, G * A, ct(0))
    elif variant == "hla2":
        # num_t = Σ_{j≤t} γ^{t−j} [Σ_{i≤j} γ^{t−i} a_ti a_ji] v_j
        if bug == "strict_mask":
            Li = np.tril(np.ones((n, n), dtype=bool), -1)
        else:
            Li = L
        Wg = np.where(L, G * A, ct(0)) if bug != "decay_once" else np.where(L, A, ct(0))
        M = Wg @ np.where(Li, A, ct(0)).T
        P = np.where(L, G * M, ct(0))
    else:
        raise ValueError(f"this test kernel has no variant {variant}")
    # Row by row: a NaN in a later value must not reach earlier rows (0 * NaN).
    num = np.zeros((n, v.shape[1]), dtype=ct)
    for t in range(n):
        num[t] = P[t, :t + 1] @ v[:t + 1]
    return num, P.sum(axis=1, dtype=ct)


def normalize(num, den, options):
    ct = num.dtype.type
    if options.normalize == "none":
        return num
    eps = ct(options.eps)
    if options.normalize == "add":
        return num / (den + eps)[:, None]
    sign = np.where(den < 0, ct(-1), ct(1))
    return num / (sign * np.maximum(np.abs(den), eps))[:, None]


def kernel(q, k, v, options, bug=None):
    """fn(q, k, v, options) -> (out, den) for hla_oracle.fuzz: la1 and hla2, every option."""
    with np.errstate(all="ignore"):  # NaN/Inf inputs (the causality probe) propagate as IEEE says
        return _kernel(q, k, v, options, bug)


def _kernel(q, k, v, options, bug):
    ct = _ct(q)
    q, k, v = (np.asarray(x, dtype=ct) for x in (q, k, v))
    q = q * ct(options.scale if bug != "no_scale" else 1)
    B, H, n, _ = q.shape
    k, v = _gqa(k, H), _gqa(v, H)
    seqs = [(0, n)] if options.cu_seqlens is None else list(zip(options.cu_seqlens[:-1], options.cu_seqlens[1:]))
    out = np.zeros((B, H, n, v.shape[-1]), dtype=ct)
    den = np.zeros((B, H, n), dtype=ct)
    for b in range(B):
        for h in range(H):
            for t0, t1 in seqs:
                nm, dn = head_outputs(options.variant, q[b, h, t0:t1], k[b, h, t0:t1], v[b, h, t0:t1], options.gamma, bug)
                out[b, h, t0:t1] = normalize(nm, dn, options)
                den[b, h, t0:t1] = dn
    return out, den.astype(np.float64)


def la1_state_kernel(q, k, v, options, bug=None):
    """la1 with an opaque state (S [B,H,d,dv], z [B,H,d]): the state-continuation probe's candidate."""
    with np.errstate(all="ignore"):
        return _la1_state(q, k, v, options, bug)


def _la1_state(q, k, v, options, bug):
    ct = _ct(q)
    q, k, v = (np.asarray(x, dtype=ct) for x in (q, k, v))
    g = ct(options.gamma)
    B, H, n, d = q.shape
    k, v = _gqa(k, H), _gqa(v, H)
    dv = v.shape[-1]
    if options.initial_state is not None and bug != "no_state":
        S, z = (np.array(x, dtype=ct) for x in options.initial_state)
    else:
        S, z = np.zeros((B, H, d, dv), dtype=ct), np.zeros((B, H, d), dtype=ct)
    out = np.zeros((B, H, n, dv), dtype=ct)
    den = np.zeros((B, H, n), dtype=ct)
    for t in range(n):
        kt, vt, qt = k[:, :, t], v[:, :, t], q[:, :, t]
        S = g * S + kt[..., :, None] * vt[..., None, :]
        z = g * z + kt
        out[:, :, t] = np.einsum("bhd,bhde->bhe", qt, S)
        den[:, :, t] = np.einsum("bhd,bhd->bh", qt, z)
    return out, den.astype(np.float64), (S, z)


def fixture_options(fx):
    """A fixture's options with the attributes kernel() reads (as hla_oracle.fuzz's CaseOptions)."""
    from types import SimpleNamespace
    kw = fx.kwargs
    return SimpleNamespace(variant=kw["variant"], gamma=float(kw["gamma"]), scale=float(kw["scale"]), eps=float(kw["eps"]),
                           normalize=kw["normalize"], cu_seqlens=fx.cu_seqlens,
                           initial_state=None, want_state=False)
