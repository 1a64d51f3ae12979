"""The options from the C++ table (_core.options()): keywords, defaults, the old spellings."""
import inspect
import warnings
from fractions import Fraction

import numpy as np
import pytest

import hla_oracle
from hla_oracle import _core, _options


def qkv(seed=0, n=6, d=3):
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(-4, 5, (1, 1, n, d)).astype(np.float64) / 4 for _ in range(3))


def test_keywords_and_defaults_are_the_tables():
    rows = _core.options()
    names = [r["name"] for r in rows]
    assert names == list(_options.table()) == ["variant", "masked", "gamma", "normalize", "eps", "lam", "scale"]
    assert _options.defaults() == {"variant": "hla2", "masked": True, "gamma": 1, "normalize": "none",
                                   "eps": Fraction(1, 1000000), "lam": 0, "scale": 1}
    for fn in (hla_oracle.reference, hla_oracle.check):
        params = inspect.signature(fn).parameters
        assert {n: params[n].default for n in names} == _options.defaults(), fn.__name__


def test_an_unknown_keyword_names_the_options():
    with pytest.raises(TypeError, match="the options are variant, masked, gamma, normalize, eps, lam, scale"):
        hla_oracle.reference(*qkv(), lamda=1)


@pytest.mark.parametrize("old, new", [(dict(normalize=True), "add"), (dict(normalize=True, eps_mode="clamp"), "clamp"),
                                      (dict(normalize=False), "none"), (dict(eps_mode="clamp", normalize="add"), "add")])
def test_the_old_normalize_spellings_warn_and_mean_the_same(old, new):
    q, k, v = qkv()
    with pytest.warns(DeprecationWarning, match="old spelling") as caught:
        r_old = hla_oracle.reference(q, k, v, gamma="1/2", **old)
    assert all(w.filename == __file__ for w in caught)  # the warning points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r_new = hla_oracle.reference(q, k, v, gamma="1/2", normalize=new)
    assert np.array_equal(r_old.out, r_new.out) and r_old.bits == r_new.bits == 0


def test_a_fixtures_kwargs_are_the_canonical_keywords():
    fx = hla_oracle.load_fixture(hla_oracle.golden_dir() / "hla2-clamp-f32-gaussian-n37-d8-B1H2K1.safetensors")
    assert set(fx.kwargs) == set(_options.table()) and set(fx.options) == set(fx.kwargs)
    assert fx.kwargs["normalize"] == fx.options["normalize"] == "clamp" and fx.kwargs["masked"] is fx.options["masked"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = hla_oracle.check(fx.ref_out, fx.q, fx.k, fx.v, **fx.kwargs)
    assert r.passed, r.text


def test_case_options_eps_mode_is_the_old_spelling():
    o = hla_oracle._fuzz.CaseOptions(variant="la1", masked=True, normalize="clamp", gamma=1.0, eps=1e-6, lam=0.0,
                                     scale=1.0, gamma_exact=Fraction(1), eps_exact=Fraction(1, 10**6),
                                     lam_exact=Fraction(0), scale_exact=Fraction(1), dtype="f32", layout="bhtd",
                                     cu_seqlens=None, initial_state=None, want_state=False)
    assert o.kwargs == {"variant": "la1", "masked": True, "gamma": 1, "normalize": "clamp", "eps": Fraction(1, 10**6),
                        "lam": 0, "scale": 1}
    with pytest.warns(DeprecationWarning):
        assert o.eps_mode == "clamp"
