#!/usr/bin/env python3
"""Mutation testing of hla-oracle: is every check checked?

Each mutant (tests/mutate/mutants.py) is one realistic change to the product's
C++ source: an exact piece of text in one file and its replacement. The runner
applies it to a scratch copy of the source, compiles only the objects that
include the changed file and that the mutant's tests link, relinks only the
archives and programs that contain them (into a folder of its own), runs the
mutant's tests against those programs and reports whether a test failed
(killed), none did (survived), or it did not compile (build error).

  mutate.py [--list | --check]                     the mutants; --check: every original occurs once
  mutate.py [--only ID[,ID...]] [--area A]         run all (default), some, or one area
  mutate.py --sample N [--seed S]                  N mutants chosen by the seed (printed, with how to reproduce)
  mutate.py ... [--json FILE|-] [--jobs J] [--work DIR] [--base-build DIR] [--timeout S]

How the base is kept intact: the scratch copy (WORK/src, synced from the
working tree, never the working tree itself) is built once into WORK/build
(incrementally on later runs). A mutant is written into WORK/src, the affected
objects are compiled from it into WORK/mutant/ with the base build's own
compile commands, and the file is restored (content and time stamp) before the
tests run, so the base build never sees a change and never rebuilds; a journal
(WORK/journal.json) restores it after a kill. --base-build DIR uses an existing
build of the working tree (CI: the main build) instead of WORK/build; its
compile commands are redirected to WORK/src. Tests are those of the base build
(`ctest --show-only=json-v1`), run by this script with every path to a relinked
program replaced by the mutant's.

Reference headers are compiled into six instantiation units (one per scalar
type, ~1 min each on one core): a mutant may name `units` (e.g. ["rational"]),
and then only those units get the change (the others keep the original code);
its tests must then be ones that compute in those scalars only (the exact
properties compute in rationals). Python 3 standard library only.
"""
import argparse
import base64
import concurrent.futures
import fcntl
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import tempfile
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

AREAS = ("reference", "scan", "check", "fuzz", "io")
FIELDS = ("id", "file", "original", "replacement", "area", "tests", "description")


def load_mutants():
    from mutants import MUTANTS  # noqa: E402
    errors, seen = [], set()
    for i, m in enumerate(MUTANTS):
        missing = [f for f in FIELDS if f not in m]
        if missing:
            errors.append(f"mutant #{i} ({m.get('id', '?')}): missing {', '.join(missing)}")
            continue
        if m["id"] in seen:
            errors.append(f"mutant {m['id']}: duplicate id")
        seen.add(m["id"])
        if m["area"] not in AREAS:
            errors.append(f"mutant {m['id']}: area {m['area']!r} is not one of {', '.join(AREAS)}")
        if m["original"] == m["replacement"]:
            errors.append(f"mutant {m['id']}: replacement equals the original")
        try:
            re.compile(m["tests"])
        except re.error as e:
            errors.append(f"mutant {m['id']}: tests regex: {e}")
    return MUTANTS, errors


def is_heavy(m):
    """A mutant in a reference header recompiles instantiation units."""
    return m["file"].startswith("reference/include/")


def check_originals(mutants, root):
    """Every mutant's original text occurs exactly once in its file."""
    errors = []
    for m in mutants:
        path = os.path.join(root, m["file"])
        try:
            text = open(path, encoding="utf-8").read()
        except OSError as e:
            errors.append(f"{m['id']}: {m['file']}: {e.strerror}")
            continue
        n = text.count(m["original"])
        if n != 1:
            errors.append(f"{m['id']}: the original text occurs {n} times in {m['file']} (must be exactly once): "
                          f"{m['original'][:80]!r}")
    return errors


# ---------------------------------------------------------------- processes

_children = set()
_children_lock = threading.Lock()
_stopping = threading.Event()  # set on Ctrl-C / SIGTERM: no new process starts


