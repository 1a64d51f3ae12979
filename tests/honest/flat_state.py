"""The most naive honest hla2 kernel, its final state included: written from SPEC §2 and §3 alone, every
term of the literal sums added one by one, in natural index order, into an f32 accumulator (np.cumsum
in float32 is sequential), for the outputs, den and the final state (S, C, m, F = Σ_{i≤j} γ^{2(T−j)+(j−i)}
k_i (k_iᵀq_j) v_jᵀ, f). It declares form_class="flat" and must PASS, also on repeated tokens with γ = 1
and a head of size 1, where its sums are longest (issue 39: states judged in every class).
Two controls (F one γ off, F without its diagonal terms) must FAIL. Exit 1 otherwise; prints every case's scores."""
import sys

import numpy as np

import hla_oracle

f32 = np.float32


def seq_sum(terms):
    """Σ terms added one by one in f32 (axis 0)."""
    return np.cumsum(np.asarray(terms, f32), axis=0, dtype=f32)[-1] if len(terms) else np.zeros(np.shape(terms)[1:], f32)


def flat_hla2(q, k, v, gamma, bug=None):
    """One head, q, k [T, d], v [T, dv] f32: out (= num), den, and the final state by literal sums.
    bug (the controls, which must FAIL): "F_decay" (F's terms one γ too many), "F_no_diagonal" (i = j dropped)."""
    T = q.shape[0]
    g = f32(gamma)
    pw = lambda e: g ** f32(e)  # noqa: E731
    A = (q @ k.T).astype(f32)  # a_{ti} = q_t·k_i (one dot product each)
    num = np.zeros((T, v.shape[1]), f32)
    den = np.zeros(T, f32)
    for t in range(T):
        j, i = np.tril_indices(t + 1)  # i ≤ j ≤ t, natural order
        w = (pw((t - i) + (t - j)) * A[t, i] * A[j, i]).astype(f32)
        num[t], den[t] = seq_sum(w[:, None] * v[j]), seq_sum(w)
    last = T - 1
    e = pw(last - np.arange(T))
    state = {"S": seq_sum(e[:, None, None] * (k[:, :, None] * k[:, None, :])),
             "C": seq_sum(e[:, None, None] * (q[:, :, None] * v[:, None, :])), "m": seq_sum(e[:, None] * q)}
    j, i = np.tril_indices(T, -1 if bug == "F_no_diagonal" else 0)
    w = (pw(2 * (last - j) + (j - i) + (bug == "F_decay")) * A[j, i]).astype(f32)  # γ^{2(T−j)+(j−i)} (k_i·q_j)
    state["F"] = seq_sum(w[:, None, None] * (k[i][:, :, None] * v[j][:, None, :]))
    state["f"] = seq_sum(w[:, None] * k[i])
    return num, den, state


def judge(T, d, gamma, tokens, bug=None, seed=1):
    rng = np.random.default_rng(seed)
    if tokens == "repeated":
        q = k = np.full((T, d), 0.7, f32)
        v = np.full((T, d), 0.7, f32)
    else:
        q, k, v = (rng.standard_normal((T, d)).astype(f32) for _ in range(3))
    num, den, state = flat_hla2(q, k, v, gamma, bug)
    b = lambda x: x[None, None]  # noqa: E731  [B=1, H=1, ...]
    r = hla_oracle.check(b(num), b(q), b(k), b(v), variant="hla2", gamma=gamma, den=b(den), precision="f32",
                         form_class="flat", final_state={part: b(x) for part, x in state.items()})
    rows = ", ".join(f"{x['name']} {x['max_score']:.3g} (ratio {x['baseline_ratio']:.3g})" for x in r.json()["states"])
    print(f"{'control ' + bug if bug else 'hla2'} flat f32, {tokens} tokens, T={T}, d=dv={d}, gamma={gamma}: {r.verdict}; out worst "
          f"{r.json()['max_score']:.3g}; {rows}")
    if r.passed == bool(bug):
        print(r.text)
    return r.passed != bool(bug)


if __name__ == "__main__":
    cases = [(160, 1, 1, "repeated"), (256, 1, 1, "repeated"), (96, 2, 0.9, "gaussian"), (64, 4, 1, "gaussian")]
    controls = [(160, 1, 1, "repeated", "F_no_diagonal"), (96, 2, 0.9, "gaussian", "F_decay")]
    sys.exit(0 if all([judge(*c) for c in cases + controls]) else 1)
