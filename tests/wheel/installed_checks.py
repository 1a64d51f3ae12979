"""The installed wheel, checked without a compiler or the system's GMP/MPFR
(run by install_test.sh in an emptied environment; argv: repository, venv).

No compiler is reachable; the extension and the `hla` tool load GMP, MPFR and
libquadmath from the wheel's hla_oracle.libs (ldd), not from /usr/lib; `hla
--version`, `hla demo`, `hla gen` + `hla check` round trips; hla_oracle.check on
a numpy kernel; a pytest session with the plugin's mark, one correct and one
wrong kernel. The kernels are tests/python/package/kernels.py (numpy, written from
SPEC §2 for the tests, with planted bugs). Exit 0 when every check passed."""
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

repo, venv = Path(sys.argv[1]), Path(sys.argv[2]).resolve()
sys.path.insert(0, str(repo / "tests" / "python" / "package"))  # kernels.py, not the package's sources
import numpy as np  # noqa: E402

import hla_oracle  # noqa: E402
from kernels import fixture_options, kernel  # noqa: E402

failures = []
start = time.monotonic()


def check(ok, what, detail=""):
    print(("ok:     " if ok else "FAILED: ") + what + (f"\n{detail}" if detail and not ok else ""), flush=True)
    if not ok:
        failures.append(what)
    return ok


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


# The environment: no compiler, no include or library path, no preloading.
for var in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD"):
    check(var not in os.environ, f"{var} is not set")
for cc in ("gcc", "g++", "cc", "c++", "clang", "clang++", "cpp", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++"):
    p = run("sh", "-c", f"command -v {cc}")
    check(p.returncode != 0, f"`command -v {cc}` fails (PATH={os.environ['PATH']})", p.stdout)

# The package comes from the venv, its binaries load the bundled libraries.
pkg = Path(hla_oracle.__file__).resolve().parent
check(pkg.is_relative_to(venv), f"hla_oracle is imported from the venv ({pkg})")
libs = pkg.parent / "hla_oracle.libs"
tool = pkg / "bin" / "hla"
core = Path(hla_oracle._core.__file__)
bundled = sorted(p.name for p in libs.iterdir()) if libs.is_dir() else []
print(f"bundled in {libs.name}: {', '.join(bundled)}")
for binary in (core, tool):
    p = run("ldd", binary)
    check(p.returncode == 0 and "not found" not in p.stdout, f"ldd {binary.name}: every library found", p.stdout + p.stderr)
    for lib in ("libgmp", "libmpfr", "libquadmath"):
        lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith(lib)]
        paths = [Path(ln.split("=>")[1].split("(")[0].strip()) for ln in lines if "=>" in ln]
        check(len(paths) == 1 and paths[0].resolve().parent == libs.resolve(), f"ldd {binary.name}: {lib} from {libs.name}",
              "\n".join(lines) or p.stdout)

# And at run time: what this process (which imported the extension) has mapped,
# ours and any other wheel's copies (numpy bundles a libquadmath), none of the system's.
maps = {Path(ln.split()[-1]).resolve() for ln in Path("/proc/self/maps").read_text().splitlines() if ".so" in ln.split()[-1]}
for lib in ("libgmp", "libmpfr", "libquadmath"):
    mapped = sorted(m for m in maps if m.name.startswith(lib))
    check(libs.resolve() in {m.parent for m in mapped} and all(m.is_relative_to(venv) for m in mapped),
          f"this process maps {lib} from {libs.name} (and no system copy)", "\n".join(map(str, mapped)))

# Test hooks are compiled only into test builds (HLA_TEST_HOOKS): the wheel's binaries read no such variable.
for binary in sorted(pkg.glob("_core*.so")) + [pkg / "bin" / "hla"]:
    check(b"HLA_TEST_WRITE_DELAY_MS" not in binary.read_bytes(), f"{binary.name}: no test hook compiled in")

# The command line tool, from the console script on PATH.
hla = venv / "bin" / "hla"
check(run("sh", "-c", "command -v hla").stdout.strip() == str(hla), "`hla` on PATH is the venv's console script")
from importlib.metadata import version  # noqa: E402
p = run("hla", "--version")
check(p.returncode == 0 and p.stdout.strip() == f"hla-oracle {version('hla_oracle')}", "hla --version: the package's version",
      p.stdout + p.stderr)
p = run("hla", "demo")
check(p.returncode == 0, "hla demo: exit 0", p.stdout[-2000:] + p.stderr)
p = run("hla", "check", "missing.safetensors", "missing.candidate.safetensors")
check(p.returncode == 2 and "missing.safetensors" in p.stderr, "hla check of a missing file: exit 2 naming it", p.stderr)

# hla gen + a numpy kernel's candidate + hla check: the correct kernel passes, a wrong one fails.
fx_path = Path("hla2.safetensors")
p = run("hla", "gen", "--case", "variant=hla2,gamma=7/8,normalize=add,dtype=f32,B=1,H=2,Hkv=2,n=24,d=8,dv=8,seed=5",
        "--out", fx_path)
