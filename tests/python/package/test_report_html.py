"""Report.html(path), Report.hints (issue 32) and Report.diagnosis (issue
40): the page of a failing kernel's report, written atomically; hints and the
known mistake for a planted bug, none for a correct kernel."""
import os

import numpy as np
import pytest

import hla_oracle
from kernels import kernel
from test_check import inputs, options, OPTS


def test_failing_report_as_a_page(tmp_path):
    q, k, v = inputs(1, H=2, n=64)
    out, den = kernel(q, k, v, options())
    out = out.copy()
    out[:, :, 16::16, :] *= 1.01  # wrong at every 16th token: a chunk-boundary bug
    r = hla_oracle.check(out, q, k, v, **OPTS, precision="f32", den=den)
    assert not r.passed
    assert any("out: periodic at width 16" in h for h in r.hints), r.hints
    assert "hint: out: periodic at width 16" in r.text
    path = r.html(tmp_path / "r.html")
    page = path.read_text(encoding="utf-8")
    assert 'data-verdict="FAIL"' in page and "<script" not in page
    assert page.count('class="cell"') == 2 * 2 * 64  # out and den: 2 heads × 64 blocks of one token
    assert "periodic at width 16" in page
    assert r.html(tmp_path / "again.html").read_bytes() == path.read_bytes()  # same report, same bytes
    assert sorted(os.listdir(tmp_path)) == ["again.html", "r.html"]


def test_missing_scale_is_diagnosed(tmp_path):
    q, k, v = inputs(4, H=2, n=48)
    out, den = kernel(q, k, v, options(scale=0.5), bug="no_scale")
    r = hla_oracle.check(out, q, k, v, **OPTS, scale=0.5, precision="f32", den=den)
    assert not r.passed
    assert [d["id"] for d in r.diagnosis][:1] == ["scale_missing"], r.diagnosis
    assert r.diagnosis[0]["fraction"] >= 0.9 and "scale" in r.diagnosis[0]["fix"]
    assert "diagnosis: matches scale_missing" in r.text
    assert 'data-id="scale_missing"' in r.html(tmp_path / "r.html").read_text(encoding="utf-8")


def test_correct_kernel_has_no_hint(tmp_path):
    q, k, v = inputs(2)
    out, den = kernel(q, k, v, options())
    r = hla_oracle.check(out, q, k, v, **OPTS, precision="f32", den=den)
    assert r.passed and r.hints == [] and r.diagnosis == [] and "hint" not in r.text
    assert 'data-verdict="PASS"' in r.html(tmp_path / "ok.html").read_text(encoding="utf-8")


def test_unwritable_path_is_an_input_error(tmp_path):
    q, k, v = inputs(3)
    out, den = kernel(q, k, v, options())
    r = hla_oracle.check(out, q, k, v, **OPTS, precision="f32", den=den)
    with pytest.raises(hla_oracle.InputError, match="missing"):
        r.html(tmp_path / "missing" / "r.html")
    with pytest.raises(ValueError):
        hla_oracle.Report(r.text, '{"pass": true, "hints": []}').html(tmp_path / "x.html")
    assert os.listdir(tmp_path) == []


def test_fixture_check_report_has_a_page(tmp_path):
    fx = hla_oracle.load_fixture(hla_oracle.golden_fixtures(hla_oracle.Support(variants=["hla2"], dtypes=["f32"]))[0])
    r = fx.check(np.zeros(fx.ref_out.shape, dtype=np.float32), precision="f32")
    assert not r.passed
    assert 'data-verdict="FAIL"' in r.html(tmp_path / "f.html").read_text(encoding="utf-8")
