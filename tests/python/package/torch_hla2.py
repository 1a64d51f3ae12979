"""A PyTorch masked hla2 (unnormalized, decay γ) in chunked form, written for
the gradient tests at production shapes: its backward is torch.autograd through
this forward. It shares no code with hla-oracle (nor with examples/torch_hla.py).

SPEC §2: num_t = Σ_{i ≤ j ≤ t} γ^{(t−i)+(t−j)} (q_t·k_i)(q_j·k_i) v_j. Split at
chunks of w tokens (SPEC §5), with S = Σ γ^{T−i} k_i k_iᵀ and the corrected
state F = Σ_j γ^{2(T−j)} (S_j q_j) v_jᵀ of everything before the chunk, and
τ = t − chunk start, ρ_t = γ^{τ+1}, D[t, j] = γ^{τ_t−τ_j} (j ≤ t, else 0):
  num = ρ²·Q F + ((Q S Qᵀ) ⊙ ρD) V + ((Q Kᵀ (QKᵀ ⊙ D)ᵀ) ⊙ D²) V,
  S ← γ^w S + Kᵀ diag(γ^{w−1−τ}) K,
  F ← γ^{2w} F + Rᵀ diag(γ^{2(w−1−τ)}) V,  R = ρ·Q S + (QKᵀ ⊙ D) K  (row j: S_j q_j).
"""
import torch


def hla2(q, k, v, gamma, chunk=64):
    """q, k [B, H, T, d], v [B, H, T, dv] (k, v with H/G heads: GQA), float32 or
    float64 (the compute precision). Returns num [B, H, T, dv]."""
    H, Hkv = q.shape[1], k.shape[1]
    if H != Hkv:  # autograd sums dk, dv over each group through the repeat
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    B, _, T, d = q.shape
    dv = v.shape[-1]
    S = q.new_zeros(B, H, d, d)
    F = q.new_zeros(B, H, d, dv)
    out = []
    for c0 in range(0, T, chunk):
        Q, K, V = q[:, :, c0:c0 + chunk], k[:, :, c0:c0 + chunk], v[:, :, c0:c0 + chunk]
        w = Q.shape[2]
        tau = torch.arange(w, dtype=q.dtype)
        diff = tau[:, None] - tau[None, :]
        D = torch.where(diff >= 0, gamma ** diff.clamp(min=0), torch.zeros((), dtype=q.dtype))
        rho = gamma ** (tau + 1)
        A = Q @ K.transpose(-1, -2)  # a_ti inside the chunk
        Wd = A * D  # [j, i] = γ^{j−i} a_ji, i ≤ j
        QS = Q @ S
        num = (rho ** 2)[:, None] * (Q @ F) + ((QS @ Q.transpose(-1, -2)) * (rho[:, None] * D)) @ V
        num = num + ((A @ Wd.transpose(-1, -2)) * D * D) @ V
        out.append(num)
        R = rho[:, None] * QS + Wd @ K
        tail = gamma ** (w - 1 - tau)
        F = gamma ** (2 * w) * F + R.transpose(-1, -2) @ ((tail ** 2)[:, None] * V)
        S = gamma ** w * S + K.transpose(-1, -2) @ (tail[:, None] * K)
    return torch.cat(out, dim=2)


def forward_backward(q, k, v, do, gamma, layout="bhtd", compute=torch.float32):
    """A kernel as a user would test it: inputs (any dtype, `layout`) computed
    in `compute`; out and the autograd gradients dq, dk, dv (in `compute`) for
    the upstream do, all in `layout`."""
    to = (lambda x: x.transpose(1, 2)) if layout == "bthd" else (lambda x: x)
    leaves = [x.detach().to(compute).requires_grad_() for x in (q, k, v)]
    out = to(hla2(*(to(x) for x in leaves), gamma))
    out.backward(do.to(compute))
    return out.detach(), *(x.grad for x in leaves)
