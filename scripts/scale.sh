#!/usr/bin/env bash
# The scaling benchmark on N emulated boards (8, 16, ...): boot the lab, provision it with a time scale
# that fits this host, measure what each board costs the host, run `npudure bench run` (scaling 1..N,
# quick, no hetero) from the scheduler host, print the summary. Root; one lab per machine:
#   sudo flock /tmp/npudure-lab.lock scripts/scale.sh 8 [time scale]
# The lab is left up (take it down with: make lab-down). Results land in results/<run id>/.
# NPUDURE_SCALE_BENCH_ARGS adds harness arguments, e.g. "--sweep 4 --sweep-repetitions 1" to skip
# most of the saturation sweep. Provisioning took ~6 min for 8 boards and ~9.5 min for 16 on the 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."
boards=${1:?usage: scripts/scale.sh BOARDS [TIME_SCALE]}
if [[ $(id -u) -ne 0 ]]; then
  echo "scale: the emulated fleet needs root: sudo scripts/scale.sh $boards" >&2
  exit 1
fi
export PATH="$PWD/.venv/bin:$PATH"
inventory=inventory/lab/hosts.yml
time_scale=${2:-$(python -m npudure_workshop.lab.timescale --boards "$boards")}
echo "scale: $boards boards at time scale $time_scale"
SECONDS=0
npudure lab up --boards "$boards" --time-scale "$time_scale" --timeout 180
echo "scale: lab up in ${SECONDS}s"
echo "scale: idle machines (systemd + sshd):"
python -m npudure_workshop.lab.footprint --seconds 5
ansible-playbook -i "$inventory" playbooks/site.yml >/tmp/npudure-scale-site.log
echo "scale: provisioned in ${SECONDS}s (log /tmp/npudure-scale-site.log)"
echo "scale: idle machines with the agent / scheduler running:"
python -m npudure_workshop.lab.footprint --seconds 10
run_id="$(date -u +%Y%m%dT%H%M%SZ)-scale$boards"
rc=0
# The harness takes the benchmark lease, an admin call: it reads the token site.yml installed.
npudure lab exec sched -- env NPUDURE_ADMIN_TOKEN_FILE=/etc/npudure/admin-token \
  /opt/npudure/venv/bin/npudure bench run --target 127.0.0.1:50050 --quick \
  --no-hetero ${NPUDURE_SCALE_BENCH_ARGS:-} --out "/var/lib/npudure/bench/$run_id" --progress lines || rc=$?
mkdir -p results
sched_root=$(python -c 'from npudure_workshop.lab import Lab; print(Lab().root("sched"))')
cp -r "$sched_root/var/lib/npudure/bench/$run_id" "results/$run_id"
python -m npudure_workshop.lab.demo_summary "results/$run_id/summary.json" --time-scale "$time_scale"
echo "scale: done in ${SECONDS}s (harness exit $rc); results/$run_id"
exit "$rc"
