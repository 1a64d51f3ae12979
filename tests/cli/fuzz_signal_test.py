#!/usr/bin/env python3
"""ctest hla_fuzz_signal: `hla fuzz` killed by SIGTERM (a CI timeout) or SIGINT
(Ctrl-C) in the middle of a case ends the candidate's process group, its
children included, removes the exec adapter's temporary folder, and dies of
the same signal (a shell sees 128 + signo); with --jobs 2, the same for both
jobs' candidates, and no jobs folder is left in --findings.

The candidate (this file, run as `candidate.py MODE PIDS ...`) records its
process group and starts a grandchild `sleep` in it, then sleeps: the signal
always arrives mid-case. TMPDIR points into the test's own folder, where the
exec adapter makes its hla-exec-* folder.

    fuzz_signal_test.py HLA WORK
"""
import os
import pathlib
import signal
import subprocess
import sys
import time


def candidate(mode, pids):
    """The exec candidate (mode 'exec': one case per call; 'server': answers lines)."""
    child = subprocess.Popen(["sleep", "300"])  # in our process group, as a kernel's helper would be
    with open(pids, "a") as f:
        f.write(f"{os.getpid()} {os.getpgid(0)} {child.pid}\n")
    if mode == "server":
        sys.stdin.readline()  # the first request: never answered
    time.sleep(300)


def group_alive(pgid):
    """Processes of group pgid that are not zombies (a container's init may reap late)."""
    alive = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(d.name))
    return alive


def run(hla, work, mode, sig, jobs=1):
    name = f"{mode}_{signal.Signals(sig).name}" + (f"_jobs{jobs}" if jobs > 1 else "")
    tmp, pids = work / f"{name}_tmp", work / f"{name}.pids"
    tmp.mkdir(parents=True)
    me = f"{sys.executable} {pathlib.Path(__file__).resolve()}"
    if mode == "exec":
        adapter = ["--exec", f"{me} --candidate exec {pids} {{in}} {{out}}"]
    else:
        adapter = ["--exec-server", f"{me} --candidate server {pids}"]
    cmd = [hla, "fuzz", *adapter, "--variants", "la1", "--max-n", "8", "--max-cases", "5", "--timeout", "200",
           "--no-progress", "--findings", str(work / f"{name}_findings"), "--jobs", str(jobs)]
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().endswith("\n") and len(pids.read_text().splitlines()) == jobs):
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            return [f"{name}: the candidate never started (exit {proc.returncode}): {err.decode()[-500:]}"]
        time.sleep(0.05)
    started = [tuple(map(int, line.split())) for line in pids.read_text().splitlines()]
    problems = []
    if len(list(tmp.glob("hla-exec-*"))) != jobs:
        problems.append(f"{name}: not {jobs} hla-exec-* folder(s) under TMPDIR={tmp} while the case ran")
    for _, pgid, _ in started:
        if not group_alive(pgid):
            problems.append(f"{name}: the candidate's group {pgid} is not running before the signal")
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        problems.append(f"{name}: hla fuzz still ran 20 s after the signal")
    took = time.monotonic() - t0
    if proc.returncode not in (-sig, 128 + sig):
        problems.append(f"{name}: exit status {proc.returncode}, expected death by signal {sig} (or {128 + sig}); "
                        f"stderr: {err.decode()[-500:]}")
    if f"stopped by signal {sig}" not in out.decode():
        problems.append(f"{name}: the summary on stdout does not say 'stopped by signal {sig}': {out.decode()[-500:]}")
    time.sleep(0.2)  # the killed group's members are reaped by init
    for pid, pgid, grandchild in started:
        left = group_alive(pgid)
        if left:
            problems.append(f"{name}: processes {left} of the candidate's group {pgid} (candidate {pid}, its child "
                            f"{grandchild}) outlived hla fuzz")
            for p in left:
                os.kill(p, signal.SIGKILL)
    findings = work / f"{name}_findings"
    debris = sorted(p.name for p in tmp.iterdir()) + sorted(p.name for p in findings.glob(".jobs-*"))
    if debris:
        problems.append(f"{name}: left in TMPDIR: {debris}")
    print(f"{'ok' if not problems else 'FAILED'}: {name}: exit {proc.returncode} {took:.2f} s after the signal")
    return problems


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--candidate":
        candidate(sys.argv[2], sys.argv[3])
        return 0
    hla, work = sys.argv[1], pathlib.Path(sys.argv[2])
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    problems = []
    for mode, sig in (("exec", signal.SIGTERM), ("exec", signal.SIGINT), ("server", signal.SIGTERM),
                      ("server", signal.SIGINT)):
        problems += run(hla, work, mode, sig)
    # --jobs 2: the signal reaches hla fuzz alone and is passed on to both jobs, each a process group of its own.
    for mode, sig in (("exec", signal.SIGTERM), ("server", signal.SIGINT)):
        problems += run(hla, work, mode, sig, jobs=2)
    for p in problems:
        print("FAILED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
