"""Zoo exec candidate `exec_ridge_off_by_one` (buggy): correct.py with the hla2
ridge term λ·Σ_j γ^(t−j) (q_t·q_j) v_j weighted γ^(t−j+1) instead: the ridge
read from the decayed state of the *next* step (S_eff = γ(S + λI) instead of
S + λI). Visible only with λ > 0 and γ < 1.

    python ridge_off_by_one.py IN OUT
"""

import sys

import correct

if __name__ == "__main__":
    sys.exit(correct.main(sys.argv, correct.Bugs(ridge_extra_decay=True)))
