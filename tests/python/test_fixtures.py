"""Fixture files read by a real third-party client: the PyPI `safetensors`
package and numpy, independent of the C++ reader.

Discovers every *.safetensors under fixtures/ (or $HLA_FIXTURES_DIR), so it
keeps working when the sample set is replaced by the golden one:
  - each file parses with safetensors and holds a well-formed fixture;
  - every MANIFEST.json matches the files' sha256 and size, and lists them all;
  - hla2 fixtures (small enough for a Python loop) are recomputed from their
    stored inputs and options with the naive definition (SPEC §2) in float64.
"""

import hashlib
import json
import os
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # hla_fixture_file, beside this file
import hla_fixture_file  # noqa: E402
FIXTURES = Path(os.environ.get("HLA_FIXTURES_DIR", ROOT / "fixtures"))
FILES = sorted(FIXTURES.rglob("*.safetensors"))
U = 2.0**-53  # unit roundoff of float64

METADATA_KEYS = {
    "format", "format_version", "variant", "masked", "normalize", "eps_mode", "gamma", "eps", "lambda",
    "scale", "batch", "heads", "kv_heads", "n", "d", "dv", "dtype", "seed", "generator_version",
    "reference_bits", "exact_tier", "suite", "case",
}  # format_version 3 adds "digest"
NUMPY_DTYPE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "U8": "u1"}
FIXTURE_DTYPE = {"f64": "F64", "f32": "F32", "bf16": "BF16", "f16": "F16"}


def decode(dtype, shape, data):
    """Raw little-endian tensor bytes -> numpy array (BF16 widened exactly to float32)."""
    if dtype == "BF16":  # numpy has no bfloat16: it is the top half of a float32
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype=NUMPY_DTYPE[dtype]).reshape(shape)


def load(path):
    """(tensors, dtypes, metadata) of a file, parsed by the safetensors package."""
    raw = safetensors.deserialize(path.read_bytes())
    tensors = {name: decode(t["dtype"], t["shape"], t["data"]) for name, t in raw}
    dtypes = {name: t["dtype"] for name, t in raw}
    with safe_open(str(path), framework="np") as f:
        metadata = f.metadata() or {}
        assert sorted(f.keys()) == sorted(tensors)
    if "BF16" not in dtypes.values():  # numpy's own loader must agree bit for bit
        loaded = load_file(str(path))
        assert sorted(loaded) == sorted(tensors)
        for name, x in loaded.items():
            assert x.dtype == tensors[name].dtype and x.tobytes() == tensors[name].tobytes(), name
    return tensors, dtypes, metadata


def digest(path):
    """The fixture digest as io/include/hla/io/fixture.hpp defines it, computed independently of the C++ writer."""
    return hla_fixture_file.digest(hla_fixture_file.parse(path.read_bytes()))


def dims(md):
    return {k: int(md[k]) for k in ("batch", "heads", "kv_heads", "n", "d", "dv")}


