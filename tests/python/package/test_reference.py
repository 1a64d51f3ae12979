"""hla_oracle.reference: the C++ reference of the user's own arrays, every way
of passing them (dtypes, bf16 bits, layouts, packed sequences, exact options)."""
from fractions import Fraction

import numpy as np
import pytest

import hla_oracle


def naive_hla2(q, k, v, gamma):
    """SPEC §2, literally, in exact rationals: num_t = Σ_{i≤j≤t} γ^{(t−i)+(t−j)} a_ti a_ji v_j (one head)."""
    n = len(q)
    a = [[sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(q[t], k[i])) for i in range(n)] for t in range(n)]
    aj = [[sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(q[j], k[i])) for i in range(n)] for j in range(n)]
    num = [[Fraction(0)] * v.shape[1] for _ in range(n)]
    den = [Fraction(0)] * n
    for t in range(n):
        for j in range(t + 1):
            for i in range(j + 1):
                w = gamma ** ((t - i) + (t - j)) * a[t][i] * aj[j][i]
                den[t] += w
                for c in range(v.shape[1]):
                    num[t][c] += w * Fraction(float(v[j][c]))
    return num, den


def small_problem(seed=1, B=1, H=2, Hkv=1, n=6, d=3, dv=2, dtype=np.float32):
    rng = np.random.default_rng(seed)
    q = rng.integers(-3, 4, (B, H, n, d)).astype(dtype) / 2
    k = rng.integers(-3, 4, (B, Hkv, n, d)).astype(dtype) / 2
    v = rng.integers(-3, 4, (B, Hkv, n, dv)).astype(dtype) / 4
    return q, k, v


def test_reference_equals_the_definition_exactly():
    q, k, v = small_problem()
    g = Fraction(7, 8)
    r = hla_oracle.reference(q, k, v, variant="hla2", gamma=g)
    assert r.out.shape == (1, 2, 6, 2) and r.den.shape == (1, 2, 6)
    assert r.bits == 0 and r.certified.all()  # small heads: exact rationals
    for h in range(2):  # GQA: both query heads use K/V head 0
        num, den = naive_hla2(q[0, h], k[0, 0], v[0, 0], g)
        assert [[float(x) for x in row] for row in num] == r.out[0, h].tolist()
        assert [float(x) for x in den] == r.den[0, h].tolist()
    assert (r.mag_num >= np.abs(r.out)).all() and (r.mag_den >= np.abs(r.den)).all()


def test_option_spellings_are_the_same_exact_values():
    q, k, v = small_problem(2)
    outs = [hla_oracle.reference(q, k, v, gamma=g, normalize="add", eps=e).out
            for g, e in [(Fraction(7, 8), Fraction(1, 1000)), ("7/8", "0.001"), ("0.875", "1/1000"), (0.875, Fraction(1, 1000))]]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    # A float is its exact binary value: 0.9 is not 9/10, and the reference knows it.
    a = hla_oracle.reference(q, k, v, gamma=0.9).out
    b = hla_oracle.reference(q, k, v, gamma="0.9").out
    assert not np.array_equal(a, b)


def test_layout_bthd_is_the_transpose():
    q, k, v = small_problem(3, B=2, H=2, Hkv=2)
    r = hla_oracle.reference(q, k, v, variant="ahla", gamma="1/2")
    t = lambda x: np.ascontiguousarray(np.swapaxes(x, 1, 2))
    rt = hla_oracle.reference(t(q), t(k), t(v), variant="ahla", gamma="1/2", layout="bthd")
    np.testing.assert_array_equal(rt.out, t(r.out))
    np.testing.assert_array_equal(rt.den, np.swapaxes(r.den, 1, 2))


def test_cu_seqlens_restart_every_sequence():
    q, k, v = small_problem(4, n=9)
    cu = np.array([0, 4, 9], dtype=np.int32)
    packed = hla_oracle.reference(q, k, v, variant="hla3", cu_seqlens=cu).out
    for t0, t1 in [(0, 4), (4, 9)]:
        alone = hla_oracle.reference(q[:, :, t0:t1], k[:, :, t0:t1], v[:, :, t0:t1], variant="hla3").out
        np.testing.assert_array_equal(packed[:, :, t0:t1], alone)


def test_bf16_as_bits_and_as_values():
    q, k, v = small_problem(5)  # halves and quarters: exact in bf16
    bits = [(x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16) for x in (q, k, v)]
    a = hla_oracle.reference(*bits, dtype="bf16", variant="la1")
    b = hla_oracle.reference(q, k, v, dtype="bf16", variant="la1")
    np.testing.assert_array_equal(a.out, b.out)
    with pytest.raises(ValueError, match="is not a bf16 value"):
        hla_oracle.reference(q + np.float32(1e-3), k, v, dtype="bf16")
    with pytest.raises(ValueError, match="give dtype='bf16'"):
        hla_oracle.reference(*bits)


