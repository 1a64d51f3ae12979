"""The honest numpy kernels (written from SPEC.md alone). Each takes q, k, v
[B, H, n, d] float arrays (bf16 inputs as float32 holding bf16 values) and
options, and returns (num, den) per head before normalization, computed in
`ct` (the compute type: float32 as shipped, float64 to verify the algorithm).
campaign.py normalizes and rounds to the output dtype, in `ct`."""
import numpy as np


# ---------------------------------------------------------------------------
# chunk_pairs64_np: SPEC §5 chunked form, width 64, intra-chunk pairs one by one
# ---------------------------------------------------------------------------
def _seq_sum(terms):
    """Sequential left-to-right sum over axis 0 (np.cumsum adds one term at a
    time; np.sum would sum pairwise, i.e. a tree)."""
    if len(terms) == 0:
        return np.zeros(terms.shape[1:], terms.dtype)
    return np.cumsum(terms, axis=0)[-1]


def _intra_terms(A, v1, lo, t, W, variant):
    """The product terms of token t with every index in [lo, t], in the literal
    order (as flat_fwd loops them): [terms, dv+1] (last column: den)."""
    idx = np.arange(lo, t + 1)
    if variant == "la1":
        w = W[t - idx] * A[t, idx]
        return w[:, None] * v1[idx]
    if variant == "hla2":  # i <= j <= t, i outer
        I, J = np.meshgrid(idx, idx, indexing="ij")
        keep = J >= I
        I, J = I[keep], J[keep]
        w = W[2 * t - I - J] * A[t, I] * A[J, I]
        return w[:, None] * v1[J]
    if variant == "ahla":  # j <= i <= t, i outer
        I, J = np.meshgrid(idx, idx, indexing="ij")
        keep = J <= I
        I, J = I[keep], J[keep]
        w = W[t - J] * A[t, I] * A[I, J]
        return w[:, None] * v1[J]
    U, I, J = np.meshgrid(idx, idx, idx, indexing="ij")  # hla3: u outer, i, j <= u
    keep = (I <= U) & (J <= U)
    U, I, J = U[keep], I[keep], J[keep]
    w = W[3 * t - I - U - J] * (A[t, I] * A[U, I]) * A[U, J]
    return w[:, None] * v1[J]


def chunk_pairs64_head(q, k, v, variant, gamma, ct, w=64):
    """One head. The carry state advances per chunk by the §4 operators (matmuls);
    the carry terms of §5 are matmuls; the intra-chunk term is added pair by pair."""
    n, d = q.shape
    dv = v.shape[1]
    g = ct(gamma)
    q, k, v = q.astype(ct), k.astype(ct), v.astype(ct)
    v1 = np.concatenate([v, np.ones((n, 1), ct)], axis=1)  # den = the same sum with v -> 1
    A = q @ k.T
    W = g ** np.arange(3 * n + 3 * w + 1, dtype=ct)
    out = np.zeros((n, dv + 1), ct)
    S = np.zeros((d, d), ct)          # sum gamma^(T-i) k_i k_i^T
    P = np.zeros((d, dv + 1), ct)     # sum gamma^(T-j) k_j [v_j, 1]
    F = np.zeros((d, dv + 1), ct)     # hla2: S C - G (masked);  ahla: E;  hla3: F
    for lo in range(0, n, w):
        hi = min(lo + w, n)
        L = hi - lo
        Q, K, V = q[lo:hi], k[lo:hi], v1[lo:hi]
        loc = np.arange(L)
        dec = np.where(loc[:, None] >= loc[None, :], W[np.abs(loc[:, None] - loc[None, :])], 0).astype(ct)  # gamma^(t-j), j <= t
        rho = W[loc + 1]                  # gamma^(t - T_A)
        ge = W[L - 1 - loc]               # gamma^(T_B - i)
        r = W[L]                          # gamma^(chunk length)
        Aloc = A[lo:hi, lo:hi]
        if variant == "la1":
            carry = rho[:, None] * (Q @ P)
        elif variant == "hla2":
            QSQ = (Q @ S) @ Q.T
            carry = (rho * rho)[:, None] * (Q @ F) + (QSQ * dec * rho[:, None]) @ V
        elif variant == "ahla":
            Ltri = np.tril(np.ones((L, L), ct))
            carry = rho[:, None] * (Q @ F + (Aloc * Ltri) @ (Q @ P))
        else:  # hla3: r^3 q^T F_A + cross terms (u in the chunk), from the §4 operator
            SBq = np.zeros((L, d), ct)
            qPB = np.zeros((L, dv + 1), ct)
            Sl = np.zeros((d, d), ct)
            Pl = np.zeros((d, dv + 1), ct)
            for u in range(L):
                Sl = g * Sl + np.outer(K[u], K[u])
                Pl = g * Pl + np.outer(K[u], V[u])
                SBq[u] = Sl @ Q[u]
                qPB[u] = Q[u] @ Pl
            sa = (Q @ S) @ Q.T            # q_t^T S_A q_u
            sb = Q @ SBq.T                # q_t^T S_{B,<=u} q_u
            qPA = Q @ P
            d2 = np.where(loc[:, None] >= loc[None, :], W[np.clip(2 * (loc[:, None] - loc[None, :]), 0, None)], 0).astype(ct)
            carry = (rho ** 3)[:, None] * (Q @ F) + ((sa * d2 * rho[:, None]) @ qPB + (sb * d2 * rho[:, None]) @ qPA
                                                     + (sa * dec * (rho * rho)[:, None]) @ qPA)
        intra = np.stack([_seq_sum(_intra_terms(A, v1, lo, t, W, variant)) for t in range(lo, hi)])
        out[lo:hi] = carry + intra
        # advance the carry to the end of the chunk (§4 with B = this chunk)
        KG = K * ge[:, None]
        if variant == "hla2":
            SB = KG.T @ K
            CB = (Q * ge[:, None]).T @ V
            FB = K.T @ ((ge[:, None] * (K @ Q.T) * np.triu(np.ones((L, L), ct)) * ge[None, :]) @ V)
            F = r * r * F + r * (S @ CB) + FB
            S = r * S + SB
        elif variant == "ahla":
            EB = KG.T @ ((Aloc * dec) @ V)
            F = r * F + EB + r * ((K.T @ Q) @ P)
            P = r * P + KG.T @ V
        elif variant == "hla3":  # F = r^3 F_A + F_B + r S_A X_B + r Y_B P_A + r^2 S_A Zq_B P_A
            gq = ge * ge
            Zq = (Q * ge[:, None]).T @ Q
            X = (Q * gq[:, None]).T @ qPB
            Y = (SBq * gq[:, None]).T @ Q
            FB = (SBq * (gq * ge)[:, None]).T @ qPB
            F = r ** 3 * F + FB + r * (S @ X) + r * (Y @ P) + r * r * (S @ (Zq @ P))
            S = r * S + KG.T @ K
            P = r * P + KG.T @ V
        else:
            P = r * P + KG.T @ V
    return out[:, :dv], out[:, dv]


