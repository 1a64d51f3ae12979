#!/usr/bin/env python3
"""The fuzzer against the bug zoo: every buggy member is caught,
with the finding kind zoo.json expects, within a fixed case budget; every
correct member passes a campaign with zero findings.

  zoo_campaigns.py HLA ZOO_JSON ZOO_PATHS_JSON REPO_ROOT WORKDIR [--seeds N] [--table]
                   [--only NAME[,NAME...]] [--correct-cases N] [--worker persistent|fork]

--seeds N runs each buggy member with seeds 1..N and --table prints the median
cases and seconds to detection (docs/fuzzing.md quotes the medians). --only runs the
named members only; --correct-cases N runs each correct member for N cases
instead of the default budgets (e.g. N = 2000, to measure false alarms).
Exec members are declared to the fuzzer from their zoo.json entry: `args`
(after {in} {out}), `variants`, `dtypes` (default all four), `features` (default all), `precision`
(default f64), `form_class` (default masked) and `timeout` (seconds per problem, default 5:
python's start-up on a loaded machine). A buggy member's `shrunk_has` (optional) lists strings its
shrunk finding ("minimal case; needs") must contain: what its bug needs to show (packed sequences, bf16, ...);
"a|b": either. A buggy member's finding must be diagnosed as its `diagnosis` (a catalog row, check/src/catalog.cpp)
and a member without one as nothing; `named_by` says what names such a member instead: "kind" (its finding kind
says what is wrong: a crash, timeout, bad output, error, NaN reaching the past) or a failed rule (grad_nonfinite). C ABI members run with a 10 s timeout if correct, else
2 s or their entry's `timeout`. Exit 1 on any miss.
Deterministic for given seeds.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

BUGGY_BUDGET = 300     # cases within which each bug must be found
# Finding kinds that name their cause (a member with "named_by": "kind" is found with one of these).
CAUSE_KINDS = {"crash", "timeout", "bad_output", "error", "nan_causality", "gradient_nan_causality"}
CORRECT_CABI = 150     # cases a correct library (or exec server) must pass
CORRECT_EXEC = 30      # cases the (slow, one process per case) correct script must pass


def campaign(hla, member, paths, root, work, seed, budget, stop_after, worker="persistent"):
    findings = os.path.join(work, f"{member['name']}-{seed}")
    cmd = [hla, "fuzz", "--seed", str(seed), "--max-cases", str(budget), "--findings", findings, "--json", "--no-progress"]
    if stop_after:
        cmd += ["--stop-after", str(stop_after)]
    if member["adapter"] == "cabi":
        # Generous for correct members (a loaded CI machine must not turn a slow case into a
        # "timeout" finding); short for the buggy ones, shorter where the member's entry says
        # (hang: the finding and each shrink attempt that still hangs wait it out).
        timeout = member.get("timeout", 10 if member["correct"] else 2)
        cmd += ["--lib", paths[member["name"]], "--timeout", str(timeout), "--worker", worker]
    else:
        runner = os.path.join(root, ".venv", "bin", "python") if member["runner"] == "python" else "sh"
        script = os.path.join(root, member["target"])
        if member["adapter"] == "exec_server":  # one process, a request line per case
            cmd += ["--exec-server", " ".join(shlex.quote(a) for a in [runner, script, *member.get("args", [])])]
        else:
            cmd += ["--exec", " ".join(shlex.quote(a) for a in [runner, script, "{in}", "{out}", *member.get("args", [])])]
        cmd += ["--variants", ",".join(member["variants"]),
                "--dtypes", ",".join(member.get("dtypes", ["f64", "f32", "bf16", "f16"])), "--features", member.get("features", "all"),
                "--precision", member.get("precision", "f64"), "--form-class", member.get("form_class", "masked"),
                "--timeout", str(member.get("timeout", 5)), "--max-n", "300"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def diagnosed(f):
    """The catalog row a finding's cause names (its width dropped: "E5/16" is E5), or None."""
    cause = f.get("cause", "") if f else ""
    return cause[len("matches "):].split("/")[0] if cause.startswith("matches ") else None


