#!/usr/bin/env python3
"""ctest: what a hostile or careless user gives `hla` is an input error.

Every row of ROWS runs one `hla` command in a fresh folder (its working
directory) and must give exit status 2 (or the row's `status`) with a message
naming the problem (`text`, a substring of stdout + stderr), no "internal
error", no raw escape character, within `timeout` seconds (a FIFO or
/dev/zero must not hang it) — and leave the folder exactly as `setup` left it:
nothing written, no temporary file.

A row is a dict:
  name     what it tries (printed in the table)
  argv     arguments after `hla`; "{d}" is the row's folder, "{fx}" a golden
           fixture, "{fixtures}" the golden folder
  text     a substring the output must contain (or a list of them)
  status   expected exit status (default 2), or a tuple of acceptable ones
  setup    optional callable(folder: pathlib.Path) that writes the row's input
           files; whatever it returns is kept alive until the row has run
           (e.g. an open file holding a lock)
  timeout  seconds (default 30)
  max_output  the most characters the output may have (default 1 MiB)
To test a corrupted fixture, append a row whose setup writes the file, e.g.
  dict(name="check: header length beyond the file", argv=["check", "{d}/bad.safetensors", "{fx}"],
       text="bad.safetensors", setup=lambda d: (d / "bad.safetensors").write_bytes(b"\\xff" * 8 + b"{}")),

After the table: killed writers (SIGTERM removes its temporary file; after
SIGKILL the next run removes it) and two concurrent `hla gen` runs.

Usage: bad_input_test.py HLA FIXTURES_DIR WORK_DIR
"""
import fcntl
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import time

