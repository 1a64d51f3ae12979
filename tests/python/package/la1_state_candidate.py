"""kernels.la1_state_kernel as an exec candidate with its state in files:
`la1_state_candidate.py IN OUT STATE_IN STATE_OUT [--bug no_state]` (hla fuzz
--exec with {state_in} {state_out}) or `--serve [--bug no_state]` (--exec-server)."""
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hla_oracle  # noqa: E402
from kernels import fixture_options, la1_state_kernel  # noqa: E402

BUG = "no_state" if "--bug" in sys.argv else None


def handle(fixture, candidate, state_in=None, state_out=None):
    fx = hla_oracle.load_fixture(fixture)
    o = fixture_options(fx)
    if state_in not in (None, "-"):
        st = load_file(state_in)
        o.initial_state = (st["S"], st["z"])
    out, den, (S, z) = la1_state_kernel(fx.q, fx.k, fx.v, o, bug=BUG)
    hla_oracle.save_candidate(candidate, out, den, fixture=fx)
    if state_out not in (None, "-"):
        save_file({"S": np.ascontiguousarray(S), "z": np.ascontiguousarray(z)}, state_out)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a not in ("--bug", "no_state")]
    if args == ["--serve"]:
        hla_oracle.serve(handle)
    else:
        handle(*args)
