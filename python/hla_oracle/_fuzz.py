"""hla_oracle.fuzz: `hla fuzz`'s campaign over a Python function, in process.

The generator, the probes (NaN/Inf causality, state continuation, varlen
isolation), the check, the shrinker and the findings are the C++ fuzzer's
(fuzz/, through fuzz::make_function_adapter); this file only converts
each case's arrays for `fn` and its results back.
"""
import logging
import sys
import traceback
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from . import _core
from ._arrays import tensor, to_numpy
from ._options import from_text, table
from ._support import support_dict

# The campaign's findings, notes (warnings) and progress (info, every 10 s with
# progress=True) go to this logger; nothing is printed unless the application
# configures logging (a NullHandler keeps Python from printing warnings itself).
log = logging.getLogger("hla_oracle.fuzz")
log.addHandler(logging.NullHandler())

_NUMPY_INPUT = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.float32}


@dataclass(frozen=True)
class CaseOptions:
    """The options of one case, handed to fn(q, k, v, options).

    normalize: 'none', 'add' or 'clamp'. Floats (what a kernel computes
    with): gamma, eps, lam, scale; exact values as Fractions: gamma_exact,
    eps_exact, lam_exact, scale_exact. dtype: of q,
    k, v ('bf16' inputs arrive as float32 arrays holding bf16 values with
    framework='numpy', as torch.bfloat16 with framework='torch'); layout;
    cu_seqlens: int64 offsets of packed sequences (B = 1) or None;
    initial_state: the state your function returned for the previous part of
    the sequence (as it returned it: an array or a tuple of arrays), or None;
    want_state: return the final state (third element of the result)."""
    variant: str
    masked: bool
    normalize: str
    gamma: float
    eps: float
    lam: float
    scale: float
    gamma_exact: Fraction
    eps_exact: Fraction
    lam_exact: Fraction
    scale_exact: Fraction
    dtype: str
    layout: str
    cu_seqlens: object
    initial_state: object
    want_state: bool

    @property
    def eps_mode(self):
        """The old spelling: 'add' or 'clamp' (normalize holds it; removed in the next release)."""
        warnings.warn("CaseOptions.eps_mode is the old spelling: read normalize (removed in the next release)",
                      DeprecationWarning, stacklevel=2)
        return "clamp" if self.normalize == "clamp" else "add"

    @property
    def kwargs(self):
        """The keyword options of hla_oracle.reference / check for this case."""
        return {name: getattr(self, name + "_exact", getattr(self, name)) for name in table()}


class FuzzResult:
    """The campaign's summary: cases, seconds, phases (seconds in the reference,
    the candidate and the check, over all cases), findings (dicts: kind,
    message, shrunk, needs, fixture, candidate, precision, form_class, rules,
    tensor, cause, group, example: whether its files were written, …), groups
    (dicts: kind, cause, rules, tensor, needs, dir, count, examples: indices into findings;
    findings of one signature, up to examples_per_group of them written),
    by_kind, probes, coverage (cases per variant, dtype and option), streams
    (seed, shard, shards), inconclusive, ok (no findings), text (as `hla fuzz`
    prints it, with how to reproduce each finding), findings_error and
    fallback_dir (set when the findings folder failed: the first error, and
    where the findings went instead)."""

    def __init__(self, d, header):
        self.cases = d["cases"]
        self.seconds = d["seconds"]
        self.phases = dict(d["phases"])
        self.inconclusive = d["inconclusive"]
        self.by_kind = dict(d["by_kind"])
        self.probes = dict(d["probes"])
        self.coverage = dict(d["coverage"])
        self.streams = list(d["streams"])
        self.findings = [dict(f) for f in d["findings"]]
        self.groups = [dict(g) for g in d["groups"]]
        self.findings_error = d["findings_error"]
        self.fallback_dir = d["fallback_dir"]
        self.text = header + d["text"]

    @property
    def ok(self):
        return not self.findings

    @property
    def cases_per_second(self):
        return self.cases / self.seconds if self.seconds > 0 else float("inf")

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<hla_oracle.FuzzResult {self.cases} cases, {len(self.findings)} finding(s)>"


