"""Tests of the hla_oracle package (run by ctest `python_package`:
PYTHONPATH=<build>/python, HLA=<build>/tools/hla)."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def hla_tool():
    """The `hla` binary of the same build (for cross-checks with the CLI)."""
    path = os.environ.get("HLA")
    if not path or not Path(path).exists():
        pytest.fail("set HLA to the build's tools/hla (ctest does)")
    return path


@pytest.fixture(scope="session")
def repo():
    return REPO
