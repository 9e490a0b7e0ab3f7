"""Raw per-request samples of one run, and their lossless .npz form (so any figure can be recomputed).

Times are seconds since the run's own start (``time.perf_counter`` of the harness), latencies are
derived, never stored twice. In a closed loop the intended send time is the actual one; in an open
loop it is the schedule's, and latency counts from it (coordinated omission is not hidden).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npudure.client.stages import complete_client_stages
from npudure.proto import inference_pb2 as pb

# StageTiming fields, in proto order; the npz column names keep the unit (µs).
STAGES: tuple[str, ...] = tuple(f.name for f in pb.StageTiming.DESCRIPTOR.fields)
OK = 0  # grpc.StatusCode.OK


# The per-request columns of the .npz, one place for save and load: Samples field -> npz name.
COLUMNS: dict[str, str] = {
    "intended_s": "intended_send_s",
    "sent_s": "sent_s",
    "done_s": "done_s",
    "status_code": "status_code",
    "node_idx": "node_idx",
    "attempts": "attempts",
    "emulated": "emulated",
    "backend_idx": "backend_idx",
    "model_idx": "model_idx",
}
# Columns a result folder from an older npudure may lack: filled in by Samples itself.
OPTIONAL_COLUMNS = {"model_idx"}


@dataclass
class Samples:
    intended_s: np.ndarray  # float64, when the request should have been sent
    sent_s: np.ndarray  # float64, when it was sent
    done_s: np.ndarray  # float64, when the response (or error) arrived
    status_code: np.ndarray  # int16, gRPC status code (0 = OK)
    node_idx: np.ndarray  # int16 index into node_names, -1 = no response
    attempts: np.ndarray  # uint8, boards tried by the scheduler
    emulated: np.ndarray  # bool, response said no real NPU ran
    backend_idx: np.ndarray  # int16 index into backend_names, -1 = no response
    stage_us: np.ndarray  # (n, len(STAGES)) uint64
    node_names: list[str] = field(default_factory=list)
    backend_names: list[str] = field(default_factory=list)
    # int16 index into model_names of the model that answered (-1 = no response); results written
    # before boards served several models have none (all -1).
    model_idx: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int16))
    model_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.model_idx.size != self.sent_s.size:  # not recorded: no model known for any sample
            self.model_idx = np.full(self.sent_s.size, -1, dtype=np.int16)

    def __len__(self) -> int:
        return int(self.sent_s.size)

    @property
    def latency_ms(self) -> np.ndarray:
        """Client-observed latency, from the intended send time."""
        return (self.done_s - self.intended_s) * 1e3

    @property
    def ok(self) -> np.ndarray:
        return self.status_code == OK

    def measured(self, window_start_s: float, window_end_s: float) -> np.ndarray:
        """Mask of the samples that belong to the measurement: intended send inside the window."""
        return (self.intended_s >= window_start_s) & (self.intended_s < window_end_s)

    def save(self, path: Path) -> None:
        columns = {key: getattr(self, name) for name, key in COLUMNS.items()}
        stage_cols = {f"stage_{name}": self.stage_us[:, i] for i, name in enumerate(STAGES)}
        np.savez_compressed(
            path,
            node_names=np.array(self.node_names, dtype=str),
            backend_names=np.array(self.backend_names, dtype=str),
            model_names=np.array(self.model_names, dtype=str),
            allow_pickle=False,  # plain numeric and string columns
            **columns,
            **stage_cols,
        )

    @classmethod
    def load(cls, path: Path) -> Samples:
        with np.load(path, allow_pickle=False) as z:
            n = z["sent_s"].size
            stages = np.zeros((n, len(STAGES)), dtype=np.uint64)
            for i, name in enumerate(STAGES):
                key = f"stage_{name}"
                if key in z:
                    stages[:, i] = z[key]
            return cls(
                **{name: z[key] for name, key in COLUMNS.items() if key in z or name not in OPTIONAL_COLUMNS},
                stage_us=stages,
                node_names=[str(s) for s in z["node_names"]],
                backend_names=[str(s) for s in z["backend_names"]],
                model_names=[str(s) for s in z["model_names"]] if "model_names" in z else [],
            )


def from_raw(
    intended: list[float],
    sent: list[float],
    done: list[float],
    codes: list[int],
    responses: list[bytes | None],
) -> Samples:
    """Build Samples from what the generator collected; responses are parsed here, after the run."""
    n = len(sent)
    node_idx = np.full(n, -1, dtype=np.int16)
    backend_idx = np.full(n, -1, dtype=np.int16)
    model_idx = np.full(n, -1, dtype=np.int16)
    attempts = np.zeros(n, dtype=np.uint8)
    emulated = np.zeros(n, dtype=bool)
    stage_us = np.zeros((n, len(STAGES)), dtype=np.uint64)
    nodes: dict[str, int] = {}
    backends: dict[str, int] = {}
    models: dict[str, int] = {}
    for i, raw in enumerate(responses):
        if raw is None:
            continue
        resp = pb.InferResponse.FromString(raw)
        node_idx[i] = nodes.setdefault(resp.node, len(nodes))
        backend_idx[i] = backends.setdefault(resp.backend, len(backends))
        model_idx[i] = models.setdefault(resp.model, len(models))
        attempts[i] = min(resp.attempts, 255)
        emulated[i] = resp.emulated
        # The client's own two stages (network back to the client, end to end) come from our call time.
        t = complete_client_stages(resp.timing, done[i] - sent[i])
        stage_us[i] = [getattr(t, name) for name in STAGES]
    return Samples(
        intended_s=np.asarray(intended, dtype=np.float64),
        sent_s=np.asarray(sent, dtype=np.float64),
        done_s=np.asarray(done, dtype=np.float64),
        status_code=np.asarray(codes, dtype=np.int16),
        node_idx=node_idx,
        attempts=attempts,
        emulated=emulated,
        backend_idx=backend_idx,
        stage_us=stage_us,
        node_names=list(nodes),
        backend_names=list(backends),
        model_idx=model_idx,
        model_names=list(models),
    )
