"""hla-oracle from Python: the reference, the check and the fuzzer of hla-oracle's
C++ core (hla_oracle._core), for kernels written and tested in Python.

    import hla_oracle
    r = hla_oracle.check(out, q, k, v, variant="hla2", gamma=Fraction(99, 100))
    assert r.passed, r.text

- ``reference(q, k, v, **options)``: the certified reference (out, den,
  magnitudes, certification flags) of your own inputs;
- ``check(out, q, k, v, **options, precision=..., form_class=..., den=None)``:
  a ``Report`` by the pass rule of ``hla check`` (docs/pass-rule.md);
- ``load_fixture(path)``, ``save_candidate(path, out, den=None)``,
  ``golden_dir()``, ``golden_fixtures(support)``: fixture files;
- ``fuzz(fn, support=..., max_cases=..., seed=..., time=...)``: ``hla fuzz``'s
  campaign (generator, probes, shrinker, findings) over a Python function
  ``fn(q, k, v, options) -> out[, den][, state]``;
- ``serve(handle)``: the server side of ``hla fuzz --exec-server``;
- the pytest plugin (``hla_oracle.pytest_plugin``, loaded by the pytest11 entry
  point): ``@pytest.mark.hla_golden(...)`` and the ``hla_fixture`` fixture.

Options (the table of docs/using.md, from the C++ core's): ``variant``
('la1', 'hla2', 'ahla', 'hla3', 'hla3_paper'), ``masked``, ``gamma``,
``normalize`` ('none', 'add', 'clamp'), ``eps``, ``lam`` (ridge λ), ``scale``.
They are exact: a ``Fraction``, an int, a string ('0.99' is 99/100, '7/8'), or a
float (its exact binary value). Arrays: numpy, torch tensors (CUDA ones are copied to the host,
bf16 included), anything with ``__array__`` or ``__dlpack__``; any float dtype,
bf16 also as uint16 bit patterns with ``dtype='bf16'``. ``layout='bhtd'``
([B,H,T,D], the default) or ``'bthd'`` (FLA's [B,T,H,D]); ``cu_seqlens``: packed
sequences (B = 1).
"""
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    from . import _core
except ImportError as _error:  # the pure-Python parts (exec_server.serve) work without the extension
    class _MissingCore:
        def __init__(self, error):
            self._error = error

        def __getattr__(self, name):
            raise ImportError(f"hla_oracle._core, the compiled core, is not available ({self._error}); build it "
                              "(scripts/setup.sh, or cmake with nanobind) and put <build>/python on the path, or "
                              "pip install ./python")

    _core = _MissingCore(_error)
    InputError = ValueError
    __version__ = None  # the compiled core knows it
else:
    InputError = _core.InputError  # a ValueError: bad arrays, shapes or options (the message names the problem)
    __version__ = _core.__version__  # CMakeLists.txt's project(VERSION)
from ._arrays import offsets_tensor, tensor, to_numpy
from ._options import NotExpressible, from_text, option_text, table, with_option_keywords
from ._options import kwargs_for as _kwargs_for
from .exec_server import serve

__all__ = ["reference", "Reference", "check", "Report", "load_fixture", "Fixture", "save_candidate", "golden_dir",
           "golden_fixtures", "fuzz", "autograd_backward", "FuzzResult", "Support", "serve", "InputError",
           "NotExpressible"]


def _inputs(q, k, v, layout, cu_seqlens, dtype, initial_state):
    if layout not in ("bhtd", "bthd"):
        raise ValueError(f"layout must be 'bhtd' ([B,H,T,D]) or 'bthd' (FLA's [B,T,H,D]), got {layout!r}")
    t = {"q": tensor(q, "q", dtype), "k": tensor(k, "k", dtype), "v": tensor(v, "v", dtype)}
    if cu_seqlens is not None:
        t["offsets"] = offsets_tensor(cu_seqlens, "cu_seqlens")
    if initial_state is not None:
        # {part: array}: the variant's streaming state per sequence and query head,
        # values [N, H, rows, cols] and denominator columns [N, H, d] (docs/using.md "Initial states").
        if not isinstance(initial_state, dict):
            raise TypeError("initial_state must be a dict {part name: array}, e.g. {'S': ..., 'F': ..., 'f': ...} for "
                            f"masked hla2 (docs/using.md \"Initial states\"), got {type(initial_state).__name__}")
        for name, x in initial_state.items():
            t["initial_state." + str(name)] = tensor(x, "initial_state." + str(name), None)
    return t


