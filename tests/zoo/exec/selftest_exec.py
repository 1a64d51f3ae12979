"""Self-test of the zoo's exec members, not the fuzzer's.

    python selftest_exec.py REPO_ROOT WORK_DIR

- correct.py reproduces ref_out / ref_den of every committed fixture whose
  variant it supports (in-process, float64: within 1e-9 x the SPEC §7
  magnitude; normalized outputs through num / D, ill-conditioned ones unscored)
  and refuses hla3_paper with a message;
- state_difference.py (hla2 only) reproduces every hla2 fixture in float64
  (1e-9) and float32 (1e-5) x the *unmasked* magnitude, the yardstick of its
  class (selftest/magnitude.py), and refuses other variants;
- backward.py (la1 gradients) reproduces ref_dq / ref_dk / ref_dv of the
  unnormalized la1 gradient fixture (float64: within 1e-9 x the SPEC §9
  magnitude), its gqa_unsummed bug does not (the fixture's kv head serves two
  query heads), and it writes no gradients for a fixture without `do`;
- each script, run as the fuzzer runs it (`python script IN OUT [args]`, `sh
  script IN OUT`), behaves as zoo.json says: correct output (in the dtype it
  computes in), wrong numbers, wrong shape, junk bytes, exit 3, or no result
  within a timeout.
"""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import safetensors

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "selftest"))
import backward  # noqa: E402
import correct  # noqa: E402
import final_state  # noqa: E402
import state_difference  # noqa: E402
from magnitude import unmasked_magnitude  # noqa: E402

REL = 1e-9
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def max_err_ratio(path, out, den, rel=REL, unmasked=False):
    """Largest |candidate − reference| / tolerance over the scored elements: rel x the SPEC §7
    magnitude (unmasked: of the unmasked order, for state-difference candidates)."""
    t, md = correct.read(str(path))
    ref_out, ref_den, mag_num, mag_den = (t[x] for x in ("ref_out", "ref_den", "mag_num", "mag_den"))
    if unmasked:
        mag_num, mag_den = unmasked_magnitude(t, md)
    if out.shape != ref_out.shape or den.shape != ref_den.shape:
        return np.inf
    eps = float(Fraction(md["eps"]))
    fin_den = np.isfinite(ref_den)
    worst = float(np.max(np.abs(den - ref_den)[fin_den] / (rel * mag_den[fin_den] + 1e-300), initial=0.0))
    if md["normalize"] == "true":
        D = ref_den + eps if md["eps_mode"] == "add" else np.where(ref_den < 0, -1.0, 1.0) * np.maximum(np.abs(ref_den), eps)
        floor = np.abs(D) - 2 * rel * mag_den
        tol = rel * (mag_num + np.abs(ref_out) * mag_den[..., None]) / np.where(floor > 0, floor, 1.0)[..., None]
        scored = (floor > 0)[..., None] & np.isfinite(ref_out)
    else:
        tol = rel * mag_num
        scored = np.isfinite(ref_out)
    worst_out = float(np.max((np.abs(out - ref_out) / (tol + 1e-300))[scored], initial=0.0))
    return max(worst, worst_out)


