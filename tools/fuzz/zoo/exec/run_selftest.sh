#!/bin/sh
# ctest entry for the zoo's exec members: runs selftest_exec.py with the
# project's Python venv (numpy + safetensors). A missing venv is a failure, as
# for the other Python tests.
#   sh run_selftest.sh REPO_ROOT WORK_DIR
root="$1"
py="$root/.venv/bin/python"
if [ ! -x "$py" ] || ! "$py" -c "import numpy, safetensors" 2>/dev/null; then
  echo "FAIL: the Python venv $root/.venv is missing or lacks numpy or safetensors." >&2
  echo "Create it with: cd $root && python3 -m venv .venv && .venv/bin/pip install numpy safetensors pytest" >&2
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$root/tools/fuzz/zoo/exec/selftest_exec.py" "$root" "$2"
