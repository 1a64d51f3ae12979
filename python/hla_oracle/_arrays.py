"""Array-likes to tensors: (safetensors dtype name, shape, little-endian bytes).

The C++ core reads these exactly as it reads safetensors files (every f64,
f32, bf16 and f16 value is a double), so a kernel's inputs and outputs are
judged as it produced them. Accepted: numpy arrays, torch tensors (CPU; CUDA
and other devices are copied to the host; torch.bfloat16 included), anything
with ``__dlpack__`` or ``__array__``, nested lists. bf16 without torch: uint16
bit patterns with ``dtype="bf16"``.
"""
import numpy as np

_NUMPY = {np.dtype(np.float64): ("F64", "f64"), np.dtype(np.float32): ("F32", "f32"), np.dtype(np.float16): ("F16", "f16")}
_NAMES = {"f64": "F64", "float64": "F64", "f32": "F32", "float32": "F32", "f16": "F16", "float16": "F16",
          "bf16": "BF16", "bfloat16": "BF16"}


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def to_numpy(x, name):
    """x as a numpy array (bf16 torch tensors as uint16 bits) and its dtype name
    when it carries one numpy cannot ('bf16'), else None."""
    if isinstance(x, np.ndarray):
        return x, None
    if _is_torch(x):
        import torch
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()  # CUDA tensors are copied to the host
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(np.uint16), "bf16"
        return t.resolve_conj().resolve_neg().numpy(), None
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
        try:
            return np.from_dlpack(x), None
        except Exception as e:  # a device array numpy cannot take
            raise TypeError(f"{name}: cannot read {type(x).__name__} through DLPack ({e}); copy it to the host "
                            "(numpy or a CPU torch tensor) first") from None
    return np.asarray(x), None


def tensor(x, name, dtype=None):
    """(ST_DTYPE, shape, bytes) of x; dtype ('bf16', 'f16', 'f32', 'f64') when
    x holds bit patterns (uint16 for bf16/f16) or to demand that the values
    are exactly of that type."""
    a, carried = to_numpy(x, name)
    want = None
    if dtype is not None:
        want = _NAMES.get(str(dtype).lower().replace("torch.", ""))
        if want is None:
            raise ValueError(f"{name}: dtype {dtype!r} is not one of f64, f32, bf16, f16")
    if carried == "bf16":
        if want not in (None, "BF16"):
            raise ValueError(f"{name} is a bfloat16 tensor but dtype={dtype!r} was given")
        st = "BF16"
    elif a.dtype == np.uint16 or a.dtype == np.int16:
        if want not in ("BF16", "F16"):
            raise ValueError(f"{name} holds 16-bit integers: give dtype='bf16' (or 'f16') if they are bit patterns")
        a = a.view(np.uint16)
        st = want
    elif a.dtype in _NUMPY:
        st = _NUMPY[a.dtype][0]
        if want is not None and want != st:
            a, st = _exactly(a, want, name), want
    elif a.dtype.kind in "iub":
        raise ValueError(f"{name} has dtype {a.dtype}; expected a float array (f64, f32, f16, or bf16 bits with dtype='bf16')")
    else:
        raise ValueError(f"{name} has dtype {a.dtype}; expected float64, float32, float16 or bfloat16")
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return (st, [int(s) for s in a.shape], a.tobytes())


def _exactly(a, st, name):
    """Values of a as type st (bits for BF16), refused when one would round."""
    a64 = a.astype(np.float64)
    if st == "F64":
        return a64
    if st in ("F32", "F16"):
        b = a64.astype(np.float32 if st == "F32" else np.float16)
    else:  # BF16: the top half of an f32 whose low half is zero
        f = a64.astype(np.float32)
        bits = f.view(np.uint32)
        b = (bits >> 16).astype(np.uint16)
        back = (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        ok = (back == a64) | (np.isnan(a64) & np.isnan(back))
        if not ok.all():
            i = np.argwhere(~ok)[0]
            raise ValueError(f"{name}[{', '.join(map(str, i))}] = {float(a64[tuple(i)])!r} is not a bf16 value")
        return b
    ok = (b.astype(np.float64) == a64) | (np.isnan(a64) & np.isnan(b.astype(np.float64)))
    if not ok.all():
        i = np.argwhere(~ok)[0]
        raise ValueError(f"{name}[{', '.join(map(str, i))}] = {float(a64[tuple(i)])!r} is not a {st.lower()} value")
    return b


def offsets_tensor(x, name):
    """cu_seqlens / offsets as an I64 tensor (from ints of any width)."""
    a, _ = to_numpy(x, name)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{name} has dtype {a.dtype}; expected integers (int32 or int64)")
    a = np.ascontiguousarray(a.astype("<i8"))
    return ("I64", [int(s) for s in a.shape], a.tobytes())
