"""Gradients from Python (SPEC §9): hla_oracle.check(..., do=, dq=, dk=, dv=),
gradient fixtures (upstream(), check(dq=...), save_candidate(dq=...)) and
hla_oracle.fuzz(fn, backward=...). The backward under test is the bug zoo's
independent numpy la1 backward (tests/zoo/exec/backward.py), with its planted
bug (dk, dv not summed over a GQA group)."""
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import hla_oracle
from hla_oracle import Support
from kernels import PRECISION, fixture_options, kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "zoo" / "exec"))
import backward  # noqa: E402

LA1 = Support(variants=["la1"], dtypes=["f32", "f64", "bf16", "f16"],
              features=["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den"], max_n=48, precision=PRECISION)


def grads_of(q, k, v, do, dden, o, bug=None):
    """fuzz's backward(q, k, v, do, dden, options) -> (dq, dk, dv) from the zoo's la1 backward."""
    f64 = [None if x is None else np.asarray(x, dtype=np.float64) for x in (q, k, v, do, dden)]
    with np.errstate(all="ignore"):
        return backward.la1_gradients(*f64, o.gamma, o.scale, o.normalize != "none", o.normalize, o.eps,
                                       o.cu_seqlens, bug)


def problem(seed=1, B=1, H=4, Hkv=2, n=24, d=4, dv=3):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((B, H, n, d)), rng.standard_normal((B, Hkv, n, d))
    v, do, dden = rng.standard_normal((B, Hkv, n, dv)), rng.standard_normal((B, H, n, dv)), rng.standard_normal((B, H, n))
    return q, k, v, do, dden


OPTS = dict(variant="la1", gamma=Fraction(7, 8), normalize="add", eps=Fraction(1, 1000), scale=Fraction(1, 2))


def options():
    from types import SimpleNamespace
    return SimpleNamespace(gamma=7 / 8, scale=0.5, normalize="add", eps=1e-3, cu_seqlens=None, variant="la1")


def test_check_judges_gradients():
    q, k, v, do, dden = problem()
    out, den = kernel(q, k, v, options())
    dq, dk, dv = grads_of(q, k, v, do, dden, options())
    r = hla_oracle.check(out, q, k, v, den=den, do=do, dden=dden, dq=dq, dk=dk, dv=dv, **OPTS)
    assert r.passed, r.text
    for name in ("dq", "dk", "dv"):
        assert any(line.strip().startswith(name) for line in r.text.splitlines()), r.text
    # dk, dv of a kv head from one query head only: the report fails, naming them.
    dq, dk, dv = grads_of(q, k, v, do, dden, options(), bug="gqa_unsummed")
    r = hla_oracle.check(out, q, k, v, den=den, do=do, dden=dden, dq=dq, dk=dk, dv=dv, **OPTS)
    assert not r.passed
    failing = {line.split()[0].rstrip(":") for line in r.text.splitlines() if line.strip().startswith(("dq", "dk", "dv")) and "FAIL" in line}
    assert failing == {"dk", "dv"}, r.text
    # A gradient for another upstream (dden dropped from the loss) fails too.
    dq, dk, dv = grads_of(q, k, v, do, None, options())
    assert not hla_oracle.check(out, q, k, v, den=den, do=do, dden=dden, dq=dq, dk=dk, dv=dv, **OPTS).passed


def test_check_gradients_in_fla_layout():
    q, k, v, do, dden = problem(seed=2, n=16)
    out, den = kernel(q, k, v, options())
    dq, dk, dv = grads_of(q, k, v, do, None, options())
    t = lambda x: np.ascontiguousarray(np.swapaxes(x, 1, 2))  # noqa: E731
    r = hla_oracle.check(t(out), t(q), t(k), t(v), do=t(do), dq=t(dq), dk=t(dk), dv=t(dv), layout="bthd", **OPTS)
    assert r.passed, r.text


