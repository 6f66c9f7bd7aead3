#!/usr/bin/env bash
# Installs flopmeter's build and test dependencies from Debian's packages when any is missing.
# Sourced by scripts/test.sh and scripts/demo.sh; safe to run repeatedly (does nothing when all are present).
set -euo pipefail

FLOPMETER_PACKAGES=(
  build-essential cmake pkg-config
  libtorch-dev          # LibTorch (CPU) with c10d: the c10d adapter, the example trainer
  libgloo-dev           # Gloo headers that c10d/ProcessGroupGloo.hpp includes
  libspdlog-dev libfmt-dev
  libtomlplusplus-dev
  nlohmann-json3-dev    # Hugging Face config.json model files (core loader)
  libgtest-dev
  nlohmann-json3-dev    # tests read the JSON output (CLI, JSONL sink) with nlohmann-json
  libprotobuf-dev protobuf-compiler  # the TensorBoard sink encodes its events with protobuf
  python3-dev           # the Python package's C fast path (python/flopmeter/_fastpath.c)
  python3-venv          # test_tensorboard reads the event files with TensorBoard from PyPI, in a venv
  python3-torch python3-numpy python3-pytest python3-hypothesis  # the Python package's tests (tests/python)
  libbenchmark-dev
  gnuplot-nox           # the demo's PNG plot
  clang libclang-rt-14-dev  # libFuzzer and clang's sanitizer runtimes: scripts/fuzz.sh
  clang-format          # scripts/check_format.sh: the changed lines follow .clang-format
  valgrind              # bench/soak_cost.py: the soak's per-call cost as instructions (ctest soak_cost_stays_flat)
)

flopmeter_install_deps() {
  local missing=()
  for p in "${FLOPMETER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  echo "flopmeter: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
