"""Operator options to the exact text the C++ core parses (io::OptionText)."""
import math
from fractions import Fraction
from numbers import Integral, Rational, Real

DEFAULT_EPS = Fraction(1, 1000000)
# The keyword options of reference()/check() and Fixture.kwargs with the value a
# kernel that does not take one must be computing (variant: chosen by the
# support a test declares, so no value is implied).
OPTION_DEFAULTS = {"variant": None, "masked": True, "gamma": 1, "normalize": False, "eps_mode": "add",
                   "eps": DEFAULT_EPS, "lam": 0, "scale": 1}


class NotExpressible(ValueError):
    """A fixture needs an option value that a kernel's signature cannot take."""


def kwargs_for(kwargs, fn, rename=None):
    """The options in kwargs that fn's signature accepts, under fn's own names
    (rename: {our name: its name}, e.g. {"lam": "ridge"}); a **kwargs parameter
    accepts all. Raises NotExpressible naming each option whose value differs from
    OPTION_DEFAULTS but that fn does not take."""
    import inspect
    rename = dict(rename or {})
    unknown = set(rename) - set(OPTION_DEFAULTS)
    if unknown:
        raise ValueError(f"rename names unknown options {sorted(unknown)}; the options are {list(OPTION_DEFAULTS)}")
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    out, missing = {}, []
    for name, value in kwargs.items():
        its = rename.get(name, name)
        if takes_all or its in params:
            out[its] = value
        elif name != "variant" and value != OPTION_DEFAULTS[name]:
            missing.append(f"{name}={value}")
    if missing:
        raise NotExpressible(f"{getattr(fn, '__name__', fn)!s} takes no parameter for {', '.join(missing)} "
                             f"(rename maps our option names to its own)")
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


def option_text(variant="hla2", masked=True, gamma=1, normalize=False, eps_mode="add", eps=DEFAULT_EPS, lam=0, scale=1):
    """{key: text} for _core (io::OptionText keys)."""
    if normalize in (False, None, "none"):
        norm = "none"
    elif normalize is True:
        norm = str(eps_mode)
    elif normalize in ("add", "clamp"):
        norm = normalize
    else:
        raise ValueError(f"normalize must be False/True or 'none', 'add', 'clamp'; got {normalize!r}")
    if eps_mode not in ("add", "clamp"):
        raise ValueError(f"eps_mode must be 'add' or 'clamp', got {eps_mode!r}")
    if not isinstance(masked, bool):
        raise TypeError(f"masked must be True or False, got {masked!r}")
    return {"variant": str(variant), "masked": "true" if masked else "false", "gamma": exact(gamma, "gamma"),
            "normalize": norm, "eps": exact(eps, "eps"), "lambda": exact(lam, "lam"), "scale": exact(scale, "scale")}
