#!/usr/bin/env bash
# The main job on the embedded default: boot N emulated RK3576 boards and a scheduler host as
# systemd-nspawn containers, provision them with the real playbooks, verify, benchmark, print.
set -euo pipefail
cd "$(dirname "$0")/.."
boards=${1:-3}
if [[ $(id -u) -ne 0 ]]; then
  echo "demo: the emulated fleet needs root (network namespaces, a bridge, systemd-nspawn): sudo make demo" >&2
  exit 1
fi
export PATH="$PWD/.venv/bin:$PATH"
inventory=inventory/lab/hosts.yml
# The boards, the scheduler and the harness share this machine: slow the emulated NPUs down enough
# that the host is never the bottleneck (NPUDURE_TIME_SCALE overrides; the harness still checks).
if [[ -n ${NPUDURE_TIME_SCALE:-} ]]; then
  time_scale=$NPUDURE_TIME_SCALE
  echo "demo: time scale $time_scale (from NPUDURE_TIME_SCALE)"
else
  time_scale=$(python -m npudure_workshop.lab.timescale --boards "$boards") # prints why on stderr
fi

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step "1/4 emulated fleet: $boards boards + scheduler host (sim backend: EMULATED NPU)"
npudure lab up --boards "$boards" --time-scale "$time_scale" # the inventory carries the scale
step "2/4 ansible-playbook playbooks/site.yml"
ansible-playbook -i "$inventory" playbooks/site.yml
step "3/4 ansible-playbook playbooks/verify.yml"
ansible-playbook -i "$inventory" playbooks/verify.yml
step "4/4 ansible-playbook playbooks/benchmark.yml"
bench_rc=0
# 10 s windows instead of --quick's 3 s: the requests cut off at a window's edges alone move a 3 s
# figure by ~0.5%, as much as the 3-board goal's margin.
ansible-playbook -i "$inventory" playbooks/benchmark.yml -e npudure_bench_duration_s=10 || bench_rc=$?
latest=$(ls -1td results/*/ 2>/dev/null | head -n 1)
if [[ -n $latest && -f $latest/summary.json ]]; then
  step "summary ($latest)"
  python -m npudure_workshop.lab.demo_summary "$latest/summary.json" --time-scale "$time_scale"
fi
cat <<MSG

The fleet is still up. Look around:
  .venv/bin/npudure lab status
  .venv/bin/npudure lab exec board1 -- systemctl status npudure-agent
  .venv/bin/npudure status --target 10.231.0.10:50050
Take it down with: make lab-down
MSG
exit "$bench_rc"
