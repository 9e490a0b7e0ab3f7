#!/usr/bin/env bash
# Install what NPUDure needs on a fresh Debian 12 machine with Python >= 3.11: the Debian packages for
# the emulated fleet and the nginx peer, and a virtualenv (.venv) with the package and its tools.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# qemu-user-static + binfmt-support: arm64 lab boards (`npudure lab up --arm64-boards N`) run under qemu-user.
# prometheus: promtool for the rule tests, and the real Prometheus of tests/integration/test_monitoring.py.
DEBS=(systemd-container debootstrap debian-archive-keyring iproute2 util-linux mount openssh-client nginx-light procps
  qemu-user-static binfmt-support prometheus)
PYTHON=${PYTHON:-python3}

missing=()
for pkg in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: missing Debian packages: ${missing[*]}" >&2
    echo "bootstrap: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# Everything comes from requirements/controller.lock, pinned and checked by sha256 (--require-hashes):
# the environment is the one the lock's commit was tested with, whatever PyPI released since. The two
# wings, the runtime (npudure) and the controller's workshop (workshop/, npudure-workshop), are installed
# editable on top, without resolving anything (scripts/lock.sh regenerates the lock).
stamp=.venv/.npudure-installed
lock=requirements/controller.lock
if [[ ! -f $stamp || pyproject.toml -nt $stamp || workshop/pyproject.toml -nt $stamp || $lock -nt $stamp ]]; then
  echo "bootstrap: installing npudure, its workshop and their tools into .venv (from $lock)"
  .venv/bin/python -m pip install -q --require-hashes -r "$lock"
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e . -e ./workshop
  .venv/bin/python -m pip check >/dev/null || {
    echo "bootstrap: $lock does not satisfy pyproject.toml's dependencies; run 'make lock'" >&2
    .venv/bin/python -m pip check >&2
    exit 1
  }
  touch "$stamp"
fi
echo "bootstrap: ready (.venv/bin/npudure $(.venv/bin/npudure --version | cut -d' ' -f2))"
