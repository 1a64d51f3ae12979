"""The operator options: their names, types and defaults are the C++ table's
(hla/options.hpp, through _core.options()); this file turns keyword values into
the exact text the core parses, and the core's text back into Python values."""
import functools
import inspect
import math
import warnings
from fractions import Fraction
from numbers import Integral, Rational, Real


@functools.lru_cache(maxsize=None)
def table():
    """{name: row} in table order; a row: name, type, default, range, values, cli, key, help, alias."""
    from . import _core
    return {r["name"]: dict(r) for r in _core.options()}


def from_text(name, text):
    """An option's exact text as its Python value: a bool, a Fraction or a str."""
    kind = table()[name]["type"]
    return text == "true" if kind == "bool" else Fraction(text) if kind == "rational" else text


def defaults():
    """{name: default value}: what a kernel that does not take an option must be computing."""
    return {name: from_text(name, row["default"]) for name, row in table().items()}


def with_option_keywords(fn):
    """fn(..., **options) shown (inspect.signature, help()) with one keyword per option and its default."""
    try:
        rows = defaults()
    except ImportError:  # no compiled core: the plain signature
        return fn
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value) for name, value in rows.items()]
    fn.__signature__ = sig.replace(parameters=params)
    return fn


class NotExpressible(ValueError):
    """A fixture needs an option value that a kernel's signature cannot take."""


def kwargs_for(kwargs, fn, rename=None):
    """The options in kwargs that fn's signature accepts, under fn's own names
    (rename: {our name: its name}, e.g. {"lam": "ridge"}); a **kwargs parameter
    accepts all. Raises NotExpressible naming each option whose value differs from
    its default but that fn does not take."""
    rename = dict(rename or {})
    unknown = set(rename) - set(table())
    if unknown:
        raise ValueError(f"rename names unknown options {sorted(unknown)}; the options are {list(table())}")
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    out, missing, default = {}, [], defaults()
    for name, value in kwargs.items():
        its = rename.get(name, name)
        if takes_all or its in params:
            out[its] = value
        elif name != "variant" and value != default[name]:
            missing.append(f"{name}={value}")
    if missing:
        raise NotExpressible(f"{getattr(fn, '__name__', fn)!s} takes no parameter for {', '.join(missing)} "
                             f"(rename maps our option names to its own)")
    return _as_old_normalize(out, params, rename.get("normalize", "normalize"), fn)


def _as_old_normalize(out, params, its, fn):
    """A kernel written for the old spelling (its normalize parameter defaults to
    a bool) gets normalize=bool, and eps_mode= when it takes one: 'none' would
    be truthy there. A clamp fixture it cannot express (no eps_mode) is NotExpressible."""
    p = params.get(its)
    if its not in out or p is None or not isinstance(p.default, bool):
        return out
    mode = out[its]
    warnings.warn(f"{getattr(fn, '__name__', fn)!s} takes normalize as a bool, the old spelling: it gets "
                  f"normalize={mode != 'none'} (the next release hands 'none', 'add' or 'clamp')", DeprecationWarning,
                  stacklevel=4)
    out[its] = mode != "none"
    if "eps_mode" in params:
        out["eps_mode"] = "clamp" if mode == "clamp" else "add"
    elif mode == "clamp":
        raise NotExpressible(f"{getattr(fn, '__name__', fn)!s} takes normalize as a bool and no eps_mode, "
                             "so it cannot express normalize='clamp'")
    return out


def exact(x, name):
    """An option value as exact text: Fraction and int as p/q, strings as
    written ('0.99' means 99/100, '7/8'), floats as their exact binary value
    (what a kernel computing with that float uses)."""
    if isinstance(x, bool):
        raise TypeError(f"{name} must be a number, got {x!r}")
    if isinstance(x, str):
        return x.strip()
    if isinstance(x, (Integral, Rational)):
        f = Fraction(x)
        return f"{f.numerator}/{f.denominator}" if f.denominator != 1 else str(f.numerator)
    if isinstance(x, Real):
        xf = float(x)
        if not math.isfinite(xf):
            raise ValueError(f"{name} = {x!r} is not finite")
        return exact(Fraction(xf), name)
    if hasattr(x, "item"):  # a 0-d numpy array or torch tensor
        return exact(x.item(), name)
    raise TypeError(f"{name} must be a number, a Fraction or a string like '7/8', got {type(x).__name__}")


def _deprecated(message):
    warnings.warn(message + " (removed in the next release)", DeprecationWarning, stacklevel=5)  # the caller of reference() or check()


def _old_normalize(opts):
    """normalize=True/False (with eps_mode=) and eps_mode= alone, the spellings before normalize='none'|'add'|'clamp'."""
    mode = opts.pop("eps_mode", None)
    if mode is not None:
        _deprecated("eps_mode= is the old spelling: pass normalize='add' or 'clamp'")
        if mode not in ("add", "clamp"):
            raise ValueError(f"eps_mode must be 'add' or 'clamp', got {mode!r}")
    norm = opts.get("normalize")
    if norm is None or isinstance(norm, bool):
        _deprecated(f"normalize={norm!r} is the old spelling: pass normalize='none', 'add' or 'clamp'")
        opts["normalize"] = (mode or "add") if norm else "none"


def option_text(options):
    """{name: exact text} for _core from the keyword options of reference() and
    check() (table(); the old spellings warn: DeprecationWarning)."""
    opts = dict(options)
    if "eps_mode" in opts or opts.get("normalize", "") is None or isinstance(opts.get("normalize"), bool):
        _old_normalize(opts)
    unknown = sorted(set(opts) - set(table()))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; the options are {', '.join(table())}")
    text = {}
    for name, row in table().items():
        x = opts.get(name, from_text(name, row["default"]))
        if row["type"] == "bool":
            if not isinstance(x, bool):
                raise TypeError(f"{name} must be True or False, got {x!r}")
            text[name] = "true" if x else "false"
        else:
            text[name] = exact(x, name) if row["type"] == "rational" else str(x)
    return text
