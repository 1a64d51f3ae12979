"""Kernel 3 of tests/falarm: numpy streaming forwards and hand-derived
reverse-time adjoint backwards for la1, hla2 (masked and unmasked, ridge) and
ahla, written from SPEC §1–§3 and §9 only (README.md here gives the
derivation). Not the engine's code, not tests/zoo's, not reference/'s.

Layout [B, H, T, D] (k, v with Hkv heads: GQA), packed sequences through
cu_seqlens (B = 1). Computes in float64 for f64 inputs and in float32 for
f32/bf16/f16 inputs; every state and adjoint is kept in that precision.
The forward is the one the backward differentiates: the streaming recurrence
of SPEC §3 (hla2 masked: the corrected-state F form, so the masked class).

    forward(q, k, v, options)                -> (out, den)          for hla_oracle.fuzz
    backward(q, k, v, do, dden, options)     -> (dq, dk, dv)        for fuzz(..., backward=)

Planted bugs (backward(..., bug=...), forward unchanged), for the tests that
show a wrong backward is caught: "dk_one_sided" (hla2: dk = S̄k, without the
S̄ᵀk half of d(kkᵀ)), "quotient_dropped" (normalize: ∂L/∂den = dden, without
−⟨do, o⟩/D).
"""
import numpy as np

PRECISION = "bf16=f32,f16=f32,f32=f32,f64=f64"


def _ct(x):
    return np.float64 if x.dtype == np.float64 else np.float32


def _sequences(options, B, T):
    """[(b, t0, t1)] of the problem's sequences."""
    cu = options.cu_seqlens
    if cu is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(x) for x in np.asarray(cu)]
    return [(0, a, b) for a, b in zip(cu[:-1], cu[1:])]


