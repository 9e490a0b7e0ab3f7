"""Which Rockchip SoC this is, from the device tree's ``compatible``, and how many NPU cores it has.

``compatible`` is a list of NUL-separated strings, most specific first (``radxa,rock-5b\\0rockchip,rk3588``);
the first ``rockchip,rkNNNN`` that we know decides. Unknown or absent: no opinion (the config rules).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from npudure.config import AgentConfig

# NPU cores per SoC (the RK3588S and RK3582 variants share the RK3588 NPU).
NPU_CORES: dict[str, int] = {"rk3576": 2, "rk3588": 3, "rk3588s": 3}


@dataclass(frozen=True)
class Soc:
    name: str  # "rk3588", or "" when not recognised
    npu_cores: int | None
    source: str  # the file read, or why nothing was

    def describe(self) -> str:
        if not self.name:
            return f"SoC not recognised ({self.source})"
        return f"{self.name.upper()} ({self.npu_cores} NPU cores, from {self.source})"


def compatible_paths(sysfs_root: str | os.PathLike[str] = "/sys") -> list[Path]:
    """Where the device tree's compatible lives; /proc/device-tree only for the real /sys."""
    paths = [Path(sysfs_root) / "firmware" / "devicetree" / "base" / "compatible"]
    if Path(sysfs_root) == Path("/sys"):
        paths.append(Path("/proc/device-tree/compatible"))
    return paths


def parse_compatible(data: bytes) -> Soc | None:
    for entry in data.split(b"\0"):
        vendor, _, model = entry.decode("ascii", "replace").strip().partition(",")
        if vendor == "rockchip" and model in NPU_CORES:
            return Soc(model, NPU_CORES[model], "")
    return None


def detect(sysfs_root: str | os.PathLike[str] = "/sys") -> Soc:
    for path in compatible_paths(sysfs_root):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found = parse_compatible(data)
        if found:
            return Soc(found.name, found.npu_cores, str(path))
        shown = ", ".join(s for s in data.decode("ascii", "replace").split("\0") if s)
        return Soc("", None, f"{path} says {shown[:120] or 'nothing'}")
    return Soc("", None, "no device tree compatible")


class SocMismatch(Exception):
    """The config asks for more NPU contexts than the detected SoC has NPU cores (exit 78)."""


def resolve_npu_cores(config: AgentConfig) -> tuple[AgentConfig, Soc]:
    """The config with ``npu_cores`` defaulted to the SoC's core count; refuses more than it has.

    The onnx backend's contexts are CPU sessions, not NPU cores: its count is left alone.
    """
    soc = detect(config.affinity.sysfs_root)
    if soc.npu_cores is None or config.backend == "onnx":
        return config, soc
    if "npu_cores" not in config.model_fields_set:
        return config.model_copy(update={"npu_cores": soc.npu_cores}), soc
    if config.npu_cores > soc.npu_cores:
        raise SocMismatch(
            f"npu_cores is {config.npu_cores}, but this board is an {soc.name.upper()} with "
            f"{soc.npu_cores} NPU cores ({soc.source}): set npu_cores to {soc.npu_cores} or less, "
            "or remove it to use every core"
        )
    return config, soc