def _state_flat(state):
    """(float64 bytes, how to rebuild it) of an array or a tuple of arrays."""
    parts = list(state) if isinstance(state, (tuple, list)) else [state]
    arrays = [np.asarray(to_numpy(p, "state")[0], dtype=np.float64) for p in parts]
    shapes = [a.shape for a in arrays]
    flat = np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0)
    return flat.tobytes(), (isinstance(state, (tuple, list)), shapes)


def _state_back(flat, how, framework):
    is_tuple, shapes = how
    parts, at = [], 0
    for s in shapes:
        size = int(np.prod(s, dtype=np.int64))
        parts.append(flat[at:at + size].reshape(s))
        at += size
    if framework == "torch":
        import torch
        parts = [torch.from_numpy(np.ascontiguousarray(p)) for p in parts]
    return tuple(parts) if is_tuple else parts[0]


def _outputs_of(res):
    """(out, den, state) of what fn returned (den, state may be None)."""
    if isinstance(res, (tuple, list)):
        if not 1 <= len(res) <= 3:
            raise ValueError(f"fn returned {len(res)} values; expected out, (out, den) or (out, den, state)")
        return tuple((list(res) + [None, None])[:3])
    return res, None, None


def autograd_backward(fn):
    """A backward for fuzz(..., backward=) from a PyTorch forward fn(q, k, v,
    options): the gradients torch.autograd computes through it (your
    torch.autograd.Function's backward, where fn calls one), for the case's
    upstream do (and dden, which needs fn to return den)."""
    def backward(q, k, v, do, dden, options):
        import torch
        q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        out, den, _ = _outputs_of(fn(q, k, v, options))
        outs, ups = [out], [do.to(out.dtype)]
        if dden is not None:
            if den is None:
                raise ValueError("the case has an upstream dden (the support declares den), but fn returned no den")
            outs.append(den)
            ups.append(dden.to(den.dtype))
        grads = torch.autograd.grad(outs, [q, k, v], ups, allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for x, g in zip((q, k, v), grads))
    backward.__qualname__ = f"autograd_backward({getattr(fn, '__qualname__', repr(fn))})"
    return backward


def _fuzz_arguments(fn, support, layout, framework, backward, examples_per_group):
    """fuzz()'s arguments checked: (the support as a dict, the backward callable or None)."""
    if int(examples_per_group) < 1:
        raise ValueError(f"examples_per_group must be at least 1, got {examples_per_group!r}")
    if layout not in ("bhtd", "bthd"):
        raise ValueError(f"layout must be 'bhtd' or 'bthd', got {layout!r}")
    if framework not in ("numpy", "torch"):
        raise ValueError(f"framework must be 'numpy' or 'torch', got {framework!r}")
    sup = support_dict(support)
    if isinstance(backward, str):
        if backward != "autograd" or framework != "torch":
            raise ValueError(f"backward must be a callable, or 'autograd' with framework='torch'; got {backward!r} "
                             f"with framework={framework!r}")
        backward = autograd_backward(fn)
    elif backward is not None and not callable(backward):
        raise TypeError(f"backward must be a callable or 'autograd', got {type(backward).__name__}")
    return sup, backward


def _in_job():
    """In each forked job of fuzz(jobs=J): one torch thread (one job a core;
    the parent's thread pools do not exist in the child)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _check_jobs(jobs):
    """fuzz(jobs=)'s value, checked: forking a process that holds a CUDA context breaks CUDA in the children."""
    if not 1 <= int(jobs) <= 64:
        raise ValueError(f"jobs must be 1 to 64, got {jobs!r}")
    torch = sys.modules.get("torch")
    if int(jobs) > 1 and torch is not None and torch.cuda.is_initialized():
        raise ValueError("jobs > 1 forks this process, and CUDA is initialized in it (a child cannot use it): "
                         "jobs=1, or `hla fuzz --exec-server ... --jobs J` with hla_oracle.serve")
    return int(jobs)


