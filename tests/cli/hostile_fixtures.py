#!/usr/bin/env python3
"""A hostile user's campaign against `hla check`, reproducible.

Takes the golden fixtures, damages or forges each of --mutations copies at
random (bit flips anywhere, single elements set to NaN/Inf/0/1e300/nearby
values, metadata edits, dropped or added tensors, truncation), and writes each
either with the digest recomputed (a forged file: only the semantic checks
stand between it and a verdict) or with the old one (a damaged file). Each is
checked twice: with an honest candidate (our streaming form in f32 on the
original inputs) and with garbage (every output 12345). The verdict must be
trustworthy:
  - garbage never PASSes;
  - the honest candidate never FAILs (a correct kernel is not blamed for a
    bad fixture): it passes, or the fixture is refused (exit 2);
  - no crash, no timeout, no raw escape character in the output.
Prints the outcome counts per mutation kind and exits 1 on any violation.

Usage: hostile_fixtures.py HLA FIXTURES_DIR WORK_DIR [--mutations N] [--seed S] [--jobs J]
"""
import argparse
import collections
import concurrent.futures
import pathlib
import random
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import hla_fixture_file as hff  # noqa: E402

FLOAT = {"F64": "d", "F32": "f"}
VALUES = [float("nan"), float("inf"), -float("inf"), 0.0, 1e300, 12345.0]