check(p.returncode == 0 and fx_path.is_file(), "hla gen --case: a fixture", p.stdout + p.stderr)
fx = hla_oracle.load_fixture(fx_path)
for bug, want in ((None, 0), ("strict_mask", 1)):
    out, den = kernel(fx.q, fx.k, fx.v, fixture_options(fx), bug=bug)
    cand = Path(f"hla2.{bug}.candidate.safetensors")
    hla_oracle.save_candidate(cand, out, den, fixture=fx)
    p = run("hla", "check", fx_path, cand, "--precision", "f32")
    check(p.returncode == want, f"hla check of the {bug or 'correct'} kernel's candidate: exit {want}", p.stdout + p.stderr)

# hla_oracle.check on the numpy kernel's outputs of random inputs.
rng = np.random.default_rng(7)
q, k, v = (rng.standard_normal((1, 2, 20, 8)).astype(np.float32) for _ in range(3))
opts = SimpleNamespace(variant="hla2", gamma=0.875, scale=1.0, eps=2.0 ** -20, normalize="add", cu_seqlens=None)
for bug, want in ((None, True), ("decay_once", False)):
    out, den = kernel(q, k, v, opts, bug=bug)
    r = hla_oracle.check(out, q, k, v, variant="hla2", gamma=opts.gamma, normalize="add", eps=opts.eps, precision="f32", den=den)
    check(r.passed is want, f"hla_oracle.check of the {bug or 'correct'} numpy kernel: {'PASS' if want else 'FAIL'}", r.text)

# A pytest session with the plugin's mark over the installed golden set.
support = dict(variants=["hla2", "la1"], dtypes=["f32", "f64"], features=["decay", "normalize", "clamp", "scale", "gqa", "varlen"],
               precision={"f32": "f32", "f64": "f64"})
Path("test_kernels.py").write_text(f'''
import sys
sys.path.insert(0, {str(repo / "tests" / "python" / "package")!r})
import pytest
from kernels import fixture_options, kernel

MARK = pytest.mark.hla_golden(**{support!r})

@MARK
def test_correct(hla_fixture):
    out, den = kernel(hla_fixture.q, hla_fixture.k, hla_fixture.v, fixture_options(hla_fixture))
    hla_fixture.assert_passes(out, den)

@MARK
def test_wrong(hla_fixture):
    out, den = kernel(hla_fixture.q, hla_fixture.k, hla_fixture.v, fixture_options(hla_fixture), bug="strict_mask")
    hla_fixture.assert_passes(out, den)
''')
expected = [Path(f).name for f in hla_oracle.golden_fixtures({k: v for k, v in support.items() if k != "precision"})]
check(len(expected) >= 10 and all((pkg / "fixtures" / f).is_file() for f in expected),
      f"the golden set is installed in the package ({len(expected)} fixtures inside the support)")
p = run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=junit.xml", "test_kernels.py")
cases = {}
for tc in ET.parse("junit.xml").getroot().iter("testcase"):
    failed = tc.find("failure") is not None or tc.find("error") is not None
    cases[tc.get("name")] = "failed" if failed else "skipped" if tc.find("skipped") is not None else "passed"
correct = {n: s for n, s in cases.items() if n.startswith("test_correct[")}
wrong = {n: s for n, s in cases.items() if n.startswith("test_wrong[")}
check(p.returncode == 1, "pytest: exit 1 (a test failed)", p.stdout[-3000:] + p.stderr)
check(len(correct) == len(expected) and set(correct.values()) == {"passed"},
      f"pytest: the correct kernel passes all {len(expected)} selected fixtures (none skipped as INCONCLUSIVE)", str(correct))
failing = {n for n, s in wrong.items() if s == "failed"}
check(len(wrong) == len(expected) and failing and all("[hla2-" in n for n in failing)
      and all(s == "passed" for n, s in wrong.items() if "[la1-" in n),
      f"pytest: the wrong kernel (i < j) fails hla2 fixtures ({len(failing)}) and passes la1's (which have no i)", str(wrong))
check("hla-oracle report" in p.stdout and "FAIL" in p.stdout, "pytest: the failures print the hla-oracle report",
      p.stdout[-3000:])
line = next((ln for ln in p.stdout.splitlines() if "reproduce: hla check" in ln), "")
repro = run("sh", "-c", line.split("reproduce: ", 1)[1]) if line else None
check(repro is not None and repro.returncode == 1, "the report's `reproduce: hla check ...` fails with exit 1",
      line + ("" if repro is None else repro.stdout[-1500:] + repro.stderr))

print(f"installed_checks: {'PASS' if not failures else 'FAIL'}: {len(failures)} failed, {time.monotonic() - start:.0f} s")
sys.exit(1 if failures else 0)