def run(cmd, cwd=None, env=None, timeout=None, capture=True):
    """Runs cmd in a session of its own (killed whole, with every process it
    started, on timeout or Ctrl-C). Output goes to a file, not a pipe, so that
    a descendant left behind cannot hold the wait open.
    Returns (returncode or None on timeout, output)."""
    if _stopping.is_set():
        raise KeyboardInterrupt
    with tempfile.TemporaryFile(mode="w+", errors="replace") as out:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out if capture else None,
                             stderr=subprocess.STDOUT if capture else None, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        with _children_lock:
            _children.add(p)
        if _stopping.is_set():
            kill(p)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(p)
            p.wait()
            rc = None
        finally:
            kill_session(p.pid)  # whatever it left behind (a forked child in a group of its own)
            with _children_lock:
                _children.discard(p)
        out.seek(0)
        return rc, out.read() if capture else ""


def kill_session(sid):
    """SIGKILL every process of session sid (the runner starts each command as a session leader)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid:  # state, ppid, pgrp, session
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass


def kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_session(p.pid)


def kill_all():
    with _children_lock:
        for p in list(_children):
            kill(p)


def checked(cmd, cwd=None, what=""):
    rc, out = run(cmd, cwd=cwd)
    if rc != 0:
        sys.exit(f"mutate: {what or ' '.join(cmd)} failed (exit {rc}):\n{out[-4000:]}")
    return out


# ---------------------------------------------------------------- scratch source

class Scratch:
    """WORK/src: a copy of the working tree's tracked and untracked (not
    ignored) files. Mutants are applied here only, with a journal."""

    def __init__(self, work):
        self.work = work
        self.src = os.path.join(work, "src")
        self.journal = os.path.join(work, "journal.json")

    def recover(self):
        if not os.path.exists(self.journal):
            return
        j = json.load(open(self.journal))
        self._restore(j)
        print(f"mutate: restored {j['file']} after an interrupted run", file=sys.stderr)

    def _restore(self, j):
        path = os.path.join(self.src, j["file"])
        with open(path, "wb") as f:
            f.write(base64.b64decode(j["content"]))
        os.utime(path, ns=(j["atime_ns"], j["mtime_ns"]))
        os.remove(self.journal)

    def sync(self, root):
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True,
                             check=True).stdout.decode()
        files = sorted({f for f in out.split("\0") if f})
        changed = 0
        for rel in files:
            a, b = os.path.join(root, rel), os.path.join(self.src, rel)
            if not os.path.lexists(a):
                continue  # deleted in the working tree, not yet in the index
            if os.path.islink(a):
                target = os.readlink(a)
                if not (os.path.islink(b) and os.readlink(b) == target):
                    if os.path.lexists(b):
                        os.remove(b)
                    os.makedirs(os.path.dirname(b), exist_ok=True)
                    os.symlink(target, b)
                    changed += 1
                continue
            data = open(a, "rb").read()
            if os.path.isfile(b) and not os.path.islink(b) and open(b, "rb").read() == data:
                continue
            os.makedirs(os.path.dirname(b), exist_ok=True)
            with open(b, "wb") as f:
                f.write(data)
            shutil.copymode(a, b)
            changed += 1
        # Files that left the working tree leave the copy too.
        listed = os.path.join(self.work, "src.files")
        if os.path.exists(listed):
            for rel in set(open(listed).read().split("\0")) - set(files):
                if rel and os.path.lexists(os.path.join(self.src, rel)):
                    os.remove(os.path.join(self.src, rel))
                    changed += 1
        with open(listed, "w") as f:
            f.write("\0".join(files))
        venv = os.path.join(self.src, ".venv")
        if os.path.isdir(os.path.join(root, ".venv")) and not os.path.lexists(venv):
            os.symlink(os.path.realpath(os.path.join(root, ".venv")), venv)
        return changed

    def apply(self, m):
        path = os.path.join(self.src, m["file"])
        data = open(path, "rb").read()
        text = data.decode("utf-8")
        n = text.count(m["original"])
        if n != 1:
            raise MutantError(f"the original text occurs {n} times in {m['file']} (must be exactly once)")
        st = os.stat(path)
        tmp = self.journal + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"file": m["file"], "content": base64.b64encode(data).decode(), "atime_ns": st.st_atime_ns,
                       "mtime_ns": st.st_mtime_ns}, f)
        os.replace(tmp, self.journal)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(m["original"], m["replacement"], 1))

    def restore(self):
        if os.path.exists(self.journal):
            self._restore(json.load(open(self.journal)))


class MutantError(Exception):
    pass


# ---------------------------------------------------------------- the base build

def parse_depfile(path):
    try:
        text = open(path).read()
    except OSError:
        return set()
    text = text.replace("\\\n", " ")
    deps = set()
    for line in text.splitlines():
        if ":" not in line:
            continue
        _, rhs = line.split(":", 1)
        deps.update(t for t in rhs.split() if t)
    return deps


class Build:
    """The base build: compile commands, link commands, dependencies, tests."""

    def __init__(self, bdir, src_of_base, scratch_src):
        self.bdir = os.path.realpath(bdir)
        self.src_of_base = os.path.realpath(src_of_base)
        self.scratch = os.path.realpath(scratch_src)
        # Paths into the base's sources (not into the build folder, which may lie inside them) go to the scratch copy.
        if self.src_of_base == self.scratch:
            self.redirect = None
        else:
            inner = os.path.relpath(self.bdir, self.src_of_base)
            guard = "" if inner.startswith("..") else r"(?!" + re.escape(inner) + r"(/|$))"
            self.redirect = re.compile(re.escape(self.src_of_base) + r"/" + guard)
        self.objects = {}  # abs object path -> compile entry
        for e in json.load(open(os.path.join(self.bdir, "compile_commands.json"))):
            out = e.get("output") or self._output_of(e)
            obj = os.path.normpath(os.path.join(e["directory"], out))
            self.objects[obj] = e
        self._deps = {}
        self.artifacts = {}  # abs output -> {"dir", "commands", "inputs", "kind"}
        for dirpath, dirnames, filenames in os.walk(self.bdir):
            if "link.txt" in filenames and dirpath.endswith(".dir") and os.path.basename(os.path.dirname(dirpath)) == "CMakeFiles":
                self._add_artifact(dirpath)
            dirnames[:] = [d for d in dirnames if not d.startswith("_deps")]
        if not self.artifacts:  # the link commands are read from the Makefile generator's link.txt files
            sys.exit(f"mutate: no link commands (CMakeFiles/*.dir/link.txt) under {self.bdir}: the base build must use "
                     "CMake's Unix Makefiles generator (scripts/setup.sh's default)")

    @staticmethod
    def _output_of(e):
        args = shlex.split(e["command"])
        return args[args.index("-o") + 1]

    def _add_artifact(self, target_dir):
        cwd = os.path.dirname(os.path.dirname(target_dir))
        lines = [ln for ln in open(os.path.join(target_dir, "link.txt")).read().splitlines() if ln.strip()]
        cmds = [shlex.split(ln) for ln in lines]
        first = cmds[0]
        if os.path.basename(first[0]).endswith("ar") and len(first) > 2:
            kind, out = "archive", first[2]
        elif "-o" in first:
            kind, out = ("shared" if "-shared" in first else "program"), first[first.index("-o") + 1]
        else:
            return
        out = os.path.normpath(os.path.join(cwd, out))
        inputs = []
        for c in cmds:
            for t in c:
                p = os.path.normpath(os.path.join(cwd, t))
                if t.endswith((".o", ".a", ".so")) and p != out:
                    inputs.append(p)
        self.artifacts[out] = {"dir": cwd, "commands": cmds, "inputs": inputs, "kind": kind}

    def deps(self, obj):
        if obj not in self._deps:
            d = {os.path.normpath(os.path.join(self.objects[obj]["directory"], x)) for x in parse_depfile(obj + ".d")}
            d.add(os.path.normpath(os.path.join(self.objects[obj]["directory"], self.objects[obj]["file"])))
            self._deps[obj] = {os.path.realpath(x) for x in d}
        return self._deps[obj]

    def closure(self, roots):
        """Artifacts and objects the given artifacts are made of (archives they link, recursively)."""
        arts, objs, todo = set(), set(), list(roots)
        while todo:
            a = todo.pop()
            if a in arts or a not in self.artifacts:
                continue
            arts.add(a)
            for i in self.artifacts[a]["inputs"]:
                if i in self.objects:
                    objs.add(i)
                elif i in self.artifacts:
                    todo.append(i)
        return arts, objs

    def compile_command(self, obj, out):
        e = self.objects[obj]
        args = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        res, skip = [], 0
        for i, a in enumerate(args):
            if skip:
                skip -= 1
                continue
            if a in ("-MD", "-MMD"):
                continue
            if a in ("-MT", "-MF", "-MQ"):
                skip = 1
                continue
            if a == "-o":
                res += ["-o", out]
                skip = 1
                continue
            res.append(self.redirect.sub(self.scratch + "/", a) if self.redirect else a)
        # A unity source (HLA_UNITY_BUILD) lies in the build folder and includes the base's
        # sources by absolute path: compile a copy that includes the scratch copy's.
        src = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if self.redirect and src.startswith(self.bdir + "/") and "/Unity/" in src:
            copy = out + ".unity" + os.path.splitext(src)[1]
            with open(copy, "w") as f:
                f.write(self.redirect.sub(self.scratch + "/", open(src).read()))
            res = [copy if a == e["file"] or os.path.realpath(os.path.join(e["directory"], a)) == src else a for a in res]
        return res, e["directory"]


# ---------------------------------------------------------------- tests

class Tests:
    def __init__(self, build):
        out = checked(["ctest", "--test-dir", build.bdir, "--show-only=json-v1"], what="ctest --show-only")
        self.tests = {}
        for t in json.loads(out)["tests"]:
            props = {p["name"]: p["value"] for p in t.get("properties", [])}
            self.tests[t["name"]] = {"name": t["name"], "command": t.get("command") or [], "props": props}
        self.artifact_paths = sorted(build.artifacts, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(p) for p in self.artifact_paths) + r"(?![\w.+-])") if self.artifact_paths else None

    def select(self, regex):
        r = re.compile(regex)
        return [n for n in self.tests if r.search(n)]

    def artifacts_of(self, name):
        found = set()
        for a in self.tests[name]["command"]:
            if self._pattern:
                found.update(m.group(0) for m in self._pattern.finditer(a))
        return found

    def run(self, name, subst, timeout):
        """Runs one test with the program paths in subst replaced. Returns (ok, why)."""
        t = self.tests[name]
        cmd = t["command"]
        if subst:
            pat = re.compile("|".join(re.escape(p) for p in sorted(subst, key=len, reverse=True)) + r"(?![\w.+-])")
            cmd = [pat.sub(lambda m: subst[m.group(0)], a) for a in cmd]
        if not cmd:
            return False, "no command (not built?)"
        props = t["props"]
        env = dict(os.environ)
        for kv in props.get("ENVIRONMENT", []):
            k, _, v = kv.partition("=")
            env[k] = v
        tmo = timeout
        if "TIMEOUT" in props:
            tmo = min(tmo, float(props["TIMEOUT"])) if tmo else float(props["TIMEOUT"])
        rc, out = run(cmd, cwd=props.get("WORKING_DIRECTORY"), env=env, timeout=tmo)
        if rc is None:
            return False, f"timeout after {tmo:.0f} s"
        ok = rc == 0
        if "PASS_REGULAR_EXPRESSION" in props:
            ok = any(re.search(r, out) for r in props["PASS_REGULAR_EXPRESSION"])
        if "FAIL_REGULAR_EXPRESSION" in props and any(re.search(r, out) for r in props["FAIL_REGULAR_EXPRESSION"]):
            ok = False
        if props.get("WILL_FAIL"):
            ok = not ok
        if "SKIP_RETURN_CODE" in props and rc == int(props["SKIP_RETURN_CODE"]):
            ok = True
        tail = "\n".join(out.strip().splitlines()[-6:])
        return ok, (f"exit {rc}" + (f": {tail}" if tail else ""))

    def run_many(self, names, subst, jobs, timeouts, stop_on_failure=True):
        """Runs tests (fastest first), J at a time; stops at the first failure.
        Returns (first failing name or None, its reason, {name: seconds})."""
        times, failed = {}, [None, ""]
        stop = threading.Event()

        def one(n):
            if stop.is_set():
                return
            t0 = time.monotonic()
            ok, why = self.run(n, subst, timeouts.get(n))
            times[n] = time.monotonic() - t0
            if not ok and failed[0] is None and not stop.is_set():
                failed[0], failed[1] = n, why
                if stop_on_failure:
                    stop.set()
                    kill_all()
            return ok

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
            list(ex.map(one, names))
        return failed[0], failed[1], times


# ---------------------------------------------------------------- one mutant

class Runner:
    def __init__(self, args, build, tests, scratch):
        self.a, self.build, self.tests, self.scratch = args, build, tests, scratch
        self.base_times = {}
        self._linked = {}  # mutant program path -> the changed inputs it was linked with

    def plan(self, m):
        names = self.tests.select(m["tests"])
        if not names:
            raise MutantError(f"no test matches {m['tests']!r}")
        roots = set()
        for n in names:
            roots |= self.tests.artifacts_of(n)
        arts, objs = self.build.closure(roots)
        target = os.path.realpath(os.path.join(self.build.src_of_base, m["file"]))
        affected = sorted(o for o in objs if target in self.build.deps(o))
        units = m.get("units")
        if units:
            affected = [o for o in affected if "/instantiate/" not in o or os.path.basename(o).split(".")[0] in units]
        if not affected:
            raise MutantError(f"{m['file']} is compiled into none of the programs its tests run")
        return names, arts, affected

    def mutant(self, m, index, total):
        """Applies m, then in stages (the programs of one group of tests at a
        time, the cheapest to build first) compiles what those programs need,
        relinks them and runs their tests; stops at the first failing test."""
        t0 = time.monotonic()
        res = {"id": m["id"], "area": m["area"], "file": m["file"], "description": m["description"]}
        try:
            names, arts, affected = self.plan(m)
        except MutantError as e:
            res.update(result="error", detail=str(e), seconds=0.0)
            return res
        wdir = os.path.join(self.a.work, "mutant", m["id"])
        shutil.rmtree(wdir, ignore_errors=True)
        os.makedirs(wdir)
        new = {}  # base path -> mutant path (objects and relinked programs)
        self._linked = {}
        groups = {}
        for n in names:
            groups.setdefault(frozenset(self.tests.artifacts_of(n)), []).append(n)
        affected = set(affected)
        weight = lambda o: 10 if "/instantiate/" in o else 1  # noqa: E731  (the reference's instantiation units)

        def cost(roots):
            _, objs = self.build.closure(roots)
            todo = [o for o in objs & affected if o not in new]
            return (sum(weight(o) for o in todo), sum(self.base_times.get(n, 60.0) for n in groups[roots]))

        try:
            self.scratch.apply(m)
            killer = None
            while groups and not killer:
                roots = min(groups, key=cost)
                group = groups.pop(roots)
                g_arts, g_objs = self.build.closure(roots)
                todo = sorted((o for o in g_objs & affected if o not in new), key=weight, reverse=True)
                err = self._compile(todo, wdir, new) or self._relink(g_arts, wdir, new)
                if err:
                    res.update(result="build error", detail=err)
                    return res
                subst = {k: v for k, v in new.items() if k in self.build.artifacts}
                order = sorted(group, key=lambda n: self.base_times.get(n, 1e9))
                timeouts = {n: max(60.0, 5 * self.base_times.get(n, 60.0)) for n in group}
                if self.a.timeout:
                    timeouts = {n: min(t, self.a.timeout) for n, t in timeouts.items()}
                killer, why, _ = self.tests.run_many(order, subst, self.a.jobs, timeouts)
            if killer:
                res.update(result="killed", killed_by=killer, detail=why)
            else:
                res.update(result="survived", detail=f"{len(names)} tests passed")
            res["tests"] = len(names)
            res["objects_compiled"] = sum(1 for k in new if k in self.build.objects)
        except MutantError as e:
            res.update(result="error", detail=str(e))
        finally:
            self.scratch.restore()
            res["seconds"] = round(time.monotonic() - t0, 1)
            if not self.a.keep:
                shutil.rmtree(wdir, ignore_errors=True)
        return res

    def _compile(self, objs, wdir, new):
        def one(o):
            out = os.path.join(wdir, "obj", hashlib.sha1(o.encode()).hexdigest()[:12] + "_" + os.path.basename(o))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            cmd, cwd = self.build.compile_command(o, out)
            rc, text = run(cmd, cwd=cwd, timeout=3600)
            return o, out, rc, text

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.a.jobs) as ex:
            for o, out, rc, text in ex.map(one, objs):
                if rc != 0:
                    lines = [ln for ln in text.splitlines() if "error" in ln] or text.splitlines()
                    return f"{os.path.basename(o)}: " + " | ".join(lines[:3])[:400]
                new[o] = out
        return None

    def _relink(self, arts, wdir, new):
        # Archives hold objects only: first the archives that hold a changed
        # object, then the programs and libraries that hold one or link such
        # an archive. Relinked again when a later stage compiled more of them.
        for kinds in (("archive",), ("shared", "program")):
            changed = {k for k in new if k in self.build.objects or self.build.artifacts.get(k, {}).get("kind") == "archive"}
            for a in sorted(arts):
                info = self.build.artifacts[a]
                if info["kind"] in kinds and any(i in changed for i in info["inputs"]):
                    out = os.path.join(wdir, "bin", os.path.relpath(a, self.build.bdir))
                    stamp = tuple(sorted(o for o in self.build.closure([a])[1] if o in new))
                    if self._linked.get(out) == stamp:
                        continue
                    err = self._link(a, out, new)
                    if err:
                        return err
                    self._linked[out] = stamp
                    new[a] = out
        return None

    def _link(self, art, out, new):
        info = self.build.artifacts[art]
        cwd = info["dir"]
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if os.path.exists(out):
            os.remove(out)
        for cmd in info["commands"]:
            res = []
            for t in cmd:
                p = os.path.normpath(os.path.join(cwd, t))
                if p == art:
                    res.append(out)
                elif p in new:
                    res.append(new[p])
                else:
                    res.append(t)
            rc, text = run(res, cwd=cwd, timeout=1800)
            if rc != 0:
                return f"linking {os.path.basename(art)}: " + text.strip()[-400:]
        return None


# ---------------------------------------------------------------- main

def ctest_costs(bdir):
    """Test durations of the base build's last ctest run (CTestCostData.txt: name, runs, average seconds)."""
    costs = {}
    try:
        for line in open(os.path.join(bdir, "Testing", "Temporary", "CTestCostData.txt")):
            if line.startswith("---"):
                break
            parts = line.rstrip("\n").rsplit(" ", 2)
            if len(parts) == 3:
                try:
                    costs[parts[0]] = float(parts[2])
                except ValueError:
                    pass
    except OSError:
        pass
    return costs


