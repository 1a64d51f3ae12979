"""The unmasked-order magnitude of an hla2 fixture (the zoo self-tests' yardstick
for state-difference members, whose rounding error scales with it).

SPEC §7: the magnitude is the defining sum with every factor replaced by its
absolute value. A state-difference kernel forms every pair i, j ≤ t (u·C_t)
and subtracts the i > j ones (q_tᵀG_t), so its error is bounded by a multiple
of u times the *unmasked* sum over absolute values — which is the unmasked hla2
recurrence run on |scale·q|, |k|, |v|. For unmasked fixtures it equals the
stored mag_num / mag_den.
"""

from fractions import Fraction

import numpy as np

import correct


def unmasked_magnitude(t, md):
    """(mag_num [B,H,n,dv], mag_den [B,H,n]) of the unmasked order, for an hla2 fixture (tensors t, metadata md)."""
    gamma, lam, scale = (float(Fraction(md[k])) for k in ("gamma", "lambda", "scale"))
    q, k, v = (np.abs(t[x].astype(np.float64)) for x in ("q", "k", "v"))
    B, H, n, _ = q.shape
    Hkv, dv = k.shape[1], v.shape[3]
    offsets = t["offsets"] if "offsets" in t else np.array([0, n])
    mag_num, mag_den = np.zeros((B, H, n, dv)), np.zeros((B, H, n))
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            for t0, t1 in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                v1 = np.concatenate([v[b, hk, t0:t1], np.ones((t1 - t0, 1))], axis=1)
                with np.errstate(all="ignore"):
                    m = correct.hla2(abs(scale) * q[b, h, t0:t1], k[b, hk, t0:t1], v1, gamma, False, lam, correct.Bugs())
                mag_num[b, h, t0:t1], mag_den[b, h, t0:t1] = m[:, :-1], m[:, -1]
    return mag_num, mag_den
