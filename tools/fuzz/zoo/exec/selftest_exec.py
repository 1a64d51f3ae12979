"""Self-test of the zoo's exec members (issue #5), not the fuzzer's.

    python selftest_exec.py REPO_ROOT WORK_DIR

- correct.py reproduces ref_out / ref_den of every committed fixture whose
  variant it supports (in-process, float64: within 1e-9 x the SPEC §7
  magnitude; normalized outputs through num / D, ill-conditioned ones unscored)
  and refuses hla3_paper with a message;
- each script, run as the fuzzer runs it (`python script IN OUT`, `sh script IN
  OUT`), behaves as zoo.json says: correct output, wrong numbers, wrong shape,
  junk bytes, exit 3, or no result within a timeout.
"""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import safetensors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import correct  # noqa: E402

REL = 1e-9
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def max_err_ratio(path, out, den):
    """Largest |candidate − reference| / tolerance over the scored elements."""
    t, md = correct.read(str(path))
    ref_out, ref_den, mag_num, mag_den = (t[x] for x in ("ref_out", "ref_den", "mag_num", "mag_den"))
    if out.shape != ref_out.shape or den.shape != ref_den.shape:
        return np.inf
    eps = float(Fraction(md["eps"]))
    fin_den = np.isfinite(ref_den)
    worst = float(np.max(np.abs(den - ref_den)[fin_den] / (REL * mag_den[fin_den] + 1e-300), initial=0.0))
    if md["normalize"] == "true":
        D = ref_den + eps if md["eps_mode"] == "add" else np.where(ref_den < 0, -1.0, 1.0) * np.maximum(np.abs(ref_den), eps)
        floor = np.abs(D) - 2 * REL * mag_den
        tol = REL * (mag_num + np.abs(ref_out) * mag_den[..., None]) / np.where(floor > 0, floor, 1.0)[..., None]
        scored = (floor > 0)[..., None] & np.isfinite(ref_out)
    else:
        tol = REL * mag_num
        scored = np.isfinite(ref_out)
    worst_out = float(np.max((np.abs(out - ref_out) / (tol + 1e-300))[scored], initial=0.0))
    return max(worst, worst_out)


def run(root, script, runner, fixture, out_path, timeout=60):
    cmd = ([sys.executable] if runner == "python" else ["sh"]) + [str(root / script), str(fixture), str(out_path)]
    return subprocess.run(cmd, capture_output=True, timeout=timeout, text=True)


def main():
    root, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    fixtures = sorted((root / "fixtures").glob("*.safetensors"))
    check(bool(fixtures), f"fixtures found under {root / 'fixtures'}")

    # correct.py in-process on every fixture.
    for path in fixtures:
        _, md = correct.read(str(path))
        if md["variant"] == "hla3_paper":
            try:
                correct.compute(str(path))
                check(False, f"correct.py refuses hla3_paper ({path.name})")
            except SystemExit as e:
                check("not supported" in str(e), f"correct.py refuses hla3_paper ({path.name})")
            continue
        with np.errstate(all="ignore"):
            out, den = correct.compute(str(path))
        r = max_err_ratio(path, out, den)
        check(r <= 1, f"correct.py matches {path.name} (worst err/tol {r:.3g})")

    members = {m["name"]: m for m in json.loads((root / "tools/fuzz/zoo/zoo.json").read_text())["members"]
               if m["adapter"] == "exec"}
    fx = root / "fixtures"
    ridge = fx / "hla2-ridge-raw-f32-gaussian-n37-d8-B1H2K1.safetensors"  # λ = 1/4, γ = 7/8
    plain = fx / "hla2-raw-f32-gaussian-n37-d8-B1H2K1.safetensors"        # λ = 0
    ridge_g1 = fx / "hla2-ridge-raw-f32-small_int-n20-d8-B1H2K1.safetensors"  # γ = 1
    bf16 = fx / "hla2-add-bf16-gaussian-n37-d8-B1H2K1.safetensors"
    varlen = fx / "ahla-raw-f32-gaussian-n40-d8-B1H2K2-varlen.safetensors"

    def output(member, fixture):
        m = members[member]
        out_path = work / f"{member}-{fixture.stem}.safetensors"
        out_path.unlink(missing_ok=True)
        p = run(root, m["target"], m["runner"], fixture, out_path)
        return p, out_path

    def ratio(member, fixture):
        p, out_path = output(member, fixture)
        if p.returncode != 0 or not out_path.exists():
            return None
        t, _ = correct.read(str(out_path))
        return max_err_ratio(fixture, t["out"], t["den"])

    for fixture in (ridge, bf16, varlen):
        r = ratio("exec_correct", fixture)
        check(r is not None and r <= 1, f"exec_correct run as a command matches {fixture.name} ({r})")
    r = ratio("exec_ridge_off_by_one", ridge)
    check(r is not None and r > 1e3, f"exec_ridge_off_by_one differs on {ridge.name} (err/tol {r})")
    for fixture in (plain, ridge_g1):
        r = ratio("exec_ridge_off_by_one", fixture)
        check(r is not None and r <= 1, f"exec_ridge_off_by_one matches {fixture.name} (err/tol {r})")

    p, out_path = output("exec_wrong_shape", plain)
    ok = p.returncode == 0 and out_path.exists()
    if ok:
        t, _ = correct.read(str(out_path))
        ref, _ = correct.read(str(plain))
        B, H, n, dv = ref["ref_out"].shape
        ok = list(t["out"].shape) == [B, H, n - 1, dv] and list(t["den"].shape) == [B, H, n - 1]
    check(ok, "exec_wrong_shape writes out [B, H, n − 1, dv]")

    p, out_path = output("exec_garbled", plain)
    parsed = True
    try:
        safetensors.deserialize(out_path.read_bytes())
    except Exception:  # noqa: BLE001 — any parse error is the point
        parsed = False
    check(p.returncode == 0 and out_path.exists() and not parsed, "exec_garbled exits 0 with an unparseable file")

    p, out_path = output("exec_fails", plain)
    check(p.returncode == 3 and p.stderr.strip() != "" and not out_path.exists(),
          f"exec_fails exits 3 with a message ({p.returncode}, {p.stderr.strip()!r})")

    m = members["exec_slow"]
    try:
        run(root, m["target"], m["runner"], plain, work / "slow.safetensors", timeout=2)
        check(False, "exec_slow outlives a 2 s timeout")
    except subprocess.TimeoutExpired:
        check(True, "exec_slow outlives a 2 s timeout")

    print("all ok" if not FAILS else f"FAILED: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
