"""An independent PyTorch implementation of masked second-order HLA (hla2),
FLA-style: inputs [B, T, H, D], optional cu_seqlens (packed sequences, B = 1),
initial_state / output_final_state, GQA (k, v with fewer heads).

Two forms of the same operator (SPEC §2: num_t = Σ_{i ≤ j ≤ t} γ^{(t−i)+(t−j)}
(q_t·k_i)(q_j·k_i) v_j, den_t the same with v_j → 1):

- fused_recurrent_hla2: token by token, the corrected state
  S_t = γS + k kᵀ, F_t = γ²F + (S_t q_t) v_tᵀ, f_t = γ²f + S_t q_t, o_t = q_tᵀF_t;
- chunk_hla2: chunks of C tokens as matrix products (derived for this example:
  inside a chunk starting at s with state (S0, F0, f0), for τ = t − s,
  U = diag(γ^{τ+1}) Q S0 + (Γ₁ ⊙ QKᵀ) K, num = diag(γ^{2(τ+1)}) Q F0 + (Γ₂ ⊙ QUᵀ) V,
  with Γ_p[t, j] = γ^{p(t−j)} for j ≤ t, else 0; the state is carried to the next chunk).

Compute precision: float32 for f32/bf16/f16 inputs, float64 for f64; the output
is returned in the input dtype. The state is a tuple (S [N,H,d,d], F [N,H,d,dv],
f [N,H,d]) in the compute precision (N: batch entries or packed sequences).
This file does not use hla-oracle: tests/… and examples/test_torch_hla.py check it.
"""
import torch


def _compute_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _normalize(num, den, normalize, eps):
    if normalize == "none":
        return num
    if normalize == "add":
        return num / (den + eps).unsqueeze(-1)
    if normalize == "clamp":  # num / (sign(den) max(|den|, eps)), sign(0) = +1
        sign = torch.where(den < 0, -1.0, 1.0).to(den.dtype)
        return num / (sign * torch.clamp(den.abs(), min=eps)).unsqueeze(-1)
    raise ValueError(f"normalize must be 'none', 'add' or 'clamp', got {normalize!r}")