def table(results, equivalent):
    rows = []
    w = max([len(r["id"]) for r in results] + [len(m["id"]) for m in equivalent] + [6])
    rw = max([len(f"killed by {r.get('killed_by', '')}") for r in results] + [20])
    rw = min(rw, 110)
    rows.append(f"{'mutant':<{w}}  {'area':<9}  {'result':<{rw}}  time")
    for r in results:
        what = r["result"]
        if what == "killed":
            what = f"killed by {r['killed_by']}"
        elif what != "survived":
            what = f"{what}: {r.get('detail', '')}"
        else:
            what = "SURVIVED"
        rows.append(f"{r['id']:<{w}}  {r['area']:<9}  {what[:rw]:<{rw}}  {r['seconds']:.0f} s")
    for m in equivalent:
        rows.append(f"{m['id']:<{w}}  {m['area']:<9}  {'equivalent (not run)':<{rw}}  -")
    return "\n".join(rows)


def score(results):
    counted = [r for r in results if r["result"] in ("killed", "survived")]
    killed = sum(r["result"] == "killed" for r in counted)
    return killed, len(counted)


def main():
    ap = argparse.ArgumentParser(description="mutation testing of hla-oracle", formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--list", action="store_true", help="list the mutants (and check their originals)")
    ap.add_argument("--check", action="store_true", help="only check that every original text occurs exactly once")
    ap.add_argument("--only", default="", help="comma list of mutant ids")
    ap.add_argument("--area", default="", help="comma list of areas: " + ", ".join(AREAS))
    ap.add_argument("--sample", type=int, default=0, help="run N mutants chosen by --seed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-heavy", type=int, default=-1, help="--sample: at most K mutants in reference headers")
    ap.add_argument("--run-equivalent", action="store_true", help="also run the mutants listed as equivalent")
    ap.add_argument("--json", default="", help="write the results as JSON to FILE (- for stdout)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--work", default=os.path.join(ROOT, "build-mutate"), help="scratch folder (default build-mutate/)")
    ap.add_argument("--base-build", default="", help="an up-to-date build of the working tree to use as the base "
                    "(default: WORK/build, built from the scratch copy)")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per test at most (default: 5x its baseline, >= 60 s)")
    ap.add_argument("--no-baseline", action="store_true", help="do not run the tests unmutated first")
    ap.add_argument("--keep", action="store_true", help="keep each mutant's objects and programs in WORK/mutant/")
    a = ap.parse_args()

    mutants, errors = load_mutants()
    errors += check_originals(mutants, ROOT)
    if a.check or a.list:
        if a.list:
            for m in mutants:
                eq = " [equivalent]" if m.get("equivalent") else ""
                print(f"{m['id']:<34} {m['area']:<9} {m['file']}: {m['description']}{eq}")
            counts = {ar: sum(m["area"] == ar for m in mutants) for ar in AREAS}
            print(f"{len(mutants)} mutants (" + ", ".join(f"{ar} {n}" for ar, n in counts.items()) + f"), "
                  f"{sum(bool(m.get('equivalent')) for m in mutants)} equivalent")
        for e in errors:
            print("mutate: " + e, file=sys.stderr)
        if not errors:
            print(f"mutate: every one of the {len(mutants)} mutants' original text occurs exactly once in its file")
        return 1 if errors else 0
    if errors:
        for e in errors:
            print("mutate: " + e, file=sys.stderr)
        return 2

    chosen = list(mutants)
    if a.only:
        ids = a.only.split(",")
        unknown = set(ids) - {m["id"] for m in mutants}
        if unknown:
            sys.exit(f"mutate: --only: no mutant {', '.join(sorted(unknown))}")
        chosen = [m for m in mutants if m["id"] in ids]
    if a.area:
        areas = a.area.split(",")
        chosen = [m for m in chosen if m["area"] in areas]
    equivalent = [m for m in chosen if m.get("equivalent")]
    if not a.run_equivalent:
        chosen = [m for m in chosen if not m.get("equivalent")]
    if a.sample:
        # A seeded shuffle, taken in order; at most --max-heavy mutants in reference
        # headers (each recompiles an instantiation unit, ~1.5 min) when given.
        pool = [m for m in chosen if not m.get("equivalent")]
        picked, heavy = set(), 0
        for m in random.Random(a.seed).sample(pool, len(pool)):
            if len(picked) == a.sample:
                break
            if is_heavy(m):
                if a.max_heavy >= 0 and heavy >= a.max_heavy:
                    continue
                heavy += 1
            picked.add(m["id"])
        chosen = [m for m in pool if m["id"] in picked]
        equivalent = []
        print(f"mutate: sample of {len(chosen)} (seed {a.seed}"
              + (f", at most {a.max_heavy} in reference headers" if a.max_heavy >= 0 else "")
              + f"); reproduce: tests/mutate/mutate.py --sample {a.sample} --seed {a.seed}"
              + (f" --max-heavy {a.max_heavy}" if a.max_heavy >= 0 else "")
              + f"  (= --only {','.join(m['id'] for m in chosen)})", flush=True)

    a.work = os.path.realpath(a.work)
    os.makedirs(a.work, exist_ok=True)
    lock = open(os.path.join(a.work, "lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit(f"mutate: another run holds {a.work}")
    scratch = Scratch(a.work)

    def on_signal(sig, frame):
        _stopping.set()
        kill_all()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    start = time.monotonic()
    try:
        scratch.recover()
        changed = scratch.sync(ROOT)
        print(f"mutate: scratch copy {scratch.src}: {changed} file(s) updated", flush=True)
        if a.base_build:
            bdir = os.path.realpath(a.base_build)
            cache = open(os.path.join(bdir, "CMakeCache.txt")).read()
            src_of_base = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M).group(1)
            if not os.path.exists(os.path.join(bdir, "compile_commands.json")):
                checked(["cmake", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", bdir], what="cmake (export compile commands)")
        else:
            bdir, src_of_base = os.path.join(a.work, "build"), scratch.src
            if not os.path.exists(os.path.join(bdir, "CMakeCache.txt")):
                checked(["cmake", "-S", scratch.src, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], what="cmake configure")
            t = time.monotonic()
            rc, out = run(["cmake", "--build", bdir, "-j", str(a.jobs)], timeout=None)
            if rc != 0:
                sys.exit(f"mutate: the base build failed:\n{out[-4000:]}")
            print(f"mutate: base build up to date ({time.monotonic() - t:.0f} s)", flush=True)
        build = Build(bdir, src_of_base, scratch.src)
        tests = Tests(build)
        runner = Runner(a, build, tests, scratch)
        runner.base_times = ctest_costs(build.bdir)
        needed = sorted({n for m in chosen for n in tests.select(m["tests"])})
        if not a.no_baseline and needed:
            t = time.monotonic()
            base_times = {}
            # All of them (no stop at the first failure): every test must pass unmutated.
            fails = []
            lock_f = threading.Lock()

            def one(n):
                t1 = time.monotonic()
                ok, why = tests.run(n, {}, a.timeout or None)
                base_times[n] = time.monotonic() - t1
                if not ok:
                    with lock_f:
                        fails.append(f"{n}: {why}")

            with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
                list(ex.map(one, needed))
            runner.base_times = base_times
            if fails:
                sys.exit("mutate: tests fail without any mutant (fix them first):\n  " + "\n  ".join(fails))
            print(f"mutate: baseline: {len(needed)} tests pass unmutated ({time.monotonic() - t:.0f} s)", flush=True)
        results = []
        for i, m in enumerate(chosen):
            r = runner.mutant(m, i, len(chosen))
            results.append(r)
            what = r["result"] + (f" by {r['killed_by']}" if r["result"] == "killed" else "")
            print(f"[{i + 1}/{len(chosen)}] {m['id']}: {what} ({r['seconds']:.0f} s)"
                  + (f"\n      {r.get('detail', '')}" if r["result"] != "killed" else ""), flush=True)
    except KeyboardInterrupt:
        kill_all()
        scratch.restore()
        print("mutate: interrupted; the scratch copy is restored", file=sys.stderr)
        return 130
    finally:
        scratch.restore()
    elapsed = time.monotonic() - start
    killed, counted = score(results)
    print()
    print(table(results, equivalent if not a.run_equivalent else []))
    pct = 100.0 * killed / counted if counted else 100.0
    others = len(results) - counted
    print(f"\nscore: {killed}/{counted} non-equivalent mutants killed ({pct:.1f}%)"
          + (f"; {others} build error(s)/error(s) not counted" if others else "")
          + (f"; {len(equivalent)} equivalent not run" if equivalent and not a.run_equivalent else "")
          + f"; wall time {elapsed:.0f} s")
    if a.json:
        doc = {"results": results, "killed": killed, "counted": counted, "score": pct, "seconds": round(elapsed, 1),
               "equivalent": [{"id": m["id"], "why": m["equivalent"]} for m in equivalent], "seed": a.seed,
               "sample": a.sample}
        if a.json == "-":
            json.dump(doc, sys.stdout, indent=1)
            print()
        else:
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)
    survived = [r for r in results if r["result"] == "survived"]
    errs = [r for r in results if r["result"] in ("error", "build error")]
    return 1 if survived or errs else 0


if __name__ == "__main__":
    sys.exit(main())
