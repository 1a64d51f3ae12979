"""Calls an honest C kernel through its include/hla_impl.h entry points (ctypes).

The same library `hla fuzz --lib` loads: hla_impl_info_get says what it
declares (precision, class), hla_impl_run computes one problem."""
import ctypes as C
from fractions import Fraction

import numpy as np

CODES = {"la1": 0, "hla2": 1, "ahla": 2, "hla3": 3}
DTYPES = {"f64": 0, "f32": 1, "bf16": 2}


class Info(C.Structure):
    _fields_ = [("abi_version", C.c_int32), ("name", C.c_char_p), ("variants", C.c_uint32), ("dtypes", C.c_uint32),
                ("features", C.c_uint32), ("max_n", C.c_int64), ("max_d", C.c_int64), ("max_dv", C.c_int64),
                ("precision", C.c_char_p), ("form_class", C.c_int32), ("precision_by_dtype", C.c_char_p)]


class Problem(C.Structure):
    _fields_ = [("abi_version", C.c_int32), ("variant", C.c_int32), ("masked", C.c_int32), ("normalize", C.c_int32),
                ("eps_mode", C.c_int32), ("gamma", C.c_double), ("eps", C.c_double), ("lam", C.c_double),
                ("scale", C.c_double), ("gamma_exact", C.c_char_p), ("eps_exact", C.c_char_p),
                ("lambda_exact", C.c_char_p), ("scale_exact", C.c_char_p), ("batch", C.c_int64), ("heads", C.c_int64),
                ("kv_heads", C.c_int64), ("n", C.c_int64), ("d", C.c_int64), ("dv", C.c_int64), ("dtype", C.c_int32),
                ("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p), ("offsets", C.c_void_p),
                ("num_offsets", C.c_int64), ("state_in", C.c_void_p), ("state_out", C.c_void_p), ("out", C.c_void_p),
                ("den", C.c_void_p)]


def _frac_text(x):
    f = Fraction(x)
    return f"{f.numerator}/{f.denominator}".encode()


class Library:
    def __init__(self, path):
        self.path = str(path)
        self.lib = C.CDLL(self.path)
        self.lib.hla_impl_info_get.restype = C.POINTER(Info)
        self.lib.hla_impl_run.argtypes = [C.POINTER(Problem), C.c_char_p, C.c_size_t]
        self.info = self.lib.hla_impl_info_get().contents

    def form_class(self):
        """The declared class as the Python API spells it."""
        fc = self.info.form_class
        if fc == 0:
            return "masked"
        if fc == 1:
            return "state_difference"
        return "flat" if fc == 2 else f"flat:{fc >> 8}"

    def run(self, q, k, v, *, variant, masked, gamma, normalize, eps, scale, dtype):
        """q, k, v: [B,H,n,d] arrays holding values of `dtype` ('f32', 'bf16' as float32 values, 'f64').
        Returns out (float32 for f32, uint16 bf16 bits for bf16, float64 for f64) and den (float64)."""
        B, H, n, d = q.shape
        Hkv, dv = k.shape[1], v.shape[3]
        if dtype == "bf16":  # the top halves of the float32 values (exact: they are bf16 values)
            conv = lambda a: np.ascontiguousarray((np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16))
            out = np.zeros((B, H, n, dv), np.uint16)
        else:
            np_t = np.float64 if dtype == "f64" else np.float32
            conv = lambda a: np.ascontiguousarray(a, np_t)
            out = np.zeros((B, H, n, dv), np_t)
        qa, ka, va = conv(q), conv(k), conv(v)
        den = np.zeros((B, H, n), np.float64)
        p = Problem(abi_version=self.info.abi_version, variant=CODES[variant], masked=int(masked),
                    normalize=int(normalize), eps_mode=0, gamma=float(Fraction(gamma)), eps=float(Fraction(eps)),
                    lam=0.0, scale=float(Fraction(scale)), gamma_exact=_frac_text(gamma), eps_exact=_frac_text(eps),
                    lambda_exact=b"0/1", scale_exact=_frac_text(scale), batch=B, heads=H, kv_heads=Hkv, n=n, d=d,
                    dv=dv, dtype=DTYPES[dtype], q=qa.ctypes.data, k=ka.ctypes.data, v=va.ctypes.data, offsets=None,
                    num_offsets=0, state_in=None, state_out=None, out=out.ctypes.data, den=den.ctypes.data)
        err = C.create_string_buffer(512)
        rc = self.lib.hla_impl_run(C.byref(p), err, 512)
        if rc:
            raise RuntimeError(f"{self.path}: {err.value.decode()}")
        return out, den
