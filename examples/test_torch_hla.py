"""The PyTorch example (torch_hla.py) tested as a kernel's own tests would:
with the pytest plugin on the golden fixtures inside its support, and fuzzed
with hla_oracle.fuzz (FLA layout, torch tensors, state handed over, packed
sequences). Run by ctest `example_torch_hla` (needs torch in .venv: scripts/setup.sh).

    PYTHONPATH=build/python .venv/bin/python -m pytest examples/test_torch_hla.py
"""
import os
from fractions import Fraction
import sys
from pathlib import Path

import pytest

try:
    import torch
except ImportError:  # ctest sets HLA_REQUIRE_TORCH: there a missing torch fails, it is not skipped
    if os.environ.get("HLA_REQUIRE_TORCH"):
        raise ImportError("the PyTorch example needs torch in .venv: run scripts/setup.sh") from None
    pytest.skip("the PyTorch example needs torch (scripts/setup.sh installs it)", allow_module_level=True)

import hla_oracle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_hla import chunk_hla2, fused_recurrent_hla2  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FORMS = {"recurrent": fused_recurrent_hla2, "chunk": chunk_hla2}
PRECISION = {"bf16": "f32", "f16": "f32", "f32": "f32", "f64": "f64"}
FEATURES = ["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den"]


def run(form, q, k, v, o):
    """fn(q, k, v, options) for hla_oracle.fuzz and the golden fixtures: (out, den, final state)."""
    return FORMS[form](q, k, v, gamma=o.gamma, scale=o.scale, initial_state=getattr(o, "initial_state", None),
                       output_final_state=getattr(o, "want_state", False), cu_seqlens=o.cu_seqlens, normalize=o.normalize,
                       eps=o.eps, return_den=True)


class FixtureOptions:
    """A golden fixture's options as the fuzzer's CaseOptions carry them."""
    def __init__(self, fx):
        kw = fx.kwargs
        self.gamma, self.scale, self.eps = float(kw["gamma"]), float(kw["scale"]), float(kw["eps"])
        self.normalize = kw["normalize"]
        self.cu_seqlens = None if fx.cu_seqlens is None else torch.from_numpy(fx.cu_seqlens)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.hla_golden(variants=["hla2"], dtypes=["f64", "f32", "bf16", "f16"], features=FEATURES, precision=PRECISION)
def test_golden(form, hla_fixture):
    q, k, v = hla_fixture.inputs(layout="bthd", framework="torch")
    out, den, _ = run(form, q, k, v, FixtureOptions(hla_fixture))
    hla_fixture.assert_passes(out, den, layout="bthd")


@pytest.mark.parametrize("form", FORMS)
def test_fuzz(form, tmp_path):
    support = hla_oracle.Support(variants=["hla2"], dtypes=["f64", "f32", "bf16", "f16"], features=FEATURES + ["state"],
                                 max_n=64, precision=PRECISION)
    findings = Path(os.environ.get("HLA_EXAMPLE_FINDINGS", tmp_path)) / form
    r = hla_oracle.fuzz(lambda q, k, v, o: run(form, q, k, v, o), support, max_cases=150, seed=1, layout="bthd",
                        framework="torch", findings=findings, progress=False)
    print(r.text)
    assert r.ok, r.text
    assert r.probes.get("state_continuation", 0) > 0 and r.probes.get("nan_causality", 0) > 0


@pytest.mark.parametrize("form", FORMS)
def test_state_handed_to_the_reference(form):
    """The kernel's own final state after a prefix, handed to hla_oracle as
    initial_state (its (S, F, f) are SPEC §3's corrected-state parts): the
    rest of the sequence, computed from that state, passes; computed from
    zero (the state dropped), it fails. bf16 inputs, GQA, several sequences."""
    g = torch.Generator().manual_seed(3)
    B, T, H, Hkv, d, dv, m = 2, 320, 4, 2, 32, 32, 128
    q, k, v = (torch.randn(B, T, h, w, generator=g).to(torch.bfloat16) for h, w in ((H, d), (Hkv, d), (Hkv, dv)))
    opts = dict(gamma=63 / 64, normalize="add", eps=1e-6)
    _, st = FORMS[form](q[:, :m], k[:, :m], v[:, :m], output_final_state=True, **opts)
    state = {"S": st[0], "F": st[1], "f": st[2]}
    rest = [x[:, m:] for x in (q, k, v)]
    out, _ = FORMS[form](*rest, initial_state=st, **opts)
    ask = dict(variant="hla2", gamma=Fraction(63, 64), normalize="add", eps=1e-6, layout="bthd", precision="f32")
    r = hla_oracle.check(out, *rest, initial_state=state, **ask)
    assert r.passed, r.text
    dropped, _ = FORMS[form](*rest, **opts)
    r = hla_oracle.check(dropped, *rest, initial_state=state, **ask)
    assert not r.passed, r.text


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.hla_golden(variants=["hla2"], dtypes=["f64", "f32", "bf16", "f16"], features=FEATURES, precision=PRECISION,
                        gradients=True)
