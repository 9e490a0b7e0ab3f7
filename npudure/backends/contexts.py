"""How many inference contexts an agent runs, and where that count came from.

Contexts are a throughput knob, not the NPU core count. The reference's RK3576 (2 NPU cores, one
RKNNLite context per thread, core mask auto) served 16.7 / 36.2 / 52.4 / 72.9 inf/s with 1 / 2 / 4 / 8
contexts: 8 beat 4 by 27% and the curve had not bent; its 161.5 inf/s INT8 local figure used 8.

``contexts: auto`` takes, in order: the count recorded beside the model (key ``contexts`` in
``<model>.json``, e.g. ``model.rknn.json``, which ``npudure bench contexts --record`` writes), else the
SoC's default below. The onnx backend's contexts are CPU sessions: it keeps ``npu_cores`` of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from npudure.backends.base import BackendError
from npudure.board import soc
from npudure.config import MAX_CONTEXTS, MIN_CONTEXTS, AgentConfig

MEASURED_RK3576 = 8
# PROVISIONAL, not measured on an RK3588: a Go runtime pool there saturated the NPU cores ~35% with 1
# runtime per core, ~74% with 3 and ~80% with 4; 3 per core takes most of that at less memory.
PROVISIONAL_RK3588 = 9

SOC_DEFAULTS: dict[str, tuple[int, str]] = {
    "rk3576": (MEASURED_RK3576, "RK3576 default, measured"),
    "rk3588": (PROVISIONAL_RK3588, "RK3588 default, provisional: not measured"),
    "rk3588s": (PROVISIONAL_RK3588, "RK3588 default, provisional: not measured"),
}
UNKNOWN_SOC = (MEASURED_RK3576, "SoC not recognised: the RK3576's 8, provisional: not measured")
# The sim emulates an RK3576, so it takes that board's measured count.
SIM_DEFAULT = (MEASURED_RK3576, "sim default (emulated RK3576), measured on the RK3576")


@dataclass(frozen=True)
class ContextCount:
    count: int
    source: str  # a short phrase for logs and `npudure status`

    @property
    def provisional(self) -> bool:
        return "provisional" in self.source


def record_path(model: str) -> Path:
    """The record beside a model file (``model.rknn`` -> ``model.rknn.json``)."""
    path = Path(model)
    return path.with_name(path.name + ".json")


def recorded(config: AgentConfig) -> ContextCount | None:
    """The count recorded beside the config's model, or None when there is none."""
    if config.backend == "sim" or not config.model:
        return None
    path = record_path(config.model)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BackendError(f"{path} is not readable JSON ({exc}): convert the model again") from None
    value = record.get("contexts") if isinstance(record, dict) else None
    if value is None:
        return None
    if type(value) is not int or not MIN_CONTEXTS <= value <= MAX_CONTEXTS:
        raise BackendError(
            f"{path}: contexts is {value!r}, not a whole number from {MIN_CONTEXTS} to {MAX_CONTEXTS}: "
            "record it again (npudure bench contexts --record) or remove the key"
        )
    return ContextCount(value, f"recorded beside the model ({path.name})")


def resolve(config: AgentConfig, board_soc: soc.Soc | None = None) -> ContextCount:
    """The agent's context count: the config's number, else what ``auto`` means on this board."""
    if isinstance(config.contexts, int):
        return ContextCount(config.contexts, "agent config")
    found = recorded(config)
    if found:
        return found
    if config.backend == "onnx":
        return ContextCount(config.npu_cores, "onnx: one CPU session per npu_cores")
    if config.backend == "sim":
        return ContextCount(*SIM_DEFAULT)
    board_soc = board_soc or soc.detect(config.affinity.sysfs_root)
    return ContextCount(*SOC_DEFAULTS.get(board_soc.name, UNKNOWN_SOC))
