"""A fixture file as raw parts, with its digest: independent of the C++ reader
and writer (io/include/hla/io/fixture.hpp defines the digest), so that tests
can verify digests and write forged or stale fixtures byte by byte.

  parts = parse(path.read_bytes())      # {"tensors": {name: [dtype, shape, bytes]}, "metadata": {...}}
  digest(parts)                         # "sha256:…" as format_version 3 stores it
  serialize(parts, redigest=True)       # bytes of a valid safetensors file (digest recomputed or kept)
"""
import hashlib
import json
import struct


def parse(data):
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    tensors = {name: [t["dtype"], list(t["shape"]), data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]]
               for name, t in header.items()}
    return {"tensors": tensors, "metadata": metadata}


def digest(parts):
    def field(x):
        return str(len(x)).encode() + b":" + x
    h = hashlib.sha256(b"hla-oracle-fixture-digest-1\n")
    md = parts["metadata"]
    for key in sorted(md, key=lambda k: k.encode()):
        if key != "digest":
            h.update(b"m " + field(key.encode()) + b" " + field(md[key].encode()) + b"\n")
    for name in sorted(parts["tensors"], key=lambda k: k.encode()):
        dtype, shape, data = parts["tensors"][name]
        h.update(b"t " + field(name.encode()) + f" {dtype} [{','.join(str(x) for x in shape)}] ".encode() + field(bytes(data)) + b"\n")
    return "sha256:" + h.hexdigest()


def serialize(parts, redigest=True):
    md = dict(parts["metadata"])
    if redigest and md.get("format_version") == "3":
        md["digest"] = digest(parts)
    header, body, at = {}, b"", 0
    for name, (dtype, shape, data) in parts["tensors"].items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        body += bytes(data)
        at += len(data)
    header["__metadata__"] = md
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + body
