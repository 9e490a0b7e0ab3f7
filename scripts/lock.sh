#!/usr/bin/env bash
# Regenerate requirements/controller.lock (Python 3.11 and later, any platform): every package the
# controller's and CI's .venv installs (requirements/controller.in: npudure's base set and its dev, onnx and
# controller extras, the workshop's dependencies, and what builds both), each pinned with the sha256 of
# every file PyPI serves for it. npudure and npudure-workshop are read from this checkout, never PyPI, and
# left out of the lock. scripts/bootstrap.sh installs only from it, with --require-hashes, so a new release
# cannot change CI overnight. Run it (`make lock`) when a pyproject.toml's dependencies change or to take
# newer releases on purpose, then run `make test` and commit the lock. uv keeps the lock's pins it can.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-.venv/bin/uv}
"$uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
  --no-emit-package npudure --no-emit-package npudure-workshop \
  --custom-compile-command "make lock" \
  --output-file requirements/controller.lock \
  requirements/controller.in "$@"
echo "lock: requirements/controller.lock has $(grep -c '==' requirements/controller.lock) pinned packages"
