"""hla_oracle.check(..., do=, dq=, dk=, dv=) at a moderately large shape, no
files: B=1, H=2, T=1024, d=dv=64, bf16 inputs, f32 compute. The kernel is
torch_hla2 (a chunked hla2 written for these tests, torch.autograd for its
backward): it passes; the same with one dq element 0.1% off fails on dq alone.
Torch tensors in FLA's [B,T,H,D] and numpy arrays in [B,H,T,D] both go in."""
import os
from fractions import Fraction

import numpy as np
import pytest

import hla_oracle

try:
    import torch
except ImportError:  # ctest's venv has torch; elsewhere the test is skipped unless HLA_REQUIRE_TORCH is set
    if os.environ.get("HLA_REQUIRE_TORCH"):
        raise
    pytest.skip("torch is not installed", allow_module_level=True)

import torch_hla2  # noqa: E402

GAMMA = Fraction(255, 256)  # a float32 value: the kernel's γ is the problem's exactly
OPTS = dict(variant="hla2", gamma=GAMMA, precision="f32")


def naive(q, k, v, gamma):
    """SPEC §2 for one small head in float64: Σ_{i ≤ j ≤ t} γ^{2t−i−j} a_ti a_ji v_j."""
    n = q.shape[0]
    a = q @ k.T
    t, j, i = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
    w = np.where((i <= j) & (j <= t), gamma ** (2 * t - i - j), 0.0) * a[t, i] * a[j, i]
    return w.sum(axis=2) @ v


def test_the_torch_kernel_is_hla2():
    # The test kernel itself against the definition (chunks of 8 over 21 tokens: a ragged last chunk, GQA).
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((1, 2, 21, 4)), rng.standard_normal((1, 1, 21, 4)), rng.standard_normal((1, 1, 21, 3))
    out = torch_hla2.hla2(*(torch.from_numpy(x) for x in (q, k, v)), 0.75, chunk=8).numpy()
    for h in range(2):
        np.testing.assert_allclose(out[0, h], naive(q[0, h], k[0, 0], v[0, 0], 0.75), rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def problem():
    g = torch.Generator().manual_seed(7)
    B, H, T, d = 1, 2, 1024, 64
    q, k, v, do = (torch.randn(B, T, H, d, generator=g).to(torch.bfloat16) for _ in range(4))  # FLA layout
    out, dq, dk, dv = torch_hla2.forward_backward(q, k, v, do, float(GAMMA), layout="bthd")
    return q, k, v, do, out, dq, dk, dv


def rows(report):
    """{tensor: line} of the report's gradient rows."""
    return {line.split(":")[0].strip(): line for line in report.text.splitlines() if line.strip().startswith(("dq:", "dk:", "dv:"))}


def test_autograd_backward_passes(problem):
    q, k, v, do, out, dq, dk, dv = problem
    r = hla_oracle.check(out, q, k, v, do=do, dq=dq, dk=dk, dv=dv, layout="bthd", **OPTS)
    assert r.passed, r.text
    assert set(rows(r)) == {"dq", "dk", "dv"} and all(": ok" in line for line in rows(r).values()), r.text


def test_a_planted_dq_error_fails_on_dq(problem):
    # numpy arrays in [B,H,T,D] this time: bf16 inputs as uint16 bit patterns, do in float32 (bf16 values).
    q, k, v, do, out, dq, dk, dv = problem
    bhtd = lambda x: np.ascontiguousarray(x.transpose(1, 2).numpy())  # noqa: E731
    bits = lambda x: np.ascontiguousarray(x.transpose(1, 2).contiguous().view(torch.int16).numpy().view(np.uint16))  # noqa: E731
    bad = bhtd(dq)
    at = np.unravel_index(np.argmax(np.abs(bad)), bad.shape)
    bad[at] *= 1.001  # rule 3 (f32 compute, unnormalized) catches it by far: ratio ~650, limit 4
    r = hla_oracle.check(bhtd(out), bits(q), bits(k), bits(v), dtype="bf16", do=bhtd(do.float()), dq=bad, dk=bhtd(dk), dv=bhtd(dv), **OPTS)
    assert not r.passed, r.text
    line = rows(r)
    assert "FAIL" in line["dq"] and ": ok" in line["dk"] and ": ok" in line["dv"], r.text
