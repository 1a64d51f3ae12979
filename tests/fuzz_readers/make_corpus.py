#!/usr/bin/env python3
"""Writes the committed seed corpus of the reader fuzz targets:
corpus/fixture/ (a few small golden fixtures, copied, plus hand-made malformed
files) and corpus/candidate/ (candidates for the golden fixture the candidate
target reads, hla3 n8 d4 B1 H2, valid and not). Deterministic: rerunning it
rewrites the same bytes. Standard library only. One more seed, a fixture
with an initial state (initial_state.<part> tensors), is written by hla itself:
  hla gen --case variant=hla2,gamma=1/2,normalize=add,dtype=f32,B=1,H=2,Hkv=1,n=8,d=4,dv=2,seed=1,state=4 \
      --out corpus/fixture/case-hla2-initial-state.safetensors

  make_corpus.py REPO_ROOT
"""
import json
import os
import shutil
import struct
import sys

GOLDEN = [  # small, and between them: every dtype, offsets, flags, normalize, ridge, hla3, gradients
    "hla2-raw-f32-gaussian-n1-d8-B1H1K1.safetensors",
    "hla3-raw-f32-small_int-n8-d4-B1H2K1.safetensors",
    "hla3_paper-raw-f32-small_int-n8-d4-B1H2K1.safetensors",
    "hla2-ridge-raw-f32-small_int-n20-d8-B1H2K1.safetensors",
    "ahla-raw-f32-gaussian-n40-d8-B1H2K2-varlen.safetensors",
    "hla2-add-bf16-gaussian-n37-d8-B1H2K1.safetensors",
    "hla2-add-f16-gaussian-n37-d8-B1H2K1.safetensors",
    "hla2-add-f64-gaussian-n37-d8-B1H2K1.safetensors",
    "hla2-clamp-f32-gaussian-n37-d8-B1H2K1.safetensors",
    "hla2-raw-f32-gaussian-n37-d8-B1H2K1-varlen-grad.safetensors",  # gradients (do, ref_d*, mag_d*)
]
SIZES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "U8": 1, "I32": 4}


def raw(header_text, data=b"", length=None):
    """8-byte length (default: of the header), header bytes, data."""
    h = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def st(tensors, metadata=None):
    """A well-formed safetensors file: tensors = {name: (dtype, shape, bytes)}."""
    header, data = {}, b""
    for name, (dt, shape, b) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"), sort_keys=True)
    text += " " * ((8 - len(text) % 8) % 8)
    return raw(text, data)


def zeros(dt, shape):
    n = 1
    for s in shape:
        n *= s
    return bytes(SIZES[dt] * n)


