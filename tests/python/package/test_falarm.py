"""No false alarms (issue 29): correct, independently written backwards fuzzed
with hla_oracle.fuzz(..., backward=) must get no finding, and the same
campaigns must catch a planted backward bug — so that the gradient judge can
neither flag honest kernels nor pass everything. The kernels and the long
campaigns (2,000 cases each) are in tests/falarm/ (README.md there).

  adjoint_*      numpy streaming forwards with hand-derived adjoint backwards (la1, hla2, ahla)
  paper_state    torch.autograd through hla2's S·C − G paper state, declared state_difference
  example        torch.autograd through examples/torch_hla.py's recurrent form (bf16/f16 inputs, f32 compute)
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "falarm"))
import adjoint_np  # noqa: E402
import analyze_findings  # noqa: E402
import falarm_kernels as falarm  # noqa: E402

import hla_oracle  # noqa: E402

MAX_N = 64


def _campaign(name, cases, seed, tmp_path, backward=None, stop_after=0, fn=None):
    k = falarm.kernels()[name]
    sup = hla_oracle.Support(**dict(k.support, max_n=MAX_N, name=f"falarm {name}"))
    seen = []
    bwd = backward or (hla_oracle.autograd_backward(k.fn) if k.backward == "autograd" else k.backward)

    def recorded(q, k_, v, do, dden, o):
        seen.append((o.normalize != "none", o.dtype, o.masked))
        return bwd(q, k_, v, do, dden, o)
    r = hla_oracle.fuzz(fn or k.fn, sup, max_cases=cases, seed=seed, layout=k.layout, framework=k.framework,
                        findings=tmp_path / name, progress=False, stop_after=stop_after, shrink_attempts=60,
                        backward=recorded)
    return r, seen


def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    torch.set_num_threads(1)


# (kernel, cases, seed): seeds chosen so that each campaign holds normalized and raw gradient cases in f32 compute.
CLEAN = [("adjoint_la1", 50, 3), ("adjoint_hla2", 50, 3), ("adjoint_ahla", 50, 3), ("paper_state", 40, 3),
         ("example_recurrent", 40, 3)]


@pytest.mark.parametrize("name,cases,seed", CLEAN, ids=[c[0] for c in CLEAN])
def test_correct_backward_has_no_finding(name, cases, seed, tmp_path):
    if name in ("paper_state", "example_recurrent"):
        _torch()
    r, seen = _campaign(name, cases, seed, tmp_path)
    assert r.ok, r.text
    assert r.probes.get("gradients", 0) >= 8 and r.probes.get("grad_nan_causality", 0) >= 1, r.probes
    f32 = [s for s in seen if s[1] != "f64"]
    assert any(s[0] for s in f32) and any(not s[0] for s in f32), seen  # rule 3 with and without normalize


def test_planted_backward_bugs_are_found(tmp_path):
    """The same campaigns fail a wrong backward whose forward is right (seed as above, first finding)."""
    cases = [("adjoint_hla2", lambda *a: adjoint_np.backward(*a, bug="dk_one_sided"), "gradient"),
             ("adjoint_la1", lambda *a: adjoint_np.backward(*a, bug="quotient_dropped"), "gradient")]
    for name, bwd, kind in cases:
        r, _ = _campaign(name, 40, 3, tmp_path / "bug", backward=bwd, stop_after=1)
        assert r.findings and r.findings[0]["kind"] == kind, (name, r.text)


def test_planted_autograd_bug_is_found(tmp_path):
    _torch()
    import paper_state_torch

    def wrong(q, k, v, o):
        return paper_state_torch.hla2_paper_state(q, k, v, o, bug="G_k_detached")
    r, _ = _campaign("paper_state", 30, 3, tmp_path, fn=wrong, backward=hla_oracle.autograd_backward(wrong), stop_after=1)
    assert r.findings and r.findings[0]["kind"] == "gradient", r.text


FALSE_ALARMS = sorted((Path(__file__).resolve().parents[2] / "falarm" / "false_alarms").glob("*.safetensors"))


@pytest.mark.parametrize("path", FALSE_ALARMS, ids=[p.stem for p in FALSE_ALARMS])
def test_known_false_alarm(path):
    """Shrunk findings of the 2,000-case campaign (seed 1) on the correct paper_state kernel: rule 3 fails its dk
    against our masked-class backward orders, which have no state-difference form (tests/falarm/README.md). The
    control: the same kernel in float64 is within a few 2^-53·M* of the reference, and the masked numpy adjoint passes in the same
    precision. Fixed by our own subtracting backward (hla2's paper state, S·C − G) among rule 3's
    orders for the state-difference class: now a regression test."""
    _torch()
    fx = hla_oracle.load_fixture(path)
    kern = falarm.kernels()["paper_state"]
    prec = kern.support["precision"][fx.dtype]
    q, k, v = fx.inputs()
    do, dden = fx.upstream()
    o = analyze_findings.options_of(fx, fx.dtype, fx.cu_seqlens)
    a64 = [None if x is None else x.astype("float64") for x in (q, k, v, do, dden)]
    out, den, dq, dk, dv = analyze_findings.run(kern, *a64, analyze_findings.options_of(fx, "f64", fx.cu_seqlens), "torch")
    r = fx.check(out, den, precision="f64", form_class="state_difference", dq=dq, dk=dk, dv=dv).json()
    for g in r["gradients"]:  # scores in units of 2^-53·M*: a few roundings (the a priori bound is 78-356 here)
        assert g["checked"] and g["nonfinite"] == 0 and g["max_score"] <= 10, g
    ct = "float64" if prec == "f64" else "float32"
    a = [None if x is None else x.astype(ct) for x in (q, k, v, do, dden)]
    out, den = adjoint_np.forward(*a[:3], o)
    dq, dk, dv = adjoint_np.backward(*a, o)
    r = fx.check(out, den, precision=prec, form_class="state_difference", dq=dq, dk=dk, dv=dv)
    assert r.passed, r.text
    out, den, dq, dk, dv = analyze_findings.run(kern, q, k, v, do, dden, o, "torch")
    r = fx.check(out, den, precision=prec, form_class="state_difference", dq=dq, dk=dk, dv=dv)
    assert r.passed, r.text  # fixed by our own state-difference backward among rule 3's orders