def test_gradient_arguments_are_checked():
    q, k, v, do, dden = problem(n=8)
    out, den = kernel(q, k, v, options())
    dq, dk, dv = grads_of(q, k, v, do, dden, options())
    with pytest.raises(ValueError, match="upstream do"):
        hla_oracle.check(out, q, k, v, dq=dq, **OPTS)
    with pytest.raises(ValueError, match="none of dq"):
        hla_oracle.check(out, q, k, v, do=do, **OPTS)
    with pytest.raises(ValueError, match="dden= needs do="):
        hla_oracle.check(out, q, k, v, dden=dden, dq=dq, **OPTS)
    with pytest.raises(ValueError, match="dk has shape"):
        hla_oracle.check(out, q, k, v, do=do, dq=dq, dk=dq, **OPTS)  # [B,H,n,d] where [B,Hkv,n,d] belongs
    with pytest.raises(ValueError, match="not representable in f32"):  # the upstream is an input: in the inputs' dtype
        hla_oracle.check(out, *(x.astype(np.float32) for x in (q, k, v)), do=do + 1e-12, dq=dq, **OPTS)


def test_gradient_fixture_from_python(tmp_path, hla_tool):
    path = hla_oracle.golden_dir() / "la1-add-f32-gaussian-n20-d8-B1H2K1-grad.safetensors"
    fx = hla_oracle.load_fixture(path)
    assert fx.gradients and fx.ref_dq is not None
    do, dden = fx.upstream()
    assert do.dtype == np.float32 and do.shape == fx.ref_out.shape
    q, k, v = fx.inputs()
    o = fixture_options(fx)
    out, den = kernel(q, k, v, o)
    dq, dk, dv = grads_of(q, k, v, do, dden, o)
    r = fx.check(out, den, precision="f32", dq=dq, dk=dk, dv=dv)
    assert r.passed, r.text
    cand = tmp_path / "c.safetensors"
    hla_oracle.save_candidate(cand, out, den, fixture=fx, dq=dq, dk=dk, dv=dv)
    p = subprocess.run([hla_tool, "check", str(path), str(cand), "--precision", "f32", "--require-grad"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    bad = grads_of(q, k, v, do, dden, o, bug="gqa_unsummed")
    assert not fx.check(out, den, precision="f32", dq=bad[0], dk=bad[1], dv=bad[2]).passed
    with pytest.raises(ValueError, match="need fixture="):
        hla_oracle.save_candidate(tmp_path / "d.safetensors", out, den, dq=dq)
    plain = hla_oracle.load_fixture(hla_oracle.golden_dir() / "la1-raw-f32-small_int-n20-d8-B1H2K1.safetensors")
    with pytest.raises(ValueError, match="carries no gradients"):
        plain.upstream()


def test_fuzz_judges_a_backward(tmp_path, hla_tool):
    r = hla_oracle.fuzz(kernel, LA1, max_cases=120, seed=4, findings=tmp_path / "ok", progress=False,
                        backward=grads_of)
    assert r.ok, r.text
    assert r.probes.get("gradients", 0) > 10 and r.probes.get("grad_nan_causality", 0) > 0, r.probes
    assert "backward=grads_of" in r.text
    bug = lambda *a: grads_of(*a, bug="gqa_unsummed")  # noqa: E731
    r = hla_oracle.fuzz(kernel, LA1, max_cases=120, seed=4, findings=tmp_path / "bug", stop_after=1, progress=False,
                        backward=bug)
    assert not r.ok and r.findings[0]["kind"] == "gradient", r.text
    f = r.findings[0]
    assert "Hkv=1" in f["shrunk"] and f["shrink_steps"] > 0, f["shrunk"]
    p = subprocess.run([hla_tool, "check", f["fixture"], f["candidate"], "--precision", f["precision"], "--require-grad"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and any(line.strip().startswith(("dk", "dv")) and "FAIL" in line
                                     for line in p.stdout.splitlines()), p.stdout


def test_fuzz_backward_misuse(tmp_path):
    r = hla_oracle.fuzz(kernel, LA1, max_cases=40, seed=4, findings=tmp_path / "f", stop_after=1, progress=False,
                        backward=lambda *a: grads_of(*a)[:2])
    assert r.findings and r.findings[0]["kind"] == "bad_output" and "expected (dq, dk, dv)" in r.findings[0]["message"], r.text
    with pytest.raises(ValueError, match="autograd"):
        hla_oracle.fuzz(kernel, LA1, backward="autograd")  # numpy framework: no autograd
    with pytest.raises(TypeError, match="backward must be"):
        hla_oracle.fuzz(kernel, LA1, backward=3)