def run(root, script, runner, fixture, out_path, timeout=60, args=()):
    cmd = ([sys.executable] if runner == "python" else ["sh"]) + [str(root / script), str(fixture), str(out_path), *args]
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

    # state_difference.py in-process, both compute dtypes, on every hla2 fixture.
    for path in fixtures:
        _, md = correct.read(str(path))
        if md["variant"] != "hla2":
            continue
        for dtype, rel in ((np.float64, 1e-9), (np.float32, 1e-5)):
            with np.errstate(all="ignore"):
                out, den = state_difference.compute(str(path), dtype)
            r = max_err_ratio(path, out.astype(np.float64), den.astype(np.float64), rel, unmasked=True)
            check(r <= 1 and out.dtype == dtype, f"state_difference.py {dtype.__name__} matches {path.name} (worst err/tol {r:.3g})")
    try:
        state_difference.compute(str(fixtures[0]))  # ahla
        check(False, f"state_difference.py refuses {fixtures[0].name}")
    except SystemExit as e:
        check("not supported" in str(e), f"state_difference.py refuses {fixtures[0].name}")

    members = {m["name"]: m for m in json.loads((root / "tests/zoo/zoo.json").read_text())["members"]
               if m["adapter"] in ("exec", "exec_server")}
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
        # A server member runs here as a plain IN OUT command, with its args but --serve.
        p = run(root, m["target"], m["runner"], fixture, out_path, args=[a for a in m.get("args", []) if a != "--serve"])
        return p, out_path

    def ratio(member, fixture, rel=REL, unmasked=False, dtype="F64"):
        p, out_path = output(member, fixture)
        if p.returncode != 0 or not out_path.exists():
            return None
        raw = dict(safetensors.deserialize(out_path.read_bytes()))
        if raw["out"]["dtype"] != dtype or raw["den"]["dtype"] != dtype:
            return np.inf
        t, _ = correct.read(str(out_path))
        return max_err_ratio(fixture, t["out"].astype(np.float64), t["den"].astype(np.float64), rel, unmasked)

    for fixture in (ridge, bf16, varlen):
        r = ratio("exec_correct", fixture)
        check(r is not None and r <= 1, f"exec_correct run as a command matches {fixture.name} ({r})")
    hla2_gqa = fx / "hla2-raw-f32-gaussian-n17-d8-B2H4K2.safetensors"  # grouped heads, B = 2
    for member, rel, dtype in (("exec_state_difference_f64", 1e-9, "F64"), ("exec_state_difference_f32", 1e-5, "F32")):
        for fixture in (ridge, bf16, hla2_gqa):
            r = ratio(member, fixture, rel, unmasked=True, dtype=dtype)
            check(r is not None and r <= 1, f"{member} run as a command writes {dtype} and matches {fixture.name} ({r})")
        p, out_path = output(member, varlen)
        check(p.returncode != 0 and "not supported" in p.stderr, f"{member} refuses {varlen.name} (exit {p.returncode})")
    r = ratio("exec_ridge_off_by_one", ridge)
    check(r is not None and r > 1e3, f"exec_ridge_off_by_one differs on {ridge.name} (err/tol {r})")
    for fixture in (plain, ridge_g1):
        r = ratio("exec_ridge_off_by_one", fixture)
        check(r is not None and r <= 1, f"exec_ridge_off_by_one matches {fixture.name} (err/tol {r})")

    grad = fx / "la1-raw-f32-gaussian-n37-d8-B1H2K1-grad.safetensors"
    t, _ = correct.read(str(grad))
    for bug, want in ((None, "matches"), ("gqa_unsummed", "differs from")):
        with np.errstate(all="ignore"):
            got = backward.gradients(str(grad), bug)
        worst = max(float(np.max(np.abs(g - t["ref_" + x]) / (REL * t["mag_" + x] + 1e-300)))
                    for x, g in zip(("dq", "dk", "dv"), got))
        check((worst <= 1) == (bug is None), f"backward.py{' --bug ' + bug if bug else ''} {want} {grad.name} (worst err/tol {worst:.3g})")
    p, out_path = output("exec_backward", grad)
    names = set(dict(safetensors.deserialize(out_path.read_bytes()))) if p.returncode == 0 and out_path.exists() else set()
    check(names == {"out", "den", "dq", "dk", "dv"}, f"exec_backward run as a command writes out, den, dq, dk, dv ({sorted(names)})")
    p, out_path = output("exec_backward", plain)
    names = set(dict(safetensors.deserialize(out_path.read_bytes()))) if p.returncode == 0 and out_path.exists() else set()
    check(names == {"out", "den"}, f"exec_backward without do writes out, den only ({sorted(names)})")

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

    check_final_states(fixtures)
    print("all ok" if not FAILS else f"FAILED: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


def check_final_states(fixtures):
    """final_state.py reproduces every fixture's final state (state.<part>) within 1e-9 x its magnitude and
    its outputs as correct.py does; each bug changes the state and leaves the outputs as they are."""
    for path in fixtures:
        t, md = correct.read(str(path))
        if md["variant"] == "hla3_paper" or not any(k.startswith("state.") for k in t) or not np.all(np.isfinite(t["q"])):
            continue
        worst = {}
        for bug in ("", "not_decayed", "stale_part"):
            with np.errstate(all="ignore"):
                out, den, states = final_state.compute(str(path), final_state.Bugs(**({bug: True} if bug else {})))
            worst[bug] = max(float(np.max(np.abs(x - t[k]) / (REL * t["mag_" + k] + 1e-300), initial=0.0)) for k, x in states.items())
            check(max_err_ratio(path, out, den) <= 1, f"final_state.py{' --bug ' + bug if bug else ''}: outputs of {path.name}")
        check(worst[""] <= 1, f"final_state.py matches the final state of {path.name} (worst err/tol {worst[''] :.3g})")
        decays = md["gamma"] != "1" and int(md["n"]) >= 2  # a carry before the last token, and a decay to miss
        check(worst["stale_part"] > 1 and (not decays or worst["not_decayed"] > 1),
              f"final_state.py's bugs change the final state of {path.name}")


if __name__ == "__main__":
    sys.exit(main())
