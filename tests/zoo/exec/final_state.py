"""Zoo exec candidates that return a final state (SPEC §8), `hla fuzz --exec`:

    python final_state.py IN OUT [--bug NAME]      (or --serve: hla fuzz --exec-server)

A float64 numpy implementation of la1, hla2, ahla and hla3 by the SPEC §3
recurrences (every option, packed sequences, an initial state when the fixture
has one) that writes `out`, `den` and the state after each sequence's last
token as `state.<part>` tensors [N, H, rows(, cols)] (io/state.hpp: S, C|m,
F|f, P|z, E|e, SQ). --bug NAME (a field of Bugs) plants one of the state-carry
bugs that linear-attention kernels are reported for; the outputs stay right.
"""

import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from safetensors.numpy import save_file

import correct


@dataclass
class Bugs:
    # The outputs stay right; only the state a kernel hands to the next chunk is wrong:
    not_decayed: bool = False  # the last member's carry misses the last token's decay (γ^p X_{n-1} stored as X_{n-1})
    stale_part: bool = False   # a denominator column (z, m, e, f) is the one of the token before the last


# Per variant and mask: the member the bugs touch (the last one with a ones column for stale_part) and its decay power.
LAST = {("la1", True): ("P", 1), ("hla2", True): ("F", 2), ("hla2", False): ("C", 1), ("ahla", True): ("E", 1),
        ("hla3", True): ("F", 3), ("hla3", False): ("P", 1)}


def layout(variant, masked, lam):
    """The parts (name, ones, square) in state order; C of masked hla2 without ridge is optional (given anyway)."""
    return {"la1": [("P", "z", False)],
            "hla2": [("S", "", True), ("C", "m", False)] + ([("F", "f", False)] if masked else []),
            "ahla": [("P", "z", False), ("E", "e", False)],
            "hla3": [("S", "", True), ("P", "z", False)] + ([("F", "f", False)] if masked else [("SQ", "", True)])}[variant]


def step(variant, X, q, k, v1, g, masked):
    """One token's update of the members X (a dict); returns num (dv + 1)."""
    if variant == "la1":
        X["P"] = g * X["P"] + np.outer(k, v1)
        return q @ X["P"]
    if variant == "ahla":
        X["P"] = g * X["P"] + np.outer(k, v1)
        X["E"] = g * X["E"] + np.outer(k, q @ X["P"])
        return q @ X["E"]
    X["S"] = g * X["S"] + np.outer(k, k)
    if variant == "hla2":
        X["C"] = g * X["C"] + np.outer(q, v1)
        if masked:
            X["F"] = g * g * X["F"] + np.outer(X["S"] @ q, v1)
            return q @ X["F"]
        return (X["S"] @ q) @ X["C"]
    X["P"] = g * X["P"] + np.outer(k, v1)
    if masked:
        X["F"] = g**3 * X["F"] + np.outer(X["S"] @ q, q @ X["P"])
        return q @ X["F"]
    X["SQ"] = g * X["SQ"] + np.outer(q, q)
    return ((q @ X["S"]) @ X["SQ"]) @ X["P"]


def sequence(variant, X, qs, ks, v1, g, masked, lam, bugs):
    """num [L, dv + 1] of one sequence from X (updated in place to its final state, with the bug)."""
    num = np.zeros((qs.shape[0], v1.shape[1]))
    before = {}
    for t in range(qs.shape[0]):
        before = {name: x.copy() for name, x in X.items()}
        num[t] = step(variant, X, qs[t], ks[t], v1[t], g, masked)
        if variant == "hla2" and lam:
            num[t] += lam * (qs[t] @ X["C"])
    if qs.shape[0]:
        m, power = LAST[(variant, masked or variant in ("la1", "ahla"))]
        if bugs.not_decayed:
            X[m] = X[m] + (1 - g**power) * before[m]
        if bugs.stale_part:
            X[m][:, -1] = before[m][:, -1]
    return num


def compute(path, bugs):
    """out, den and the final state's tensors for the fixture at path."""
    t, md = correct.read(path)
    variant, masked = md["variant"], md.get("masked", "true") == "true"
    normalize, eps_mode = md.get("normalize", "false") == "true", md.get("eps_mode", "add")
    g, eps, lam, scale = (float(Fraction(md[key])) for key in ("gamma", "eps", "lambda", "scale"))
    q, k, v = (t[x].astype(np.float64) for x in ("q", "k", "v"))
    B, H, n, d = q.shape
    Hkv, dv = k.shape[1], v.shape[3]
    offsets = t["offsets"].tolist() if "offsets" in t else [0, n]
    parts = layout(variant, masked, lam)
    N = B * (len(offsets) - 1)
    states = {}
    for name, ones, square in parts:
        states[name] = np.zeros((N, H, d, d if square else dv))
        if ones:
            states[ones] = np.zeros((N, H, d))
    out, den = np.zeros((B, H, n, dv)), np.zeros((B, H, n))
    seq = 0
    for b in range(B):
        for t0, t1 in zip(offsets[:-1], offsets[1:]):
            for h in range(H):
                hk = h // (H // Hkv)
                X = {}
                for name, ones, square in parts:
                    X[name] = np.zeros((d, d if square else dv + 1))
                    if f"initial_state.{name}" in t:
                        X[name][:, : (d if square else dv)] = t[f"initial_state.{name}"][seq, h]
                    if ones and f"initial_state.{ones}" in t:
                        X[name][:, -1] = t[f"initial_state.{ones}"][seq, h]
                if variant == "hla2" and masked:
                    X.setdefault("C", np.zeros((d, dv + 1)))
                v1 = np.concatenate([v[b, hk, t0:t1], np.ones((t1 - t0, 1))], axis=1)
                num = sequence(variant, X, q[b, h, t0:t1] * scale, k[b, hk, t0:t1], v1, g, masked, lam, bugs)
                dn = num[:, -1]
                D = dn + eps if eps_mode == "add" else np.where(dn < 0, -1.0, 1.0) * np.maximum(np.abs(dn), eps)
                out[b, h, t0:t1] = num[:, :-1] / D[:, None] if normalize else num[:, :-1]
                den[b, h, t0:t1] = dn
                for name, ones, square in parts:
                    states[name][seq, h] = X[name] if square else X[name][:, :-1]
                    if ones:
                        states[ones][seq, h] = X[name][:, -1]
            seq += 1
    return out, den, {f"state.{name}": x for name, x in states.items()}


def run(in_path, out_path, bugs):
    with np.errstate(all="ignore"):  # NaN/Inf inputs propagate as they should
        out, den, states = compute(in_path, bugs)
    save_file({"out": out, "den": den, **{k: np.ascontiguousarray(x) for k, x in states.items()}}, out_path)


if __name__ == "__main__":
    args = sys.argv[1:]
    bug = {}
    if "--bug" in args:  # --bug NAME (a field of Bugs), anywhere
        i = args.index("--bug")
        bug = {args[i + 1]: True}
        del args[i:i + 2]
    sys.exit(correct.main([sys.argv[0]] + args, Bugs(**bug), run_case=run, usage="IN OUT [--bug NAME] | --serve [--bug NAME]"))
