"""The zoo's C ABI members on the committed golden fixtures (a zoo self-test).

    python cabi_fixtures.py REPO_ROOT ZOO_PATHS_JSON

Calls each cabi member through ctypes (the same C ABI the fuzzer uses) on every
fixture inside its declared support, and compares with ref_out / ref_den within
1e-5 x the SPEC §7 magnitude (plus the rounding of 16-bit outputs; normalized
outputs through num / D, ill-conditioned ones unscored). Asserts that the
correct members match on every fixture they support (every distribution:
gaussian, cancellation, dynamic range, near-zero den, …) — members that declare
form_class STATE_DIFFERENCE against the unmasked-order magnitude (magnitude.py),
which their subtraction of partial sums errs against; for the buggy members
it only reports on how many fixtures each bug shows (the fixtures were not
designed for them; zoo_selftest asserts their bugs).
"""

import ctypes as C
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import safetensors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exec"))
import correct  # noqa: E402  (fixture reading only)
from magnitude import unmasked_magnitude  # noqa: E402

RTOL = 1e-5
VARIANTS = {"la1": 0, "hla2": 1, "ahla": 2, "hla3": 3, "hla3_paper": 4}
DTYPES = {"f64": (0, "F64", 8, 0.0), "f32": (1, "F32", 4, 2.0**-24), "bf16": (2, "BF16", 2, 2.0**-8),
          "f16": (3, "F16", 2, 2.0**-11)}


class Info(C.Structure):
    _fields_ = [("abi_version", C.c_int32), ("name", C.c_char_p), ("variants", C.c_uint32), ("dtypes", C.c_uint32),
                ("features", C.c_uint32), ("max_n", C.c_int64), ("max_d", C.c_int64), ("max_dv", C.c_int64),
                ("precision", C.c_char_p), ("form_class", C.c_int32), ("precision_by_dtype", C.c_char_p)]  # ABI 1.1+

STATE_DIFFERENCE = 1  # HLA_CLASS_STATE_DIFFERENCE


def abi_minor(v):
    """HLA_IMPL_ABI_MINOR_OF: the old encoding 1, 2 is 1.0, 1.1; since 1.2, major << 16 | minor."""
    return v - 1 if v < 0x10000 else v & 0xFFFF


