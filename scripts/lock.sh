#!/usr/bin/env bash
# Regenerate requirements/controller.lock (Python 3.11 and later, any platform): every package the controller's and CI's .venv installs
# (npudure's base set and its dev, onnx and controller extras, and what builds npudure), each pinned with
# the sha256 of every file PyPI serves for it. scripts/bootstrap.sh installs only from it, with
# --require-hashes, so a new release cannot change CI overnight. Run it (`make lock`) when pyproject.toml's
# dependencies change or to take newer releases on purpose, then run `make test` and commit both files.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-.venv/bin/uv}
"$uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
  --extra dev --extra onnx --extra controller \
  --custom-compile-command "make lock" \
  --output-file requirements/controller.lock \
  pyproject.toml requirements/build.in "$@"
echo "lock: requirements/controller.lock has $(grep -c '==' requirements/controller.lock) pinned packages"
