"""pytest plugin of hla_oracle (entry point pytest11, so installed = loaded;
or ``pytest -p hla_oracle.pytest_plugin``).

A test that takes the ``hla_fixture`` fixture runs once per golden fixture
inside the support declared by its ``hla_golden`` mark (hla_oracle.Support
fields; no mark: every golden fixture):

    @pytest.mark.hla_golden(variants=["hla2"], dtypes=["f32", "bf16"], features=["decay", "normalize"],
                            d=[8], precision={"bf16": "f32", "f32": "f32"})
    def test_kernel(hla_fixture):
        q, k, v = hla_fixture.inputs(layout="bthd", framework="torch")
        out = my_kernel(q, k, v, **hla_fixture.kwargs)
        hla_fixture.assert_passes(out, layout="bthd")

A kernel that takes only some options, under its own names, gets those from
``hla_fixture.kwargs_for(my_kernel, rename={"gamma": "decay"})``; a fixture whose
options it cannot take (masked=False for a kernel without ``masked``) is skipped,
the skip saying which option.

``assert_passes`` judges with the declared precision and form class and fails
with the whole report (`hla check`'s text); a report of a failing test is also
printed in its "hla-oracle report" section, however the test asserted it, with
the path of its HTML page (Report.html: where the error lies, with hints).
A backward is tested on the gradient fixtures (``gradients=True`` in the mark):

    @pytest.mark.hla_golden(variants=["hla2"], gradients=True)
    def test_backward(hla_fixture):
        q, k, v = (x.requires_grad_() for x in hla_fixture.inputs(framework="torch"))
        do, _ = hla_fixture.upstream(framework="torch")
        out = my_kernel(q, k, v, **hla_fixture.kwargs)
        out.backward(do)
        hla_fixture.assert_passes(out.detach(), dq=q.grad, dk=k.grad, dv=v.grad)

``--hla-fixtures DIR`` selects another folder of fixtures (e.g. `hla gen --suite default`).

A failing check writes its outputs as a candidate file and its report as an
HTML page into a folder of its own test, ``<reports>/<test id>/`` (``--hla-reports
DIR``, default ``hla-reports`` in pytest's rootdir), emptied when the test
starts: the same test writes the same paths in every run, and tests run side
by side (``pytest -n 2``, pytest-xdist) never write into one folder.
"""
import hashlib
import re
import shutil
from pathlib import Path

import pytest

import hla_oracle
from hla_oracle._support import as_support

_REPORTS = pytest.StashKey[list]() if hasattr(pytest, "StashKey") else None


def pytest_addoption(parser):
    parser.addoption("--hla-fixtures", default=None,
                     help="folder of hla-oracle fixtures for tests using hla_fixture (default: the golden set)")
    parser.addoption("--hla-reports", default=None,
                     help="folder for the candidate files and HTML reports of failing hla_fixture checks, one "
                          "subfolder per test (default: hla-reports in the rootdir)")


def _reports_folder(item):
    """The folder of a test's failure outputs: its node id made a file name
    (readable part, then a hash of the whole id: distinct ids, distinct folders)."""
    root = item.config.getoption("--hla-reports")
    root = Path(root) if root else item.config.rootpath / "hla-reports"
    readable = re.sub(r"[^A-Za-z0-9._=-]+", "_", item.nodeid)[-80:].strip("_.")
    return root.resolve() / f"{readable}-{hashlib.sha256(item.nodeid.encode()).hexdigest()[:10]}"


def pytest_configure(config):
    config.addinivalue_line("markers", "hla_golden(**support): run the test's hla_fixture over the golden fixtures "
                                       "inside this support (hla_oracle.Support fields); gradients=True: only those "
                                       "with an upstream do (hla_fixture.upstream(), check(..., dq=, dk=, dv=))")