def _to_layout(a, layout):
    """[B,H,T,...] from the core as [B,T,H,...] for layout 'bthd'."""
    return np.ascontiguousarray(np.swapaxes(a, 1, 2)) if layout == "bthd" else a


@dataclass
class Reference:
    """The reference of a problem (arrays float64, in the call's layout).

    out: [B,H,T,dv] the output (num, or num/(den ⊕ ε) when normalized), the
    f64 rounding of the exact value; num: the numerator; den: [B,H,T];
    mag_num, mag_den: SPEC §7 magnitudes (the scale errors are judged in);
    mag_num_unmasked, mag_den_unmasked: the state-difference class's;
    flags, den_flags: uint8, bit 1 = not certified to f64, bit 2 =
    ill-conditioned (normalized); certified: flags & 1 == 0; bits: 0 exact
    rationals, 113 binary128 or certified, 106 double-double."""
    out: np.ndarray
    den: np.ndarray
    num: np.ndarray
    mag_num: np.ndarray
    mag_den: np.ndarray
    mag_num_unmasked: np.ndarray
    mag_den_unmasked: np.ndarray
    flags: np.ndarray
    den_flags: np.ndarray
    bits: int
    stats: dict = field(default_factory=dict)

    @property
    def certified(self):
        return (self.flags & 1) == 0


@with_option_keywords
def reference(q, k, v, *, layout="bhtd", cu_seqlens=None, initial_state=None, dtype=None, threads=0, **options):
    """The reference of your q, k, v (the same computation as `hla ref`):
    exact rationals for small heads, else the double-double engine with
    certification, binary128 where it cannot certify. Returns a Reference.
    initial_state: {part: array} — each sequence's streaming state before its
    first token, per query head (docs/using.md "Initial states": the parts of each
    variant's state, e.g. masked hla2 {'S': [N,H,d,d], 'F': [N,H,d,dv],
    'f': [N,H,d]}, N = sequences); None: every sequence starts from zero."""
    opts = option_text(options)
    r = _core.reference(_inputs(q, k, v, layout, cu_seqlens, dtype, initial_state), opts, layout, int(threads))
    arrays = {name: _to_layout(r[name], layout) for name in
              ("out", "den", "num", "mag_num", "mag_den", "mag_num_unmasked", "mag_den_unmasked", "flags", "den_flags")}
    return Reference(bits=int(r["bits"]), stats=dict(r["stats"]), **arrays)


class Report:
    """The verdict of the check (docs/pass-rule.md).

    passed: PASS; inconclusive: too little could be scored (not a pass);
    verdict: 'PASS', 'FAIL' or 'INCONCLUSIVE'; text: the report as `hla check`
    prints it; json(): every field (scores, bound, ratio, counts, worst
    elements, histogram); worst: the worst elements (dicts with batch, head,
    token, column ('den' for the denominator), candidate, reference,
    magnitude, score); reasons: why it failed; hints: where the error lies
    (a failing report's diagnosis: growing with t, periodic at a chunk
    width, at sequence starts, in some heads, in one part; the verdict does
    not depend on them); diagnosis: the known mistakes a failing report
    matches (dicts with id, what, fix, part, fraction; best first);
    html(path): the report as one HTML page."""

    def __init__(self, text, json_text, native=None):
        self.text = text
        self._json = json.loads(json_text)
        self._native = native

    passed = property(lambda self: bool(self._json["pass"]))
    inconclusive = property(lambda self: bool(self._json["inconclusive"]))
    verdict = property(lambda self: self._json["verdict"])
    reasons = property(lambda self: list(self._json["reasons"]))
    worst = property(lambda self: [dict(e) for e in self._json["worst"]])
    max_score = property(lambda self: self._json["max_score"])
    hints = property(lambda self: list(self._json["hints"]))
    diagnosis = property(lambda self: [dict(d) for d in self._json.get("diagnosis", [])])

    def html(self, path):
        """Writes the report as one self-contained HTML page (inline SVG, nothing
        fetched, no script) to `path`, atomically: the verdict, the pass-rule
        numbers, the hints and per part (out, den, each gradient and state
        part) a heatmap of the worst score per (batch·head, token block), the
        worst score per token beside our worst order's, the score histograms
        and the worst elements. Returns the path; InputError (a ValueError)
        when it cannot be written."""
        if self._native is None:
            raise ValueError("this Report carries no score maps (it was not made by hla_oracle.check or Fixture.check)")
        self._native.write_html(os.fspath(path))
        return Path(path)

    def json(self):
        return json.loads(json.dumps(self._json))

    def __str__(self):
        return self.text

    def __repr__(self):
        reason = f": {self._json['reasons'][0]}" if self._json["reasons"] else ""
        return f"<hla_oracle.Report {self.verdict}{reason}>"