def test_golden_backward(form, hla_fixture):
    """torch.autograd through each form, on the golden gradient fixtures: dq, dk, dv for the fixture's upstream."""
    q, k, v = (x.requires_grad_() for x in hla_fixture.inputs(layout="bthd", framework="torch"))
    do, dden = hla_fixture.upstream(layout="bthd", framework="torch")
    out, den, _ = run(form, q, k, v, FixtureOptions(hla_fixture))
    torch.autograd.backward([out, den] if dden is not None else [out],
                            [do.to(out.dtype), dden.to(den.dtype)] if dden is not None else [do.to(out.dtype)])
    hla_fixture.assert_passes(out.detach(), den.detach(), layout="bthd", dq=q.grad, dk=k.grad, dv=v.grad)


@pytest.mark.parametrize("form", FORMS)
def test_fuzz_backward(form, tmp_path):
    """The same forms' autograd backward fuzzed (hla_oracle.fuzz(..., backward="autograd")). The recurrent
    form's is clean. The chunk form's is right on finite upstreams, but autograd through its masked matrix
    products (Γ ⊙ QKᵀ, Wᵀ·dnum) multiplies masked entries by a NaN of do: a NaN at token j reaches dq, dk, dv of
    later tokens of its chunk (SPEC §9's rule forbids it; the forward avoids the same leak by running a chunk
    with a non-finite input token by token, which autograd cannot do for the upstream). The fuzzer reports
    exactly that, and nothing else."""
    support = hla_oracle.Support(variants=["hla2"], dtypes=["f64", "f32", "bf16"], features=FEATURES, max_n=48,
                                 precision=PRECISION)
    findings = Path(os.environ.get("HLA_EXAMPLE_FINDINGS", tmp_path)) / (form + "-backward")
    r = hla_oracle.fuzz(lambda q, k, v, o: run(form, q, k, v, o), support, max_cases=80, seed=2, layout="bthd",
                        framework="torch", findings=findings, progress=False, backward="autograd")
    print(r.text)
    assert r.probes.get("gradients", 0) > 5 and r.probes.get("grad_nan_causality", 0) > 0, r.probes
    if form == "recurrent":
        assert r.ok, r.text
    else:
        assert r.findings and set(r.by_kind) == {"gradient_nan_causality"}, r.text
        for f in r.findings:  # shrunk to two tokens: the NaN at token 0, its leak at token 1
            assert " n=2 " in f["shrunk"] and "token 1" in f["message"], f


@pytest.mark.parametrize("form", FORMS)
def test_state_gradient(form):
    """The gradient of the initial state: torch.autograd through each form from a state (S, F, f: SPEC §3's
    corrected-state parts, the §8 parts), judged with hla_oracle.check(..., dstate=) together with dq, dk, dv;
    a dropped state gradient (zeros) fails on its rows."""
    g = torch.Generator().manual_seed(5)
    B, T, H, Hkv, d, dv, m = 1, 40, 2, 1, 8, 8, 16
    q, k, v = (torch.randn(B, T, h, w, generator=g) for h, w in ((H, d), (Hkv, d), (Hkv, dv)))
    _, st = FORMS[form](q[:, :m], k[:, :m], v[:, :m], gamma=0.9, output_final_state=True)
    st = tuple(x.detach().clone().requires_grad_() for x in st)
    rest = [x[:, m:].clone().requires_grad_() for x in (q, k, v)]
    out, _ = FORMS[form](*rest, gamma=0.9, initial_state=st)
    do = torch.randn(out.shape, generator=g)
    out.backward(do)
    state = {"S": st[0].detach(), "F": st[1].detach(), "f": st[2].detach()}
    # f feeds only den, which this loss (no normalize, no dden) does not read: autograd leaves its gradient None.
    dstate = {p: torch.zeros_like(x) if x.grad is None else x.grad for p, x in zip(("S", "F", "f"), st)}
    ask = dict(variant="hla2", gamma=0.9, layout="bthd", precision="f32", initial_state=state, do=do,
               dq=rest[0].grad, dk=rest[1].grad, dv=rest[2].grad)
    qkv = [x.detach() for x in rest]
    r = hla_oracle.check(out.detach(), *qkv, dstate=dstate, **ask)
    assert r.passed, r.text
    assert all(f"dstate.{p}: ok" in r.text for p in ("S", "F", "f")), r.text
    r = hla_oracle.check(out.detach(), *qkv, dstate={p: torch.zeros_like(x) for p, x in dstate.items()}, **ask)
    assert not r.passed and "dstate.F: FAIL" in r.text, r.text
