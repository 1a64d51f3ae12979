#!/usr/bin/env bash
# Installs whatever is missing (Debian packages, the Python test venv),
# then configures and builds hla-oracle in Release. Idempotent: a second run
# installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: headless, renders `hla check --html` pages in ctest hla_html_report (skipped without it).
packages=(cmake clang g++ make ninja-build python3 python3-venv libboost-dev libgmp-dev libmpfr-dev libeigen3-dev catch2
          librapidcheck-dev nlohmann-json3-dev libcli11-dev chromium)
# HLA_EXTRA_APT: more packages for the same apt run (.ci/run: the later CI jobs' own, so that
# a fresh machine updates the package lists once, not once per job).
read -r -a extra <<< "${HLA_EXTRA_APT:-}"
bash scripts/apt_install.sh setup "${packages[@]}" "${extra[@]}"

# Python side: the test venv (numpy, safetensors, pytest, pytest-xdist for the
# plugin's parallel-run test), nanobind to build the package hla_oracle
# (python/) into it, and CPU torch for the PyTorch example.
if ! .venv/bin/python -c "import numpy, safetensors, pytest, xdist, nanobind" 2>/dev/null; then
  echo "setup: creating .venv with numpy, safetensors, pytest, pytest-xdist, nanobind"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check numpy safetensors pytest pytest-xdist nanobind
fi
# torch in the background while the build compiles: where PyTorch's CPU index is unreachable (CI's
# machine) PyPI's wheel brings 5 GB of CUDA libraries, about 150 s of download and unpacking that
# would otherwise come before the build (measured 2026-12-06). Only the tests need it; waited for below.
torch_pid=""
torch_log=.venv/torch-install.log
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing torch (CPU where reachable) into .venv for examples/torch_hla.py, in the background ($torch_log)"
  { .venv/bin/pip install -q --disable-pip-version-check torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null ||
      .venv/bin/pip install -q --disable-pip-version-check torch; } >"$torch_log" 2>&1 &
  torch_pid=$!
  # A failed build ends setup at once: pip goes with it (the next run reinstalls what it left).
  trap 'if kill -0 "$torch_pid" 2>/dev/null; then pkill -P "$torch_pid"; kill "$torch_pid"; fi 2>/dev/null || true' EXIT
fi

# The compiler of a new build folder: clang, unless CC/CXX name another. On
# two cores it builds this code (Eigen and Boost.Multiprecision templates in
# six scalar types) in 35% less time than GCC; GCC builds and tests it too
# (scripts/sanitize.sh, tests/add_variant/check.sh). A configured folder keeps
# its compiler.
if [ ! -f build/CMakeCache.txt ]; then
  export CC="${CC:-clang}" CXX="${CXX:-clang++}"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
build_start=$(date +%s)
cmake --build build -j"$(nproc)"
echo "setup: build took $(( $(date +%s) - build_start )) s"
if [ -n "$torch_pid" ]; then
  wait "$torch_pid" || { cat "$torch_log" >&2; echo "setup: installing torch failed (above)" >&2; exit 1; }
  echo "setup: torch installed, $(( $(date +%s) - build_start )) s after the build began"
fi

# hla_oracle in .venv: the build's package (build/python: the module and a copy
# of python/hla_oracle, refreshed by every build) through a .pth file, with its
# pytest11 entry point. Elsewhere: pip install ./python (docs/python.md).
if [ -d build/python/hla_oracle ]; then
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD/build/python" > "$site/hla_oracle_build.pth"
fi
