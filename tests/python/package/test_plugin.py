"""The pytest plugin: hla_fixture parametrized over the golden fixtures inside
a declared support; a failing kernel's report is printed."""
import subprocess
import textwrap
from pathlib import Path

import hla_oracle
from hla_oracle import Support

HERE = Path(__file__).resolve().parent

TEST = '''
import sys
sys.path.insert(0, {here!r})
import pytest
from kernels import fixture_options, kernel

@pytest.mark.hla_golden(variants=["hla2", "la1"], dtypes=["f32", "f64", "bf16"],
                        features=["decay", "normalize", "clamp", "scale", "gqa", "varlen"],
                        precision={{"bf16": "f32", "f32": "f32", "f64": "f64"}})
def test_kernel(hla_fixture):
    out, den = kernel(hla_fixture.q, hla_fixture.k, hla_fixture.v, fixture_options(hla_fixture), bug={bug!r})
    {assertion}
'''


def run(pytester, bug, assertion="hla_fixture.assert_passes(out, den)"):
    pytester.makepyfile(TEST.format(here=str(HERE), bug=bug, assertion=assertion))
    return pytester.runpytest("-q", "-p", "no:cacheprovider")


def expected_count():
    return len(hla_oracle.golden_fixtures(Support(variants=["hla2", "la1"], dtypes=["f32", "f64", "bf16"],
                                                  features=["decay", "normalize", "clamp", "scale", "gqa", "varlen"])))


def test_correct_kernel_passes_every_selected_fixture(pytester):
    n = expected_count()
    assert n >= 10
    # Every golden fixture judges something (none is INCONCLUSIVE: an all-zero output fails each), so all pass.
    o = run(pytester, None).parseoutcomes()
    assert o.get("failed", 0) == 0 and o.get("skipped", 0) == 0 and o.get("passed", 0) == n, o


def test_wrong_kernel_fails_with_the_report(pytester, hla_tool):
    res = run(pytester, "strict_mask")
    out = res.stdout.str()
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed", 0) > 0 and outcomes.get("passed", 0) > 0  # la1 fixtures still pass
    assert "FAIL" in out and "worst elements" in out
    # The printed command reproduces the failure with the CLI.
    line = next(x for x in out.splitlines() if "reproduce: hla check" in x)
    args = line.split("reproduce: hla check", 1)[1].split()
    p = subprocess.run([hla_tool, "check", *args], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr


def test_failure_names_the_mistake(pytester):
    res = run(pytester, "no_scale")
    assert res.parseoutcomes().get("failed", 0) > 0
    assert "matches scale_missing: q never multiplied by scale; fix: multiply q by scale first" in res.stdout.str()


def test_report_section_even_with_a_plain_assert(pytester):
    res = run(pytester, "decay_once", "assert hla_fixture.check(out, den).passed")
    assert res.parseoutcomes().get("failed", 0) > 0
    assert "hla-oracle report" in res.stdout.str() and "worst elements" in res.stdout.str()
    # The section names the failing report's HTML page, which exists and says FAIL.
    line = next(x for x in res.stdout.str().splitlines() if "html report:" in x)
    page = Path(line.split("html report:", 1)[1].strip())
    assert page.suffix == ".html" and 'data-verdict="FAIL"' in page.read_text(encoding="utf-8")


def test_empty_support_is_a_usage_error(pytester):
    pytester.makepyfile(textwrap.dedent('''
        import pytest
        @pytest.mark.hla_golden(variants=["hla3"], dtypes=["f64"], d=[999])
        def test_nothing(hla_fixture):
            pass
    '''))
    res = pytester.runpytest("-q", "-p", "no:cacheprovider")
    assert res.ret != 0 and "no fixture of" in (res.stdout.str() + res.stderr.str())


def test_plugin_is_an_installed_entry_point():
    from importlib.metadata import entry_points
    eps = entry_points(group="pytest11")
    assert any(ep.value == "hla_oracle.pytest_plugin" for ep in eps)


def test_kwargs_for_offers_the_options_a_signature_takes_under_its_names():
    sup = Support(variants=["hla2"], features=["decay", "normalize", "clamp", "scale", "ridge", "unmasked"])
    fixtures = [hla_oracle.load_fixture(p) for p in hla_oracle.golden_fixtures(sup)]
    plain = next(f for f in fixtures if f.options["normalize"] == "none" and f.options["masked"] and f.options["lam"] == "0")
    normalized = next(f for f in fixtures if f.options["normalize"] != "none")

    def kernel(q, k, v, decay=1.0, scale=1.0):
        return q

    got = plain.kwargs_for(kernel, rename={"gamma": "decay"})
    assert got == {"decay": plain.kwargs["gamma"], "scale": plain.kwargs["scale"]}
    try:
        normalized.kwargs_for(kernel, rename={"gamma": "decay"})
        raise AssertionError("a normalized fixture passed for a kernel without `normalize`")
    except hla_oracle.NotExpressible as e:
        assert "normalize=" in str(e) and "kernel" in str(e)
    assert set(normalized.kwargs_for(lambda q, k, v, **kw: q)) == set(normalized.kwargs)  # **kw takes all
    try:
        plain.kwargs_for(kernel, rename={"ridge": "lam"})
        raise AssertionError("an unknown option in rename passed")
    except ValueError as e:
        assert "ridge" in str(e)


def test_kwargs_for_hands_a_bool_to_a_kernel_of_the_old_normalize_spelling():
    import pytest
    fixtures = [hla_oracle.load_fixture(p) for p in hla_oracle.golden_fixtures(
        Support(variants=["hla2"], features=["normalize", "clamp"]))]
    by_mode = {f.options["normalize"]: f for f in fixtures}
    assert {"none", "add", "clamp"} <= set(by_mode), sorted(by_mode)

    def old(q, k, v, normalize=False, eps=1e-6):
        return q

    def old_with_mode(q, k, v, normalize=False, eps_mode="add"):
        return q

    with pytest.warns(DeprecationWarning, match="bool"):
        assert by_mode["none"].kwargs_for(old)["normalize"] is False  # 'none' would be truthy
    with pytest.warns(DeprecationWarning):
        assert by_mode["add"].kwargs_for(old)["normalize"] is True
    with pytest.warns(DeprecationWarning), pytest.raises(hla_oracle.NotExpressible, match="clamp"):
        by_mode["clamp"].kwargs_for(old)
    with pytest.warns(DeprecationWarning):
        got = by_mode["clamp"].kwargs_for(old_with_mode)
    assert got["normalize"] is True and got["eps_mode"] == "clamp"


def test_kwargs_for_skips_the_fixtures_a_kernel_cannot_express(pytester):
    pytester.makepyfile('''
import pytest

def kernel(q, k, v, gamma=1, scale=1):
    return q

@pytest.mark.hla_golden(variants=["hla2"], dtypes=["f32"], features=["decay", "normalize", "clamp", "scale"])
def test_kernel(hla_fixture):
    kw = hla_fixture.kwargs_for(kernel)
    assert set(kw) <= {"gamma", "scale"}
''')
    r = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rs")
    out = r.stdout.str()
    assert r.ret == 0, out
    passed, skipped = r.parseoutcomes().get("passed", 0), r.parseoutcomes().get("skipped", 0)
    assert passed >= 1 and skipped >= 1, out
    assert "takes no parameter for" in out, out