def test_fixture_directory_has_fixtures():
    assert FILES, f"no *.safetensors under {FIXTURES}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_is_well_formed(path):
    t, dt, md = load(path)
    keys = METADATA_KEYS | ({"digest"} if md.get("format_version") == "3" else set())
    assert set(md) == keys, f"{path}: metadata keys {sorted(set(md) ^ keys)} differ"
    assert md["format"] == "hla-oracle-fixture" and md["format_version"] in ("1", "2", "3")
    if md["format_version"] == "3":
        assert md["digest"] == digest(path), f"{path}: the digest does not match the content"
    g = dims(md)
    B, H, Hkv, n, d, dv = (g[k] for k in ("batch", "heads", "kv_heads", "n", "d", "dv"))
    want = {
        "q": [B, H, n, d], "k": [B, Hkv, n, d], "v": [B, Hkv, n, dv],
        "ref_out": [B, H, n, dv], "mag_num": [B, H, n, dv], "ref_den": [B, H, n], "mag_den": [B, H, n],
    }
    for name, shape in want.items():
        assert list(t[name].shape) == shape, f"{path}: {name} has shape {list(t[name].shape)}, expected {shape}"
    for name in ("q", "k", "v"):
        assert dt[name] == FIXTURE_DTYPE[md["dtype"]]
    for name in ("ref_out", "ref_den", "mag_num", "mag_den"):
        assert dt[name] == "F64"
    for name in ("mag_num", "mag_den"):  # NaN allowed: inputs with NaN (causality cases)
        assert not np.any(t[name] < 0), f"{path}: {name} has negative entries"
    if "flags" in t:
        assert dt["flags"] == "U8" and list(t["flags"].shape) == want["ref_out"]
        assert np.all(t["flags"] & ~np.uint8(3) == 0)
    if "den_flags" in t:
        assert dt["den_flags"] == "U8" and list(t["den_flags"].shape) == want["ref_den"]
        assert np.all(t["den_flags"] & ~np.uint8(3) == 0)
    if "offsets" in t:
        off = t["offsets"]
        assert dt["offsets"] == "I64" and B == 1 and off[0] == 0 and off[-1] == n and np.all(np.diff(off) > 0)
    # Format version 2: num of a normalized problem, unmasked-order magnitudes of masked hla2/hla3.
    if "ref_num" in t:
        assert md["format_version"] in ("2", "3") and md["normalize"] == "true" and list(t["ref_num"].shape) == want["ref_out"]
    for name, shape in (("mag_num_unmasked", want["ref_out"]), ("mag_den_unmasked", want["ref_den"])):
        if name in t:
            assert md["format_version"] in ("2", "3") and md["masked"] == "true" and md["variant"] in ("hla2", "hla3")
            assert dt[name] == "F64" and list(t[name].shape) == shape and not np.any(t[name] < 0)
    # Gradients (SPEC §9; version 3): all or none, dden and the flags optional.
    grad = {"do": want["ref_out"], "ref_dq": want["q"], "mag_dq": want["q"], "ref_dk": want["k"], "mag_dk": want["k"],
            "ref_dv": want["v"], "mag_dv": want["v"]}
    grad_optional = {"dden": want["ref_den"], "dq_flags": want["q"], "dk_flags": want["k"], "dv_flags": want["v"]}
    if set(t) & (set(grad) | set(grad_optional)):
        assert md["format_version"] == "3" and set(grad) <= set(t), f"{path}: gradient tensors, not all of {sorted(grad)}"
        for name, shape in {**grad, **grad_optional}.items():
            if name in t:
                assert list(t[name].shape) == shape, f"{path}: {name} has shape {list(t[name].shape)}, expected {shape}"
                want_dtype = FIXTURE_DTYPE[md["dtype"]] if name in ("do", "dden") else "U8" if name.endswith("_flags") else "F64"
                assert dt[name] == want_dtype, f"{path}: {name} has dtype {dt[name]}, expected {want_dtype}"
        for name in ("mag_dq", "mag_dk", "mag_dv"):
            assert not np.any(t[name] < 0), f"{path}: {name} has negative entries"
            # The magnitude sums the absolute values of the gradient's terms: it bounds the gradient.
            assert np.all(np.abs(t["ref_" + name[4:]]) <= t[name] * (1 + 2**-50)), f"{path}: |ref_{name[4:]}| exceeds {name}"
    others = set(t) - set(want) - {"flags", "den_flags", "offsets", "ref_num", "mag_num_unmasked", "mag_den_unmasked"}
    others -= set(grad) | set(grad_optional)
    # The final state (SPEC §8): state.<part> and mag_state.<part> F64 for every part, [N, H, rows(, cols)]; the
    # magnitude bounds the value; state_flags.<part> U8 where something is flagged.
    final = {name for name in others if name.startswith(("state.", "mag_state.", "state_flags."))}
    parts = {name.split(".", 1)[1] for name in final}
    assert all(f"state.{x}" in t and f"mag_state.{x}" in t for x in parts), f"{path}: final state parts {sorted(final)}"
    N = len(t["offsets"]) - 1 if "offsets" in t else B
    for x in parts:
        assert dt[f"state.{x}"] == dt[f"mag_state.{x}"] == "F64" and list(t[f"state.{x}"].shape)[:3] == [N, H, d]
        val, mag = t[f"state.{x}"], t[f"mag_state.{x}"]  # NaN where an input is NaN (causality cases)
        assert np.all((np.abs(val) <= mag * (1 + 2**-50)) | np.isnan(val) | np.isnan(mag)), f"{path}: |state.{x}| exceeds its magnitude"
        if f"state_flags.{x}" in t:
            assert dt[f"state_flags.{x}"] == "U8" and np.all(t[f"state_flags.{x}"] & ~np.uint8(1) == 0)
    others -= final
    assert all(name.startswith("initial_state.") for name in others), others
    Fraction(md["gamma"]), Fraction(md["eps"]), Fraction(md["lambda"]), Fraction(md["scale"])