def _precision(precision):
    """'f32', or per input dtype: 'bf16=f32,f32=f32' or {'bf16': 'f32', ...}; None: the output dtype's."""
    if precision is None:
        return ""
    if isinstance(precision, dict):
        return ",".join(f"{k}={v}" for k, v in precision.items())
    return str(precision)


@with_option_keywords
def check(out, q, k, v, *, precision=None, form_class="masked", den=None, layout="bhtd", cu_seqlens=None, initial_state=None,
          dtype=None, out_dtype=None, exact_tier=False, worst=10, dump=None, do=None, dden=None, dq=None, dk=None, dv=None,
          dstate=None, final_state=None, exact_max_n=None, **options):
    """Judges a kernel's `out` (and `den` when it exposes one) on q, k, v with
    the pass rule of `hla check`: computes the reference, scores every element
    in units of u·magnitude and compares with our own honest evaluation
    orders. precision: the kernel's compute precision ('f32', 'bf16=f32,...';
    default: out's dtype); form_class: how the kernel accumulates
    its terms, 'masked' (nested sums), 'state_difference' (subtracts unmasked partial
    sums), 'flat' (every term added one by one into one accumulator) or 'flat:W' (so
    inside chunks of width W) (docs/pass-rule.md);
    initial_state as in reference(). dump='PATH/STEM': on failure write STEM.safetensors and
    STEM.candidate.safetensors, reproduced by `hla check` (the report says how).
    Gradients (SPEC §9): with the upstream do [B,H,T,dv] (and dden [B,H,T]),
    finite and holding values of the inputs' dtype (any float dtype; as
    `hla ref` reads them), the kernel's dq, dk, dv (any of them; [B,H,T,d],
    [B,Hkv,T,d], [B,Hkv,T,dv] in `layout`) are judged as the gradients of
    L = Σ⟨do, out⟩ + Σ dden·den, each in a row of the report; from an initial_state,
    dstate={part: array} (the state's gradient, shaped as initial_state) too, a row per part.
    final_state={part: array}: the kernel's final state, shaped as initial_state (every part
    it needs; SPEC §8), judged part by part as out is.
    exact_max_n: heads up to this long (d, dv <= 16) get an exact rational reference (default
    None: hla_oracle.EXACT_MAX_N, as every interface); 0: the certified double-double engine for every head."""
    opts = option_text(options)
    t = _inputs(q, k, v, layout, cu_seqlens, dtype, initial_state)
    o = tensor(out, "out", out_dtype)
    d = None if den is None else tensor(den, "den")
    text, js, native = _core.check(t, opts, layout, o, d, _precision(precision), str(form_class), bool(exact_tier), int(worst),
                           "" if dump is None else os.fspath(dump), _gradients(do=do, dden=dden, dq=dq, dk=dk, dv=dv, dstate=dstate,
                                                                                      final_state=final_state),
                           None if exact_max_n is None else int(exact_max_n))
    return Report(text, js, native)


def __getattr__(name):
    """hla_oracle.EXACT_MAX_N: the C++ core's exact-reference threshold (read when asked: the core may be missing)."""
    if name == "EXACT_MAX_N":
        return _core.EXACT_MAX_N
    raise AttributeError(f"module 'hla_oracle' has no attribute {name!r}")