def fixture_inputs(root):
    """Hand-made malformed fixture files."""
    fx = open(os.path.join(root, "fixtures", GOLDEN[1]), "rb").read()
    n = struct.unpack("<Q", fx[:8])[0]
    header = json.loads(fx[8:8 + n])
    data = fx[8 + n:]
    md = header["__metadata__"]

    def edit(md_changes=None, drop=(), extra_header=None):
        h = json.loads(json.dumps(header))
        h["__metadata__"].update(md_changes or {})
        for k in drop:
            h["__metadata__"].pop(k, None)
        h.update(extra_header or {})
        text = json.dumps(h, separators=(",", ":"), sort_keys=True)
        return raw(text, data)

    yield "empty", b""
    yield "seven_bytes", b"\x07\x00\x00\x00\x00\x00\x00"
    yield "header_only_zero_length", raw("", length=0)
    yield "header_length_over_limit", raw("{}", length=100_000_001)
    yield "header_length_past_end", raw("{}", length=1 << 40)
    yield "header_length_max", raw("{}", length=(1 << 64) - 1)
    yield "empty_object", raw("{}      ")
    yield "not_an_object", raw("[1,2,3] ")
    yield "nested_arrays", raw("[" * 2000 + "]" * 2000)
    yield "nested_objects", raw('{"a":' * 500 + "{}" + "}" * 500)
    yield "nul_after_json", raw('{"__metadata__":{}}\x00\x00\x00\x00\x00')
    yield "nul_inside_key", raw('{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    yield "invalid_utf8_key", raw(b'{"\xff\xfe":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    yield "duplicate_key", raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                               '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    yield "huge_shape", raw('{"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}', bytes(8))
    yield "shape_int64_max", raw('{"a":{"dtype":"U8","shape":[9223372036854775807,0],"data_offsets":[0,0]}}')
    yield "shape_uint64_max", raw('{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}}')
    yield "shape_negative", raw('{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}')
    yield "shape_float", raw('{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}', b"\x00")
    yield "offsets_overlap", raw('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                 '"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', bytes(6))
    yield "offsets_gap", raw('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                             '"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}', bytes(6))
    yield "offsets_reversed", raw('{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}', bytes(4))
    yield "trailing_bytes", raw('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', bytes(5))
    yield "metadata_not_string", raw('{"__metadata__":{"n":8}}')
    yield "unknown_dtype", raw('{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}', bytes(16))
    # A real fixture's header with one thing wrong each: the fixture-level checks.
    yield "fixture_unknown_metadata", edit({"extra": "1"})
    yield "fixture_missing_metadata", edit(drop=("gamma",))
    yield "fixture_bad_gamma", edit({"gamma": "1/0"})
    yield "fixture_gamma_huge", edit({"gamma": "9" * 400 + "/7"})
    yield "fixture_bad_dim", edit({"n": "08"})
    yield "fixture_dim_mismatch", edit({"d": "5"})
    yield "fixture_format_version_9", edit({"format_version": "9"})
    yield "fixture_reference_bits", edit({"reference_bits": "18446744073709551615"})
    yield "fixture_unknown_tensor", edit(extra_header={"zz": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})
    yield "fixture_state_empty_name", edit(extra_header={"state.": {"dtype": "F64", "shape": [0], "data_offsets": [0, 0]}})
    yield "fixture_state_zero", edit(extra_header={"state.S": {"dtype": "F64", "shape": [3, 0], "data_offsets": [0, 0]}})
    assert md["n"] == "8"


def candidate_inputs():
    out, den, state = [1, 2, 8, 4], [1, 2, 8], [1, 2, 4, 4]
    one = struct.pack("<f", 1.0)
    yield "out_f32", st({"out": ("F32", out, one * 64)})
    yield "out_den_state", st({"out": ("F32", out, one * 64), "den": ("F64", den, zeros("F64", den)),
                               "state.S": ("F64", state, zeros("F64", state))})
    yield "out_bf16_nan_inf", st({"out": ("BF16", out, b"\xc0\x7f\x80\x7f\x80\xff\x01\x00" * 16)})
    yield "out_f16_metadata", st({"out": ("F16", out, zeros("F16", out))}, {"note": "ignored"})
    yield "out_i32", st({"out": ("I32", out, zeros("I32", out))})
    yield "out_wrong_shape", st({"out": ("F32", [1, 2, 4, 8], zeros("F32", out))})
    yield "out_scalar", st({"out": ("F32", [], one)})
    yield "missing_out", st({"den": ("F32", den, zeros("F32", den))})
    yield "unknown_tensor", st({"out": ("F32", out, zeros("F32", out)), "extra": ("U8", [1], b"\x00")})
    yield "unknown_state", st({"out": ("F32", out, zeros("F32", out)), "state.T": ("F64", state, zeros("F64", state))})
    yield "empty_state_name", st({"out": ("F32", out, zeros("F32", out)), "state.": ("F64", [0], b"")})
    yield "den_wrong_shape", st({"out": ("F32", out, zeros("F32", out)), "den": ("F32", out, zeros("F32", out))})
    yield "empty", b""


def main():
    root = sys.argv[1]
    here = os.path.join(root, "tests", "fuzz_readers", "corpus")
    for sub, inputs in (("fixture", fixture_inputs(root)), ("candidate", candidate_inputs())):
        d = os.path.join(here, sub)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for name, data in inputs:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        if sub == "fixture":
            for g in GOLDEN:
                shutil.copyfile(os.path.join(root, "fixtures", g), os.path.join(d, "golden-" + g))
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(here) for f in fs)
    print(f"corpus: {total} bytes")


if __name__ == "__main__":
    main()