def test_manifests_match_the_files():
    manifests = sorted(FIXTURES.rglob("MANIFEST.json"))
    assert manifests, f"no MANIFEST.json under {FIXTURES}"
    covered = set()
    for m in manifests:
        doc = json.loads(m.read_text())
        assert doc["format"] == "hla-oracle-manifest" and doc["format_version"] == "1", m
        on_disk = {p.relative_to(m.parent).as_posix() for p in m.parent.rglob("*.safetensors")}
        assert set(doc["files"]) == on_disk, f"{m}: listed {sorted(doc['files'])} but found {sorted(on_disk)}"
        for name, entry in doc["files"].items():
            data = (m.parent / name).read_bytes()
            assert len(data) == entry["size"], f"{m}: {name} size"
            assert hashlib.sha256(data).hexdigest() == entry["sha256"], f"{m}: {name} sha256"
            covered.add((m.parent / name).resolve())
    assert {p.resolve() for p in FILES} <= covered, "fixtures not listed in any MANIFEST.json"


# ---------------------------------------------------------------------------
# hla2 recomputed with the naive definition, in float64.
#
# Error model: every term of num_t (or den_t) is a product of a few rounded
# factors (a dot product of d terms, a power of γ, scale, v), and num_t sums at
# most L² + L of them (L = sequence length); first order, the float64 result
# is within k·u·|num|_t of the exact value with k = L² + 3L + 2d + 10, and the
# stored reference is within u·|num|_t (it is rounded from a ≥113-bit value).
# We assert 1e-12·magnitude per element (the required accuracy) and only run it on
# fixtures where k·u ≤ 1e-12 makes that a proven bound, not a tuned one.
REL = 1e-12
MAX_LOOP = 3_000_000  # Python loop iterations a fixture may cost here