def _failed(ex):
    where = traceback.extract_tb(ex.__traceback__)[-1]
    return ("error", f"{type(ex).__name__}: {ex} (at {where.filename}:{where.lineno})")


class _CaseCalls:
    """The campaign's calls of fn and backward: the core's arrays converted to the caller's layout and framework,
    and their results back, as the core's ("ok", ...), ("error", why) or ("bad_output", why) tuples."""

    def __init__(self, fn, backward, layout, framework):
        self.fn, self.backward, self.layout, self.framework = fn, backward, layout, framework
        self.torch = None
        if framework == "torch":
            import torch
            self.torch = torch
        self.states = {}  # how the last returned state is rebuilt (shapes), by its flat size

    def convert_input(self, a, dtype):
        a = a.astype(_NUMPY_INPUT[dtype], copy=False)
        if self.layout == "bthd":
            a = np.ascontiguousarray(np.swapaxes(a, 1, 2))
        if self.torch is not None:
            t = self.torch.from_numpy(a)
            return t.to(self.torch.bfloat16) if dtype == "bf16" else t
        return a

    def convert_output(self, x, name):
        a, carried = to_numpy(x, name)
        if self.layout == "bthd":
            a = np.swapaxes(a, 1, 2) if a.ndim >= 3 else a
        return tensor(a, name, carried)

    def options_of(self, info, offsets, initial, want_state):
        if offsets is not None and self.torch is not None:
            offsets = self.torch.from_numpy(offsets)
        o = {name: from_text(name, info[name]) for name in table()}
        exact = {name + "_exact": x for name, x in o.items() if isinstance(x, Fraction)}
        return CaseOptions(**{name: float(x) if isinstance(x, Fraction) else x for name, x in o.items()}, **exact,
                           dtype=info["dtype"],
                           layout=self.layout, cu_seqlens=offsets, initial_state=initial, want_state=bool(want_state))

    def run_case(self, q, k, v, info, offsets, state_in, want_state):
        dtype = info["dtype"]
        initial = None
        if state_in is not None:
            how = self.states.get(state_in.size)
            initial = _state_back(state_in, how, self.framework) if how else state_in
        opts = self.options_of(info, offsets, initial, want_state)
        try:
            c = self.convert_input
            res = self.fn(c(q, dtype), c(k, dtype), c(v, dtype), opts)
        except Exception as ex:
            return _failed(ex)
        try:
            out, den, state = _outputs_of(res)
        except ValueError as ex:
            return ("bad_output", str(ex))
        if out is None:
            return ("bad_output", "fn returned no out")
        try:
            o = self.convert_output(out, "out")
            d = None if den is None else self.convert_output(den, "den")
            flat = None
            if want_state:
                if state is None:
                    return ("bad_output", "options.want_state was set but fn returned no state (the third value)")
                flat, how = _state_flat(state)
                self.states[len(flat) // 8] = how
        except (ValueError, TypeError) as ex:
            return ("bad_output", str(ex))
        return ("ok", o, d, flat)

    def run_backward_case(self, q, k, v, info, offsets, do, dden):
        dtype = info["dtype"]
        opts = self.options_of(info, offsets, None, False)
        c = self.convert_input
        try:
            res = self.backward(c(q, dtype), c(k, dtype), c(v, dtype), c(do, dtype),
                                None if dden is None else c(dden, dtype), opts)
        except Exception as ex:
            return _failed(ex)
        if not isinstance(res, (tuple, list)) or len(res) != 3:
            return ("bad_output", f"backward returned {type(res).__name__}"
                    f"{f' of {len(res)} values' if isinstance(res, (tuple, list)) else ''}; expected (dq, dk, dv)")
        try:
            return ("ok",) + tuple(self.convert_output(g, name) for g, name in zip(res, ("dq", "dk", "dv")))
        except (ValueError, TypeError) as ex:
            return ("bad_output", str(ex))


def fuzz(fn, support=None, *, max_cases=1000, seed=1, time=0, findings="hla-findings", layout="bhtd", framework="numpy",
         shrink_attempts=300, stop_after=0, progress=True, shard=None, exact_max_n=None, backward=None,
         examples_per_group=3, jobs=1):
    """Fuzzes fn(q, k, v, options) -> out, (out, den) or (out, den, state)
    (den, state may be None) with `hla fuzz`'s campaign: cases inside
    `support` (a Support or a dict of its fields), each judged by the pass
    rule, each failure shrunk and written to `findings` as a fixture plus your
    outputs (`hla check` reproduces it). q, k, v: numpy arrays (framework=
    'torch': CPU torch tensors) in `layout`; options: CaseOptions. An
    exception from fn is an `error` finding; KeyboardInterrupt stops the
    campaign. Same seed, same cases, same findings. Returns a FuzzResult.
    Nothing is printed: findings and notes are logged as warnings, and with
    progress=True a progress line every 10 s as info, to the logger
    'hla_oracle.fuzz' (logging.basicConfig(level=logging.INFO) shows them).
    No crash or timeout isolation (fn runs in this process): use
    `hla fuzz --exec-server` with hla_oracle.serve for that.
    exact_max_n: heads up to this long (d, dv <= 16) are judged against an exact
    rational reference (default None: hla_oracle.EXACT_MAX_N, as `hla fuzz`); 0: the
    certified double-double engine for every case.
    shard=(i, N): the i-th of N disjoint case streams.
    jobs=J: J forked processes share the cases (`hla fuzz --jobs`): the same
    findings, merged into `findings`; each sets torch.set_num_threads(1).
    examples_per_group: findings with one signature (kind and cause: the
    diagnosis, else the error profile) form a group, a folder
    findings/<kind>-<g>/ with the files of examples_per_group of them (the
    last slot kept for a new variety); the rest are counted.
    backward: your gradients, judged like `hla check` judges dq, dk, dv (SPEC
    §9) on half of the cases (a quarter of those with a NaN/Inf in the
    upstream, whose reach is the gradient NaN-causality probe):
    backward(q, k, v, do, dden, options) -> (dq, dk, dv), do [B,H,T,dv] and
    dden [B,H,T] (None unless the support declares den) in the layout and
    framework of q; or "autograd" (framework='torch'): torch.autograd through
    fn (autograd_backward(fn))."""
    sup, backward = _fuzz_arguments(fn, support, layout, framework, backward, examples_per_group)
    jobs = _check_jobs(jobs)
    calls = _CaseCalls(fn, backward, layout, framework)
    shards = (0, 1) if shard is None else tuple(shard)
    d = _core.fuzz(calls.run_case, sup, int(seed), int(max_cases), float(time), str(findings), int(shrink_attempts),
                   int(stop_after), bool(progress), int(shards[0]), int(shards[1]),
                   None if exact_max_n is None else int(exact_max_n),
                   None if backward is None else calls.run_backward_case,
                   lambda level, message: log.log(logging.WARNING if level == "warning" else logging.INFO, message),
                   int(examples_per_group), jobs, _in_job)
    name = getattr(fn, "__qualname__", repr(fn))
    if backward is not None:
        name += f", backward={getattr(backward, '__qualname__', repr(backward))}"
    header = (f"hla_oracle.fuzz({name}): seed {seed}, max_cases {max_cases}, layout {layout}, framework {framework}"
              f"{f', {jobs} jobs' if jobs > 1 else ''}; support {sup}\n")
    result = FuzzResult(d, header)
    log.info("%s: %d cases in %.1f s, %d finding(s)", name, result.cases, result.seconds, len(result.findings))
    return result