class GoldenCase:
    """A golden fixture for one parametrized test: the hla_oracle.Fixture's
    attributes (inputs(), q, k, v, kwargs, options, dtype, shape, …) plus
    check() and assert_passes() with the declared precision and form class."""

    def __init__(self, fixture, support, reports, folder):
        self.fixture = fixture
        self.support = support
        self._reports = reports
        self._folder = folder  # this test's, for the outputs of failing checks

    def __getattr__(self, name):
        return getattr(self.fixture, name)

    def check(self, out, den=None, *, layout="bhtd", out_dtype=None, precision=None, form_class=None, dq=None, dk=None,
              dv=None):
        declared = self.support or hla_oracle.Support(precision=None)  # no mark: the precision of out's dtype
        p = precision if precision is not None else declared.precision
        fc = form_class or declared.form_class
        grads = {"dq": dq, "dk": dk, "dv": dv}
        r = self.fixture.check(out, den, precision=p, form_class=fc, layout=layout, out_dtype=out_dtype, **grads)
        if not r.passed:  # the outputs as a candidate file: `hla check` reproduces the verdict
            folder = self._folder
            folder.mkdir(parents=True, exist_ok=True)
            failed_before = sum(not x.passed for x in self._reports)  # a second failing check: names of its own
            stem = Path(self.fixture.path).name[:-len(".safetensors")] + (f"-{failed_before + 1}" if failed_before else "")
            cand = folder / (stem + ".candidate.safetensors")
            hla_oracle.save_candidate(cand, out, den, fixture=self.fixture, layout=layout, out_dtype=out_dtype, **grads)
            prec = hla_oracle._precision(p)
            r.text += (f"  reproduce: hla check {self.fixture.path} {cand}" + (f" --precision {prec}" if prec else "") +
                       ("" if fc == "masked" else f" --form-class {fc}") + "\n")
            # The report as a page: heatmaps of where the error lies, the hints.
            page = r.html(folder / (stem + ".report.html"))
            r.text += f"  html report: {page}\n"
        self._reports.append(r)
        return r

    def kwargs_for(self, fn, rename=None):
        """The fixture's options that fn's signature takes, under its own names (Fixture.kwargs_for); a fixture
        fn cannot express (an option value it has no parameter for) is skipped, the skip naming why."""
        try:
            return self.fixture.kwargs_for(fn, rename)
        except hla_oracle.NotExpressible as e:
            pytest.skip(f"{self.fixture.name}: {e}")

    def assert_passes(self, out, den=None, **kw):
        r = self.check(out, den, **kw)
        if r.verdict == "INCONCLUSIVE":  # too little to judge (e.g. an all-zero output would pass): not a verdict
            pytest.skip(f"{self.fixture.name}: INCONCLUSIVE: {'; '.join(r.reasons)}")
        if not r.passed:
            named = "".join(f"\n  matches {d['id']}: {d['what']}; fix: {d['fix']}" for d in r.diagnosis)
            raise AssertionError(f"{self.fixture.name}: {r.verdict}{named}\n{r.text}")
        return r

    def __repr__(self):
        return f"<hla_fixture {self.fixture!r}>"


def pytest_generate_tests(metafunc):
    if "hla_fixture" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("hla_golden")
    kwargs = dict(mark.kwargs) if mark else {}
    gradients = kwargs.pop("gradients", False)  # only fixtures with an upstream do (test a backward)
    support = as_support(kwargs) if mark else None
    folder = metafunc.config.getoption("--hla-fixtures")
    paths = hla_oracle.golden_fixtures(support, folder)
    if gradients:
        paths = [p for p in paths if hla_oracle.load_fixture(p).gradients]
    if not paths:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: no fixture of "
                                f"{folder or hla_oracle.golden_dir()} lies inside the declared support {support}")
    import os
    metafunc.parametrize("hla_fixture", [(p, support) for p in paths], ids=[os.path.basename(p)[:-12] for p in paths],
                         indirect=True)


@pytest.fixture
def hla_fixture(request):
    path, support = request.param
    reports = []
    if _REPORTS is not None:
        request.node.stash[_REPORTS] = reports
    folder = _reports_folder(request.node)
    shutil.rmtree(folder, ignore_errors=True)  # no report of an earlier run stays beside this run's
    return GoldenCase(hla_oracle.load_fixture(path), support, reports, folder)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if _REPORTS is None or rep.when != "call" or not rep.failed:
        return
    reports = item.stash.get(_REPORTS, [])
    failing = [r for r in reports if not r.passed]
    if failing:
        rep.sections.append(("hla-oracle report", "\n".join(r.text for r in failing)))
