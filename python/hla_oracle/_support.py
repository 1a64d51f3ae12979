"""What a kernel declares it supports (the fuzzer generates, and the pytest
plugin selects, only problems inside it): the Python side of fuzz::Supports."""
from dataclasses import asdict, dataclass, field, fields

try:  # the variant table's rows less the paper-literal ones, from the compiled core
    from ._core import variants as _variants
    ALL_VARIANTS = tuple(_variants())
except ImportError:  # without the core nothing is fuzzed or checked (hla_oracle says why on first use)
    ALL_VARIANTS = ()


def _names(x, what):
    if x is None:
        return []
    if isinstance(x, str):
        return [s.strip() for s in x.split(",") if s.strip()]
    try:
        return [str(s) for s in x]
    except TypeError:
        raise TypeError(f"{what} must be a list of names or a comma list, got {x!r}") from None


def _ints(x, what):
    if x is None:
        return []
    if isinstance(x, int):
        return [x]
    if isinstance(x, str):
        x = [s for s in x.split(",") if s.strip()]
    try:
        return [int(s) for s in x]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must list positive integers (e.g. [64, 128]), got {x!r}") from None


@dataclass
class Support:
    """variants: e.g. ['hla2']; dtypes: input dtypes among f64, f32, bf16, f16;
    features: among unmasked, normalize, clamp, decay (γ < 1), ridge, scale, gqa
    (H > Hkv), varlen (cu_seqlens), den (returns the denominator), state
    (takes initial_state and returns its final state), or 'all' (all but
    state); max_n, max_d, max_dv: largest sizes; d, dv: the only head sizes it
    takes (dv='d': dv = d only); n_multiple: every sequence length a multiple
    of this block; precision: its compute precision, one ('f32') or per input
    dtype ('bf16=f32,f32=f32' or {'bf16': 'f32'}); form_class: 'masked',
    'state_difference', 'flat' or 'flat:W' (docs/pass-rule.md)."""
    variants: list = field(default_factory=lambda: list(ALL_VARIANTS))
    dtypes: list = field(default_factory=lambda: ["f32"])
    features: list = field(default_factory=list)
    max_n: int = 4096
    max_d: int = 64
    max_dv: int = 64
    d: list = None
    dv: object = None
    n_multiple: int = 1
    precision: object = "f32"
    form_class: str = "masked"
    name: str = "python function"


def support_dict(s):
    """The dict _core takes, from a Support, a dict of its fields or None."""
    if s is None:
        s = Support()
    elif isinstance(s, dict):
        unknown = set(s) - {f.name for f in fields(Support)}
        if unknown:
            raise ValueError(f"unknown support field(s) {sorted(unknown)}; the fields are {[f.name for f in fields(Support)]}")
        s = Support(**s)
    elif not isinstance(s, Support):
        raise TypeError(f"support must be a hla_oracle.Support or a dict, got {type(s).__name__}")
    feats = _names(s.features, "features")
    state = "state" in feats
    feats = [f for f in feats if f != "state"]
    dv_equals_d = isinstance(s.dv, str) and s.dv.strip() == "d"
    precision = s.precision
    if isinstance(precision, dict):
        precision = ",".join(f"{k}={v}" for k, v in precision.items())
    variants = _names(s.variants, "variants")
    if variants == ["all"]:
        variants = list(ALL_VARIANTS)
    return {"name": str(s.name), "variants": variants, "dtypes": _names(s.dtypes, "dtypes"),
            "features": ",".join(feats), "state": state, "max_n": int(s.max_n), "max_d": int(s.max_d),
            "max_dv": int(s.max_dv), "d": _ints(s.d, "d"), "dv": [] if dv_equals_d else _ints(s.dv, "dv"),
            "dv_equals_d": dv_equals_d, "n_multiple": int(s.n_multiple), "precision": str(precision),
            "form_class": str(s.form_class)}


def as_support(s):
    """A Support from a Support, a dict or None."""
    if isinstance(s, Support):
        return s
    return Support(**(s or {}))


__all__ = ["Support", "support_dict", "as_support", "asdict"]
