#!/usr/bin/env bash
# The repaired wheel installs and works where no compiler and no -dev package
# can be reached: a fresh venv gets the wheel (numpy, pytest, safetensors from
# PyPI), then installed_checks.py runs in an environment emptied by `env -i`:
# PATH is the venv's bin plus a folder with sh and ldd only (no gcc, g++, cc,
# c++, clang), and no CPATH, CPLUS_INCLUDE_PATH, LIBRARY_PATH, LD_LIBRARY_PATH.
# Nothing is removed from the machine.
#
#   tests/wheel/install_test.sh dist/hla_oracle-*.whl     (exit 0: every check passed)
#
# PYTHON: the interpreter of the venv (default python3; the wheel's Python tag must match it).
set -euo pipefail
wheel=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hla-wheel-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

t=$(date +%s)
"${PYTHON:-python3}" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel" numpy pytest safetensors
echo "install_test: venv and pip install took $(( $(date +%s) - t )) s"

mkdir "$work/bin" "$work/home"
for tool in sh ldd; do
  ln -s "$(command -v "$tool")" "$work/bin/$tool"
done
cd "$work/home"
env -i PATH="$work/venv/bin:$work/bin" HOME="$work/home" TMPDIR="$work/home" LANG=C.UTF-8 \
  "$work/venv/bin/python" "$here/installed_checks.py" "$repo" "$work/venv"
