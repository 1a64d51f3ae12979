"""The pytest plugin under pytest-xdist (`pytest -n 2`): a session of one
correct and two wrong kernels (the same bug twice, so both fail on the same
golden fixtures) run on two workers. Checks that the correct kernel passes, the
wrong ones fail with the report and the path of its HTML page and candidate
file, that each failing test writes into a folder of its own (no two share a
path), that `hla check` reproduces each failure from the printed command, and
that a second run writes the same paths with the same bytes and removes a
stale file from an earlier run. ctest python_plugin_xdist.

  plugin_xdist_test.py HLA WORK      (PYTHONPATH: the build's python/)
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "package"  # kernels.py: numpy kernels with planted bugs

TEST = '''
import sys
sys.path.insert(0, {kernels!r})
import pytest
from kernels import fixture_options, kernel

SUPPORT = dict(variants=["hla2"], dtypes=["f32"], features=["gqa", "varlen"], precision={{"f32": "f32"}})

def run(fx, bug):
    out, den = kernel(fx.q, fx.k, fx.v, fixture_options(fx), bug=bug)
    fx.assert_passes(out, den)

@pytest.mark.hla_golden(**SUPPORT)
def test_correct(hla_fixture):
    run(hla_fixture, None)

@pytest.mark.hla_golden(**SUPPORT)
def test_wrong_a(hla_fixture):
    run(hla_fixture, "strict_mask")

@pytest.mark.hla_golden(**SUPPORT)
def test_wrong_b(hla_fixture):
    run(hla_fixture, "strict_mask")
'''


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def session(work, reports):
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-v", "--hla-reports", str(reports),
           "test_kernels.py"]
    p = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    print(f"$ (cd {work} && {' '.join(cmd)})  -> exit {p.returncode}")
    return p.returncode, out


def files_of(folder):
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file()}


def main():
    hla, work = sys.argv[1], Path(sys.argv[2]).resolve()
    try:
        import xdist  # noqa: F401
    except ImportError:
        fail(f"pytest-xdist is not installed in {sys.executable}'s environment (bash scripts/setup.sh installs it)")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "test_kernels.py").write_text(TEST.format(kernels=str(KERNELS)))
    reports = work / "reports"

    rc, out = session(work, reports)
    passed = re.findall(r"^\[(gw\d)\] \[ *\d+%\] PASSED test_kernels.py::(\S+)", out, re.M)
    failed = re.findall(r"^\[(gw\d)\] \[ *\d+%\] FAILED test_kernels.py::(\S+)", out, re.M)
    if rc != 1 or not passed or not failed:
        print(out)
        fail(f"expected exit 1 with passing and failing tests; got exit {rc}, {len(passed)} passed, {len(failed)} failed")
    if {w for w, _ in passed + failed} != {"gw0", "gw1"}:
        print(out)
        fail("the session did not run on two workers")
    if any(t.startswith("test_correct") for _, t in failed) or any(t.startswith("test_wrong") for _, t in passed):
        print(out)
        fail(f"the correct kernel must pass every fixture and the wrong ones fail them: failed {failed}")
    a = sorted(t.split("[", 1)[1] for _, t in failed if t.startswith("test_wrong_a"))
    b = sorted(t.split("[", 1)[1] for _, t in failed if t.startswith("test_wrong_b"))
    if not a or a != b:
        fail(f"both wrong kernels must fail the same fixtures: {a} vs {b}")

    # Every failing test names its HTML page and its candidate file, in a folder of its own under --hla-reports.
    pages = re.findall(r"html report: (\S+)", out)
    commands = re.findall(r"reproduce: hla check (.+)$", out, re.M)
    # pytest prints a failing test's report twice (the assertion's message and the report section).
    pages, commands = sorted(set(pages)), sorted(set(commands))
    if len(pages) != len(failed) or len(commands) != len(failed):
        print(out)
        fail(f"{len(failed)} failing tests, but {len(pages)} distinct HTML pages and {len(commands)} reproduce commands")
    folders = {Path(p).parent for p in pages}
    if len(folders) != len(failed):
        fail(f"{len(failed)} failing tests wrote into {len(folders)} folders: {sorted(map(str, folders))}")
    for page in map(Path, pages):
        if reports.resolve() not in page.parents or not page.is_file():
            fail(f"{page} is not a file under {reports}")
        if 'data-verdict="FAIL"' not in page.read_text(encoding="utf-8"):
            fail(f"{page} does not say FAIL")
    for c in commands:
        args = c.split()
        p = subprocess.run([hla, "check", *args], capture_output=True, text=True)
        if p.returncode != 1:
            fail(f"hla check {c} exited {p.returncode}, expected 1 (FAIL):\n{p.stdout}{p.stderr}")
    first = files_of(reports)
    if len(first) != 2 * len(failed):
        fail(f"expected a page and a candidate file per failing test, found {sorted(first)}")

    # A second run: the same paths, byte for byte; a file an earlier run left in a test's folder is gone.
    stale = Path(pages[0]).parent / "stale.report.html"
    stale.write_text("from an earlier run")
    rc2, out2 = session(work, reports)
    second = files_of(reports)
    if rc2 != 1 or second != first:
        print(out2)
        fail(f"the second run (exit {rc2}) wrote other files or bytes: "
             f"only first {sorted(set(first.items()) - set(second.items()))}, "
             f"only second {sorted(set(second.items()) - set(first.items()))}")
    print(f"PASS: {len(passed)} passed and {len(failed)} failed on gw0 and gw1; {len(folders)} report folders, "
          f"{len(first)} files, the same bytes in a second run; each failure reproduced by hla check")


if __name__ == "__main__":
    main()
