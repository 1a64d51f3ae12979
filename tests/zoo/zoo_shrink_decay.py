#!/usr/bin/env python3
"""A decay-only bug's shrunk finding keeps γ < 1.

  zoo_shrink_decay.py HLA ZOO_JSON ZOO_PATHS_JSON REPO_ROOT WORKDIR [--seeds N] [--members A,B]

wrong_decay_power (F decays by γ, not γ²) and e1_decay (the paper's Alg. 1
line 6) compute exactly the right thing at γ = 1. A finding on them that the
shrinker reduced to gamma=1 therefore no longer shows the bug: the shrinker
accepted a reduction that fails for some other reason. For each member and
seed 1..N this runs `hla fuzz --json` (up to 3 findings) and checks that every
finding's shrunk case (FuzzCase::describe(): "... gamma=7/8 ...") has gamma ≠ 1.
A γ = 1 finding says whether the fuzzer found it at γ = 1 already or the
shrinker dropped γ, and is replayed on correct_streaming (a masked-form
implementation) to say whether that passes the same fixture. Exit 1 if any
shrunk finding has gamma = 1 or a member is not caught.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_campaigns import BUGGY_BUDGET, campaign  # noqa: E402


def gamma_of(describe):
    m = re.search(r"\bgamma=(\S+)", describe)
    return m.group(1) if m else None


def main():
    ap = argparse.ArgumentParser(description="decay-only bugs: the shrunk finding keeps gamma < 1")
    for name in ("hla", "zoo_json", "paths_json", "root", "work"):
        ap.add_argument(name)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--members", default="wrong_decay_power,e1_decay")
    a = ap.parse_args()
    zoo = {m["name"]: m for m in json.load(open(a.zoo_json))["members"]}
    paths = json.load(open(a.paths_json))
    os.makedirs(a.work, exist_ok=True)
    bad = []
    for name in a.members.split(","):
        for seed in range(1, a.seeds + 1):
            r = campaign(a.hla, zoo[name], paths, a.root, a.work, seed, BUGGY_BUDGET, 3)
            if not r["findings"]:
                print(f"FAIL {name} seed {seed}: no finding in {r['cases']} cases")
                bad.append(f"{name} seed {seed} (not caught)")
            for f in r["findings"]:
                g = gamma_of(f["shrunk"])
                ok = g is not None and g != "1"
                print(f"{'ok  ' if ok else 'FAIL'} {name} seed {seed} case {f['case_index']}: [{f['kind']}] shrunk to "
                      f"gamma={g}: {f['shrunk']}", flush=True)
                if ok:
                    continue
                bad.append(f"{name} seed {seed} case {f['case_index']}")
                how = "found at gamma=1" if gamma_of(f["original"]) == "1" else "the shrinker dropped gamma"
                print(f"     {how}; original: {f['original']}\n     message: {f['message']}")
                replay = subprocess.run([a.hla, "fuzz", "--lib", paths["correct_streaming"], "--replay", f["fixture"]],
                                        capture_output=True, text=True)
                print(f"     correct_streaming on the shrunk fixture: {replay.stdout.strip() or replay.stderr.strip()}")
    if bad:
        print(f"FAILED: shrunk to gamma = 1 (or not caught): {', '.join(bad)}")
        return 1
    print("all shrunk findings of decay-only bugs keep gamma < 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
