"""The README's Python quick start, run as a reader would run it: the two
```python blocks of "Quick start: Python and pytest", taken from README.md
as they stand. The first (hla_oracle.check of the PyTorch example) must exit 0
from the repository root, and exit non-zero when the kernel is called with a
decay other than the one checked. The second (the pytest mark) is saved as
test_my_kernel.py under a `my_kernel` built on examples/torch_hla.py: pytest
must pass on at least one golden fixture with the kernel as written, and fail
with the kernel's output shifted by one token. ctest readme_quickstart.

  readme_quickstart_test.py WORK      (PYTHONPATH: the build's python/; torch)
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Quick start: Python and pytest"
CALL = "fla.chunk_hla2(q, k, v, gamma=0.99)[0]"

# The reader's kernel: the example's chunked form taking the fixture's keyword options.
KERNEL = '''
import sys
sys.path.insert(0, {repo!r})
import torch
import examples.torch_hla as fla

def my_kernel(q, k, v, variant, masked, gamma, normalize, eps, lam, scale):
    assert variant == "hla2" and masked and lam == 0
    out = fla.chunk_hla2(q, k, v, gamma=float(gamma), scale=float(scale), normalize=normalize, eps=float(eps))[0]
    return {shift}
'''


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def blocks():
    text = (REPO / "README.md").read_text()
    if SECTION not in text:
        fail(f"README.md has no section {SECTION!r}")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(.*?)```", section, re.S)
    if len(found) != 2:
        fail(f"expected 2 python blocks in {SECTION!r}, found {len(found)}")
    return found


def run(cmd, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    shown = " ".join("'<the block>'" if "\n" in c else c for c in cmd)
    print(f"$ (cd {cwd} && {shown}) -> exit {p.returncode}")
    return p.returncode, p.stdout + p.stderr


def main():
    work = Path(sys.argv[1])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    check_block, pytest_block = blocks()

    if CALL not in check_block:
        fail(f"the first block no longer calls {CALL}")
    rc, out = run([sys.executable, "-c", check_block], REPO)
    if rc != 0:
        fail(f"the README's hla_oracle.check block failed:\n{out}")
    rc, out = run([sys.executable, "-c", check_block.replace(CALL, CALL.replace("0.99)", "0.9)"))], REPO)
    if rc == 0 or "AssertionError" not in out:
        fail(f"the block passed a kernel run with the wrong decay (exit {rc}):\n{out}")

    for name, shift, want_pass in (("correct", "out", True), ("shifted", "torch.roll(out, 1, dims=1)", False)):
        folder = work / name
        folder.mkdir()
        (folder / "test_my_kernel.py").write_text(KERNEL.format(repo=str(REPO), shift=shift) + pytest_block)
        rc, out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_kernel.py"], folder)
        passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", out)) else 0
        failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", out)) else 0
        if want_pass and (rc != 0 or passed == 0 or failed):
            fail(f"the README's pytest block failed the {name} kernel:\n{out}")
        if not want_pass and (rc == 0 or failed == 0):
            fail(f"the README's pytest block passed the {name} kernel:\n{out}")
        print(f"{name} kernel: {passed} passed, {failed} failed (as expected)")
    print("PASS: the README's Python quick start runs, passes the example and fails wrong kernels")


if __name__ == "__main__":
    main()
