"""Mutual TLS in the appliance, on the emulated fleet (root): the npudure_tls role end to end.

site.yml with ``npudure_tls_enabled=true`` (CA beside the inventory: inventory/lab/secrets/pki), a second run
that changes nothing, verify.yml and a short benchmark.yml over TLS; then, from the controller, a
plaintext client is refused by the scheduler and a certificate from the fleet CA whose CN is not an
admin identity cannot call SetPolicy, while the operator's admin certificate can.

Runs on the session's shared lab (tests/appliance/conftest.py), last of its modules; a lab that was
already up is left running, switched back to plaintext at the end. Alone:
    sudo .venv/bin/pytest -m lab tests/appliance/test_site_tls.py
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from helpers import ansible
from helpers.ansible import BIN, ROOT
from helpers.host_steal import PLUMBING_MAX_STEAL

import npudure
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(1800)]

PLAYBOOKS = ROOT / "playbooks"
# A short benchmark: one sweep point, one repetition per node count, no dial.
QUICK_BENCH = {
    "npudure_bench_sweep": "2",
    "npudure_bench_sweep_repetitions": 1,
    "npudure_bench_repetitions": 1,
    "npudure_bench_duration_s": 2,
    "npudure_bench_hetero": False,
    # The TLS path is under test, not the figures (helpers/host_steal.py).
    "npudure_bench_extra_args": ["--max-steal", f"{PLUMBING_MAX_STEAL * 100:g}"],
}


@pytest.fixture(scope="module")
def ca_dir(fleet: Path) -> Path:
    # The fleet's own CA folder beside its inventory (the role's default): kept across runs on a reused
    # lab, whose hosts then trust it (the role refuses to make another CA for them).
    return fleet.parent / "secrets" / "pki"


@pytest.fixture(scope="module")
def tls_fleet(fleet: Path, source: Path, ca_dir: Path, lab_is_kept: bool) -> Iterator[dict]:
    extra = {
        "npudure_tls_enabled": True,
        "npudure_tls_ca_dir": str(ca_dir),
        "npudure_wheelhouse_project_dir": str(source),
        # Boards at a pace this 2-core host can carry with TLS on every frame: at full speed they
        # fall behind their model and the harness rightly marks the run invalid (emulation_lag).
        "npudure_agent_sim_time_scale": 10.0,
        # Every board in one batch (see test_site.ALL_AT_ONCE): switching TLS on and off restarts every
        # agent, and one board at a time made each switch ~3x longer; the roll is tested under load in
        # test_operations_fleet.py.
        "npudure_serial": "100%",
    }
    yield {"inventory": fleet, "extra": extra}
    if lab_is_kept:  # someone's own lab: leave it as the other tests expect it, plaintext
        _playbook(fleet, "site.yml", {**extra, "npudure_tls_enabled": False})


def _playbook(
    inventory: Path, name: str, extra: dict, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return ansible.run(
        [BIN / "ansible-playbook", "-i", inventory, "-e", json.dumps(extra), PLAYBOOKS / name],
        timeout=timeout,
    )


def _scheduler_address(inventory: Path) -> str:
    hosts = yaml.safe_load(inventory.read_text())["all"]["children"]["scheduler"]["hosts"]
    return f"{next(iter(hosts.values()))['ansible_host']}:50050"


def test_site_with_tls_converges_then_changes_nothing(tls_fleet: dict, ca_dir: Path) -> None:
    first = _playbook(tls_fleet["inventory"], "site.yml", tls_fleet["extra"])
    assert first.returncode == 0, (first.stdout + first.stderr)[-8000:]
    assert (ca_dir / "ca.key").stat().st_mode & 0o077 == 0
    assert (ca_dir / "admin" / "admin.key").stat().st_mode & 0o077 == 0
    second = _playbook(tls_fleet["inventory"], "site.yml", tls_fleet["extra"])
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-8000:]
    recap = ansible.recap(output)
    assert recap and all(c["changed"] == 0 and c["failed"] == 0 for c in recap.values()), recap


def test_keys_stay_on_their_hosts(tls_fleet: dict) -> None:
    # The agent's key is the service user's, 0600; the controller only ever saw requests.
    done = ansible.run(
        [
            BIN / "ansible",
            "-i",
            tls_fleet["inventory"],
            "boards",
            "-m",
            "ansible.builtin.command",
            "-a",
            "stat -c 'key=%U:%a' /etc/npudure/tls/agent.key",
        ],
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.findall(r"key=(\S+)", done.stdout) == ["npudure:600"] * 3, done.stdout
    ca = Path(tls_fleet["extra"]["npudure_tls_ca_dir"])
    assert sorted(p.name for p in ca.rglob("*.key")) == ["admin.key", "ca.key"]
    assert len(list((ca / "requests").glob("board*-agent.csr"))) == 3


def test_verify_passes_over_tls(tls_fleet: dict) -> None:
    done = _playbook(tls_fleet["inventory"], "verify.yml", tls_fleet["extra"], timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "boards and the scheduler are healthy and uniform" in output


def test_benchmark_passes_over_tls(tls_fleet: dict) -> None:
    done = _playbook(
        tls_fleet["inventory"], "benchmark.yml", {**tls_fleet["extra"], **QUICK_BENCH}, timeout=900
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    # The YAML callback may fold the message: the JSON is written without spaces, and DOTALL anyway.
    served = re.search(r"runs, all valid; requests served per board:\s+(\{.*?\})", output, re.S)
    assert served, output[-4000:]
    counts = json.loads(served.group(1))
    assert set(counts) == {"board1", "board2", "board3"} and all(n > 0 for n in counts.values()), counts


def test_plaintext_client_is_refused(tls_fleet: dict) -> None:
    address = _scheduler_address(tls_fleet["inventory"])
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as caught:
        rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_proxyless_reaches_every_board_over_tls(
    tls_fleet: dict, ca_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One channel to the three boards, each with its own certificate, checked against the fleet name
    # (npudure-agents) the role adds to every agent certificate.
    admin = ca_dir / "admin"
    monkeypatch.setenv(security.ENV_CA, str(ca_dir / "ca.crt"))
    monkeypatch.setenv(security.ENV_CERT, str(admin / "admin.crt"))
    monkeypatch.setenv(security.ENV_KEY, str(admin / "admin.key"))
    frame = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=bytes(640 * 640 * 3))
    with npudure.connect(_scheduler_address(tls_fleet["inventory"])) as client:
        assert client.route.tls
        nodes = {client.infer(frame, timeout=30).node for _ in range(24)}
    assert nodes == {"board1", "board2", "board3"}


def _secure(address: str, ca: Path, cert: Path, key: Path) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(ca.read_bytes(), key.read_bytes(), cert.read_bytes())
    return grpc.secure_channel(address, credentials)


def test_only_an_admin_certificate_may_set_the_policy(tls_fleet: dict, ca_dir: Path, tmp_path: Path) -> None:
    cli = str(BIN / "npudure")
    key, csr, cert = tmp_path / "viewer.key", tmp_path / "viewer.csr", tmp_path / "viewer.crt"
    for argv in (
        [cli, "pki", "csr", "--key", key, "--csr", csr, "--cn", "npudure-viewer"],
        [cli, "pki", "sign", "--ca-dir", ca_dir, "--csr", csr, "--out", cert, "--client-only"],
    ):
        done = ansible.run(argv, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    address, ca = _scheduler_address(tls_fleet["inventory"]), ca_dir / "ca.crt"
    with _secure(address, ca, cert, key) as channel:
        stub = rpc.ClusterStub(channel)
        policy = stub.GetClusterStatus(pb.ClusterStatusRequest(), timeout=5).policy  # TLS itself works
        with pytest.raises(grpc.RpcError) as caught:
            stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=5)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    admin = ca_dir / "admin"
    with _secure(address, ca, admin / "admin.crt", admin / "admin.key") as channel:
        rpc.ClusterStub(channel).SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=5)


# A CA rotation on the lab's hosts with rotate-ca.yml as an operator runs it (the default roll: boards
# drained one at a time, then the scheduler handed over), without load: its under-load figure is
# tests/integration/test_ca_rotation.py on loopback. ~3 rolls of the fleet: longer than CI's budget.
@pytest.mark.long
@pytest.mark.timeout(3600)
def test_rotate_ca_rolls_a_new_ca_out_to_the_lab_hosts(tls_fleet: dict, ca_dir: Path, tmp_path: Path) -> None:
    from npudure.proto.contract import board_state_label

    inventory = tls_fleet["inventory"]
    extra = {k: v for k, v in tls_fleet["extra"].items() if k != "npudure_serial"}
    address = _scheduler_address(inventory)
    old = tmp_path / "old"
    old.mkdir()
    for name in ("admin/admin.crt", "admin/admin.key", "ca.crt"):
        shutil.copy2(ca_dir / name, old / Path(name).name)
    out_of_order = _playbook(inventory, "rotate-ca.yml", {**extra, "npudure_ca_rotation": "switch"})
    flat = " ".join((out_of_order.stdout + out_of_order.stderr).split())
    assert out_of_order.returncode != 0 and "no CA rotation is under way: start one first" in flat, flat[
        -3000:
    ]
    for phase in ("start", "switch", "finish"):
        done = _playbook(inventory, "rotate-ca.yml", {**extra, "npudure_ca_rotation": phase}, timeout=1800)
        assert done.returncode == 0, f"{phase}: " + (done.stdout + done.stderr)[-8000:]
        trust = ca_dir / ("ca.crt" if phase == "finish" else "trust.crt")
        admin = ca_dir / "admin"
        # The operator's admin certificate as the phase left it: every board UP behind the scheduler.
        with _secure(address, trust, admin / "admin.crt", admin / "admin.key") as channel:
            status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=10)
        states = {b.name: board_state_label(b.state) for b in status.boards}
        assert states == dict.fromkeys(("board1", "board2", "board3"), "UP"), f"{phase}: {states}"
    assert (ca_dir / "ca.crt").read_bytes() != (old / "ca.crt").read_bytes(), "the CA was not replaced"
    # The old CA is gone from the fleet: a certificate it issued no longer gets through the handshake.
    with (
        _secure(address, ca_dir / "ca.crt", old / "admin.crt", old / "admin.key") as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
