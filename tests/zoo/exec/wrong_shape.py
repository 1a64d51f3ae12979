"""Zoo exec candidate `exec_wrong_shape` (buggy): computes correctly but writes
`out` as [B, H, n−1, dv] and `den` as [B, H, n−1] (an off-by-one in the output
allocation: the last token is dropped).

    python wrong_shape.py IN OUT
"""

import sys

import numpy as np

import correct

if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} IN OUT", file=sys.stderr)
        sys.exit(2)
    with np.errstate(all="ignore"):
        out, den = correct.compute(sys.argv[1])
    correct.write(sys.argv[2], out[:, :, :-1], den[:, :, :-1])
