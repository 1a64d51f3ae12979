"""Kernel 2 of tests/falarm: hla2 through the paper's state (SPEC §3, "paper
state, decay corrected"), token by token in PyTorch; its backward is
torch.autograd through this forward. Written from SPEC.md only.

    S_t = γS_{t−1} + k_tk_tᵀ,  C_t = γC_{t−1} + q_tv_tᵀ,  m_t = γm_{t−1} + q_t,
    G_t = γ²G_{t−1} + γ·k_t(k_tᵀC_{t−1}),  h_t = γ²h_{t−1} + γ·k_t(k_tᵀm_{t−1}),
    u = q_tᵀS_t + λq_tᵀ,  num_t = u·C_t − q_tᵀG_t,  den_t = u·m_t − q_tᵀh_t
    (unmasked: without G, h).

It subtracts the unmasked partial sum u·C_t − q_tᵀG_t, so it is a
state-difference kernel (SPEC §7): declare form_class='state_difference'.
Planted bugs (hla2_paper_state(..., bug="G_k_detached"), for the tests): G's
update reads k_t through a detached copy for its left factor, so the forward
is unchanged and autograd drops that factor's term from dk; "state_C_detached"
(_sequence from a state): G0 = S0·C0 − F0 reads C0 detached (dstate.C loses S0ᵀḠ).
Layout [B, H, T, D] (k, v with Hkv heads: GQA), cu_seqlens for packed
sequences (B = 1); computes in float64 for f64 inputs, float32 otherwise.
"""
import torch


def _ct(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _sequence(q, k, v, gamma, lam, masked, bug=None, init=None):
    """One sequence: q, k [H, n, d], v [H, n, dv] -> num [H, n, dv], den [H, n]. init: the state it
    continues, {part: [H, ...]} (docs/using.md "Initial states": S, C, m, F, f), the paper's carry
    G = S·C − F, h = S·m − f formed from it by subtracting (autograd reaches the parts through it)."""
    H, n, d = q.shape
    dv = v.shape[2]
    z = dict(dtype=q.dtype)
    S = torch.zeros(H, d, d, **z)
    C = torch.zeros(H, d, dv, **z)
    m = torch.zeros(H, d, **z)
    G = torch.zeros(H, d, dv, **z)
    h = torch.zeros(H, d, **z)
    if init is not None:
        S, C, m = init["S"], init["C"], init["m"]
        if masked:
            G = torch.einsum("hde,hec->hdc", S, C.detach() if bug == "state_C_detached" else C) - init["F"]
            h = torch.einsum("hde,he->hd", S, m) - init["f"]
    g2 = gamma * gamma
    num, den = [], []
    for t in range(n):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        if masked:  # from the previous C, m (before this token's update)
            kC = torch.einsum("hd,hdc->hc", kt, C)
            km = torch.einsum("hd,hd->h", kt, m)
            kl = kt.detach() if bug == "G_k_detached" else kt
            G = g2 * G + gamma * kl.unsqueeze(-1) * kC.unsqueeze(-2)
            h = g2 * h + gamma * kt * km.unsqueeze(-1)
        S = gamma * S + kt.unsqueeze(-1) * kt.unsqueeze(-2)
        C = gamma * C + qt.unsqueeze(-1) * vt.unsqueeze(-2)
        m = gamma * m + qt
        u = torch.einsum("hd,hde->he", qt, S) + lam * qt
        nt = torch.einsum("hd,hdc->hc", u, C)
        dt = torch.einsum("hd,hd->h", u, m)
        if masked:
            nt = nt - torch.einsum("hd,hdc->hc", qt, G)
            dt = dt - torch.einsum("hd,hd->h", qt, h)
        num.append(nt)
        den.append(dt)
    if n == 0:
        return q.new_zeros(H, 0, dv), q.new_zeros(H, 0)
    return torch.stack(num, 1), torch.stack(den, 1)


def _normalize(num, den, normalize, eps):
    if normalize == "none":
        return num
    if normalize == "add":
        return num / (den + eps).unsqueeze(-1)
    if normalize == "clamp":  # num / (sign(den)·max(|den|, ε)), sign(0) = +1
        sign = torch.where(den < 0, -1.0, 1.0).to(den.dtype)
        return num / (sign * torch.clamp(den.abs(), min=eps)).unsqueeze(-1)
    raise ValueError(f"normalize {normalize!r}")


def hla2_paper_state(q, k, v, options, bug=None):
    """fn(q, k, v, options) for hla_oracle.fuzz (framework='torch', layout 'bhtd'): (out, den) in the compute
    precision. options: gamma, lam, scale, masked, normalize, eps, cu_seqlens."""
    if options.variant != "hla2":
        raise ValueError(f"the paper state is hla2's, not {options.variant}")
    if options.initial_state is not None:
        raise ValueError("tests/falarm paper_state_torch takes no initial state")
    ct = _ct(q)
    q, k, v = (x.to(ct) for x in (q, k, v))
    B, H, T, _ = q.shape
    if k.shape[1] != H:  # GQA, after the cast: autograd sums dk, dv over the group in the compute precision
        k, v = k.repeat_interleave(H // k.shape[1], dim=1), v.repeat_interleave(H // v.shape[1], dim=1)
    q = q * options.scale
    if options.cu_seqlens is None:
        seqs = [(b, 0, T) for b in range(B)]
    else:
        cu = [int(x) for x in options.cu_seqlens]
        seqs = [(0, a, b) for a, b in zip(cu[:-1], cu[1:])]
    nums, dens = [], []
    for b, t0, t1 in seqs:
        n_, d_ = _sequence(q[b, :, t0:t1], k[b, :, t0:t1], v[b, :, t0:t1], options.gamma, options.lam, options.masked, bug)
        nums.append((b, n_)), dens.append((b, d_))
    # Assemble without in-place writes: per batch entry, the sequences concatenated along T.
    num = torch.stack([torch.cat([x for bb, x in nums if bb == b], 1) for b in range(B)])
    den = torch.stack([torch.cat([x for bb, x in dens if bb == b], 1) for b in range(B)])
    return _normalize(num, den, options.normalize, options.eps), den