# ---------------------------------------------------------------------------
# tree_np: segment summaries (SPEC §4) combined by a Blelloch scan
# ---------------------------------------------------------------------------
def _mm(a, b):
    return np.einsum("...ij,...jk->...ik", a, b)


def _tokens(q, k, v1, variant, masked, g):
    """The single-token summaries of §4 (arrays with a leading position axis)."""
    n = q.shape[0]
    o = lambda x, y: x[:, :, None] * y[:, None, :]
    qk = np.einsum("td,td->t", q, k)[:, None, None]
    rho = np.full(n, g, q.dtype)
    if variant == "la1":
        return {"P": o(k, v1), "rho": rho}
    if variant == "hla2":
        s = {"S": o(k, k), "C": o(q, v1), "rho": rho}
        if masked:
            s["F"] = qk * o(k, v1)  # S C - G of one token: k k^T q v^T
        return s
    if variant == "ahla":
        return {"R": o(k, q), "P": o(k, v1), "E": qk * o(k, v1), "rho": rho}
    return {"S": o(k, k), "P": o(k, v1), "Zq": o(q, q), "X": qk * o(q, v1), "Y": qk * o(k, q),
            "F": qk * qk * o(k, v1), "rho": rho}


def _combine(A, B, variant):
    """A ⊕ B (A first), elementwise over the leading axis: §4's operators (hla2 in
    its masked F = S C - G form, which only adds)."""
    r = B["rho"][:, None, None]
    out = {"rho": A["rho"] * B["rho"]}
    if variant == "la1":
        out["P"] = r * A["P"] + B["P"]
    elif variant == "hla2":
        out["S"] = r * A["S"] + B["S"]
        out["C"] = r * A["C"] + B["C"]
        if "F" in A:
            out["F"] = r * r * A["F"] + r * _mm(A["S"], B["C"]) + B["F"]
    elif variant == "ahla":
        out["R"] = A["R"] + B["R"]  # undecayed
        out["P"] = r * A["P"] + B["P"]
        out["E"] = r * A["E"] + B["E"] + r * _mm(B["R"], A["P"])
    else:
        out["S"] = r * A["S"] + B["S"]
        out["P"] = r * A["P"] + B["P"]
        out["Zq"] = r * A["Zq"] + B["Zq"]
        out["X"] = r * r * A["X"] + B["X"] + r * _mm(B["Zq"], A["P"])
        out["Y"] = r * r * A["Y"] + B["Y"] + r * _mm(A["S"], B["Zq"])
        out["F"] = (r ** 3 * A["F"] + B["F"] + r * _mm(A["S"], B["X"]) + r * _mm(B["Y"], A["P"])
                    + r * r * _mm(A["S"], _mm(B["Zq"], A["P"])))
    return out


