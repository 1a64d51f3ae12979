#!/usr/bin/env bash
# Installs whatever is missing (Debian packages, the Python test venv),
# then configures and builds hla-oracle in Release. Idempotent: a second run
# installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make python3 python3-venv libboost-dev libgmp-dev libmpfr-dev libeigen3-dev catch2
          librapidcheck-dev nlohmann-json3-dev libcli11-dev)
bash scripts/apt_install.sh setup "${packages[@]}"

# Python side (tests that read fixtures with the real third-party readers).
if ! .venv/bin/python -c "import numpy, safetensors, pytest" 2>/dev/null; then
  echo "setup: creating .venv with numpy, safetensors, pytest"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check numpy safetensors pytest
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
