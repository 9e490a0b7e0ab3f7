"""An admin token rotated with an overlap, on real processes: every service accepts old and new for
the window, the scheduler's calls to the agents keep working at every step, and no request fails.

The cluster's services share one token file, rewritten at each step as an operator's play would:
"old\\nnew" (send old, accept both), "new\\nold" (send new, accept both), "new" (old refused).

The second test rotates as rotate-token.yml does on the appliance, with no scheduler restart: each
step rolls the agents, then reloads the scheduler (``npudure scheduler --reload``, the unit's
ExecReload), which re-reads its token file in place; the scheduler's pid never changes.
"""

from __future__ import annotations

import grpc
import pytest
from helpers.fleet_ops import board_states, failures, reload, start_load, wait_for

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure_workshop.lab.local import LocalCluster

OLD, NEW, FOREIGN = "o" * 40, "n" * 40, "f" * 40


def _write(path, *tokens: str) -> None:
    # Replaced in one rename, as Ansible's copy module installs it on a host: a process reading the
    # file meanwhile (the load generator opening its channel) sees the old or the new one, never an
    # empty file (which a truncate-then-write showed it, and it rightly refused).
    part = path.with_name(f".{path.name}.part")
    part.write_text("".join(f"{t}\n" for t in tokens))
    part.chmod(0o600)
    part.replace(path)


def _admin_ok(address: str, token: str, node: bool = False) -> bool:
    with grpc.insecure_channel(address) as channel:
        metadata = (("authorization", f"Bearer {token}"),)
        try:
            if node:
                rpc.NodeStub(channel).SetCpuCap(pb.SetCpuCapRequest(mhz=0), timeout=5, metadata=metadata)
            else:
                rpc.ClusterStub(channel).SetPolicy(
                    pb.SetPolicyRequest(policy="least_inflight"), timeout=5, metadata=metadata
                )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.PERMISSION_DENIED, exc
            return False
    return True


def _scheduler_reaches_agents(cluster: LocalCluster, token: str) -> bool:
    """SetNodeCpuCap through the scheduler: the scheduler calls the agent with ITS token."""
    with grpc.insecure_channel(cluster.address) as channel:
        for name in cluster.agents:
            rpc.ClusterStub(channel).SetNodeCpuCap(
                pb.SetNodeCpuCapRequest(node=name, mhz=0),
                timeout=5,
                metadata=(("authorization", f"Bearer {token}"),),
            )
    return True


def test_a_token_rotation_with_overlap_fails_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "admin-token"
    _write(token_file, OLD, NEW)
    monkeypatch.setenv("NPUDURE_ADMIN_TOKEN_FILE", str(token_file))
    with LocalCluster(boards=2, time_scale=3.0, admin_token_file=token_file) as cluster:
        load = start_load(cluster, "scheduler", duration_s=20.0)
        board1 = cluster.agents["board1"].address
        # Window open: both accepted everywhere, anything else refused.
        for address, node in ((cluster.address, False), (board1, True)):
            assert _admin_ok(address, OLD, node) and _admin_ok(address, NEW, node)
            assert not _admin_ok(address, FOREIGN, node)
        assert _scheduler_reaches_agents(cluster, NEW)  # the scheduler still sends OLD: accepted
        # Send the new one: the scheduler restarts with "new" first; the agents accept both.
        _write(token_file, NEW, OLD)
        cluster.restart_scheduler()
        assert _scheduler_reaches_agents(cluster, OLD)
        # Close the window: agents restarted one at a time on "new" alone.
        _write(token_file, NEW)
        for name in list(cluster.agents):
            cluster.restart_agent(name)
            # As a roll does: the next board only once the scheduler has this one back.
            wait_for(f"{name} UP", lambda name=name: board_states(cluster)[name] == "UP")
        assert not _admin_ok(board1, OLD, node=True) and _admin_ok(board1, NEW, node=True)
        assert _scheduler_reaches_agents(cluster, NEW)  # what the scheduler sends is accepted
        cluster.restart_scheduler()
        assert not _admin_ok(cluster.address, OLD)
        failed, total, errors, gap = failures(load)
    print(f"token rotation under central load: {failed}/{total} failed, longest gap {gap:.2f}s")
    assert total > 50
    assert failed == 0, errors


def _roll_agents(cluster: LocalCluster) -> None:
    """Agents restarted one at a time, the next once the scheduler has this one back (a roll)."""
    for name in list(cluster.agents):
        cluster.restart_agent(name)
        wait_for(f"{name} UP", lambda name=name: board_states(cluster)[name] == "UP")


def test_a_token_rotation_reaches_the_running_scheduler_by_a_reload(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "admin-token"
    _write(token_file, OLD)
    monkeypatch.setenv("NPUDURE_ADMIN_TOKEN_FILE", str(token_file))
    with LocalCluster(boards=2, time_scale=3.0, admin_token_file=token_file) as cluster:
        assert cluster.scheduler is not None and cluster.scheduler.process is not None
        pid = cluster.scheduler.process.pid
        load = start_load(cluster, "scheduler", duration_s=30.0)
        # start: "new\nold" on every host; the boards roll first.
        _write(token_file, NEW, OLD)
        _roll_agents(cluster)
        assert not _admin_ok(cluster.address, NEW), "the scheduler took the new token before its reload"
        done = reload(cluster)
        assert done.returncode == 0, done.stderr
        assert "2 admin token(s) accepted" in done.stdout, done.stdout
        # The window: both accepted by the running scheduler, anything else refused.
        assert _admin_ok(cluster.address, OLD) and _admin_ok(cluster.address, NEW)
        assert not _admin_ok(cluster.address, FOREIGN)
        # finish: "new" alone; the boards roll first and refuse the old token from now on ...
        _write(token_file, NEW)
        _roll_agents(cluster)
        assert not _admin_ok(cluster.agents["board1"].address, OLD, node=True)
        # ... and still accept what the scheduler sends: the first token of its reloaded set, NEW.
        assert _scheduler_reaches_agents(cluster, NEW)
        done = reload(cluster)
        assert done.returncode == 0, done.stderr
        assert "1 admin token(s) accepted" in done.stdout, done.stdout
        assert not _admin_ok(cluster.address, OLD) and _admin_ok(cluster.address, NEW)
        # A reload is itself an admin call: a file holding only a token the scheduler does not know
        # changes nothing (refused), and the scheduler keeps the tokens it has.
        _write(token_file, FOREIGN)
        refused = reload(cluster)
        assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stderr, refused.stderr
        assert _admin_ok(cluster.address, NEW) and not _admin_ok(cluster.address, FOREIGN)
        _write(token_file, NEW)
        assert cluster.scheduler.process.pid == pid and cluster.scheduler.process.poll() is None
        failed, total, errors, gap = failures(load)
    print(
        f"token rotation by reload under central load (2 sim boards, time scale 3, concurrency 6, shared "
        f"2-core host): {failed}/{total} failed, longest gap {gap:.2f}s, scheduler never restarted"
    )
    assert total > 50
    assert failed == 0, errors