def tree_head(q, k, v, variant, masked, gamma, ct):
    n, d = q.shape
    dv = v.shape[1]
    q, k, v = q.astype(ct), k.astype(ct), v.astype(ct)
    v1 = np.concatenate([v, np.ones((n, 1), ct)], axis=1)
    tok = _tokens(q, k, v1, variant, masked, ct(gamma))
    m = 1
    while m < max(n, 1):
        m *= 2
    ident = {key: (np.ones(m - n, ct) if key == "rho" else np.zeros((m - n,) + a.shape[1:], ct)) for key, a in tok.items()}
    a = {key: np.concatenate([tok[key], ident[key]]) for key in tok}
    s = 1
    while s < m:  # up-sweep: node i (i+1 a multiple of 2s) = left child ⊕ right child
        R = np.arange(2 * s - 1, m, 2 * s)
        c = _combine({x: y[R - s] for x, y in a.items()}, {x: y[R] for x, y in a.items()}, variant)
        for key in a:
            a[key][R] = c[key]
        s *= 2
    for key in a:  # the root's exclusive prefix: the empty segment
        a[key][m - 1] = 1 if key == "rho" else 0
    s = m // 2
    while s >= 1:  # down-sweep: left gets the node's prefix, right gets prefix ⊕ left subtree
        R = np.arange(2 * s - 1, m, 2 * s)
        left = {x: y[R - s].copy() for x, y in a.items()}
        pre = {x: y[R].copy() for x, y in a.items()}
        c = _combine(pre, left, variant)
        for key in a:
            a[key][R - s] = pre[key]
            a[key][R] = c[key]
        s //= 2
    excl = {x: y[:n] for x, y in a.items()}
    inc = _combine(excl, tok, variant)  # inclusive state at t = prefix ⊕ token t
    if variant == "la1":
        o = np.einsum("td,tdc->tc", q, inc["P"])
    elif variant == "hla2" and not masked:
        o = np.einsum("te,tec->tc", np.einsum("td,tde->te", q, inc["S"]), inc["C"])
    elif variant == "ahla":
        o = np.einsum("td,tdc->tc", q, inc["E"])
    else:
        o = np.einsum("td,tdc->tc", q, inc["F"])
    return o[:, :dv], o[:, dv]


# ---------------------------------------------------------------------------
# f64_round_np: the masked matrix forms of §2 in float64, output rounded
# ---------------------------------------------------------------------------
def matrix_forms_head(q, k, v, variant, masked, gamma, ct=np.float64, strict=False):
    """§2's dense masked products with the decay matrices: ((W Wᵀ)⊙L)V and friends.
    strict=True is the campaign's control, a WRONG kernel: the causal mask without its diagonal."""
    n = q.shape[0]
    q, k, v = q.astype(ct), k.astype(ct), v.astype(ct)
    v1 = np.concatenate([v, np.ones((n, 1), ct)], axis=1)
    t = np.arange(n)
    Lm = ((t[:, None] > t[None, :]) if strict else (t[:, None] >= t[None, :])).astype(ct)
    D = np.where(Lm > 0, ct(gamma) ** np.maximum(t[:, None] - t[None, :], 0), 0).astype(ct)  # gamma^(t-j), j <= t
    A = q @ k.T
    if variant == "la1":
        o = (A * D) @ v1
    elif variant == "hla2":  # [t, j] = sum_i gamma^(t-i) a_ti a_ji (i <= j: masked); then gamma^(t-j), j <= t
        M = (A * D) @ ((A * Lm).T if masked else A.T)
        o = (M * D) @ v1
    elif variant == "ahla":
        o = ((A * D) @ (A * D)) @ v1
    else:  # hla3: sum_{i<=u} gamma^(t-i) a_ti a_ui, times gamma^(2(t-u)) (u <= t), times gamma^(u-j) a_uj (j <= u)
        if masked:
            M = ((A * D) @ (A * Lm).T) * D * D
            o = (M @ (A * D)) @ v1
        else:  # i, u, j <= t: gamma^(t-i) a_ti a_ui a_uj gamma^(t-u) gamma^(t-j)
            o = np.stack([((A[s] * D[s]) @ A.T * D[s]) @ (A * D[s][None, :]) @ v1 for s in range(n)])
    return o[:, :-1], o[:, -1]
