"""Fixture files from Python: load_fixture, Fixture.check, save_candidate,
golden_fixtures (the same selection as `hla select`)."""
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import hla_oracle
from hla_oracle import Support

GOLDEN_HLA2 = "hla2-add-f32-gaussian-n37-d8-B1H2K1.safetensors"


def test_golden_dir_holds_the_golden_set(repo):
    # The source tree's fixtures/ (build tree) or the copy installed with the package: the same files.
    mine = {p.name: p.read_bytes() for p in map(Path, hla_oracle.golden_fixtures())}
    theirs = {p.name: p.read_bytes() for p in (repo / "fixtures").glob("*.safetensors")}
    assert len(mine) > 100 and mine == theirs


def test_load_fixture_and_check_its_own_reference():
    f = hla_oracle.load_fixture(hla_oracle.golden_dir() / GOLDEN_HLA2)
    assert f.options["variant"] == "hla2" and f.options["normalize"] == "add" and f.dtype == "f32"
    assert f.q.dtype == np.float32 and f.q.shape == (1, 2, 37, 8) and f.k.shape == (1, 1, 37, 8)
    assert f.shape == {"B": 1, "H": 2, "Hkv": 1, "n": 37, "d": 8, "dv": 4}
    assert "normalize" in f.features and "gqa" in f.features
    # The reference rounded to f32 passes (one rounding); the reference shifted by 1% fails.
    r = f.check(f.ref_out.astype(np.float32), precision="f32")
    assert r.passed, r.text
    assert "hla check" in r.text and GOLDEN_HLA2 in r.text
    r = f.check((f.ref_out * 1.01).astype(np.float32), precision="f32")
    assert not r.passed and r.worst


def test_fixture_check_agrees_with_the_cli(tmp_path, hla_tool):
    f = hla_oracle.load_fixture(hla_oracle.golden_dir() / GOLDEN_HLA2)
    bad = f.ref_out.astype(np.float32)
    bad[0, 1, 20, 3] += 0.5
    cand = tmp_path / "cand.safetensors"
    hla_oracle.save_candidate(cand, bad, fixture=f)
    assert load_file(str(cand))["out"].dtype == np.float32
    p = subprocess.run([hla_tool, "check", f.path, str(cand), "--precision", "f32"], capture_output=True, text=True)
    r = f.check(bad, precision="f32")
    assert p.returncode == 1 and not r.passed
    assert r.worst[0]["token"] == 20 and r.worst[0]["column"] == 3


def test_save_candidate_without_fixture_bf16_and_layout(tmp_path):
    out = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)  # [B,T,H,dv]
    bits = (out.view(np.uint32) >> 16).astype(np.uint16)  # small integers: exact in bf16
    path = tmp_path / "c.safetensors"
    hla_oracle.save_candidate(path, bits, out_dtype="bf16", layout="bthd")
    from safetensors import safe_open
    with safe_open(str(path), framework="numpy") as fh:
        assert fh.keys() == ["out"]
    hla_oracle.save_candidate(path, out, den=np.ones((2, 3, 4)), layout="bthd")
    back = load_file(str(path))
    np.testing.assert_array_equal(back["out"], np.swapaxes(out, 1, 2))
    assert back["den"].shape == (2, 4, 3)


def test_golden_fixtures_is_hla_select(hla_tool):
    support = Support(variants=["hla2", "la1"], dtypes=["f32", "bf16"], features=["decay", "normalize"], d=[8], dv=[4, 8])
    mine = hla_oracle.golden_fixtures(support)
    p = subprocess.run([hla_tool, "select", str(hla_oracle.golden_dir()), "--variants", "hla2,la1", "--dtypes", "f32,bf16",
                        "--features", "decay,normalize", "--d", "8", "--dv", "4,8"], capture_output=True, text=True, check=True)
    assert mine == p.stdout.split() and 0 < len(mine) < len(hla_oracle.golden_fixtures())
    dv_d = hla_oracle.golden_fixtures(Support(variants=["hla2"], dtypes=["f32"], features="all", dv="d", n_multiple=8))
    for path in dv_d:
        f = hla_oracle.load_fixture(path)
        assert f.shape["dv"] == f.shape["d"] and f.shape["n"] % 8 == 0


def test_damaged_fixture_is_refused(tmp_path):
    src = hla_oracle.golden_dir() / GOLDEN_HLA2
    data = bytearray(src.read_bytes())
    data[-3] ^= 0x40
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(hla_oracle.InputError, match="digest"):
        hla_oracle.load_fixture(bad)