def sequences(offsets, n):
    if offsets is None:
        return [(0, n)]
    return [(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]


def hla2_candidates():
    """hla2 fixtures where 1e-12·magnitude is a proven bound and the loop is affordable.
    Reads metadata and offsets only, so that a large golden set stays cheap to scan."""
    out = []
    for path in FILES:
        with safe_open(str(path), framework="np") as f:
            md = f.metadata() or {}
            if md.get("variant") != "hla2":
                continue
            offsets = f.get_tensor("offsets") if "offsets" in f.keys() else None
        g = dims(md)
        lengths = [b - a for a, b in sequences(offsets, g["n"])]
        L = max(lengths, default=0)
        k = L * L + 3 * L + 2 * g["d"] + 10
        cost = g["batch"] * g["heads"] * sum(x**3 for x in lengths) * (g["d"] + g["dv"] + 1)
        if k * U <= REL and cost <= MAX_LOOP:
            out.append(path)
    return out


HLA2 = hla2_candidates()


def test_some_hla2_fixture_is_recomputed():
    assert HLA2, f"no hla2 fixture under {FIXTURES} small enough for the naive float64 recomputation"


def naive_hla2(q, k, v, masked, gamma, lam):
    """num [L, dv], den [L] of one head and sequence, SPEC §2 (q already scaled)."""
    L = q.shape[0]
    num = np.zeros((L, v.shape[1]))
    den = np.zeros(L)
    for t in range(L):
        for i in range(t + 1):
            a_ti = float(np.dot(q[t], k[i]))
            for j in range(i if masked else 0, t + 1):
                w = gamma ** ((t - i) + (t - j)) * a_ti * float(np.dot(q[j], k[i]))
                num[t] += w * v[j]
                den[t] += w
        for j in range(t + 1):  # ridge λ (Alg. 1 line 7)
            w = lam * gamma ** (t - j) * float(np.dot(q[t], q[j]))
            num[t] += w * v[j]
            den[t] += w
    return num, den


@pytest.mark.parametrize("path", HLA2, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_hla2_reference_matches_naive_float64(path):
    t, _, md = load(path)
    g = dims(md)
    masked = md["masked"] == "true"
    normalize = md["normalize"] == "true"
    gamma, lam, scale, eps = (float(Fraction(md[k])) for k in ("gamma", "lambda", "scale", "eps"))
    group = g["heads"] // g["kv_heads"]
    q, k, v = (t[x].astype(np.float64) for x in ("q", "k", "v"))
    checked = 0
    for b in range(g["batch"]):
        for h in range(g["heads"]):
            hk = h // group
            for t0, t1 in sequences(t.get("offsets"), g["n"]):
                num, den = naive_hla2(q[b, h, t0:t1] * scale, k[b, hk, t0:t1], v[b, hk, t0:t1], masked, gamma, lam)
                ref_out, ref_den = t["ref_out"][b, h, t0:t1], t["ref_den"][b, h, t0:t1]
                mag_num, mag_den = t["mag_num"][b, h, t0:t1], t["mag_den"][b, h, t0:t1]
                where = f"{path.name} b={b} h={h} tokens [{t0}, {t1})"
                # Non-finite inputs (causality cases) reach the same elements in both;
                # only finite elements are compared numerically.
                fin_den = np.isfinite(ref_den)
                assert np.array_equal(fin_den, np.isfinite(den)), f"{where}: den finite in one, not the other"
                err_den = np.abs(den - ref_den)[fin_den]
                assert np.all(err_den <= REL * mag_den[fin_den]), f"{where}: den off by {err_den.max()} > 1e-12·|den|"
                if not normalize:
                    fin = np.isfinite(ref_out)
                    assert np.array_equal(fin, np.isfinite(num)), f"{where}: num finite in one, not the other"
                    err = np.abs(num - ref_out)[fin]
                    assert np.all(err <= REL * mag_num[fin]), f"{where}: num off by {err.max()} > 1e-12·|num|"
                else:
                    # SPEC §7 / bounds.hpp: with |Δnum| ≤ eN and |Δden| ≤ eD, the normalized
                    # output moves by at most (eN + |out|·eD) / (|D| − eD), plus one rounding
                    # of ours and one of the stored reference.
                    if md["eps_mode"] == "add":
                        D = ref_den + eps
                    else:
                        D = np.where(ref_den < 0, -1.0, 1.0) * np.maximum(np.abs(ref_den), eps)
                    eN, eD = REL * mag_num, REL * mag_den + U * np.abs(D)  # den error + rounding of D
                    if md["eps_mode"] == "add":
                        floor = np.abs(D) - eD
                    else:  # clamping is 1-Lipschitz; near 0 the sign may flip
                        floor = np.where(np.abs(ref_den) <= eD, 0.0, np.maximum(np.abs(D) - eD, eps))
                    den_mine = den + eps if md["eps_mode"] == "add" else \
                        np.where(den < 0, -1.0, 1.0) * np.maximum(np.abs(den), eps)
                    out = num / den_mine[:, None]
                    # Elsewhere the division is ill-conditioned (or non-finite): not scored.
                    ok = (floor > 0)[:, None] & np.isfinite(ref_out)
                    bound = (eN + np.abs(ref_out) * eD[:, None]) / np.where(floor > 0, floor, 1.0)[:, None] \
                        + 2 * U * np.abs(ref_out)
                    err = np.abs(out - ref_out)
                    assert np.all((err <= bound)[ok]), f"{where}: normalized out off by {err[ok].max()}"
                checked += ref_out.size
    assert checked == t["ref_out"].size