def _gradients(dstate=None, final_state=None, **arrays):
    """The given gradient arrays (do, dden, dq, dk, dv; dstate: {part: array}) and the final
    state ({part: array}) as tensors, by name (dstate.<part>, state.<part>)."""
    t = {name: tensor(x, name) for name, x in arrays.items() if x is not None}
    for prefix, parts in (("dstate", dstate), ("state", final_state)):
        if parts is None:
            continue
        if not isinstance(parts, dict):
            name = "dstate" if prefix == "dstate" else "final_state"
            raise TypeError(f"{name} must be a dict {{part: array}} (shaped as initial_state's parts), got {type(parts).__name__}")
        t.update({f"{prefix}.{part}": tensor(x, f"{prefix}.{part}") for part, x in parts.items()})
    return t


class Fixture:
    """A fixture file (digest checked when read): the inputs, options and
    reference of one case. q, k, v: numpy [B,H,T,D] in the input dtype (bf16
    values as float32, exactly: see .dtype); options: exact text (masked: a bool); kwargs: the
    keyword options of reference()/check(); shape: B, H, Hkv, n, d, dv;
    features: what a kernel must support to run it (as `hla select` names them)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._handle = _core.load_fixture(self.path)
        info = _core.fixture_info(self._handle)
        self.case = info["case"]
        self.suite = info["suite"]
        self.dtype = info["dtype"]
        self.exact_tier = info["exact_tier"]
        self.reference_bits = info["reference_bits"]
        self.gradients = info["gradients"]
        self.warnings = list(info["warnings"])
        self.options = {name: from_text(name, t) if table()[name]["type"] == "bool" else t for name, t in info["options"].items()}
        self.shape = dict(info["shape"])
        self.features = set() if info["features"] == "none" else set(info["features"].split(", "))
        self._arrays = None

    @property
    def name(self):
        return Path(self.path).name

    @property
    def kwargs(self):
        return {name: from_text(name, t) if isinstance(t, str) else t for name, t in self.options.items()}

    def kwargs_for(self, fn, rename=None):
        """kwargs restricted to the parameters fn's signature accepts, under its own names (rename: {our name: its
        name}, e.g. {"lam": "ridge", "gamma": "decay"}); raises NotExpressible when this fixture needs a value of an
        option fn cannot take (e.g. masked=False for a kernel without `masked`)."""
        return _kwargs_for(self.kwargs, fn, rename)

    def _get(self, name):
        if self._arrays is None:
            self._arrays = _core.fixture_arrays(self._handle)
        return self._arrays[name]

    def _input(self, name):
        return self._input_typed(self._get(name))

    def _input_typed(self, a):
        return a.astype({"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.float32}[self.dtype])

    q = property(lambda self: self._input("q"))
    k = property(lambda self: self._input("k"))
    v = property(lambda self: self._input("v"))
    cu_seqlens = property(lambda self: self._get("offsets"))
    ref_out = property(lambda self: self._get("ref_out"))
    ref_den = property(lambda self: self._get("ref_den"))
    mag_num = property(lambda self: self._get("mag_num"))
    mag_den = property(lambda self: self._get("mag_den"))
    # Gradient fixtures (gradients True): the upstream do [B,H,T,dv], dden [B,H,T]
    # (or None) and the reference gradients with their magnitudes; None otherwise.
    do = property(lambda self: self._get("do"))
    dden = property(lambda self: self._get("dden"))
    ref_dq = property(lambda self: self._get("ref_dq"))
    ref_dk = property(lambda self: self._get("ref_dk"))
    ref_dv = property(lambda self: self._get("ref_dv"))

    def inputs(self, layout="bhtd", framework="numpy"):
        """(q, k, v) in `layout`, as numpy arrays or torch tensors (framework='torch': bf16 as torch.bfloat16)."""
        qkv = [_to_layout(x, layout) for x in (self.q, self.k, self.v)]
        if framework == "numpy":
            return tuple(qkv)
        if framework == "torch":
            import torch
            ts = [torch.from_numpy(np.ascontiguousarray(x)) for x in qkv]
            return tuple(t.to(torch.bfloat16) if self.dtype == "bf16" else t for t in ts)
        raise ValueError(f"framework must be 'numpy' or 'torch', got {framework!r}")

    def upstream(self, layout="bhtd", framework="numpy"):
        """(do, dden) of a gradient fixture in `layout` and the inputs' dtype (dden None when it has none)."""
        if not self.gradients:
            raise ValueError(f"{self.name} carries no gradients (no upstream do): use a *-grad fixture")
        arrays = [None if x is None else _to_layout(self._input_typed(x), layout) for x in (self.do, self.dden)]
        if framework == "numpy":
            return tuple(arrays)
        if framework == "torch":
            import torch
            ts = [None if x is None else torch.from_numpy(np.ascontiguousarray(x)) for x in arrays]
            return tuple(t.to(torch.bfloat16) if t is not None and self.dtype == "bf16" else t for t in ts)
        raise ValueError(f"framework must be 'numpy' or 'torch', got {framework!r}")

    def check(self, out, den=None, *, precision=None, form_class="masked", layout="bhtd", out_dtype=None, worst=10,
              dq=None, dk=None, dv=None, dstate=None, final_state=None):
        """The Report of `out` (and `den`) against this fixture, as `hla check FIXTURE CANDIDATE` gives it
        (the fixture's reference is proved to belong to its inputs first; its exact tier applies). A
        gradient fixture also judges dq, dk, dv (in `layout`), the gradients for its upstream(), and from an
        initial state dstate={part: array}; final_state={part: array} as in check()."""
        o = tensor(out, "out", out_dtype)
        d = None if den is None else tensor(den, "den")
        text, js, native = _core.check_fixture(self._handle, o, d, layout, _precision(precision), str(form_class), int(worst),
                                               _gradients(dq=dq, dk=dk, dv=dv, dstate=dstate, final_state=final_state))
        return Report(text, js, native)

    def __repr__(self):
        s = self.shape
        return (f"<hla_oracle.Fixture {self.name}: {self.options['variant']} {self.dtype} "
                f"B={s['B']} H={s['H']} Hkv={s['Hkv']} n={s['n']} d={s['d']} dv={s['dv']}>")