def mutate(rng, data):
    """(kind, bytes) of one damaged or forged copy of a fixture's bytes."""
    kind = rng.choice(["bitflip", "element", "metadata", "tensor", "truncate", "header"])
    if kind == "truncate":
        return kind, data[:rng.randrange(len(data))]
    if kind == "header":
        n = struct.unpack("<Q", data[:8])[0]
        i = rng.randrange(8 + n)
        return kind, data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    parts = hff.parse(data)
    t, md = parts["tensors"], parts["metadata"]
    if kind == "bitflip":
        name = rng.choice(sorted(k for k in t if t[k][2]))
        raw = bytearray(t[name][2])
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        t[name][2] = bytes(raw)
        kind += ":" + name
    elif kind == "element":
        name = rng.choice(sorted(k for k in t if t[k][0] in FLOAT and t[k][2]))
        fmt = FLOAT[t[name][0]]
        size = struct.calcsize(fmt)
        i = rng.randrange(len(t[name][2]) // size)
        x = struct.unpack_from("<" + fmt, t[name][2], i * size)[0]
        y = rng.choice(VALUES + [x * 2, -x, x * (1 + 1e-6), x * (1 + 2**-40)])
        if fmt == "f" and abs(y) > 3.4e38 and y == y and abs(y) != float("inf"):
            y = float("inf")  # beyond float32
        raw = bytearray(t[name][2])
        struct.pack_into("<" + fmt, raw, i * size, y)
        t[name][2] = bytes(raw)
        kind += ":" + name
    elif kind == "metadata":
        key = rng.choice(["gamma", "scale", "eps", "lambda", "variant", "masked", "normalize", "eps_mode", "exact_tier",
                          "reference_bits", "dtype", "n", "d", "heads", "kv_heads", "case", "seed", "format_version"])
        md[key] = rng.choice({
            "gamma": ["1", "1/2", "99/100", "0", "2", "1e-400", "9" * 500], "scale": ["1", "-1", "3/4", "1/8", "0"],
            "eps": ["1", "1/1000000", "0"], "lambda": ["0", "1", "1/3"], "variant": ["la1", "hla2", "ahla", "hla3", "hla3_paper"],
            "masked": ["true", "false"], "normalize": ["true", "false"], "eps_mode": ["add", "clamp"],
            "exact_tier": ["true", "false"], "reference_bits": ["0", "53", "113", "7"], "dtype": ["f64", "f32", "bf16", "f16"],
            "n": ["0", "1", str(1 << 40)], "d": ["1", "64"], "heads": ["1", "2", str(1 << 40)], "kv_heads": ["1", "2"],
            "case": ["x", "\x1b[2Jred", "y" * 5000], "seed": ["0", "7"], "format_version": ["1", "2", "4"]}[key])
        kind += ":" + key
    else:
        optional = [k for k in ("ref_num", "mag_num_unmasked", "mag_den_unmasked", "flags", "den_flags", "offsets") if k in t]
        if optional and rng.random() < 0.5:
            name = rng.choice(optional)
            del t[name]
            kind += ":drop " + name
        else:
            shape = t["ref_out"][1]
            count = len(t["ref_out"][2]) // 8
            t["flags"] = ["U8", shape, bytes(rng.choice([1, 2, 3]) for _ in range(count))]
            kind += ":add flags"
    forged = rng.random() < 0.5
    return kind + (" (forged)" if forged else " (stale)"), hff.serialize(parts, redigest=forged)


def check(hla, fixture, candidate):
    try:
        r = subprocess.run([hla, "check", str(fixture), str(candidate)], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    out = (r.stdout + r.stderr).decode(errors="replace")
    status = {0: "pass", 1: "fail", 2: "refused", 4: "inconclusive"}.get(r.returncode, f"exit {r.returncode}")
    return status, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hla"), ap.add_argument("fixtures"), ap.add_argument("work")
    ap.add_argument("--mutations", type=int, default=200), ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    fixtures = sorted(pathlib.Path(a.fixtures).glob("*.safetensors"))
    rng = random.Random(a.seed)
    print(f"hostile_fixtures: {a.mutations} mutations of {len(fixtures)} golden fixtures, seed {a.seed} "
          f"(reproduce: hostile_fixtures.py HLA FIXTURES WORK --mutations {a.mutations} --seed {a.seed})")

    # Honest and garbage candidates per original fixture.
    cands = {}
    for fx in fixtures:
        honest = work / (fx.stem + ".honest.safetensors")
        form = "streaming"
        subprocess.run([a.hla, "eval", str(fx), "--form", form, "--out", str(honest)], check=True, capture_output=True)
        parts = hff.parse(honest.read_bytes())
        dtype, shape, raw = parts["tensors"]["out"]
        garbage = work / (fx.stem + ".garbage.safetensors")
        count = len(raw) // 4
        garbage.write_bytes(hff.serialize({"tensors": {"out": ["F32", shape, struct.pack(f"<{count}f", *[12345.0] * count)]},
                                           "metadata": {}}))
        cands[fx] = (honest, garbage)

    jobs = []
    for i in range(a.mutations):
        fx = rng.choice(fixtures)
        kind, data = mutate(rng, fx.read_bytes())
        path = work / f"m{i:05d}.safetensors"
        path.write_bytes(data)
        jobs.append((i, fx, kind, path))

    def run(job):
        i, fx, kind, path = job
        honest, garbage = cands[fx]
        return i, fx, kind, check(a.hla, path, honest), check(a.hla, path, garbage)

    table = collections.defaultdict(collections.Counter)
    violations = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for i, fx, kind, (hs, ho), (gs, go) in ex.map(run, jobs):
            table[kind.split(":")[0] + (" (forged)" if "(forged)" in kind else " (stale)")][f"honest {hs}"] += 1
            table[kind.split(":")[0] + (" (forged)" if "(forged)" in kind else " (stale)")][f"garbage {gs}"] += 1
            for who, status, out in (("honest", hs, ho), ("garbage", gs, go)):
                bad = (who == "garbage" and status == "pass") or (who == "honest" and status == "fail") or \
                      status not in ("pass", "fail", "refused", "inconclusive") or "\x1b" in out or "internal error" in out
                if bad:
                    violations.append(f"m{i:05d} ({fx.name}, {kind}): {who} candidate -> {status}: {out.strip()[:300]!r}")
    outcomes = sorted({k for c in table.values() for k in c})
    print(f"{'mutation':24}" + "".join(f"{o:>22}" for o in outcomes))
    for kind in sorted(table):
        print(f"{kind:24}" + "".join(f"{table[kind][o]:>22}" for o in outcomes))
    total = collections.Counter()
    for c in table.values():
        total.update(c)
    print(f"{'all':24}" + "".join(f"{total[o]:>22}" for o in outcomes))
    print(f"{2 * a.mutations} runs, {len(violations)} violation(s)")
    for v in violations[:20]:
        print("VIOLATION " + v)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
