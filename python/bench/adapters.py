"""Cases per second of one numpy kernel (tests/python/package/kernels.py: la1 and hla2,
n <= 64) through the three ways hla-oracle fuzzes a Python function, on the
same case stream (same support, same seed):

  in-process   hla_oracle.fuzz(kernel, ...)
  exec-server  hla fuzz --exec-server 'python numpy_candidate.py --serve'
  exec         hla fuzz --exec 'python numpy_candidate.py {in} {out}' (a process per case)

    PYTHONPATH=build/python .venv/bin/python python/bench/adapters.py build/tools/hla [--cases N] [--seed S]
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "python" / "package"))
import hla_oracle  # noqa: E402
from kernels import PRECISION, kernel  # noqa: E402

VARIANTS, DTYPES = ["la1", "hla2"], ["f32", "f64", "bf16", "f16"]
FEATURES = ["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den"]
MAX_N = 64


def cli(hla, mode, cases, seed, findings, exact_max_n):
    cmd = f"{sys.executable} {HERE / 'numpy_candidate.py'}"
    adapter = ["--exec-server", cmd + " --serve"] if mode == "exec-server" else ["--exec", cmd + " {in} {out}"]
    args = [hla, "fuzz", *adapter, "--variants", ",".join(VARIANTS), "--dtypes", ",".join(DTYPES), "--features",
            ",".join(FEATURES), "--precision", PRECISION, "--max-n", str(MAX_N), "--seed", str(seed), "--max-cases",
            str(cases), "--no-progress", "--json", "--findings", findings, "--exact-max-n", str(exact_max_n)]
    t = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode not in (0, 1):
        raise SystemExit(f"{mode}: hla fuzz failed ({p.returncode}): {p.stderr}")
    s = json.loads(p.stdout)
    return s["cases"], wall, len(s["findings"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hla")
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--exec-cases", type=int, default=40, help="cases for the process-per-case adapter (slow)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--exact-max-n", type=int, default=48,
                    help="heads up to this long judged against exact rationals (hla fuzz's default 48; 0: the engine)")
    a = ap.parse_args()
    support = hla_oracle.Support(variants=VARIANTS, dtypes=DTYPES, features=FEATURES, max_n=MAX_N, precision=PRECISION)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        r = hla_oracle.fuzz(kernel, support, max_cases=a.cases, seed=a.seed, findings=f"{tmp}/in", progress=False,
                            exact_max_n=a.exact_max_n)
        rows.append(("in-process (hla_oracle.fuzz)", r.cases, time.perf_counter() - t, len(r.findings)))
        rows.append(("exec-server (hla_oracle.serve)", *cli(a.hla, "exec-server", a.cases, a.seed, f"{tmp}/srv", a.exact_max_n)))
        rows.append(("exec, a process per case", *cli(a.hla, "exec", a.exec_cases, a.seed, f"{tmp}/exec", a.exact_max_n)))
    print(f"numpy la1/hla2 kernel, n <= {MAX_N}, dtypes {','.join(DTYPES)}, features {','.join(FEATURES)}, seed {a.seed}, "
          f"exact_max_n {a.exact_max_n}")
    print(f"{'adapter':34} {'cases':>6} {'seconds':>8} {'cases/s':>8} {'ms/case':>8} findings")
    for name, cases, wall, found in rows:
        print(f"{name:34} {cases:6d} {wall:8.2f} {cases / wall:8.1f} {1e3 * wall / cases:8.2f} {found}")


if __name__ == "__main__":
    main()