class Problem(C.Structure):
    _fields_ = [("abi_version", C.c_int32), ("variant", C.c_int32), ("masked", C.c_int32), ("normalize", C.c_int32),
                ("eps_mode", C.c_int32), ("gamma", C.c_double), ("eps", C.c_double), ("lambda_", C.c_double),
                ("scale", C.c_double), ("gamma_exact", C.c_char_p), ("eps_exact", C.c_char_p),
                ("lambda_exact", C.c_char_p), ("scale_exact", C.c_char_p), ("batch", C.c_int64), ("heads", C.c_int64),
                ("kv_heads", C.c_int64), ("n", C.c_int64), ("d", C.c_int64), ("dv", C.c_int64), ("dtype", C.c_int32),
                ("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p), ("offsets", C.c_void_p),
                ("num_offsets", C.c_int64), ("state_in", C.c_void_p), ("state_out", C.c_void_p), ("out", C.c_void_p),
                ("den", C.c_void_p)]


FEAT = {"unmasked": 1, "normalize": 2, "clamp": 4, "decay": 8, "ridge": 16, "scale": 32, "gqa": 64, "varlen": 128,
        "den": 512}



def aligned(a):
    """A copy of array a whose data starts on a 64-byte boundary, as the harness hands buffers over (hla_impl.h)."""
    raw = np.empty(a.nbytes + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out

def needs(md, t):
    """Feature bits a fixture needs."""
    f = 0
    f |= FEAT["unmasked"] if md["masked"] == "false" else 0
    if md["normalize"] == "true":
        f |= FEAT["normalize"] if md["eps_mode"] == "add" else FEAT["clamp"]
    f |= FEAT["decay"] if Fraction(md["gamma"]) != 1 else 0
    f |= FEAT["ridge"] if Fraction(md["lambda"]) != 0 else 0
    f |= FEAT["scale"] if Fraction(md["scale"]) != 1 else 0
    f |= FEAT["gqa"] if int(md["kv_heads"]) < int(md["heads"]) else 0
    f |= FEAT["varlen"] if "offsets" in t else 0
    return f


def run(lib, info, path):
    """worst err/tol (inf: a non-finite output where the reference is finite), or None if unsupported."""
    raw = dict(safetensors.deserialize(path.read_bytes()))
    t, md = correct.read(str(path))
    code, name, size, u = DTYPES[md["dtype"]]
    if not (info.variants >> VARIANTS[md["variant"]] & 1) or not (info.dtypes >> code & 1):
        return None
    if needs(md, t) & ~info.features:
        return None
    p = Problem()
    p.abi_version, p.variant, p.dtype = info.abi_version, VARIANTS[md["variant"]], code  # the library's own version
    p.masked, p.normalize = md["masked"] == "true", md["normalize"] == "true"
    p.eps_mode = 0 if md["eps_mode"] == "add" else 1
    exact = {k: md[k].encode() for k in ("gamma", "eps", "lambda", "scale")}
    p.gamma, p.eps, p.lambda_, p.scale = (float(Fraction(md[k])) for k in ("gamma", "eps", "lambda", "scale"))
    p.gamma_exact, p.eps_exact, p.lambda_exact, p.scale_exact = (exact[k] for k in ("gamma", "eps", "lambda", "scale"))
    for k in ("batch", "heads", "kv_heads", "n", "d", "dv"):
        setattr(p, k, int(md[k]))
    bufs = {x: aligned(np.frombuffer(bytes(raw[x]["data"]), dtype=np.uint8)) for x in ("q", "k", "v")}
    p.q, p.k, p.v = (bufs[x].ctypes.data for x in ("q", "k", "v"))
    if "offsets" in t:
        offsets = aligned(np.asarray(t["offsets"], dtype=np.int64))
        p.offsets, p.num_offsets = offsets.ctypes.data, len(offsets)
    ref_out, ref_den, mag_num, mag_den = (t[x] for x in ("ref_out", "ref_den", "mag_num", "mag_den"))
    if abi_minor(info.abi_version) >= 1 and info.form_class == STATE_DIFFERENCE and md["variant"] == "hla2":
        mag_num, mag_den = unmasked_magnitude(t, md)
    out_buf = aligned(np.zeros(ref_out.size * size, dtype=np.uint8))
    den = aligned(np.full(ref_den.shape, np.nan))
    p.out, p.den = out_buf.ctypes.data, den.ctypes.data
    err = C.create_string_buffer(512)
    if lib.hla_impl_run(C.byref(p), err, 512) != 0:
        raise RuntimeError(f"{path.name}: {err.value.decode()}")
    out = correct.decode(name, ref_out.shape, out_buf.tobytes()).astype(np.float64)
    if p.normalize:
        D = ref_den + p.eps if p.eps_mode == 0 else np.where(ref_den < 0, -1.0, 1.0) * np.maximum(np.abs(ref_den), p.eps)
        floor = np.abs(D) - 2 * RTOL * mag_den
        tol = RTOL * (mag_num + np.abs(ref_out) * mag_den[..., None]) / np.where(floor > 0, floor, 1.0)[..., None]
        scored = (floor > 0)[..., None] & np.isfinite(ref_out)
    else:
        tol, scored = RTOL * mag_num, np.isfinite(ref_out)
    tol = tol + 2 * u * np.abs(ref_out) + 1e-300
    # References beyond the output dtype's range are not scored (as in the checker): f16 holds 65504.
    in_range = np.abs(ref_out) <= {"F16": 65504.0, "BF16": 3.3895e38}.get(name, np.inf)
    scored = scored & in_range
    if np.any(~np.isfinite(out) & np.isfinite(ref_out) & in_range) or np.any(~np.isfinite(den) & np.isfinite(ref_den)):
        return np.inf
    fin = np.isfinite(ref_den)
    worst_den = np.max(np.abs(den - ref_den)[fin] / (RTOL * mag_den[fin] + 1e-300), initial=0.0)
    return max(float(np.max((np.abs(out - ref_out) / tol)[scored], initial=0.0)), float(worst_den))


def main():
    root, paths = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    zoo = {m["name"]: m for m in json.loads((root / "tests/zoo/zoo.json").read_text())["members"]}
    fixtures = sorted((root / "fixtures").glob("*.safetensors"))
    failures = 0
    for name, lib_path in paths.items():
        lib = C.CDLL(lib_path)
        lib.hla_impl_info_get.restype = C.POINTER(Info)
        info = lib.hla_impl_info_get().contents
        if name in ("crash_long", "hang"):
            continue  # n = 42 / n > 40 fixtures would hang or kill this process
        results = {}
        for path in fixtures:
            r = run(lib, info, path)
            if r is not None:
                results[path.name] = r
        differ = sorted(f for f, r in results.items() if r > 1)
        if zoo[name]["correct"]:
            worst = max(results.values(), default=0.0)
            # Enough fixtures to mean something: 30 (of 56), 20 for a member of hla2 alone (25 fixtures).
            ok = not differ and len(results) >= (30 if bin(info.variants).count("1") > 1 else 20)
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: matches {len(results) - len(differ)} of {len(results)} supported "
                  f"fixtures (worst err/tol {worst:.3g}){'; differs on ' + ', '.join(differ) if differ else ''}")
        else:
            print(f"info {name}: differs on {len(differ)} of {len(results)} supported fixtures")
    print("all ok" if not failures else f"FAILED: {failures} member(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
