"""hla_oracle.check(..., final_state={part: array}): a kernel's final state (SPEC §8) judged part by part,
and a wrong one refused with a message naming it (issue 39)."""
import numpy as np
import pytest

import hla_oracle

GAMMA = 0.875


def la1(q, k, v, X0=None):
    """la1 by its recurrence in float64 ([B, H, T, D]): out and the final state {P, z} ([B, H, d, dv], [B, H, d])."""
    B, H, T, d = q.shape
    P = np.zeros((B, H, d, v.shape[-1])) if X0 is None else X0["P"].astype(np.float64).copy()
    z = np.zeros((B, H, d)) if X0 is None else X0["z"].astype(np.float64).copy()
    out = np.zeros((B, H, T, v.shape[-1]))
    for t in range(T):
        P = GAMMA * P + np.einsum("bhi,bhj->bhij", k[:, :, t], v[:, :, t])
        z = GAMMA * z + k[:, :, t]
        out[:, :, t] = np.einsum("bhi,bhij->bhj", q[:, :, t], P)
    return out, {"P": P, "z": z}


@pytest.fixture
def case():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 2, 30, 4)).astype(np.float32) for _ in range(3))
    X0 = {"P": rng.standard_normal((2, 2, 4, 4)).astype(np.float32), "z": rng.standard_normal((2, 2, 4)).astype(np.float32)}
    out, final = la1(*(x.astype(np.float64) for x in (q, k, v)), X0)
    return q, k, v, X0, out, final


def check(case, final_state):
    q, k, v, X0, out, _ = case
    return hla_oracle.check(out, q, k, v, variant="la1", gamma=GAMMA, initial_state=X0, precision="f64", final_state=final_state)


def test_a_right_final_state_passes_each_part_judged(case):
    r = check(case, case[5])
    assert r.passed, r.text
    rows = {x["name"]: x for x in r.json()["states"]}
    assert set(rows) == {"state.P", "state.z"} and all(x["checked"] and x["scored"] > 0 and x["pass"] for x in rows.values())


def test_a_final_state_not_decayed_at_the_last_token_fails_naming_the_part(case):
    q, k, v, X0, out, final = case
    _, before = la1(*(x[:, :, :-1].astype(np.float64) for x in (q, k, v)), X0)  # the carry before the last token
    wrong = dict(final, z=final["z"] + (1 - GAMMA) * before["z"])
    r = check(case, wrong)
    assert not r.passed and any(s.startswith("state.z:") for s in r.reasons), r.text
    assert not any(s.startswith("state.P:") for s in r.reasons)


@pytest.mark.parametrize("final_state, needle", [
    (lambda f: dict(f, P=f["P"][:, :, :3]), "state.P has shape [2, 2, 3, 4]; expected [2, 2, 4, 4]"),
    (lambda f: {"P": f["P"]}, "without 'state.z'"),
    (lambda f: dict(f, G=f["P"]), "'state.G', which is not part of the la1"),
])
def test_a_wrong_shape_part_name_or_missing_part_is_an_input_error(case, final_state, needle):
    with pytest.raises(hla_oracle.InputError, match=None) as e:
        check(case, final_state(case[5]))
    assert needle in str(e.value)


def test_final_state_must_be_a_dict(case):
    with pytest.raises(TypeError, match="final_state must be a dict"):
        check(case, (case[5]["P"], case[5]["z"]))