def reproduces_row_failure(hla, f):
    """A gradient finding's fixture carries the upstream and reference gradients, its
    candidate file dq, dk, dv: `hla check` must fail them on a gradient row; a final-state
    finding's candidate holds state.<part>: `hla check` must fail a state row."""
    rows = ("state.",) if f["kind"] == "final_state" else ("dq", "dk", "dv")
    proc = subprocess.run([hla, "check", f["fixture"], f["candidate"], "--precision", f["precision"]] +
                          ([] if f["kind"] == "final_state" else ["--require-grad"]), capture_output=True, text=True)
    failing = [line for line in proc.stdout.splitlines() if line.strip().startswith(rows) and "FAIL" in line]
    if proc.returncode != 1 or not failing:
        print(f"     hla check on the finding exited {proc.returncode}, failing rows: {failing}\n{proc.stdout[-2000:]}")
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description="the fuzzer against the bug zoo")
    for name in ("hla", "zoo_json", "paths_json", "root", "work"):
        ap.add_argument(name)
    ap.add_argument("--seeds", type=int, default=1, help="run each buggy member with seeds 1..N")
    ap.add_argument("--table", action="store_true", help="print the median detection table")
    ap.add_argument("--only", default="", help="comma list of members to run (default: all)")
    ap.add_argument("--correct-cases", type=int, default=0, help="cases per correct member (default: per adapter)")
    ap.add_argument("--worker", default="persistent", choices=["persistent", "fork"],
                    help="how C ABI members run (hla fuzz --worker)")
    ap.add_argument("--shard", default="0/1", help="i/N: run members i, i+N, i+2N, ... (ctest runs the shards in parallel)")
    a = ap.parse_args()
    hla, root, work, seeds = a.hla, a.root, a.work, a.seeds
    zoo = json.load(open(a.zoo_json))["members"]
    both = [m["name"] for m in zoo if m.get("diagnosis") and m.get("named_by")]
    if both:
        raise SystemExit(f"zoo.json: {', '.join(both)} has both a diagnosis and named_by")
    paths = json.load(open(a.paths_json))
    if a.only:
        wanted = set(a.only.split(","))
        unknown = wanted - {m["name"] for m in zoo}
        if unknown:
            raise SystemExit(f"--only: no zoo member named {', '.join(sorted(unknown))}")
        zoo = [m for m in zoo if m["name"] in wanted]
    shard, shards = (int(x) for x in a.shard.split("/"))
    if not 0 <= shard < shards:
        raise SystemExit(f"--shard must be i/N with 0 <= i < N, got {a.shard}")
    zoo = zoo[shard::shards]
    os.makedirs(work, exist_ok=True)
    misses, rows = [], []
    for m in zoo:
        if m["correct"]:
            budget = a.correct_cases or (CORRECT_EXEC if m["adapter"] == "exec" else CORRECT_CABI)
            r = campaign(hla, m, paths, root, work, 1, budget, 0, a.worker)
            ok = not r["findings"]
            print(f"{'ok ' if ok else 'MISS'} {m['name']}: {r['cases']} cases, {len(r['findings'])} findings, "
                  f"{1e3 * r['seconds'] / max(1, r['cases']):.1f} ms/case", flush=True)
            for f in r["findings"]:
                print(f"     unexpected [{f['kind']}] {f['message']}\n     {f['shrunk']}")
            if not ok:
                misses.append(m["name"])
            continue
        cases, secs, names = [], [], []
        for seed in range(1, seeds + 1):
            r = campaign(hla, m, paths, root, work, seed, BUGGY_BUDGET, 1, a.worker)
            f = r["findings"][0] if r["findings"] else None
            ok = f is not None and f["kind"] == m["expected_finding"]
            if ok and (f["kind"].startswith("gradient") or f["kind"] == "final_state"):
                ok = reproduces_row_failure(hla, f)
            shrunk = f"{f['shrunk']}; needs: {f['needs']}" if f else ""
            missing = [x for x in m.get("shrunk_has", []) if not any(alt in shrunk for alt in x.split("|"))]
            if ok and missing:
                print(f"     the shrunk finding lacks {missing}: caught, but not by what its bug needs")
                ok = False
            named = diagnosed(f)
            names.append(named or "-")
            by = m.get("named_by")
            if ok and by is not None and not (f["kind"] in CAUSE_KINDS if by == "kind" else by in f.get("rules", "").split(",")):
                print(f"     named_by {by}: its finding [{f['kind']}] (rules {f.get('rules', '')}) does not say so")
                ok = False
            if ok and named != m.get("diagnosis"):
                print(f"     diagnosed as {named or 'nothing'}, zoo.json says {m.get('diagnosis') or 'nothing'} (its cause: {f['cause']})")
                ok = False
            print(f"{'ok ' if ok else 'MISS'} {m['name']} seed {seed}: " +
                  (f"[{f['kind']}] after {f['cases_run']} cases, {f['seconds']:.2f} s, named {named or '-'}; shrunk to {f['shrunk']}"
                   if f else
                   f"no finding in {r['cases']} cases") + (f" (expected {m['expected_finding']})" if not ok else ""), flush=True)
            if ok:
                cases.append(f["cases_run"])
                secs.append(f["seconds"])
            else:
                misses.append(f"{m['name']} (seed {seed})")
        rows.append((m["name"], m["adapter"], m["expected_finding"], "/".join(sorted(set(names))), len(cases), seeds,
                     statistics.median(cases) if cases else None, statistics.median(secs) if secs else None))
    if a.table:
        print("\n| member | adapter | finding | named | caught | median cases | median seconds |\n|---|---|---|---|---|---|---|")
        for name, ad, kind, named, k, n, mc, ms in rows:
            print(f"| {name} | {ad} | {kind} | {named} | {k}/{n} | {mc if mc is not None else '-'} | "
                  f"{f'{ms:.2f}' if ms is not None else '-'} |")
    if misses:
        print("missed:", ", ".join(misses))
        return 1
    print(f"all {len(zoo)} zoo members judged as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
