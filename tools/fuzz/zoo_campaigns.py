#!/usr/bin/env python3
"""The fuzzer against the bug zoo (issue #5): every buggy member is caught,
with the finding kind zoo.json expects, within a fixed case budget; every
correct member passes a campaign with zero findings.

  zoo_campaigns.py HLA ZOO_JSON ZOO_PATHS_JSON REPO_ROOT WORKDIR [--seeds N] [--table]

--seeds N runs each buggy member with seeds 1..N and --table prints the median
cases and seconds to detection (the closing note's zoo table). Exit 1 on any
miss. Deterministic for given seeds.
"""
import json
import os
import shlex
import statistics
import subprocess
import sys

BUGGY_BUDGET = 300     # cases within which each bug must be found
CORRECT_CABI = 150     # cases a correct library must pass
CORRECT_EXEC = 30      # cases the (slow, one process per case) correct script must pass


def campaign(hla, member, paths, root, work, seed, budget, stop_after):
    findings = os.path.join(work, f"{member['name']}-{seed}")
    cmd = [hla, "fuzz", "--seed", str(seed), "--max-cases", str(budget), "--findings", findings, "--json", "--no-progress"]
    if stop_after:
        cmd += ["--stop-after", str(stop_after)]
    if member["adapter"] == "cabi":
        # Generous for correct members (a loaded CI machine must not turn a slow case into a
        # "timeout" finding); short for the buggy ones, where the hang member waits it out.
        cmd += ["--lib", paths[member["name"]], "--timeout", "10" if member["correct"] else "2"]
    else:
        runner = os.path.join(root, ".venv", "bin", "python") if member["runner"] == "python" else "sh"
        script = os.path.join(root, member["target"])
        cmd += ["--exec", f"{shlex.quote(runner)} {shlex.quote(script)} {{in}} {{out}}", "--variants",
                ",".join(member["variants"]), "--dtypes", "f64,f32,bf16,f16", "--features", "all", "--precision", "f64",
                "--timeout", "5", "--max-n", "300"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def main():
    hla, zoo_json, paths_json, root, work = sys.argv[1:6]
    seeds = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 1
    table = "--table" in sys.argv
    zoo = json.load(open(zoo_json))["members"]
    paths = json.load(open(paths_json))
    os.makedirs(work, exist_ok=True)
    misses, rows = [], []
    for m in zoo:
        if m["correct"]:
            budget = CORRECT_CABI if m["adapter"] == "cabi" else CORRECT_EXEC
            r = campaign(hla, m, paths, root, work, 1, budget, 0)
            ok = not r["findings"]
            print(f"{'ok ' if ok else 'MISS'} {m['name']}: {r['cases']} cases, {len(r['findings'])} findings, "
                  f"{1e3 * r['seconds'] / max(1, r['cases']):.1f} ms/case", flush=True)
            for f in r["findings"]:
                print(f"     unexpected [{f['kind']}] {f['message']}\n     {f['shrunk']}")
            if not ok:
                misses.append(m["name"])
            continue
        cases, secs = [], []
        for seed in range(1, seeds + 1):
            r = campaign(hla, m, paths, root, work, seed, BUGGY_BUDGET, 1)
            f = r["findings"][0] if r["findings"] else None
            ok = f is not None and f["kind"] == m["expected_finding"]
            print(f"{'ok ' if ok else 'MISS'} {m['name']} seed {seed}: " +
                  (f"[{f['kind']}] after {f['cases_run']} cases, {f['seconds']:.2f} s; shrunk to {f['shrunk']}" if f else
                   f"no finding in {r['cases']} cases") + (f" (expected {m['expected_finding']})" if not ok else ""), flush=True)
            if ok:
                cases.append(f["cases_run"])
                secs.append(f["seconds"])
            else:
                misses.append(f"{m['name']} (seed {seed})")
        rows.append((m["name"], m["adapter"], m["expected_finding"], len(cases), seeds,
                     statistics.median(cases) if cases else None, statistics.median(secs) if secs else None))
    if table:
        print("\n| member | adapter | finding | caught | median cases | median seconds |\n|---|---|---|---|---|---|")
        for name, ad, kind, k, n, mc, ms in rows:
            print(f"| {name} | {ad} | {kind} | {k}/{n} | {mc if mc is not None else '-'} | "
                  f"{f'{ms:.2f}' if ms is not None else '-'} |")
    if misses:
        print("missed:", ", ".join(misses))
        return 1
    print(f"all {len(zoo)} zoo members judged as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
