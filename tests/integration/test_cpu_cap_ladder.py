"""The reference CPU-cap ladder end to end on fake RK3576 and RK3588 cpufreq trees.

Clocks above a cluster's top (2208 MHz on the 1800 MHz little cluster) clamp that cluster to its own
maximum instead of aborting the ladder; the agent's SetCpuCap (real gRPC on loopback) says so.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from helpers.pool import IdleBackend

from npudure.agent import cpucap
from npudure.agent.server import serve
from npudure.backends.base import Backend
from npudure.backends.sim import SimBackend
from npudure.board import cpufreq
from npudure.config import AgentConfig, SimConfig
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.lab.local import free_port

LADDER_MHZ = [2208, 1608, 1200, 1008, 816, 600]
COMMON_KHZ = [408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000]
# name -> {policy: (cpus, offered kHz)}; the top of each list is the cluster's hardware maximum.
BOARDS = {
    "rk3576": {
        "policy0": ([0, 1, 2, 3], COMMON_KHZ),
        "policy4": ([4, 5, 6, 7], [*COMMON_KHZ[:-2], 1608000, 2016000, 2208000]),
    },
    "rk3588": {
        "policy0": ([0, 1, 2, 3], COMMON_KHZ),
        "policy4": ([4, 5], [*COMMON_KHZ, 2016000, 2208000, 2256000]),
        "policy6": ([6, 7], [*COMMON_KHZ, 2016000, 2208000, 2256000]),
    },
}


def make_tree(root: Path, board: str) -> Path:
    for name, (cpus, khz) in BOARDS[board].items():
        path = root / "devices/system/cpu/cpufreq" / name
        path.mkdir(parents=True)
        (path / "related_cpus").write_text(" ".join(map(str, cpus)) + "\n")
        (path / "scaling_available_frequencies").write_text(" ".join(map(str, sorted(set(khz)))) + "\n")
        (path / "cpuinfo_min_freq").write_text(f"{min(khz)}\n")
        (path / "cpuinfo_max_freq").write_text(f"{max(khz)}\n")
        (path / "scaling_max_freq").write_text(f"{max(khz)}\n")
    return root


def caps_khz(root: Path) -> dict[str, int]:
    base = root / "devices/system/cpu/cpufreq"
    return {p.name: int((p / "scaling_max_freq").read_text()) for p in sorted(base.iterdir())}


def expected_khz(board: str, mhz: int | None) -> dict[str, int]:
    """Each cluster at the requested clock, or at its own top when it cannot reach it."""
    tops = {name: max(khz) for name, (_, khz) in BOARDS[board].items()}
    return {name: top if mhz is None else min(mhz * 1000, top) for name, top in tops.items()}


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_the_whole_ladder_runs_and_lifts(tmp_path: Path, board: str) -> None:
    root = make_tree(tmp_path, board)
    cap = cpucap.SysfsCpuCap(root)
    for mhz in LADDER_MHZ:
        note = cap.set(mhz)
        assert caps_khz(root) == expected_khz(board, mhz), mhz
        assert cap.mhz == mhz
        # Only the little cluster (1800 MHz top) cannot take 2208; every other rung fits everyone.
        assert ("policy0" in note) == (mhz > 1800), (mhz, note)
        assert ("policy4" in note) is False
    assert cap.set(None) == ""
    assert cap.mhz is None
    assert caps_khz(root) == expected_khz(board, None)


def test_capping_every_cluster_alike_is_what_used_to_abort(tmp_path: Path) -> None:
    root = make_tree(tmp_path, "rk3576")
    with pytest.raises(cpufreq.CpuFreqError, match="cannot run at 2208 MHz"):
        cpufreq.set_max_freq(2208, sysfs_root=root)
    assert caps_khz(root) == expected_khz("rk3576", None)


def test_a_clock_no_cluster_reaches_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    root = make_tree(tmp_path, "rk3588")
    cap = cpucap.SysfsCpuCap(root)
    cap.set(1008)
    with pytest.raises(cpucap.CpuCapError, match="no CPU cluster here can run at 3000 MHz"):
        cap.set(3000)
    with pytest.raises(cpucap.CpuCapError, match="cannot run at 1500 MHz"):
        cap.set(1500)
    assert caps_khz(root) == expected_khz("rk3588", 1008)
    assert cap.mhz == 1008


def test_a_failure_halfway_puts_back_the_clusters_already_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_tree(tmp_path, "rk3588")
    real_write = cpufreq._write

    def refuse_policy6(path: Path, value: str) -> None:
        if "policy6" in str(path) and value == "816000":
            raise cpufreq.CpuFreqError(f"cannot write {value!r} to {path}: Permission denied")
        real_write(path, value)

    monkeypatch.setattr(cpufreq, "_write", refuse_policy6)
    with pytest.raises(cpucap.CpuCapError, match="policy6"):
        cpucap.SysfsCpuCap(root).set(816)
    assert caps_khz(root) == expected_khz("rk3588", None)


# ---------------------------------------------------------------- through the agent's gRPC API


class _RealBoard(IdleBackend):
    """A backend that claims real hardware, so the agent caps the clock through cpufreq."""

    name = "fake-real"


async def _ladder_over_grpc(config: AgentConfig, backend: Backend) -> list[pb.NodeStatus | str]:
    """SetCpuCap down the ladder as an admin (SetCpuCap needs the admin token, like on a board)."""
    assert config.admin.token_file, "the agent must have an admin token"
    token = Path(config.admin.token_file).read_text().strip()
    ready = asyncio.Event()
    server = asyncio.create_task(serve(config, backend, ready))
    await asyncio.wait_for(ready.wait(), 30)
    replies: list[pb.NodeStatus | str] = []
    try:
        async with security.aio_channel(config.listen, token=token, from_env=False) as channel:
            stub = rpc.NodeStub(channel)
            for mhz in [*LADDER_MHZ, 0, 3000]:
                try:
                    replies.append(await stub.SetCpuCap(pb.SetCpuCapRequest(mhz=mhz), timeout=10))
                except grpc.aio.AioRpcError as exc:
                    replies.append(f"{exc.code().name}: {exc.details()}")
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    return replies


def _config(root: Path, **extra: object) -> AgentConfig:
    token = security.write_token(root.parent / "admin-token")
    return AgentConfig(
        node_name="capped",
        listen=f"127.0.0.1:{free_port()}",
        metrics_port=0,
        affinity={"sysfs_root": str(root)},
        admin={"token_file": str(token)},
        **extra,
    )


async def test_set_cpu_cap_runs_the_ladder_on_a_real_board(tmp_path: Path) -> None:
    root = make_tree(tmp_path, "rk3588")
    (root / "firmware/devicetree/base").mkdir(parents=True)
    (root / "firmware/devicetree/base/compatible").write_bytes(b"radxa,rock-5b\0rockchip,rk3588\0")
    replies = await _ladder_over_grpc(_config(root), _RealBoard())
    statuses = replies[: len(LADDER_MHZ) + 1]
    assert all(isinstance(s, pb.NodeStatus) for s in statuses), replies
    assert [s.cpu_cap_mhz for s in statuses] == [*LADDER_MHZ, 0]  # type: ignore[union-attr]
    assert statuses[0].soc.startswith("RK3588 (3 NPU cores")  # type: ignore[union-attr]
    assert "policy0 (cpus 0-3) tops out at 1800 MHz" in statuses[0].cpu_cap_note  # type: ignore[union-attr]
    assert [s.cpu_cap_note for s in statuses[1:]] == [""] * len(LADDER_MHZ)  # type: ignore[union-attr]
    assert caps_khz(root) == expected_khz("rk3588", None)  # 0 lifted the cap
    assert isinstance(replies[-1], str) and replies[-1].startswith("FAILED_PRECONDITION: cannot cap")


async def test_an_emulated_board_models_the_cap_and_leaves_sysfs_alone(tmp_path: Path) -> None:
    root = make_tree(tmp_path, "rk3576")
    sim = SimBackend(1, SimConfig())
    replies = await _ladder_over_grpc(_config(root), sim)
    assert [r.cpu_cap_mhz for r in replies[: len(LADDER_MHZ) + 1]] == [*LADDER_MHZ, 0]  # type: ignore[union-attr]
    assert caps_khz(root) == expected_khz("rk3576", None)
    assert isinstance(cpucap.choose(sim, root), cpucap.EmulatedCpuCap)
    assert isinstance(cpucap.choose(_RealBoard(), root), cpucap.SysfsCpuCap)