def load_fixture(path):
    """Reads a fixture file (`hla gen`, `hla ref`, the golden set, a fuzz finding)."""
    return Fixture(path)


def save_candidate(path, out, den=None, *, fixture=None, layout="bhtd", out_dtype=None, dq=None, dk=None, dv=None,
                   dstate=None, final_state=None):
    """Writes a candidate file for `hla check FIXTURE CANDIDATE` (atomically):
    `out` in its own dtype (bf16 included) and optionally `den`. With
    `fixture` (a Fixture or a path), shapes are checked against it; the
    gradients dq, dk, dv (for a gradient fixture's upstream) need it."""
    fx = None
    if fixture is not None:
        fx = (fixture if isinstance(fixture, Fixture) else Fixture(fixture))._handle
    o = tensor(out, "out", out_dtype)
    d = None if den is None else tensor(den, "den")
    _core.save_candidate(os.fspath(path), o, d, fx, layout, _gradients(dq=dq, dk=dk, dv=dv, dstate=dstate, final_state=final_state))


def golden_dir():
    """The folder of the golden fixture set: $HLA_ORACLE_FIXTURES, else the
    copy installed with the package, else the source tree's fixtures/ (build tree)."""
    env = os.environ.get("HLA_ORACLE_FIXTURES")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent / "fixtures"
    if here.is_dir():
        return here
    try:
        from ._paths import GOLDEN
        if Path(GOLDEN).is_dir():
            return Path(GOLDEN)
    except ImportError:
        pass
    raise FileNotFoundError("the golden fixture set was not found: set HLA_ORACLE_FIXTURES to hla-oracle's fixtures/ folder")


from ._support import Support, support_dict  # noqa: E402


def golden_fixtures(support=None, folder=None):
    """Paths of the golden fixtures (or of `folder`) inside a declared support
    (a Support or a dict of its fields; None: all), sorted: what `hla select` lists."""
    folder = Path(folder) if folder is not None else golden_dir()
    paths = sorted(str(p) for p in folder.glob("*.safetensors") if not p.name.startswith("."))
    if support is None:
        return paths
    why = _core.outside(support_dict(support), paths)
    return [p for p, w in zip(paths, why) if not w]


from ._fuzz import FuzzResult, autograd_backward, fuzz  # noqa: E402