def test_f16_and_f64_inputs():
    q, k, v = small_problem(6)
    for dt in (np.float16, np.float64):
        r = hla_oracle.reference(q.astype(dt), k.astype(dt), v.astype(dt), variant="la1")
        np.testing.assert_array_equal(r.out, hla_oracle.reference(q, k, v, variant="la1").out)


def test_clear_errors():
    q, k, v = small_problem(7)
    with pytest.raises(hla_oracle.InputError, match="variant"):
        hla_oracle.reference(q, k, v, variant="hla9")
    with pytest.raises(hla_oracle.InputError, match="number of tokens T"):
        hla_oracle.reference(q, k[:, :, :3], v, variant="la1")
    with pytest.raises(hla_oracle.InputError, match="gamma"):
        hla_oracle.reference(q, k, v, gamma=Fraction(3, 2))
    with pytest.raises(TypeError, match="initial_state must be a dict"):
        hla_oracle.reference(q, k, v, initial_state=np.zeros(3))
    with pytest.raises(hla_oracle.InputError, match="without 'initial_state.F'"):
        hla_oracle.reference(q, k, v, initial_state={"S": np.zeros((1, 2, 3, 3)), "f": np.zeros((1, 2, 3))})
    with pytest.raises(ValueError, match="expected a float array"):
        hla_oracle.reference(q.astype(np.int32), k, v)
    with pytest.raises(ValueError, match="layout"):
        hla_oracle.reference(q, k, v, layout="thd")
    with pytest.raises(hla_oracle.InputError, match="one dtype"):
        hla_oracle.reference(q, k.astype(np.float64), v)


def test_nan_reaches_only_later_outputs():
    q, k, v = small_problem(8, n=8)
    v = v.copy()
    v[0, 0, 5, 0] = np.nan
    r = hla_oracle.reference(q, k, v, variant="hla2")
    assert np.isfinite(r.out[:, :, :5]).all() and np.isnan(r.out[0, :, 5:, 0]).all()


def hla2_state(q, k, v, gamma, m):
    """The masked hla2 state after tokens [0, m) of every head (SPEC §3, the
    corrected-state form), exact: S, C, m, F, f as float64 arrays [1, H, ...]."""
    B, H, n, d = q.shape
    dv = v.shape[-1]
    out = {name: np.zeros(shape) for name, shape in
           (("S", (1, H, d, d)), ("C", (1, H, d, dv)), ("m", (1, H, d)), ("F", (1, H, d, dv)), ("f", (1, H, d)))}
    g = float(gamma)
    for h in range(H):
        kv = h * k.shape[1] // H
        S, C, F = np.zeros((d, d)), np.zeros((d, dv + 1)), np.zeros((d, dv + 1))
        for t in range(m):
            qt, kt = q[0, h, t].astype(np.float64), k[0, kv, t].astype(np.float64)
            vt = np.append(v[0, kv, t].astype(np.float64), 1.0)
            S = g * S + np.outer(kt, kt)
            C = g * C + np.outer(qt, vt)
            F = g * g * F + np.outer(S @ qt, vt)
        out["S"][0, h], out["C"][0, h], out["m"][0, h] = S, C[:, :dv], C[:, dv]
        out["F"][0, h], out["f"][0, h] = F[:, :dv], F[:, dv]
    return out


def test_initial_state_continues_the_sequence():
    """The reference of tokens [m, n) from the state after [0, m) equals the
    one-pass reference's rows (small dyadic inputs: the state is exact in
    float64), and a kernel that continues from the state passes check."""
    q, k, v = small_problem(5, n=9)
    g, m = Fraction(1, 2), 4
    whole = hla_oracle.reference(q, k, v, variant="hla2", gamma=g, normalize="add")
    st = hla2_state(q, k, v, g, m)
    part = hla_oracle.reference(q[:, :, m:], k[:, :, m:], v[:, :, m:], variant="hla2", gamma=g, normalize="add",
                                initial_state=st)
    np.testing.assert_array_equal(part.out, whole.out[:, :, m:])
    np.testing.assert_array_equal(part.den, whole.den[:, :, m:])
    # C and m are optional for masked hla2 without ridge (no output reads them).
    lean = {name: st[name] for name in ("S", "F", "f")}
    np.testing.assert_array_equal(hla_oracle.reference(q[:, :, m:], k[:, :, m:], v[:, :, m:], variant="hla2", gamma=g,
                                                       initial_state=lean).num, part.num)
    # check(): our rows pass from the state; the same rows judged without it fail.
    r = hla_oracle.check(whole.out[:, :, m:].astype(np.float32), q[:, :, m:], k[:, :, m:], v[:, :, m:], variant="hla2",
                         gamma=g, normalize="add", initial_state=st)
    assert r.passed, r.text
    alone = hla_oracle.reference(q[:, :, m:], k[:, :, m:], v[:, :, m:], variant="hla2", gamma=g, normalize="add")
    r = hla_oracle.check(alone.out.astype(np.float32), q[:, :, m:], k[:, :, m:], v[:, :, m:], variant="hla2", gamma=g,
                         normalize="add", initial_state=st)
    assert not r.passed, r.text