def _expand(x, H):
    """k or v [B, Hkv, T, ·] with each kv head repeated for its group of query heads."""
    return np.repeat(x, H // x.shape[1], axis=1) if x.shape[1] != H else x


def _group_sum(g, Hkv):
    """[B, H, T, ·] gradients of the repeated k, v summed over each group: [B, Hkv, T, ·]."""
    B, H = g.shape[:2]
    return g.reshape(B, Hkv, H // Hkv, *g.shape[2:]).sum(axis=2)


def _outer(a, b):
    return a[:, :, None] * b[:, None, :]


def _mv(M, x):  # M [H, r, c] · x [H, c] -> [H, r]
    return np.einsum("hrc,hc->hr", M, x)


def _vm(x, M):  # xᵀ M: x [H, r], M [H, r, c] -> [H, c]
    return np.einsum("hr,hrc->hc", x, M)


# ---------------------------------------------------------------- forwards
# Each sequence forward returns num [H, n, dv], den [H, n] and a tape (the
# per-token states the backward reads), for q [H, n, d] (scaled), k [H, n, d],
# v [H, n, dv] of one sequence.

def _la1_fwd(q, k, v, o, ct):
    H, n, d = q.shape
    dv = v.shape[2]
    g = ct(o.gamma)
    P = np.zeros((H, d, dv), ct)
    z = np.zeros((H, d), ct)
    num, den = np.zeros((H, n, dv), ct), np.zeros((H, n), ct)
    Ps, zs = [], []
    for t in range(n):
        P = g * P + _outer(k[:, t], v[:, t])
        z = g * z + k[:, t]
        num[:, t] = _vm(q[:, t], P)
        den[:, t] = np.einsum("hd,hd->h", q[:, t], z)
        Ps.append(P), zs.append(z)
    return num, den, (Ps, zs)


def _hla2_fwd(q, k, v, o, ct):
    H, n, d = q.shape
    dv = v.shape[2]
    g, lam = ct(o.gamma), ct(o.lam)
    S = np.zeros((H, d, d), ct)
    C = np.zeros((H, d, dv), ct)
    m = np.zeros((H, d), ct)
    F = np.zeros((H, d, dv), ct)
    f = np.zeros((H, d), ct)
    num, den = np.zeros((H, n, dv), ct), np.zeros((H, n), ct)
    tape = {"S": [], "C": [], "m": [], "F": [], "f": [], "w": []}
    for t in range(n):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        S = g * S + _outer(kt, kt)
        C = g * C + _outer(qt, vt)
        m = g * m + qt
        w = _mv(S, qt)  # S_t q_t
        if o.masked:
            F = g * g * F + _outer(w, vt)
            f = g * g * f + w
            num[:, t] = _vm(qt, F)
            den[:, t] = np.einsum("hd,hd->h", qt, f)
            if lam:
                num[:, t] += lam * _vm(qt, C)
                den[:, t] += lam * np.einsum("hd,hd->h", qt, m)
        else:  # u = S_t q_t + λ q_t; num = uᵀ C_t, den = u·m_t
            u = w + lam * qt
            num[:, t] = _vm(u, C)
            den[:, t] = np.einsum("hd,hd->h", u, m)
        for name, x in (("S", S), ("C", C), ("m", m), ("F", F), ("f", f), ("w", w)):
            tape[name].append(x)
    return num, den, tape


def _ahla_fwd(q, k, v, o, ct):
    H, n, d = q.shape
    dv = v.shape[2]
    g = ct(o.gamma)
    P = np.zeros((H, d, dv), ct)
    mK = np.zeros((H, d), ct)
    E = np.zeros((H, d, dv), ct)
    nn = np.zeros((H, d), ct)
    num, den = np.zeros((H, n, dv), ct), np.zeros((H, n), ct)
    tape = {"P": [], "mK": [], "E": [], "n": [], "r": [], "s": []}
    for t in range(n):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        P = g * P + _outer(kt, vt)
        mK = g * mK + kt
        r = _vm(qt, P)                            # P_tᵀ q_t  [H, dv]
        s = np.einsum("hd,hd->h", qt, mK)         # q_t·mK_t  [H]
        E = g * E + _outer(kt, r)
        nn = g * nn + kt * s[:, None]
        num[:, t] = _vm(qt, E)
        den[:, t] = np.einsum("hd,hd->h", qt, nn)
        for name, x in (("P", P), ("mK", mK), ("E", E), ("n", nn), ("r", r), ("s", s)):
            tape[name].append(x)
    return num, den, tape


# --------------------------------------------------------------- backwards
# Given the upstream of num (gn [H, n, dv]) and of den (gd [H, n]) of one
# sequence, the gradients of the scaled q, of k and v (per query head).

def _la1_bwd(q, k, v, o, ct, tape, gn, gd, bug=None):
    Ps, zs = tape
    H, n, d = q.shape
    dv = v.shape[2]
    g = ct(o.gamma)
    Pb = np.zeros((H, d, dv), ct)  # P̄_t = q_t gn_tᵀ + γ P̄_{t+1}
    zb = np.zeros((H, d), ct)      # z̄_t = q_t gd_t + γ z̄_{t+1}
    dq, dk, dvv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for t in range(n - 1, -1, -1):
        qt = q[:, t]
        Pb = g * Pb + _outer(qt, gn[:, t])
        zb = g * zb + qt * gd[:, t][:, None]
        dq[:, t] = _mv(Ps[t], gn[:, t]) + zs[t] * gd[:, t][:, None]
        dk[:, t] = _mv(Pb, v[:, t]) + zb
        dvv[:, t] = _vm(k[:, t], Pb)
    return dq, dk, dvv


def _hla2_bwd(q, k, v, o, ct, tape, gn, gd, bug=None):
    H, n, d = q.shape
    dv = v.shape[2]
    g, lam = ct(o.gamma), ct(o.lam)
    Sb = np.zeros((H, d, d), ct)   # adjoint of S_t (not symmetric)
    Cb = np.zeros((H, d, dv), ct)
    mb = np.zeros((H, d), ct)
    Fb = np.zeros((H, d, dv), ct)
    fb = np.zeros((H, d), ct)
    dq, dk, dvv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for t in range(n - 1, -1, -1):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        gnt, gdt = gn[:, t], gd[:, t][:, None]
        S, C, m = tape["S"][t], tape["C"][t], tape["m"][t]
        if o.masked:
            # num_t = q_tᵀF_t + λ q_tᵀC_t, den_t = q_t·f_t + λ q_t·m_t
            Fb = g * g * Fb + _outer(qt, gnt)
            fb = g * g * fb + qt * gdt
            Cb = g * Cb + lam * _outer(qt, gnt)
            mb = g * mb + lam * qt * gdt
            wb = _mv(Fb, vt) + fb                       # w_t = S_t q_t feeds F_t, f_t
            Sb = g * Sb + _outer(wb, qt)
            dq[:, t] = (_mv(tape["F"][t], gnt) + tape["f"][t] * gdt + lam * (_mv(C, gnt) + m * gdt)
                        + _mv(S, wb) + _mv(Cb, vt) + mb)
            dvv[:, t] = _vm(tape["w"][t], Fb) + _vm(qt, Cb)
        else:
            # u_t = S_t q_t + λ q_t, num_t = u_tᵀC_t, den_t = u_t·m_t
            u = tape["w"][t] + lam * qt
            Cb = g * Cb + _outer(u, gnt)
            mb = g * mb + u * gdt
            ub = _mv(C, gnt) + m * gdt
            Sb = g * Sb + _outer(ub, qt)
            dq[:, t] = _mv(S, ub) + lam * ub + _mv(Cb, vt) + mb
            dvv[:, t] = _vm(qt, Cb)
        # S_t = γS_{t−1} + k_tk_tᵀ: d/dk_t of ⟨S̄_t, k kᵀ⟩ = (S̄_t + S̄_tᵀ) k_t
        dk[:, t] = _mv(Sb, kt) + (0 if bug == "dk_one_sided" else _vm(kt, Sb))
    return dq, dk, dvv


def _ahla_bwd(q, k, v, o, ct, tape, gn, gd, bug=None):
    H, n, d = q.shape
    dv = v.shape[2]
    g = ct(o.gamma)
    Eb = np.zeros((H, d, dv), ct)
    nb = np.zeros((H, d), ct)
    Pb = np.zeros((H, d, dv), ct)
    mKb = np.zeros((H, d), ct)
    dq, dk, dvv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for t in range(n - 1, -1, -1):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        gnt, gdt = gn[:, t], gd[:, t][:, None]
        Eb = g * Eb + _outer(qt, gnt)                   # num_t = q_tᵀE_t
        nb = g * nb + qt * gdt                          # den_t = q_t·n_t
        r, s = tape["r"][t], tape["s"][t]
        rb = _vm(kt, Eb)                                # E_t ∋ k_t r_tᵀ
        sb = np.einsum("hd,hd->h", kt, nb)              # n_t ∋ k_t s_t
        Pb = g * Pb + _outer(qt, rb)                    # r_t = P_tᵀ q_t
        mKb = g * mKb + qt * sb[:, None]                # s_t = q_t·mK_t
        dq[:, t] = (_mv(tape["E"][t], gnt) + tape["n"][t] * gdt + _mv(tape["P"][t], rb)
                    + tape["mK"][t] * sb[:, None])
        dk[:, t] = _mv(Eb, r) + nb * s[:, None] + _mv(Pb, vt) + mKb
        dvv[:, t] = _vm(kt, Pb)
    return dq, dk, dvv


FORMS = {"la1": (_la1_fwd, _la1_bwd), "hla2": (_hla2_fwd, _hla2_bwd), "ahla": (_ahla_fwd, _ahla_bwd)}


# ------------------------------------------------------------ normalization

def _normalizer(den, o, ct):
    """D = den ⊕ ε and dD/dden (SPEC §1, §9)."""
    eps = ct(o.eps)
    if o.normalize == "add":
        return den + eps, np.ones_like(den)
    if o.normalize == "clamp":  # sign(den)·max(|den|, ε), sign(0) = +1; D' = 1 where |den| ≥ ε, else 0
        sign = np.where(den < 0, ct(-1), ct(1))
        held = np.abs(den) < eps
        return sign * np.where(held, eps, np.abs(den)), np.where(held, ct(0), ct(1))
    raise ValueError(f"normalize {o.normalize!r}")


def _run(q, k, v, o):
    if o.variant not in FORMS:
        raise ValueError(f"tests/falarm adjoint_np has no variant {o.variant}")
    if o.initial_state is not None:
        raise ValueError("tests/falarm adjoint_np takes no initial state")
    ct = _ct(q)
    q, k, v = (np.asarray(x, dtype=ct) for x in (q, k, v))
    q = q * ct(o.scale)
    B, H, T, _ = q.shape
    k, v = _expand(k, H), _expand(v, H)
    return q, k, v, ct, B, H, T


def forward(q, k, v, options):
    """(out [B,H,T,dv], den [B,H,T]) in the compute precision."""
    with np.errstate(all="ignore"):
        q, k, v, ct, B, H, T = _run(q, k, v, options)
        fwd = FORMS[options.variant][0]
        num = np.zeros((B, H, T, v.shape[3]), ct)
        den = np.zeros((B, H, T), ct)
        for b, t0, t1 in _sequences(options, B, T):
            num[b, :, t0:t1], den[b, :, t0:t1], _ = fwd(q[b, :, t0:t1], k[b, :, t0:t1], v[b, :, t0:t1], options, ct)
        if options.normalize == "none":
            return num, den
        D, _ = _normalizer(den, options, ct)
        return num / D[..., None], den


def backward(q, k, v, do, dden, options, bug=None):
    """(dq, dk, dv) of L = Σ⟨do, out⟩ + Σ dden·den (dden may be None), dk, dv summed over each GQA group."""
    with np.errstate(all="ignore"):
        Hkv = k.shape[1]
        q, k, v, ct, B, H, T = _run(q, k, v, options)
        fwd, bwd = FORMS[options.variant]
        do = np.asarray(do, dtype=ct)
        dden = np.zeros((B, H, T), ct) if dden is None else np.asarray(dden, dtype=ct)
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        for b, t0, t1 in _sequences(options, B, T):
            qs, ks, vs = q[b, :, t0:t1], k[b, :, t0:t1], v[b, :, t0:t1]
            num, den, tape = fwd(qs, ks, vs, options, ct)
            dos, ddens = do[b, :, t0:t1], dden[b, :, t0:t1]
            if options.normalize != "none":
                # o = num/D: ∂L/∂num = do/D, ∂L/∂den = dden − ⟨do, o⟩/D · dD/dden
                D, dD = _normalizer(den, options, ct)
                out = num / D[..., None]
                gn = dos / D[..., None]
                gd = ddens - np.einsum("htc,htc->ht", dos, out) / D * dD
                if bug == "quotient_dropped":
                    gd = ddens
            else:
                gn, gd = dos, ddens
            dq[b, :, t0:t1], dk[b, :, t0:t1], dv[b, :, t0:t1] = bwd(qs, ks, vs, options, ct, tape, gn, gd, bug)
        return dq * ct(options.scale), _group_sum(dk, Hkv), _group_sum(dv, Hkv)
