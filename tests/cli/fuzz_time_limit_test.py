#!/usr/bin/env python3
"""ctest hla_fuzz_time_limit: `hla fuzz --time T` is a hard limit. A candidate
that hangs (each call cut by --timeout 5 s) and a buggy one whose findings
shrink for long (an unbounded shrinking budget) both end within a small
margin of T; a finding being shrunk at T keeps the smallest case so far and
is written (the first few of each group are). The campaign's own `seconds` must be within 0.5 s of T, the whole
process (start-up included) within 3 s.

    fuzz_time_limit_test.py HLA ZOO_DIR WORK
"""
import json
import pathlib
import shutil
import subprocess
import sys
import time


def run(hla, zoo, work, member, limit, extra):
    out = work / member
    cmd = [hla, "fuzz", "--lib", str(zoo / f"libzoo_{member}.so"), "--time", str(limit), "--max-cases", "1000000",
           "--shrink-attempts", "1000000", "--json", "--no-progress", "--findings", str(out), *extra]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t
    j = json.loads(p.stdout)
    print(f"{member}: --time {limit}: {wall:.2f} s wall, campaign {j['seconds']:.2f} s, {j['cases']} cases, "
          f"{len(j['findings'])} finding(s); reproduce: {' '.join(cmd)}")
    problems = []
    if j["seconds"] > limit + 0.5 or wall > limit + 3:
        problems.append(f"{member}: ran {j['seconds']:.2f} s ({wall:.2f} s wall) for --time {limit}")
    for f in j["findings"]:
        if f["example"] and not pathlib.Path(f["fixture"]).is_file():
            problems.append(f"{member}: finding {f['kind']} at case {f['case_index']} has no fixture file")
    return j, problems


def main():
    hla, zoo, work = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    problems = []
    # Every 7th length hangs: the call cut at --time, not at --timeout 5.
    _, p = run(hla, zoo, work, "hang", 1.5, ["--timeout", "5"])
    problems += p
    # Findings from the first cases, each shrunk as long as the budget lasts: the deadline cuts the shrinking.
    j, p = run(hla, zoo, work, "e1_decay", 1.0, [])
    problems += p
    if not j["findings"]:
        problems.append("e1_decay: no finding within 1 s")
    for p in problems:
        print("FAILED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
