#!/usr/bin/env bash
# Set up a fresh machine: system packages, .venv at the repo root, torch from disk, the project
# (Rust core included) in editable mode. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(g++ bubblewrap librust-pyo3-dev librust-serde-dev librust-serde-derive-dev librust-serde-json-dev chromium iproute2)
missing=()
for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${missing[@]}"
fi

scripts/cargo_sources.sh

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import torch, torchvision' 2>/dev/null \
  || .venv/bin/pip install -q torch==2.14.1 torchvision==0.29.1 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/pip install -q -e '.[dev]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import torch, search_core, grpc, xdist; print("setup: ok, torch", torch.__version__)'
