#!/bin/sh
# Runs the project's Python venv (numpy, safetensors, pytest from PyPI) for the
# tests that read fixtures with real third-party readers. A missing venv is a
# failure, not a skip: those tests are part of the suite.
#   sh scripts/venv_python.sh REPO_ROOT ARGS...     (ARGS as for python)
root="$1"
shift
py="$root/.venv/bin/python"
if [ ! -x "$py" ] || ! "$py" -c "import numpy, safetensors, pytest" 2>/dev/null; then
  echo "FAIL: the Python venv $root/.venv is missing or lacks numpy, safetensors or pytest." >&2
  echo "Create it with: bash scripts/setup.sh (or: cd $root && python3 -m venv .venv && .venv/bin/pip install numpy safetensors pytest)" >&2
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$@"
