"""The numpy kernel of tests/python/package/kernels.py as an exec candidate: one fixture
per process (`numpy_candidate.py IN OUT`) or a server (`--serve`, hla fuzz
--exec-server), through hla_oracle's fixture I/O. Used by adapters.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python" / "package"))
import hla_oracle  # noqa: E402
from kernels import fixture_options, kernel  # noqa: E402


def handle(fixture_path, candidate_path):
    fx = hla_oracle.load_fixture(fixture_path)
    out, den = kernel(fx.q, fx.k, fx.v, fixture_options(fx))
    hla_oracle.save_candidate(candidate_path, out, den, fixture=fx)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        hla_oracle.serve(handle)
    else:
        handle(sys.argv[1], sys.argv[2])
