"""The §2 literal sums in float64 with numpy (einsum over explicit index masks):
a self-check for the kernels while developing (small n only: O(n^4) memory for hla3)."""
import numpy as np


def literal64(q, k, v, variant, masked=True, gamma=1.0):
    """num [n, dv], den [n] of one head, float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    n = q.shape[0]
    A = q @ k.T
    t = np.arange(n)
    g = float(gamma)
    le = lambda x, y: (x <= y)
    num = np.zeros((n, v.shape[1]))
    den = np.zeros(n)
    for s in range(n):
        if variant == "la1":
            w = np.where(t <= s, g ** (s - t), 0.0) * A[s]
            num[s], den[s] = w @ v, w.sum()
        elif variant == "hla2":
            I, J = np.meshgrid(t, t, indexing="ij")
            m = (I <= s) & (J <= s) & (le(I, J) if masked else True)
            w = np.where(m, g ** np.where(m, 2 * s - I - J, 0), 0.0) * A[s][:, None] * A.T  # A.T[i, j] = a_ji
            num[s], den[s] = w.sum(0) @ v, w.sum()
        elif variant == "ahla":
            I, J = np.meshgrid(t, t, indexing="ij")
            m = (J <= I) & (I <= s)
            w = np.where(m, g ** np.where(m, s - J, 0), 0.0) * A[s][:, None] * A  # A[i, j] = a_ij
            num[s], den[s] = w.sum(0) @ v, w.sum()
        else:  # hla3: indices (i, u, j)
            I, U, J = np.meshgrid(t, t, t, indexing="ij")
            m = (I <= s) & (U <= s) & (J <= s)
            if masked:
                m &= (I <= U) & (J <= U)
            w = np.where(m, g ** np.where(m, 3 * s - I - U - J, 0), 0.0) * A[s][:, None, None] * A.T[:, :, None] * A[None, :, :]
            num[s], den[s] = w.sum((0, 1)) @ v, w.sum()
    return num, den
