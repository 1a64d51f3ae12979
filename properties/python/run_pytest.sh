#!/bin/sh
# ctest entry for the Python client tests: runs pytest from the project's venv.
# A missing venv is a failure, not a skip: the test is part of the suite.
root="$1"
shift
py="$root/.venv/bin/python"
if [ ! -x "$py" ] || ! "$py" -c "import numpy, safetensors, pytest" 2>/dev/null; then
  echo "FAIL: the Python test venv $root/.venv is missing or lacks numpy, safetensors or pytest." >&2
  echo "Create it with: cd $root && python3 -m venv .venv && .venv/bin/pip install numpy safetensors pytest" >&2
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 exec "$py" -m pytest -q -p no:cacheprovider "$root/properties/python" "$@"
