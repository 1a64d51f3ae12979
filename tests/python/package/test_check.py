"""hla_oracle.check: the pass rule of `hla check` on arrays, with reports on
correct and wrong kernels."""
import json
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import hla_oracle
from kernels import kernel

OPTS = dict(variant="hla2", gamma="15/16")


def options(**kw):
    base = dict(variant="hla2", gamma=15 / 16, scale=1.0, normalize="none", eps=1e-6, cu_seqlens=None)
    base.update(kw)
    return SimpleNamespace(**base)


def inputs(seed=0, B=1, H=2, n=40, d=8, dv=4, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(dtype) for s in [(B, H, n, d), (B, H, n, d), (B, H, n, dv)])


def test_correct_kernel_passes_with_den():
    q, k, v = inputs()
    out, den = kernel(q, k, v, options())
    r = hla_oracle.check(out, q, k, v, **OPTS, precision="f32", den=den)
    assert r.passed, r.text
    assert r.verdict == "PASS" and not r.inconclusive and r.reasons == []
    assert r.json()["scored"] == out.size + den.size
    assert "hla_oracle.check: hla2" in r.text and "PASS" in r.text


@pytest.mark.parametrize("bug", ["strict_mask", "decay_once"])
def test_wrong_kernel_fails_with_a_report(bug, tmp_path, hla_tool):
    q, k, v = inputs(1)
    out, _ = kernel(q, k, v, options(), bug=bug)
    r = hla_oracle.check(out, q, k, v, **OPTS, precision="f32", dump=tmp_path / "failing")
    assert not r.passed and r.verdict == "FAIL"
    assert r.reasons and "worst elements" in r.text
    w = r.worst[0]
    assert set(w) >= {"batch", "head", "token", "column", "candidate", "reference", "score"}
    assert w["score"] > r.json()["bound"]
    # The dump reproduces with the CLI: same verdict (exit 1).
    assert "failing case written: hla check" in r.text
    fixture, candidate = tmp_path / "failing.safetensors", tmp_path / "failing.candidate.safetensors"
    p = subprocess.run([hla_tool, "check", str(fixture), str(candidate), "--precision", "f32"], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr


def test_declared_precision_decides():
    # An f32 computation stored in float64: passes declared f32, fails declared f64
    # (f32 rounding errors are far beyond the f64 bound; out's dtype allows only f64 rounding).
    q, k, v = inputs(2, dtype=np.float32)
    out, _ = kernel(q, k, v, options())
    out64 = out.astype(np.float64)
    assert hla_oracle.check(out64, q, k, v, **OPTS, precision="f32").passed
    r = hla_oracle.check(out64, q, k, v, **OPTS, precision="f64")
    assert not r.passed and r.json()["over_bound"] > 0, r.text
    # Per input dtype: the f32 entry applies to these f32 inputs.
    assert hla_oracle.check(out64, q, k, v, **OPTS, precision={"bf16": "f64", "f32": "f32"}).passed


def test_torch_tensors_and_layout(repo):
    torch = pytest.importorskip("torch")
    q, k, v = inputs(3)
    out, _ = kernel(q, k, v, options())
    t = lambda x: torch.from_numpy(np.ascontiguousarray(np.swapaxes(x, 1, 2)))
    r = hla_oracle.check(t(out), t(q), t(k), t(v), **OPTS, precision="f32", layout="bthd")
    assert r.passed, r.text
    r = hla_oracle.check(t(out).to(torch.bfloat16), t(q).to(torch.bfloat16), t(k).to(torch.bfloat16),
                         t(v).to(torch.bfloat16), **OPTS, precision="f32", layout="bthd")
    assert not r.passed  # the inputs were rounded to bf16 after the kernel ran on f32 ones


def test_shape_errors_name_the_problem():
    q, k, v = inputs(4)
    out, _ = kernel(q, k, v, options())
    with pytest.raises(hla_oracle.InputError, match=r"out has shape \[1, 2, 39, 4\]; expected \[1, 2, 40, 4\]"):
        hla_oracle.check(out[:, :, 1:], q, k, v, **OPTS)
    with pytest.raises(hla_oracle.InputError, match="form class|form_class|masked"):
        hla_oracle.check(out, q, k, v, **OPTS, form_class="sideways")
    with pytest.raises(hla_oracle.InputError, match="bad chunk width '0'.*1 <= W <= 65536"):
        hla_oracle.check(out, q, k, v, **OPTS, form_class="flat:0")
    with pytest.raises(hla_oracle.InputError, match="precision"):
        hla_oracle.check(out, q, k, v, **OPTS, precision="f24")


def test_report_json_is_the_cli_json(tmp_path, hla_tool):
    q, k, v = inputs(5)
    out, _ = kernel(q, k, v, options(), bug="decay_once")
    r = hla_oracle.check(out, q, k, v, **OPTS, precision="f32", dump=tmp_path / "c")
    p = subprocess.run([hla_tool, "check", str(tmp_path / "c.safetensors"), str(tmp_path / "c.candidate.safetensors"),
                        "--precision", "f32", "--json"], capture_output=True, text=True)
    cli = json.loads(p.stdout)
    mine = r.json()
    for key in ("pass", "max_score", "bound", "baseline_max_score", "scored", "over_bound", "worst"):
        assert mine[key] == cli[key], key


def flat_hla2(q, k, v):
    """hla2 masked, γ = 1, as a literal loop adds it: every term a_ti·a_ji·v_j into one f32 accumulator."""
    n = q.shape[0]
    A = q @ k.T
    out = np.zeros((n, v.shape[1]), np.float32)
    for t in range(n):
        c = np.array([A[t, i] * A[j, i] for j in range(t + 1) for i in range(j + 1)], np.float32)
        js = np.array([j for j in range(t + 1) for i in range(j + 1)])
        terms = np.vstack([np.zeros((1, v.shape[1]), np.float32), c[:, None] * v[js]])
        out[t] = np.cumsum(terms, axis=0, dtype=np.float32)[-1]  # sequential, as the loop adds them
    return out


def test_flat_kernel_fails_masked_with_a_python_hint_and_passes_flat():
    # Issue 37: a correct literal loop on a few repeated positive tokens with d = 1 exceeds the masked bound;
    # declared flat (its class) it passes, and the masked report names that class in Python syntax, with no
    # location hint ("grows with the token index") from its rounding profile.
    rng = np.random.default_rng(1)
    n = 160
    toks = np.abs(rng.standard_normal((3, 1)))
    q, k = (toks[rng.integers(0, 3, n)].astype(np.float32) for _ in range(2))
    v = np.abs(rng.standard_normal((n, 2))).astype(np.float32)
    out = flat_hla2(q, k, v)
    args = (out[None, None], q[None, None], k[None, None], v[None, None])
    masked = hla_oracle.check(*args, variant="hla2", precision="f32")
    assert not masked.passed
    assert 'hint: judged as form_class="flat"' in masked.text, masked.text
    assert "--form-class" not in masked.text and "grows with" not in masked.text, masked.text
    flat = hla_oracle.check(*args, variant="hla2", precision="f32", form_class="flat")
    assert flat.passed, flat.text
    assert "literal" in flat.text  # our flat orders set rule 3's bar


def test_flat_kernel_gradients_by_autograd_pass_as_flat():
    # The same literal loop in torch, differentiated by autograd: its dq, dk, dv pass in the flat class (rule 3's
    # bar there: our nested backward orders times the class's path ratio, no flat backward order of ours).
    torch = pytest.importorskip("torch")
    for seed in range(3):
        rng = np.random.default_rng(seed)
        n, d, gamma = 16, 1 + seed % 2, [1.0, 0.9, 0.5][seed]
        toks = np.abs(rng.standard_normal((3, d)))
        q, k = (torch.tensor(toks[rng.integers(0, 3, n)], dtype=torch.float32, requires_grad=True) for _ in range(2))
        v = torch.tensor(np.abs(rng.standard_normal((n, 2))), dtype=torch.float32, requires_grad=True)
        A, g = q @ k.T, torch.tensor(gamma)
        out = torch.stack([sum(((g ** (2 * t - i - j) * A[t, i] * A[j, i]) * v[j] for j in range(t + 1) for i in range(j + 1)),
                               torch.zeros(2)) for t in range(n)])
        do = torch.tensor(rng.standard_normal((n, 2)), dtype=torch.float32)
        (out * do).sum().backward()
        a = lambda x: x.detach().numpy()[None, None]
        r = hla_oracle.check(a(out), a(q), a(k), a(v), variant="hla2", gamma=gamma, precision="f32", form_class="flat",
                             do=a(do), dq=a(q.grad), dk=a(k.grad), dv=a(v.grad))
        assert r.passed, r.text
        assert all(g["checked"] and "longest path" in g["baseline_worst_form"] for g in r.json()["gradients"]), r.text