def _heads(q, k, v):
    """k, v with their K/V heads repeated for the query heads (GQA)."""
    H, Hkv = q.shape[2], k.shape[2]
    if H % Hkv:
        raise ValueError(f"{H} query heads are not a multiple of {Hkv} K/V heads")
    if Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=2)
        v = v.repeat_interleave(H // Hkv, dim=2)
    return k, v


def _zero_state(H, d, dv, dtype):
    return (torch.zeros(H, d, d, dtype=dtype), torch.zeros(H, d, dv, dtype=dtype), torch.zeros(H, d, dtype=dtype))


def _recurrent_seq(q, k, v, gamma, state):
    """One sequence: q, k [T, H, d], v [T, H, dv]; state per head. Returns num [T,H,dv], den [T,H], state."""
    S, F, f = state
    g2 = gamma * gamma
    num, den = [], []
    for t in range(q.shape[0]):
        qt, kt, vt = q[t], k[t], v[t]
        S = gamma * S + kt.unsqueeze(-1) * kt.unsqueeze(-2)
        u = torch.einsum("hij,hj->hi", S, qt)  # S_t q_t
        F = g2 * F + u.unsqueeze(-1) * vt.unsqueeze(-2)
        f = g2 * f + u
        num.append(torch.einsum("hi,hij->hj", qt, F))
        den.append(torch.einsum("hi,hi->h", qt, f))
    T = q.shape[0]
    if T == 0:
        return q.new_zeros(0, q.shape[1], v.shape[2]), q.new_zeros(0, q.shape[1]), (S, F, f)
    return torch.stack(num), torch.stack(den), (S, F, f)


def _chunk_seq(q, k, v, gamma, state, chunk_size):
    S, F, f = state
    T = q.shape[0]
    nums, dens = [], []
    for s in range(0, T, chunk_size):
        if not all(torch.isfinite(x[s:s + chunk_size]).all() for x in (q, k, v)):
            # The products below would carry a NaN/Inf of a later token into earlier rows
            # (0·NaN = NaN): such a chunk goes token by token (hla_oracle.fuzz found this).
            n_, d_, (S, F, f) = _recurrent_seq(q[s:s + chunk_size], k[s:s + chunk_size], v[s:s + chunk_size], gamma, (S, F, f))
            nums.append(n_)
            dens.append(d_)
            continue
        Q, K, V = (x[s:s + chunk_size].transpose(0, 1) for x in (q, k, v))  # [H, C, ·]
        C = Q.shape[1]
        tau = torch.arange(C, dtype=Q.dtype)
        diff = tau.unsqueeze(1) - tau.unsqueeze(0)  # t − j
        causal = diff >= 0
        g1 = torch.where(causal, gamma ** diff.clamp(min=0), 0.0).to(Q.dtype)
        g2 = torch.where(causal, (gamma * gamma) ** diff.clamp(min=0), 0.0).to(Q.dtype)
        lead1 = (gamma ** (tau + 1)).unsqueeze(-1)      # γ^{τ+1}
        lead2 = ((gamma * gamma) ** (tau + 1)).unsqueeze(-1)
        U = lead1 * (Q @ S) + (g1 * (Q @ K.transpose(1, 2))) @ K     # rows u_j = S_j q_j
        W = g2 * (Q @ U.transpose(1, 2))
        nums.append((lead2 * (Q @ F) + W @ V).transpose(0, 1))
        dens.append((lead2.squeeze(-1) * torch.einsum("hcd,hd->hc", Q, f) + W.sum(-1)).transpose(0, 1))
        # The state at the chunk's last token.
        last1 = (gamma ** (C - 1 - tau)).unsqueeze(-1)             # γ^{e−i}
        last2 = ((gamma * gamma) ** (C - 1 - tau)).unsqueeze(-1)
        S = gamma ** C * S + K.transpose(1, 2) @ (last1 * K)
        F = (gamma * gamma) ** C * F + U.transpose(1, 2) @ (last2 * V)
        f = (gamma * gamma) ** C * f + (last2 * U).sum(1)
    if T == 0:
        return q.new_zeros(0, q.shape[1], v.shape[2]), q.new_zeros(0, q.shape[1]), (S, F, f)
    return torch.cat(nums), torch.cat(dens), (S, F, f)


def _run(seq_fn, q, k, v, gamma, scale, initial_state, output_final_state, cu_seqlens, normalize, eps, return_den):
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, D], got shape {tuple(q.shape)}")
    out_dtype = q.dtype
    ct = _compute_dtype(q)
    # To the compute precision first, then repeat the K/V heads: autograd's
    # backward of the repeat sums dk, dv over a group, which in bf16 would round
    # every partial sum (hla_oracle.fuzz(..., backward="autograd") found this).
    q, k, v = (x.to(ct) for x in (q, k, v))
    k, v = _heads(q, k, v)
    if scale is not None:
        q = q * scale
    B, T, H, d = q.shape
    dv = v.shape[-1]
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError("cu_seqlens needs B = 1")
        bounds = [int(x) for x in cu_seqlens]
        seqs = [(0, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    num = q.new_zeros(B, T, H, dv)
    den = q.new_zeros(B, T, H)
    finals = []
    for i, (b, t0, t1) in enumerate(seqs):
        st = _zero_state(H, d, dv, ct) if initial_state is None else tuple(x[i].to(ct) for x in initial_state)
        n_, d_, st = seq_fn(q[b, t0:t1], k[b, t0:t1], v[b, t0:t1], gamma, st)
        num[b, t0:t1] = n_
        den[b, t0:t1] = d_
        finals.append(st)
    o = _normalize(num, den, normalize, eps).to(out_dtype)
    final = tuple(torch.stack([s[j] for s in finals]) for j in range(3)) if output_final_state else None
    return (o, den, final) if return_den else (o, final)


def fused_recurrent_hla2(q, k, v, gamma=1.0, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                         normalize="none", eps=1e-6, return_den=False):
    """hla2 token by token. Returns (o [B,T,H,dv] in q's dtype, final_state or None), or
    (o, den [B,T,H], final_state) with return_den."""
    return _run(_recurrent_seq, q, k, v, gamma, scale, initial_state, output_final_state, cu_seqlens, normalize, eps,
                return_den)


def chunk_hla2(q, k, v, gamma=1.0, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
               normalize="none", eps=1e-6, chunk_size=16, return_den=False):
    """hla2 by chunks of chunk_size tokens (matrix products). Same arguments and results as fused_recurrent_hla2."""
    return _run(lambda q_, k_, v_, g, st: _chunk_seq(q_, k_, v_, g, st, chunk_size), q, k, v, gamma, scale,
                initial_state, output_final_state, cu_seqlens, normalize, eps, return_den)
