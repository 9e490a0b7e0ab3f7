"""SoC detection from the device tree and the NPU context count that follows from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.devicetree import COMPATIBLE, fake_sysfs

from npudure.board import soc
from npudure.config import AgentConfig


@pytest.mark.parametrize(("board", "cores"), [("rk3588", 3), ("rk3576", 2)])
def test_detects_the_soc_and_its_npu_cores(tmp_path: Path, board: str, cores: int) -> None:
    found = soc.detect(fake_sysfs(tmp_path, COMPATIBLE[board]))
    assert (found.name, found.npu_cores) == (board, cores)
    assert board.upper() in found.describe() and "compatible" in found.describe()


def test_unknown_or_missing_soc_has_no_opinion(tmp_path: Path) -> None:
    other = soc.detect(fake_sysfs(tmp_path / "a", COMPATIBLE["rk3566"]))
    assert (other.name, other.npu_cores) == ("", None)
    assert "rockchip,rk3566" in other.describe()
    missing = soc.detect(fake_sysfs(tmp_path / "b", None))
    assert missing.npu_cores is None and "no device tree" in missing.describe()


def _config(root: Path, **fields: object) -> AgentConfig:
    return AgentConfig.model_validate({"node_name": "b", "affinity": {"sysfs_root": str(root)}, **fields})


def test_npu_cores_defaults_to_the_soc_and_more_is_refused(tmp_path: Path) -> None:
    rk3588 = fake_sysfs(tmp_path / "rk3588", COMPATIBLE["rk3588"])
    rk3576 = fake_sysfs(tmp_path / "rk3576", COMPATIBLE["rk3576"])
    assert soc.resolve_npu_cores(_config(rk3588))[0].npu_cores == 3
    assert soc.resolve_npu_cores(_config(rk3576))[0].npu_cores == 2
    assert soc.resolve_npu_cores(_config(rk3588, npu_cores=1))[0].npu_cores == 1
    with pytest.raises(soc.SocMismatch, match="npu_cores is 3, but this board is an RK3576 with 2 NPU cores"):
        soc.resolve_npu_cores(_config(rk3576, npu_cores=3))
    # ONNX sessions are CPU work, not NPU cores; an unknown SoC keeps what the config says.
    assert soc.resolve_npu_cores(_config(rk3576, backend="onnx", npu_cores=4))[0].npu_cores == 4
    unknown = fake_sysfs(tmp_path / "rk3566", COMPATIBLE["rk3566"])
    assert soc.resolve_npu_cores(_config(unknown, npu_cores=5))[0].npu_cores == 5
