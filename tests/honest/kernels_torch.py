"""The honest PyTorch kernels (written from SPEC.md alone), differentiable by
torch.autograd. Each takes q, k, v [B, H, n, d] tensors already in the compute
dtype (float32 as shipped; float64 to verify the algorithm), q already scaled,
and gamma as a Python float, and returns (num [B,H,n,dv], den [B,H,n])."""
import torch


def _tril(n, device=None):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


# ---------------------------------------------------------------------------
# Decay matrices: log-space (as production chunk kernels: b = cumsum(log gamma))
# or by powers gamma^(t-j).
# ---------------------------------------------------------------------------
def _logspace(n, gamma, dtype):
    """b_t = sum_{s<=t} log gamma (cumsum in dtype); D[t, j] = exp(b_t - b_j) (j <= t, else 0)."""
    lg = torch.log(torch.tensor(gamma, dtype=dtype))
    b = torch.cumsum(lg.expand(n), 0)
    diff = (b[:, None] - b[None, :]).masked_fill(~_tril(n), float("-inf"))
    return b, torch.exp(diff)


def _powers(n, gamma, dtype):
    """D[t, j] = gamma^(t-j) by torch.pow in dtype, and gamma^(t+1) as b-like 'rho'."""
    t = torch.arange(n, dtype=dtype)
    g = torch.tensor(gamma, dtype=dtype)
    D = torch.where(_tril(n), g ** (t[:, None] - t[None, :]).clamp(min=0), torch.zeros((), dtype=dtype))
    return g ** (t + 1), D


# ---------------------------------------------------------------------------
# Chunked masked-matmul kernel (SPEC §5): logspace_chunk_torch (log-space decay,
# width 64) and matmul_chunk_torch (powers, width 16) are this function.
# ---------------------------------------------------------------------------
def chunked(q, k, v, variant, gamma, width, decay, mm=torch.matmul):
    B, H, n, d = q.shape
    dv = v.shape[-1]
    dt = q.dtype
    ones = torch.ones(B, H, n, 1, dtype=dt)
    v1 = torch.cat([v, ones], -1)  # den rides along as a last value column
    S = q.new_zeros(B, H, d, d)
    P = q.new_zeros(B, H, d, dv + 1)
    F = q.new_zeros(B, H, d, dv + 1)  # hla2: S C - G;  ahla: E
    outs = []
    for lo in range(0, n, width):
        hi = min(lo + width, n)
        L = hi - lo
        Q, K, V = q[:, :, lo:hi], k[:, :, lo:hi], v1[:, :, lo:hi]
        if decay == "log":
            b, D = _logspace(L, gamma, dt)
            rho, ge, r = torch.exp(b), torch.exp(b[-1] - b), torch.exp(b[-1])  # carry, chunk-end decays
        else:
            rho, D = _powers(L, gamma, dt)
            ge, r = D[-1], rho[-1]
        A = mm(Q, K.transpose(-1, -2))
        Lm = _tril(L).to(dt)
        rc = rho[:, None]
        if variant == "la1":
            o = mm(A * D, V) + rc * mm(Q, P)
            P = r * P + mm((K * ge[:, None]).transpose(-1, -2), V)
        elif variant == "hla2":
            intra = mm(mm(A * D, (A * Lm).transpose(-1, -2)) * D, V)  # sum_{i<=j<=t} gamma^(2t-i-j) a_ti a_ji v_j
            carry = rc * rc * mm(Q, F) + mm(mm(mm(Q, S), Q.transpose(-1, -2)) * D * rc, V)
            o = intra + carry
            KG = K * ge[:, None]
            CB = mm((Q * ge[:, None]).transpose(-1, -2), V)
            FB = mm(K.transpose(-1, -2), mm(ge[:, None] * mm(K, Q.transpose(-1, -2)) * Lm.T * ge[None, :], V))
            F = r * r * F + r * mm(S, CB) + FB
            S = r * S + mm(KG.transpose(-1, -2), K)
        else:  # ahla
            intra = mm(mm(A * D, A * D), V)
            carry = rc * (mm(Q, F) + mm(A * Lm, mm(Q, P)))
            o = intra + carry
            KG = K * ge[:, None]
            F = r * F + mm(KG.transpose(-1, -2), mm(A * D, V)) + r * mm(mm(K.transpose(-1, -2), Q), P)
            P = r * P + mm(KG.transpose(-1, -2), V)
        outs.append(o)
    o = torch.cat(outs, 2) if outs else v1.new_zeros(B, H, 0, dv + 1)
    return o[..., :dv], o[..., dv]


# ---------------------------------------------------------------------------
# tc_chunk_torch: the same chunked kernel as a tensor-core kernel computes it
# (Triton's tl.dot, FLA's chunk kernels): every operand of every product --
# inputs, states, attention blocks, decayed keys -- rounded to the operand
# format (bf16 inputs: bf16; f32 inputs: tf32), products accumulated in f32.
# Declared "bf16=bf16+f32,f32=tf32". Rounding passes gradients straight through.
# ---------------------------------------------------------------------------
def round_bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


def round_tf32(x):
    """To nearest, ties to even, on a 10-bit significand (f32's exponent): TF32's operand rounding."""
    i = x.contiguous().view(torch.int32)
    i = (i + 0xFFF + ((i >> 13) & 1)) & -0x2000
    return i.view(torch.float32)