HLA, FIXTURES, WORK = os.path.abspath(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve(), pathlib.Path(sys.argv[3]).resolve()
FX = FIXTURES / "hla2-raw-f32-gaussian-n37-d8-B1H2K1.safetensors"
FX_GRAD = FIXTURES / "hla2-raw-f32-gaussian-n37-d8-B1H2K1-grad.safetensors"  # the same problem with gradients
GOLDEN_CASE = "hla2-raw-f32-gaussian-n1-d8-B1H1K1"  # the smallest golden case: a quick `hla gen --filter`
EXEC = "true {in} {out}"  # an exec candidate that is never run: the rows fail before


def write(name, data=b""):
    def setup(d):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    return setup


def fifo(name):
    return lambda d: os.mkfifo(d / name)


def copy_fx(name):
    return lambda d: shutil.copyfile(FX, d / name)


def candidate(name="cand.safetensors"):
    # A real candidate for FX, written by `hla eval` (so the check rows fail on the option under test only).
    return lambda d: subprocess.run([HLA, "eval", str(FX), "--out", str(d / name)], check=True, capture_output=True)


def grad_candidate(name="cand.safetensors"):
    # A candidate for FX (no gradients) that carries dq, dk, dv: those of FX_GRAD's (same shapes).
    def setup(d):
        subprocess.run([HLA, "eval", str(FX_GRAD), "--out", str(d / name), "--grad", "streaming"], check=True, capture_output=True)
        shutil.copyfile(FX, d / "bad.safetensors")
    return setup


def fixture_with_case(name, case):
    # FX with another case name in its metadata (the lead's reader may come to
    # reject control characters there; either way nothing raw may be printed).
    def setup(d):
        from safetensors import safe_open
        from safetensors.numpy import save_file
        with safe_open(str(FX), framework="np") as f:
            md = dict(f.metadata())
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        md["case"] = case
        save_file(tensors, str(d / name), metadata=md)
        candidate()(d)
    return setup


def foreign_seed(d):
    # A golden fixture (suite golden, seed 1) in a folder then written with --seed 2.
    (d / "out").mkdir()
    shutil.copyfile(FIXTURES / f"{GOLDEN_CASE}.safetensors", d / "out" / f"{GOLDEN_CASE}.safetensors")


def locked(d):
    # Another `hla gen` (this process, pretending) holds the output folder's lock.
    (d / "out").mkdir()
    f = open(d / "out" / ".hla-gen.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import hla_fixture_file  # noqa: E402


def inputs(name, drop=(), extra=None, change=None):
    # An `hla ref` input file: FX's q, k, v (f32, [1,2,37,8] / [1,1,37,8] / [1,1,37,4]),
    # without the tensors in `drop`, with `extra` ones, `change` applied to the parts.
    def setup(d):
        t = {k: v for k, v in hla_fixture_file.parse(FX.read_bytes())["tensors"].items() if k in ("q", "k", "v") and k not in drop}
        t.update(extra or {})
        if change:
            change(t)
        (d / name).write_bytes(hla_fixture_file.serialize({"tensors": t, "metadata": {}}, redigest=False))
    return setup


def edited(name, edit, redigest=True, fixture=None):
    # FX with `edit(parts)` applied (tensors: name -> [dtype, shape, bytes];
    # metadata), written with a digest that fits (a forged file: the semantic
    # checks must catch it) or, with redigest=False, the old one (a stale or
    # damaged file: the digest must catch it). A candidate for FX beside it.
    def setup(d):
        parts = hla_fixture_file.parse((fixture or FX).read_bytes())
        edit(parts)
        (d / name).write_bytes(hla_fixture_file.serialize(parts, redigest))
        candidate()(d)
    return setup


def tensor_op(tensor, fn):
    # Rewrites one F64/F32 tensor of the parts through fn(values: list) -> list.
    def edit(parts):
        dtype, shape, data = parts["tensors"][tensor]
        fmt = {"F64": "d", "F32": "f"}[dtype]
        values = list(struct.unpack(f"<{len(data) // struct.calcsize(fmt)}{fmt}", data))
        values = fn(values)
        parts["tensors"][tensor][2] = struct.pack(f"<{len(values)}{fmt}", *values)
    return edit


def state_candidate(edit):
    # FX's candidate (`hla eval`) with FX's final state (state.<part>, F64) and `edit(tensors)` applied, as cand.safetensors.
    def setup(d):
        candidate()(d)
        c = hla_fixture_file.parse((d / "cand.safetensors").read_bytes())
        fx = hla_fixture_file.parse(FX.read_bytes())["tensors"]
        c["tensors"].update({k: list(v) for k, v in fx.items() if k.startswith("state.")})
        edit(c["tensors"])
        (d / "cand.safetensors").write_bytes(hla_fixture_file.serialize({"tensors": c["tensors"], "metadata": {}}, redigest=False))
    return setup


def meta(**kv):
    def edit(parts):
        parts["metadata"].update(kv)
    return edit


def huge_heads(parts):
    # A 1 KB fixture: n = 0 and 2^40 heads (every tensor empty).
    md = parts["metadata"]
    md.update(n="0", heads=str(1 << 40), kv_heads=str(1 << 40))
    for name, t in parts["tensors"].items():
        t[1] = [1, 1 << 40, 0] + ([int(md["d"]) if name in ("q", "k") else int(md["dv"])] if len(t[1]) == 4 else [])
        t[2] = b""


def raw_header(text):
    return lambda d: (d / "bad.safetensors").write_bytes(struct.pack("<Q", len(text)) + text)


def f32s(shape, fill=0.5, odd=None):
    # An F32 tensor of `shape` holding `fill`, with odd = (index, value) in place.
    n = 1
    for x in shape:
        n *= x
    values = [fill] * n
    if odd:
        values[odd[0]] = odd[1]
    return ["F32", list(shape), struct.pack(f"<{n}f", *values)]


def f64s(shape, value):
    n = 1
    for x in shape:
        n *= x
    return ["F64", list(shape), struct.pack(f"<{n}d", *[value] * n)]


DO = [1, 2, 37, 4]  # FX's output [B,H,T,dv]
REF = ["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"]


def bthd_inputs(t):
    # FX's q, k, v relabelled [B,T,H,D] (the values' order does not matter to a shape check).
    for name in ("q", "k", "v"):
        B, H, T, D = t[name][1]
        t[name] = [t[name][0], [B, T, H, D], t[name][2]]


CHECK_BAD = ["check", "{d}/bad.safetensors", "{d}/cand.safetensors"]
NOT_ITS_INPUTS = "does not match its inputs"

ROWS = [
    # --- corrupted, stale and forged fixtures: refused, never judged ---
    dict(name="check: q bit flip, digest kept", argv=CHECK_BAD, text="digest mismatch",
         setup=edited("bad.safetensors", tensor_op("q", lambda x: [x[0] * 2] + x[1:]), redigest=False)),
    dict(name="check: gamma edited, digest kept", argv=CHECK_BAD, text="digest mismatch",
         setup=edited("bad.safetensors", meta(gamma="1/2"), redigest=False)),
    dict(name="check: gamma edited, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", meta(gamma="1/2"))),
    dict(name="check: scale edited, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", meta(scale="3/4"))),
    # (the stored final state's parts are those of the original variant and mask: refused, naming the part)
    dict(name="check: variant edited, digest forged", argv=CHECK_BAD, text="'state.C', which is not part of the ahla masked",
         setup=edited("bad.safetensors", meta(variant="ahla"))),
    dict(name="check: masked edited, digest forged", argv=CHECK_BAD, text="'state.F', which is not part of the hla2 unmasked",
         setup=edited("bad.safetensors", meta(masked="false"))),
    dict(name="check: normalize edited, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", meta(normalize="true"))),
    dict(name="check: one q value changed, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("q", lambda x: x[:5] + [x[5] + 1] + x[6:]))),
    dict(name="check: one v value changed, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("v", lambda x: x[:-1] + [x[-1] - 2]))),
    dict(name="check: ref_out all NaN, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("ref_out", lambda x: [float("nan")] * len(x)))),
    dict(name="check: ref_out all Inf, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("ref_out", lambda x: [float("inf")] * len(x)))),
    dict(name="check: ref_out 1e300, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("ref_out", lambda x: [1e300] * len(x)))),
    dict(name="check: ref_out = 12345 everywhere, digest forged", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("ref_out", lambda x: [12345.0] * len(x)))),
    dict(name="check: one NaN in ref_out, digest forged", argv=CHECK_BAD, text="ref_out 1 element(s)",
         setup=edited("bad.safetensors", tensor_op("ref_out", lambda x: x[:-1] + [float("nan")]))),
    dict(name="check: mag_num x 1e10, digest forged", argv=CHECK_BAD, text="mag_num",
         setup=edited("bad.safetensors", tensor_op("mag_num", lambda x: [m * 1e10 for m in x]))),
    dict(name="check: ref_den edited, digest forged", argv=CHECK_BAD, text="ref_den",
         setup=edited("bad.safetensors", tensor_op("ref_den", lambda x: [e + 1 for e in x]))),
    dict(name="check: ill-conditioned flags on a plain problem, digest forged", argv=CHECK_BAD, text="ill-conditioned",
         setup=edited("bad.safetensors", lambda p: p["tensors"].__setitem__(
             "flags", ["U8", p["tensors"]["ref_out"][1], b"\x02" * (len(p["tensors"]["ref_out"][2]) // 8)]))),
    dict(name="check: exact_tier claimed, digest forged", argv=CHECK_BAD, text="differs from the exact-tier value",
         setup=edited("bad.safetensors", meta(exact_tier="true"))),
    dict(name="check: reference_bits 7, digest forged", argv=CHECK_BAD, text="reference_bits = 7",
         setup=edited("bad.safetensors", meta(reference_bits="7"))),
    dict(name="check: n = 0 with 2^40 heads (1 KB file)", argv=CHECK_BAD, text="heads = 1099511627776 exceeds the limit",
         setup=edited("bad.safetensors", huge_heads), timeout=10),
    dict(name="fuzz --replay: n = 0 with 2^40 heads", argv=["fuzz", "--exec", EXEC, "--replay", "{d}/bad.safetensors"],
         text="exceeds the limit", setup=edited("bad.safetensors", huge_heads), timeout=10),
    dict(name="check: 10,000-digit gamma", argv=CHECK_BAD, text="longer than 400 characters",
         setup=edited("bad.safetensors", meta(gamma="9" * 10000)), max_output=1500),
    dict(name="check: gamma = 1e-400", argv=CHECK_BAD, text="more than 1100 bits", setup=edited("bad.safetensors", meta(gamma="1e-400"))),
    dict(name="fuzz --replay: gamma = 1e-400", argv=["fuzz", "--exec", EXEC, "--replay", "{d}/bad.safetensors"],
         text="more than 1100 bits", setup=edited("bad.safetensors", meta(gamma="1e-400")), timeout=10),
    dict(name="check: escape sequence in the case name", argv=CHECK_BAD, text="holds control bytes",
         setup=edited("bad.safetensors", meta(case="\x1b[2J\x1b[31mred"))),
    dict(name="check: version 3 without a digest", argv=CHECK_BAD, text="metadata key 'digest' is missing",
         setup=edited("bad.safetensors", lambda p: p["metadata"].pop("digest"), redigest=False)),
    dict(name="check: format_version 9", argv=CHECK_BAD, text="format_version = '9' is not supported",
         setup=edited("bad.safetensors", meta(format_version="9"))),
    dict(name="check: a state tensor of rank 9", argv=CHECK_BAD, text="more than 8",
         setup=edited("bad.safetensors", lambda p: p["tensors"].__setitem__("state.S", ["F64", [1] * 9, b"\0" * 8]))),
    dict(name="check: a final state entry edited, digest forged", argv=CHECK_BAD, text="state[",
         setup=edited("bad.safetensors", tensor_op("state.F", lambda x: [x[0] * 1.01 + 1e-3] + x[1:]))),
    dict(name="check: a final state's magnitude edited, digest forged", argv=CHECK_BAD, text="mag_state[",
         setup=edited("bad.safetensors", tensor_op("mag_state.S", lambda x: x[:-1] + [x[-1] * 2 + 1]))),
    dict(name="check: a final state part dropped, digest forged", argv=CHECK_BAD, text="without 'state.f'",
         setup=edited("bad.safetensors", lambda p: p["tensors"].pop("state.f"))),
    dict(name="check: candidate state of the wrong shape", argv=["check", "{fx}", "{d}/cand.safetensors"],
         text=["cand.safetensors", "state.S has shape [1, 2, 8, 4]; expected [1, 2, 8, 8]"],
         setup=state_candidate(lambda t: t.__setitem__("state.S", ["F64", [1, 2, 8, 4], t["state.S"][2][: 8 * 64]]))),
    dict(name="check: candidate state part of an unknown name", argv=["check", "{fx}", "{d}/cand.safetensors"],
         text=["'state.G', which is not part of the hla2 masked", "its parts are state.S state.C state.m state.F state.f"],
         setup=state_candidate(lambda t: t.__setitem__("state.G", t["state.F"]))),
    dict(name="check: candidate final state missing a part", argv=["check", "{fx}", "{d}/cand.safetensors"],
         text="without 'state.F'", setup=state_candidate(lambda t: t.pop("state.F"))),
    dict(name="check: candidate final state in two dtypes", argv=["check", "{fx}", "{d}/cand.safetensors"],
         text="the state.* tensors must have one dtype",
         setup=state_candidate(lambda t: t.__setitem__("state.f", ["F32", t["state.f"][1], struct.pack(
             f"<{len(t['state.f'][2]) // 8}f", *struct.unpack(f"<{len(t['state.f'][2]) // 8}d", t["state.f"][2]))]))),
    dict(name="check: header, NUL, garbage", argv=CHECK_BAD, text="control byte 0x00",
         setup=lambda d: ((d / "bad.safetensors").write_bytes(
             (lambda b: struct.pack("<Q", struct.unpack("<Q", b[:8])[0] + 8) + b[8:8 + struct.unpack("<Q", b[:8])[0]] + b"\0garbage"
              + b[8 + struct.unpack("<Q", b[:8])[0]:])(FX.read_bytes())), candidate()(d))),
    dict(name="check: header of 100,000 nested [", argv=CHECK_BAD, text="nests JSON deeper than 8",
         setup=lambda d: (raw_header(b"[" * 100000)(d), candidate()(d))),
    dict(name="check: header length 2^40 in a 16-byte file", argv=CHECK_BAD, text="exceeds the limit",
         setup=lambda d: ((d / "bad.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}      "), candidate()(d))),
    dict(name="check: data declared beyond the file", argv=CHECK_BAD, text="lie outside the data buffer",
         setup=lambda d: ((d / "bad.safetensors").write_bytes(FX.read_bytes()[:-100]), candidate()(d))),
    dict(name="check --verify-inputs: ref_out one ulp off, digest forged", argv=CHECK_BAD + ["--verify-inputs"],
         text="--verify-inputs", setup=edited("bad.safetensors", tensor_op("ref_out", lambda x: [x[0] * (1 + 2**-52)] + x[1:]))),
    dict(name="fuzz --replay past its --budget", argv=["fuzz", "--exec", EXEC, "--replay", "{fx}", "--budget", "0.000001"],
         text="exceeded its budget"),
    dict(name="check --budget 0", argv=["check", "{fx}", "{d}/cand.safetensors", "--verify-inputs", "--budget", "0"], text="--budget",
         setup=candidate()),
    dict(name="check: a version-2 fixture reads, with a warning", argv=CHECK_BAD, text="without a digest", status=0,
         setup=edited("bad.safetensors", lambda p: (p["metadata"].pop("digest"), p["metadata"].update(format_version="2")),
                      redigest=False)),
    # --- usage ---
    dict(name="unknown subcommand", argv=["frobnicate"], text="unknown subcommand 'frobnicate'"),
    dict(name="no subcommand", argv=[], text="subcommand"),
    # --- gen: output folder ---
    dict(name="gen --out in /proc", argv=["gen", "--suite", "golden", "--out", "/proc/hla-x"], text="/proc/hla-x"),
    dict(name="gen --out under an existing file", argv=["gen", "--suite", "golden", "--out", "{d}/file/sub"],
         text="is not a directory", setup=write("file", b"x")),
    dict(name="gen --out is an existing file", argv=["gen", "--suite", "golden", "--out", "{d}/file"],
         text="exists and is not a directory", setup=write("file", b"x")),
    dict(name="gen --out ''", argv=["gen", "--out", ""], text="--out"),
    dict(name="gen --out a folder of another seed", argv=["gen", "--suite", "golden", "--seed", "2", "--out", "{d}/out"],
         text="not of suite 'golden' --seed 2", setup=foreign_seed),
    dict(name="gen --out a foreign fixture", argv=["gen", "--suite", "golden", "--out", "{d}/out"],
         text="alien.safetensors, which is not in suite", setup=lambda d: (d / "out").mkdir() or shutil.copyfile(FX, d / "out/alien.safetensors")),
    dict(name="gen --out a fixture in a subfolder", argv=["gen", "--suite", "golden", "--out", "{d}/out"],
         text="old/x.safetensors", setup=write("out/old/x.safetensors", b"")),
    dict(name="gen --out a folder being written", argv=["gen", "--suite", "golden", "--out", "{d}/out"],
         text=f"is being written by another hla gen (pid {os.getpid()})", setup=locked),
    # --- gen: option values ---
    dict(name="gen --seed -1", argv=["gen", "--seed", "-1", "--out", "{d}/o"], text="--seed"),
    dict(name="gen --seed 2^64", argv=["gen", "--seed", "18446744073709551616", "--out", "{d}/o"], text="--seed"),
    dict(name="gen --seed 1.5", argv=["gen", "--seed", "1.5", "--out", "{d}/o"], text="--seed"),
    dict(name="gen --suite ''", argv=["gen", "--suite", "", "--out", "{d}/o"], text="--suite"),
    dict(name="gen --filter ''", argv=["gen", "--suite", "golden", "--filter", "", "--out", "{d}/o"], text="--filter: empty value"),
    dict(name="gen --filter matching nothing", argv=["gen", "--suite", "golden", "--filter", "nonesuch", "--out", "{d}/o"],
         text="matches no case"),
    # --- eval ---
    dict(name="eval --out in a missing folder", argv=["eval", "{fx}", "--out", "/nonexistent-dir/c.safetensors"],
         text="'/nonexistent-dir' does not exist"),
    dict(name="eval --out is a folder", argv=["eval", "{fx}", "--out", "{d}"], text="is a directory"),
    dict(name="eval --out is a FIFO", argv=["eval", "{fx}", "--out", "{d}/pipe"], text="not a regular file", setup=fifo("pipe")),
    dict(name="eval --out is the fixture", argv=["eval", "{d}/fx.safetensors", "--out", "{d}/fx.safetensors"],
         text="is the fixture itself", setup=copy_fx("fx.safetensors")),
    dict(name="eval --out under an existing file", argv=["eval", "{fx}", "--out", "{d}/file/c.safetensors"],
         text="is not a directory", setup=write("file", b"x")),
    dict(name="eval missing fixture", argv=["eval", "{d}/missing.safetensors", "--out", "{d}/c.safetensors"], text="No such file"),
    dict(name="eval fixture is a folder", argv=["eval", "{d}", "--out", "{d}/c.safetensors"], text="is a directory"),
    dict(name="eval --chunk 0", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--chunk", "0"], text="--chunk"),
    dict(name="eval --chunk -5", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--chunk", "-5"], text="--chunk"),
    dict(name="eval --chunk 2^40", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--chunk", "1099511627776"], text="--chunk"),
    dict(name="eval --paper ''", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--paper", ""], text="--paper"),
    dict(name="eval --paper E (prefix)", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--paper", "E"], text="unknown paper form 'E'"),
    dict(name="eval --paper E4 (no such form)", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--paper", "E4"], text="unknown paper form 'E4'"),
    dict(name="eval --form and --paper", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--form", "naive", "--paper", "E1"],
         text="not both"),
    dict(name="eval --precision ''", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--precision", ""], text="--precision"),
    dict(name="eval --form ''", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--form", ""], text="--form"),
    dict(name="eval --dtype f8", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--dtype", "f8"], text="unknown dtype 'f8'"),
    dict(name="eval escape sequence in --out", argv=["eval", "{fx}", "--out", "/nonexistent\x1b[31m/c.safetensors"],
         text="\\x1b[31m"),
    # --- check ---
    dict(name="check candidate /dev/zero", argv=["check", "{fx}", "/dev/zero"], text="not a regular file"),
    # --html: refused before any work, nothing written (the page itself is written atomically).
    dict(name="check --html into a missing folder", argv=["check", "{fx}", "{fx}", "--html", "{d}/missing/r.html"],
         text=["--html", "does not exist"]),
    dict(name="check --html a folder", argv=["check", "{fx}", "{fx}", "--html", "{d}"], text=["--html", "is a directory"]),
    dict(name="check --html a FIFO", argv=["check", "{fx}", "{fx}", "--html", "{d}/pipe"], text=["--html", "not a regular file"],
         setup=fifo("pipe")),
    dict(name="check --html empty", argv=["check", "{fx}", "{fx}", "--html", ""], text="--html"),
    dict(name="check fixture is a FIFO", argv=["check", "{d}/pipe", "{d}/cand.safetensors"], text="not a regular file",
         setup=lambda d: (fifo("pipe")(d), candidate()(d))),
    dict(name="check fixture is a folder", argv=["check", "{d}", "{fx}"], text="is a directory"),
    dict(name="check empty fixture", argv=["check", "{d}/empty.safetensors", "{fx}"], text="empty.safetensors",
         setup=write("empty.safetensors")),
    dict(name="check empty candidate", argv=["check", "{fx}", "{d}/empty.safetensors"], text="empty.safetensors",
         setup=write("empty.safetensors")),
    dict(name="check candidate is a fixture", argv=["check", "{fx}", "{fx}"], text=FX.name),
    dict(name="check fixture ''", argv=["check", "", "{fx}"], text="FIXTURE"),
    dict(name="check --precision ''", argv=["check", "{fx}", "{d}/cand.safetensors", "--precision", ""], text="--precision",
         setup=candidate()),
    dict(name="check --form-class ''", argv=["check", "{fx}", "{d}/cand.safetensors", "--form-class", ""], text="--form-class",
         setup=candidate()),
    dict(name="check --form-class sideways", argv=["check", "{fx}", "{d}/cand.safetensors", "--form-class", "sideways"],
         text=["unknown form class 'sideways'", "masked, state_difference, flat", "flat:W"], setup=candidate()),
    dict(name="check --form-class flat:0", argv=["check", "{fx}", "{d}/cand.safetensors", "--form-class", "flat:0"],
         text=["bad chunk width '0'", "1 <= W <= 65536"], setup=candidate()),
    dict(name="check --form-class flat:70000", argv=["check", "{fx}", "{d}/cand.safetensors", "--form-class", "flat:70000"],
         text="bad chunk width '70000'", setup=candidate()),
    dict(name="check --form-class flat:x", argv=["check", "{fx}", "{d}/cand.safetensors", "--form-class", "flat:x"],
         text="bad chunk width 'x'", setup=candidate()),
    dict(name="fuzz --exec --form-class flat:-4", argv=["fuzz", "--exec", "true {in} {out}", "--form-class", "flat:-4", "--max-cases", "1"],
         text=["bad chunk width '-4'", "state_difference"]),
    dict(name="check --worst -1", argv=["check", "{fx}", "{d}/cand.safetensors", "--worst", "-1"], text="--worst", setup=candidate()),
    dict(name="check escape sequence in a path", argv=["check", "{d}/\x1b]0;pwned\x07.safetensors", "{fx}"], text="\\x1b]0;pwned\\x07"),
    dict(name="check a case name with an escape sequence", argv=["check", "{d}/esc.safetensors", "{d}/cand.safetensors"],
         status=(0, 2), text="esc.safetensors", setup=fixture_with_case("esc.safetensors", "\x1b[2J\x1b[31mred")),
    dict(name="check a case name of 100 kB", argv=["check", "{d}/long.safetensors", "{d}/cand.safetensors"],
         status=(0, 2), text="long.safetensors", max_output=20000, setup=fixture_with_case("long.safetensors", "x" * 100000)),
    # --- fuzz ---
    dict(name="fuzz --seed -1", argv=["fuzz", "--exec", EXEC, "--seed", "-1"], text="--seed"),
    dict(name="fuzz --max-cases -1", argv=["fuzz", "--exec", EXEC, "--max-cases", "-1"], text="--max-cases"),
    dict(name="fuzz --max-cases 0", argv=["fuzz", "--exec", EXEC, "--max-cases", "0"], text="--max-cases"),
    dict(name="fuzz --time -5", argv=["fuzz", "--exec", EXEC, "--time", "-5"], text="--time"),
    dict(name="fuzz --time nan", argv=["fuzz", "--exec", EXEC, "--time", "nan"], text="--time"),
    dict(name="fuzz --timeout 0", argv=["fuzz", "--exec", EXEC, "--timeout", "0"], text="--timeout"),
    dict(name="fuzz --timeout 1e300", argv=["fuzz", "--exec", EXEC, "--timeout", "1e300"], text="--timeout"),
    dict(name="fuzz --shard -1/2", argv=["fuzz", "--exec", EXEC, "--shard", "-1/2"], text="--shard"),
    dict(name="fuzz --shard 0/2x", argv=["fuzz", "--exec", EXEC, "--shard", "0/2x"], text="--shard"),
    dict(name="fuzz --stop-after -1", argv=["fuzz", "--exec", EXEC, "--stop-after", "-1"], text="--stop-after"),
    dict(name="fuzz --shrink-attempts -1", argv=["fuzz", "--exec", EXEC, "--shrink-attempts", "-1"], text="--shrink-attempts"),
    dict(name="fuzz --max-n -1", argv=["fuzz", "--exec", EXEC, "--max-n", "-1"], text="--max-n"),
    dict(name="fuzz --variants ''", argv=["fuzz", "--exec", EXEC, "--variants", ""], text="--variants"),
    dict(name="fuzz --variants with an empty entry", argv=["fuzz", "--exec", EXEC, "--variants", "hla2,,la1"], text="empty entry"),
    dict(name="fuzz --dtypes ''", argv=["fuzz", "--exec", EXEC, "--dtypes", ""], text="--dtypes"),
    dict(name="fuzz --features ''", argv=["fuzz", "--exec", EXEC, "--features", ""], text="--features"),
    dict(name="fuzz --precision ''", argv=["fuzz", "--exec", EXEC, "--precision", ""], text="--precision"),
    dict(name="fuzz --findings in /proc", argv=["fuzz", "--exec", EXEC, "--findings", "/proc/hla-findings"], text="/proc/hla-findings"),
    dict(name="fuzz --findings is a file", argv=["fuzz", "--exec", EXEC, "--findings", "{d}/file"], text="exists and is not a directory",
         setup=write("file", b"x")),
    dict(name="fuzz --lib with exec-only --features", argv=["fuzz", "--lib", "{d}/x.so", "--features", "decay"],
         text="--features describes an --exec candidate"),
    dict(name="fuzz --lib is a folder", argv=["fuzz", "--lib", "{d}"], text="is a directory"),
    dict(name="fuzz --replay a FIFO", argv=["fuzz", "--exec", EXEC, "--replay", "{d}/pipe"], text="not a regular file",
         setup=fifo("pipe")),
    # --- select ---
    dict(name="select --max-n -1", argv=["select", "{fixtures}", "--max-n", "-1"], text="--max-n"),
    dict(name="select --variants ''", argv=["select", "{fixtures}", "--variants", ""], text="--variants"),
    dict(name="select --d 64,,128", argv=["select", "{fixtures}", "--d", "64,,128"], text="empty entry"),
    dict(name="select DIR is a file", argv=["select", "{fx}"], text="not a directory"),
    dict(name="select a folder with an empty fixture", argv=["select", "{d}"], text="empty.safetensors", setup=write("empty.safetensors")),
    # --- ref: the user's own inputs ---
    dict(name="ref: no input file", argv=["ref", "{d}/missing.safetensors", "--out", "{d}/o.safetensors"], text="missing.safetensors"),
    dict(name="ref: input without v", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="no tensor 'v'",
         setup=inputs("in.safetensors", drop=("v",))),
    dict(name="ref: an initial state without a part name", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"],
         text="tensors named initial_state.<part>", setup=inputs("in.safetensors", extra={"initial_state": ["F32", [1], b"\0" * 4]})),
    dict(name="ref: an initial state part the variant's state lacks", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"],
         text="'initial_state.G', which is not part of the", setup=inputs("in.safetensors", extra={"initial_state.G": ["F32", [1], b"\0" * 4]})),
    dict(name="ref: an initial state part of the wrong shape", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"],
         text="initial_state.S has shape [1]", setup=inputs("in.safetensors", extra={"initial_state.S": ["F32", [1], b"\0" * 4]})),
    dict(name="ref: an unknown tensor", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"],
         text="expected q, k, v", setup=inputs("in.safetensors", extra={"z": ["F32", [1], b"\0" * 4]})),
    dict(name="ref: q of rank 3", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="expected 4 dimensions",
         setup=inputs("in.safetensors", change=lambda t: t["q"].__setitem__(1, [2, 37, 8]))),
    dict(name="ref: q, k, v of different dtypes", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="one dtype",
         setup=inputs("in.safetensors", change=lambda t: t.__setitem__("v", ["F64", [1, 1, 37, 2], t["v"][2]]))),
    dict(name="ref: integer q", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="expected F64, F32, BF16 or F16",
         setup=inputs("in.safetensors", change=lambda t: t.__setitem__("q", ["I32", t["q"][1], t["q"][2]]))),
    dict(name="ref: heads not a multiple of K/V heads", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"],
         text="multiple of the K/V heads", setup=inputs("in.safetensors", change=lambda t: (
             t.__setitem__("k", ["F32", [1, 2, 37, 4], t["k"][2]]), t.__setitem__("v", ["F32", [1, 2, 37, 2], t["v"][2]]),
             t.__setitem__("q", ["F32", [1, 3, 37, 4], t["q"][2][:3 * 37 * 4 * 4]])))),
    dict(name="ref: tokens differ", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="number of tokens",
         setup=inputs("in.safetensors", change=lambda t: t.__setitem__("v", ["F32", [1, 1, 74, 2], t["v"][2]]))),
    dict(name="ref: cu_seqlens not ending at T", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="offsets",
         setup=inputs("in.safetensors", extra={"cu_seqlens": ["I64", [2], struct.pack("<2q", 0, 30)]})),
    dict(name="ref: cu_seqlens of floats", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="expected I64 or I32",
         setup=inputs("in.safetensors", extra={"cu_seqlens": ["F32", [2], struct.pack("<2f", 0, 37)]})),
    dict(name="ref: offsets and cu_seqlens", argv=["ref", "{d}/in.safetensors", "--out", "{d}/o.safetensors"], text="give one",
         setup=inputs("in.safetensors", extra={"cu_seqlens": ["I64", [2], struct.pack("<2q", 0, 37)],
                                               "offsets": ["I64", [2], struct.pack("<2q", 0, 37)]})),
    dict(name="ref --layout xyz", argv=["ref", "{d}/in.safetensors", "--layout", "xyz", "--out", "{d}/o.safetensors"], text="--layout",
         setup=inputs("in.safetensors")),
    dict(name="ref --gamma 3/2", argv=["ref", "{d}/in.safetensors", "--gamma", "3/2", "--out", "{d}/o.safetensors"], text="gamma",
         setup=inputs("in.safetensors")),
    dict(name="ref --gamma abc", argv=["ref", "{d}/in.safetensors", "--gamma", "abc", "--out", "{d}/o.safetensors"], text="gamma",
         setup=inputs("in.safetensors")),
    dict(name="ref --normalize sometimes", argv=["ref", "{d}/in.safetensors", "--normalize", "sometimes", "--out", "{d}/o.safetensors"],
         text="normalize", setup=inputs("in.safetensors")),
    dict(name="ref --variant hla4", argv=["ref", "{d}/in.safetensors", "--variant", "hla4", "--out", "{d}/o.safetensors"], text="hla4",
         setup=inputs("in.safetensors")),
    dict(name="ref --unmasked on ahla", argv=["ref", "{d}/in.safetensors", "--variant", "ahla", "--unmasked", "--out", "{d}/o.safetensors"],
         text="no unmasked form", setup=inputs("in.safetensors")),
    dict(name="ref --out is a folder", argv=["ref", "{d}/in.safetensors", "--out", "{d}/sub"], text="is a directory",
         setup=lambda d: (inputs("in.safetensors")(d), (d / "sub").mkdir())),
    dict(name="ref --out is the input", argv=["ref", "{d}/in.safetensors", "--out", "{d}/in.safetensors"], text="input file itself",
         setup=inputs("in.safetensors")),
    dict(name="ref: input is a FIFO", argv=["ref", "{d}/pipe", "--out", "{d}/o.safetensors"], text="not a regular file", setup=fifo("pipe")),
    dict(name="ref --threads 0", argv=["ref", "{d}/in.safetensors", "--threads", "0", "--out", "{d}/o.safetensors"], text="--threads",
         setup=inputs("in.safetensors")),
    # --- ref: the upstream gradients do, dden (SPEC §9) ---
    dict(name="ref: do with the wrong dv", argv=REF, text="do has shape [1, 2, 37, 3]; expected [1, 2, 37, 4] ([B,H,T,dv])",
         setup=inputs("in.safetensors", extra={"do": f32s([1, 2, 37, 3])})),
    dict(name="ref: do with the wrong T", argv=REF, text="do has shape [1, 2, 36, 4]; expected [1, 2, 37, 4]",
         setup=inputs("in.safetensors", extra={"do": f32s([1, 2, 36, 4])})),
    dict(name="ref: do [B,T,H,dv] with --layout bhtd", argv=REF,
         text=["do has shape [1, 37, 2, 4]; expected [1, 2, 37, 4]", "that is the [B,T,H,dv] layout", "(layout bhtd)"],
         setup=inputs("in.safetensors", extra={"do": f32s([1, 37, 2, 4])})),
    dict(name="ref: do [B,H,T,dv] with --layout bthd", argv=REF + ["--layout", "bthd"],
         text=["do has shape [1, 2, 37, 4]; expected [1, 37, 2, 4]", "that is the [B,H,T,dv] layout", "(layout bthd)"],
         setup=inputs("in.safetensors", extra={"do": f32s(DO)}, change=bthd_inputs)),
    dict(name="ref: do of integers", argv=REF, text="do has dtype I32; expected F64, F32, BF16 or F16",
         setup=inputs("in.safetensors", extra={"do": ["I32", DO, b"\0" * 4 * 296]})),
    dict(name="ref: do with a value the inputs' dtype cannot hold", argv=REF,
         text=["do[0, 0, 0, 0] = 0.1 (F64) is not representable in f32, the inputs' dtype"],
         setup=inputs("in.safetensors", extra={"do": f64s(DO, 0.1)})),
    dict(name="ref: NaN in do", argv=REF, text=["do[0, 1, 2, 3] = nan is not finite", "grad_nan_causality"],
         setup=inputs("in.safetensors", extra={"do": f32s(DO, odd=(((0 * 2 + 1) * 37 + 2) * 4 + 3, float("nan")))})),
    dict(name="ref: NaN in do, --layout bthd (index in its order)", argv=REF + ["--layout", "bthd"], text="do[0, 2, 1, 3] = nan is not finite",
         setup=inputs("in.safetensors", extra={"do": f32s([1, 37, 2, 4], odd=(((0 * 37 + 2) * 2 + 1) * 4 + 3, float("nan")))},
                      change=bthd_inputs)),
    dict(name="ref: Inf in dden", argv=REF, text="dden[0, 1, 5] = inf is not finite",
         setup=inputs("in.safetensors", extra={"do": f32s(DO), "dden": f32s([1, 2, 37], odd=(37 + 5, float("inf")))})),
    dict(name="ref: dden of the wrong shape", argv=REF, text="dden has shape [1, 2, 37, 1]; expected [1, 2, 37] ([B,H,T])",
         setup=inputs("in.safetensors", extra={"do": f32s(DO), "dden": f32s([1, 2, 37, 1])})),
    dict(name="ref: dden without do", argv=REF, text="holds dden but no do",
         setup=inputs("in.safetensors", extra={"dden": f32s([1, 2, 37])})),
    dict(name="ref: do for hla3_paper (no backward)", argv=REF + ["--variant", "hla3_paper"], text="has no backward form",
         setup=inputs("in.safetensors", extra={"do": f32s(DO)})),
    dict(name="ref: do with a NaN in q", argv=REF, text=["need finite inputs", "q[5] is not finite"],
         setup=inputs("in.safetensors", extra={"do": f32s(DO)}, change=lambda t: t.__setitem__("q", f32s([1, 2, 37, 8], odd=(5, float("nan")))))),
    # --- gen --case ---
    dict(name="gen --case without --out", argv=["gen", "--case", "variant=hla2"], text="--out"),
    dict(name="gen --case with an unknown key", argv=["gen", "--case", "variant=hla2,heads=2", "--out", "{d}/c.safetensors"], text="unknown key 'heads'"),
    dict(name="gen --case with n=abc", argv=["gen", "--case", "n=abc", "--out", "{d}/c.safetensors"], text="n=abc"),
    dict(name="gen --case without '='", argv=["gen", "--case", "hla2", "--out", "{d}/c.safetensors"], text="not key=value"),
    dict(name="gen --case too large", argv=["gen", "--case", "B=64,H=64,n=65536,d=128", "--out", "{d}/c.safetensors"], text="2^28"),
    dict(name="gen --case dist=nope", argv=["gen", "--case", "dist=nope", "--out", "{d}/c.safetensors"], text="distribution"),
    dict(name="gen --case H=3,Hkv=2", argv=["gen", "--case", "H=3,Hkv=2", "--out", "{d}/c.safetensors"], text="multiple"),
    dict(name="gen --case hla3_paper with decay", argv=["gen", "--case", "variant=hla3_paper,gamma=1/2", "--out", "{d}/c.safetensors"],
         text="gamma = 1 only"),
    dict(name="gen --case d=0", argv=["gen", "--case", "d=0", "--out", "{d}/c.safetensors"], text="d must be at least 1"),
    dict(name="gen --case --out a folder", argv=["gen", "--case", "n=4", "--out", "{d}/sub"], text="is a directory",
         setup=lambda d: (d / "sub").mkdir()),
    dict(name="gen --case with --list", argv=["gen", "--case", "n=4", "--list", "--out", "{d}/c.safetensors"], text="--list"),
    # --- demo ---
    dict(name="demo --n -1", argv=["demo", "--n", "-1"], text="--n"),
    dict(name="demo --seed -1", argv=["demo", "--seed", "-1"], text="--seed"),
    dict(name="demo --chunk 0", argv=["demo", "--chunk", "0"], text="--chunk"),
    dict(name="demo --gamma ''", argv=["demo", "--gamma", ""], text="--gamma"),
    dict(name="demo --gamma 3/2", argv=["demo", "--gamma", "3/2"], text="gamma"),
    # Gradients (SPEC §9).
    dict(name="check: gradients against a fixture without any", argv=CHECK_BAD, setup=grad_candidate(),
         text="is a gradient, but the fixture carries no gradients"),
    dict(name="check --require-grad, fixture without gradients", argv=["check", "{fx}", "{d}/cand.safetensors", "--require-grad"],
         setup=candidate(), text="the fixture carries none"),
    dict(name="check: gradient fixture without ref_dk", argv=CHECK_BAD, text="tensor 'ref_dk' is missing",
         setup=edited("bad.safetensors", lambda p: p["tensors"].pop("ref_dk"), fixture=FX_GRAD)),
    dict(name="check: gradient fixture, ref_dq edited (digest recomputed)", argv=CHECK_BAD, text="ref_dq 592 element",
         setup=edited("bad.safetensors", tensor_op("ref_dq", lambda v: [x * (1 + 1e-6) for x in v]), fixture=FX_GRAD)),
    dict(name="check: gradient fixture, do edited (digest recomputed)", argv=CHECK_BAD, text=NOT_ITS_INPUTS,
         setup=edited("bad.safetensors", tensor_op("do", lambda v: [-x for x in v]), fixture=FX_GRAD)),
    dict(name="eval --grad, fixture without gradients", argv=["eval", "{fx}", "--out", "{d}/c.safetensors", "--grad", "streaming"],
         text="carries no gradients"),
    dict(name="eval --grad backwards", argv=["eval", str(FX_GRAD), "--out", "{d}/c.safetensors", "--grad", "backwards"],
         text="--grad 'backwards' is not a backward form"),
    dict(name="eval --grad streaming in bf16", argv=["eval", str(FX_GRAD), "--out", "{d}/c.safetensors", "--grad", "streaming",
                                                     "--precision", "bf16"], text="in bf16 the chunked backward does"),
    dict(name="gen --case grad=maybe", argv=["gen", "--case", "variant=hla2,n=4,d=2,grad=maybe", "--out", "{d}/c.safetensors"],
         text="grad=maybe is not true or false"),
    dict(name="gen --case dden without grad", argv=["gen", "--case", "variant=hla2,n=4,d=2,dden=true", "--out", "{d}/c.safetensors"],
         text="dden=true needs grad=true"),
    dict(name="gen --case grad=true for hla3_paper", argv=["gen", "--case", "variant=hla3_paper,n=4,d=2,grad=true", "--out", "{d}/c.safetensors"],
         text="has no backward form"),
]
if os.geteuid() != 0:  # permission bits do not stop root
    ROWS += [
        dict(name="gen --out a read-only folder", argv=["gen", "--suite", "golden", "--out", "{d}/ro"], text="Permission denied",
             setup=lambda d: (d / "ro").mkdir(mode=0o555)),
        dict(name="eval --out in a read-only folder", argv=["eval", "{fx}", "--out", "{d}/ro/c.safetensors"], text="Permission denied",
             setup=lambda d: (d / "ro").mkdir(mode=0o555)),
    ]


def snapshot(d):
    # Every name below d (hidden ones too) with its type, size and, for files,
    # mtime: "nothing written". A folder's mtime may change (a probe file made
    # and removed to test that it is writable).
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            out[os.path.relpath(p, d)] = (st.st_mode, None if n in dirs else st.st_size, None if n in dirs else st.st_mtime_ns)
    return out


def run_row(i, row):
    d = WORK / f"row{i:03d}"
    d.mkdir()
    keep = row["setup"](d) if "setup" in row else None
    before = snapshot(d)
    fixtures_before = snapshot(FIXTURES)
    argv = [a.replace("{d}", str(d)).replace("{fx}", str(FX)).replace("{fixtures}", str(FIXTURES)) for a in row["argv"]]
    want = row.get("status", 2)
    problems = []
    try:
        r = subprocess.run([HLA] + argv, cwd=d, capture_output=True, timeout=row.get("timeout", 30))
        status, out = r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        status, out = "timeout", ((e.stdout or b"") + (e.stderr or b"")).decode("utf-8", "replace")
    del keep
    if status not in (want if isinstance(want, tuple) else (want,)):
        problems.append(f"exit {status}, want {want}")
    for text in row["text"] if isinstance(row["text"], list) else [row["text"]]:
        if text not in out:
            problems.append(f"output lacks {text!r}")
    if len(out) > row.get("max_output", 1 << 20):
        problems.append(f"prints {len(out)} characters (absurd strings must be cut)")
    if "internal error" in out:
        problems.append("says 'internal error'")
    if "\x1b" in out:
        problems.append("prints a raw escape character")
    after = snapshot(d)
    if after != before:
        changed = sorted(set(after.items()) ^ set(before.items()))
        problems.append(f"the folder changed: {[c[0] for c in changed]}")
    if snapshot(FIXTURES) != fixtures_before:
        problems.append("the golden fixtures folder changed")
    return status, out, problems


def temps(d):
    return sorted(p.name for p in pathlib.Path(d).iterdir() if ".tmp." in p.name)


def wait_for_temp(d, proc, seconds=60):
    end = time.time() + seconds
    while time.time() < end and proc.poll() is None:
        if pathlib.Path(d).is_dir() and temps(d):
            return True
        time.sleep(0.02)
    return False


def slow_gen(out, delay_ms=4000):
    env = dict(os.environ, HLA_TEST_WRITE_DELAY_MS=str(delay_ms))
    return subprocess.Popen([HLA, "gen", "--suite", "golden", "--filter", GOLDEN_CASE, "--no-progress", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def signal_checks():
    results = []

    def note(name, ok, detail=""):
        results.append((name, ok, detail))

    # SIGTERM mid-write: the handler removes the temporary file and the lock, then dies of the signal.
    out = WORK / "term"
    p = slow_gen(out)
    mid = wait_for_temp(out, p)
    p.send_signal(signal.SIGTERM)
    p.wait(30)
    left = sorted(os.listdir(out))
    note("SIGTERM mid-write leaves nothing", mid and p.returncode == -signal.SIGTERM and left == [],
         f"saw temp: {mid}, exit {p.returncode}, left {left}")

    # SIGKILL mid-write: the temporary file stays; the next run removes it and succeeds.
    out = WORK / "kill"
    p = slow_gen(out)
    mid = wait_for_temp(out, p)
    stale = temps(out)
    p.kill()
    p.wait(30)
    r = subprocess.run([HLA, "gen", "--suite", "golden", "--filter", GOLDEN_CASE, "--no-progress", "--out", str(out)], capture_output=True,
                       timeout=120)
    left = sorted(os.listdir(out))
    note("SIGKILL mid-write, then a rerun cleans up", mid and bool(stale) and r.returncode == 0 and
         left == ["MANIFEST.json", f"{GOLDEN_CASE}.safetensors"] and b"removed 1 temporary file" in r.stderr,
         f"saw temp: {stale}, rerun exit {r.returncode}, left {left}, stderr {r.stderr[-200:]!r}")

    # Two concurrent runs into one folder: the second is refused, naming the first's pid.
    out = WORK / "twice"
    p = slow_gen(out, 1500)  # the second gen runs in ~50 ms; the first is waited for to the end
    mid = wait_for_temp(out, p)
    r = subprocess.run([HLA, "gen", "--suite", "golden", "--filter", GOLDEN_CASE, "--no-progress", "--out", str(out)], capture_output=True,
                       timeout=60)
    p.wait(60)
    msg = f"is being written by another hla gen (pid {p.pid})"
    left = sorted(os.listdir(out))
    note("a second concurrent gen is refused", mid and r.returncode == 2 and msg in r.stderr.decode() and p.returncode == 0 and
         left == ["MANIFEST.json", f"{GOLDEN_CASE}.safetensors"], f"second exit {r.returncode}: {r.stderr[-300:]!r}; first exit {p.returncode}; left {left}")

    # The same suite and seed again into a full folder: allowed (how the golden set is regenerated), same bytes.
    before = (out / f"{GOLDEN_CASE}.safetensors").read_bytes()
    r = subprocess.run([HLA, "gen", "--suite", "golden", "--filter", GOLDEN_CASE, "--no-progress", "--out", str(out)], capture_output=True,
                       timeout=60)
    note("the same suite and seed again is fine", r.returncode == 0 and (out / f"{GOLDEN_CASE}.safetensors").read_bytes() == before,
         f"exit {r.returncode}: {r.stderr[-300:]!r}")
    return results


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    fails = 0
    print(f"{'#':>3}  {'result':6}  {'exit':>4}  case")
    for i, row in enumerate(ROWS):
        status, out, problems = run_row(i, row)
        fails += bool(problems)
        print(f"{i:3d}  {'ok' if not problems else 'FAILED':6}  {status!s:>4}  {row['name']}")
        first = next((line for line in out.splitlines() if line.strip()), "")
        print(f"{'':17}{first[:150]}")
        for p in problems:
            print(f"{'':17}-> {p}")
            print("\n".join(" " * 20 + line for line in out.splitlines()[:10]))
    print()
    for name, ok, detail in signal_checks():
        fails += not ok
        print(f"{'ok' if ok else 'FAILED':6}  {name}" + ("" if ok else f": {detail}"))
    print(f"\n{len(ROWS)} table rows and 4 process checks: {fails} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
