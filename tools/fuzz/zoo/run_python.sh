#!/bin/sh
# ctest entry for the zoo's Python checks: runs a script with the project's
# venv (numpy + safetensors). A missing venv is a failure, as for the other
# Python tests.
#   sh run_python.sh REPO_ROOT SCRIPT [ARGS...]
root="$1"
shift
py="$root/.venv/bin/python"
if [ ! -x "$py" ] || ! "$py" -c "import numpy, safetensors" 2>/dev/null; then
  echo "FAIL: the Python venv $root/.venv is missing or lacks numpy or safetensors." >&2
  echo "Create it with: cd $root && python3 -m venv .venv && .venv/bin/pip install numpy safetensors pytest" >&2
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$@"