def tensor_core_mm(rnd):
    """a @ b on operands rounded by rnd (straight-through for autograd), accumulated in the operands' f32."""
    def r(x):
        return x + (rnd(x.detach()) - x).detach()
    return lambda a, b: r(a) @ r(b)


# ---------------------------------------------------------------------------
# logspace_seq_torch: one naive masked matmul per sequence, decays
# exp(b_t - b_j) with b = cumsum(log gamma) over the whole sequence.
# ---------------------------------------------------------------------------
def logspace_seq(q, k, v, variant, masked, gamma, mm=torch.matmul):
    n = q.shape[2]
    dt = q.dtype
    _, D = _logspace(n, gamma, dt)
    Lm = _tril(n).to(dt)
    v1 = torch.cat([v, torch.ones(*v.shape[:-1], 1, dtype=dt)], -1)
    A = mm(q, k.transpose(-1, -2))
    if variant == "la1":
        o = mm(A * D, v1)
    elif variant == "hla2":
        M = mm(A * D, ((A * Lm) if masked else A).transpose(-1, -2))
        o = mm(M * D, v1)
    elif variant == "ahla":
        o = mm(mm(A * D, A * D), v1)
    else:  # hla3 masked
        M = mm(A * D, (A * Lm).transpose(-1, -2)) * D * D
        o = mm(mm(M, A * D), v1)
    return o[..., :-1], o[..., -1]


# ---------------------------------------------------------------------------
# recurrent_torch: the §3 streaming recurrences, one token at a time.
# ---------------------------------------------------------------------------
def recurrent(q, k, v, variant, masked, gamma):
    B, H, n, d = q.shape
    dt = q.dtype
    v1 = torch.cat([v, torch.ones(B, H, n, 1, dtype=dt)], -1)
    e = v1.shape[-1]
    g = torch.tensor(gamma, dtype=dt)
    S = q.new_zeros(B, H, d, d)
    SQ = q.new_zeros(B, H, d, d)
    P = q.new_zeros(B, H, d, e)
    C = q.new_zeros(B, H, d, e)
    F = q.new_zeros(B, H, d, e)
    outs = []
    for t in range(n):
        qt, kt, vt = q[:, :, t], k[:, :, t], v1[:, :, t]
        outer = lambda x, y: x[..., :, None] * y[..., None, :]
        if variant == "la1":
            P = g * P + outer(kt, vt)
            o = (qt[..., None] * P).sum(-2)
        elif variant == "hla2":
            S = g * S + outer(kt, kt)
            if masked:  # F_t = g^2 F + (S_t q_t) v_t^T
                F = g * g * F + outer((S @ qt[..., None])[..., 0], vt)
                o = (qt[..., None] * F).sum(-2)
            else:  # (q^T S_t) C_t
                C = g * C + outer(qt, vt)
                o = ((S @ qt[..., None])[..., 0][..., None] * C).sum(-2)
        elif variant == "ahla":  # E_t = g E + k (q^T P_t)
            P = g * P + outer(kt, vt)
            F = g * F + outer(kt, (qt[..., None] * P).sum(-2))
            o = (qt[..., None] * F).sum(-2)
        else:
            S = g * S + outer(kt, kt)
            P = g * P + outer(kt, vt)
            Sq = (S @ qt[..., None])[..., 0]
            if masked:  # F_t = g^3 F + (S q)(q^T P)
                F = g * g * g * F + outer(Sq, (qt[..., None] * P).sum(-2))
                o = (qt[..., None] * F).sum(-2)
            else:  # q^T S SQ P
                SQ = g * SQ + outer(qt, qt)
                o = ((SQ @ Sq[..., None]) * P).sum(-2)
        outs.append(o)
    o = torch.stack(outs, 2) if outs else v1.new_zeros(B, H, 0, e)
    return o[..., :-1], o[..., -1]


# ---------------------------------------------------------------------------
# state_diff_torch: hla2 with the paper's state, o = q^T (S_t C_t - G_t)
# (decay corrected, SPEC §3): subtracts unmasked partial sums.
# ---------------------------------------------------------------------------
def state_difference(q, k, v, gamma):
    B, H, n, d = q.shape
    dt = q.dtype
    v1 = torch.cat([v, torch.ones(B, H, n, 1, dtype=dt)], -1)
    e = v1.shape[-1]
    g = torch.tensor(gamma, dtype=dt)
    S = q.new_zeros(B, H, d, d)
    C = q.new_zeros(B, H, d, e)
    G = q.new_zeros(B, H, d, e)
    outs = []
    for t in range(n):
        qt, kt, vt = q[:, :, t], k[:, :, t], v1[:, :, t]
        kC = (kt[..., None] * C).sum(-2)  # k_t^T C_{t-1}
        G = g * g * G + g * kt[..., :, None] * kC[..., None, :]
        S = g * S + kt[..., :, None] * kt[..., None, :]
        C = g * C + qt[..., :, None] * vt[..., None, :]
        u = (qt[..., None] * S).sum(-2)  # q_t^T S_t
        o = (u[..., None] * C).sum(-2) - (qt[..., None] * G).sum(-2)
        outs.append(o)
    o = torch.stack(outs, 2) if outs else v1.new_zeros(B, H, 0, e)
    return o[..., :-1], o[..., -1]
