"""Operator options to the exact text the C++ core parses (io::OptionText)."""
import math
from fractions import Fraction
from numbers import Integral, Rational, Real

DEFAULT_EPS = Fraction(1, 1000000)


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
