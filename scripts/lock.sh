#!/usr/bin/env bash
# Regenerate the two locks, each package pinned with the sha256 of every file PyPI serves for it:
# - requirements/controller.lock (Python 3.11 and later, any platform): what the controller's and CI's
#   .venv installs (requirements/controller.in: npudure's base set and its dev, onnx and controller
#   extras, the workshop's dependencies, and what builds both). scripts/bootstrap.sh installs only from it,
#   with --require-hashes, so a new release cannot change CI overnight.
# - requirements/fleet.lock (Python 3.10 and later): what the boards and the scheduler host install
#   (requirements/fleet.in: the runtime with its onnx, rknn and controller extras, no dev tools). The
#   npudure_wheelhouse role downloads only its pins, checks every wheel against its hashes, and the hosts
#   install their share with --require-hashes.
# npudure and npudure-workshop are read from this checkout, never PyPI, and left out of both. Run it
# (`make lock`) when a pyproject.toml's dependencies change or to take newer releases on purpose, then run
# `make test` and commit the locks. uv keeps the locks' pins it can.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-.venv/bin/uv}
lock() {  # NAME PYTHON [uv args...]
  local name=$1 python=$2
  shift 2
  "$uv" pip compile --quiet --universal --python-version "$python" --generate-hashes \
    --no-emit-package npudure --no-emit-package npudure-workshop \
    --custom-compile-command "make lock" \
    --output-file "requirements/$name.lock" \
    "requirements/$name.in" "$@"
  echo "lock: requirements/$name.lock has $(grep -c '==' "requirements/$name.lock") pinned packages"
}
lock controller 3.11 "$@"
lock fleet 3.10 "$@"
