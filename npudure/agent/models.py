"""The models one board serves: the config's set, each model's backend, and which one is the default.

A board serves either the config's single ``model`` (today's configs, unchanged), named
``DEFAULT_MODEL_NAME`` ("yolov8n", the name the HTTP API always listed it under) whatever its file is
called: file stems differ between boards and conversions, and a name must be the same on every board for the
scheduler to route by it. Or it serves ``models:``, a list of named entries, the one marked
``default`` (else the first) answering requests that name no model. Each model gets its own backend,
so its own contexts and worker pool (contexts share the NPU; the scheduler's per-board in-flight
counts cover them all). The whole set's memory is checked before any model is loaded, where the
backend states its cost (sim, rknn); onnx measures its sessions as it loads them, so later models see
the memory the earlier ones took.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from npudure.agent.pool import WorkerPool
from npudure.backends import Backend, BackendError, contexts, create_backend, memory
from npudure.board import soc
from npudure.config import DEFAULT_MODEL_NAME, AgentConfig, ModelEntry
from npudure.proto import inference_pb2 as pb


@dataclass(frozen=True)
class LoadedModel:
    name: str
    backend: Backend
    contexts_source: str


def entries(config: AgentConfig) -> list[ModelEntry]:
    """The board's models, the default first (a single ``model`` is one entry)."""
    if not config.models:
        return [
            ModelEntry(
                name=DEFAULT_MODEL_NAME,
                model=config.model,
                model_sha256=config.model_sha256,
                class_names=config.class_names,
                input_size=config.input_size,
                default=True,
            )
        ]
    first = next((m for m in config.models if m.default), config.models[0])
    return [first, *(m for m in config.models if m is not first)]


def model_config(config: AgentConfig, entry: ModelEntry) -> AgentConfig:
    """The agent config as one model's backend reads it (its file, names, size and contexts)."""
    if not config.models:
        return config
    return config.model_copy(
        update={
            "model": entry.model,
            "model_sha256": entry.model_sha256,
            "class_names": entry.class_names,
            "input_size": entry.input_size,
            "contexts": config.contexts if entry.contexts is None else entry.contexts,
            "models": None,
        }
    )


def _stated_bytes(config: AgentConfig) -> tuple[int, str] | None:
    """What one context of this model costs where the backend states it (None: measured at load)."""
    if config.backend == "sim":
        return memory.SIM_CONTEXT_BYTES, "the sim's stated figure"
    if config.backend == "rknn" and config.model and Path(config.model).is_file():
        return memory.rknn_context_bytes(Path(config.model).stat().st_size), "an estimate per .rknn"
    return None


def check_memory(plans: list[tuple[str, AgentConfig, int]], meminfo: str | None = None) -> None:
    """Refuse a set whose stated contexts together exceed MemAvailable, naming each model's share."""
    shares = []
    for name, cfg, count in plans:
        stated = _stated_bytes(cfg)
        if stated is not None:
            shares.append((name, count, stated[0], stated[1]))
    if len(shares) < 2:
        return  # one model: the backend's own check says it, as before
    total = sum(count * each for _, count, each, _ in shares)
    available = memory.mem_available(meminfo)
    if available is None or total <= available:
        return
    parts = ", ".join(f"{name} {count} x {each / memory.MiB:.0f} MiB" for name, count, each, _ in shares)
    raise memory.ContextMemoryError(
        f"the {len(shares)} models need {total / memory.MiB:.0f} MiB together ({parts}; {shares[0][3]}), "
        f"but MemAvailable is {available / memory.MiB:.0f} MiB: serve fewer models or fewer contexts"
    )


def load(
    config: AgentConfig,
    board_soc: soc.Soc | None = None,
    create: Callable[[AgentConfig, int], Backend] = create_backend,
) -> list[LoadedModel]:
    """Every model's backend (made by ``create``), the default first; on a failure the ones made are
    closed first."""
    several = len(config.models or ()) > 1
    plans = []
    for entry in entries(config):
        cfg = model_config(config, entry)
        try:
            count = contexts.resolve(cfg, board_soc)  # a bad count recorded beside the model
        except BackendError as exc:
            raise _named(exc, entry.name, several) from None
        plans.append((entry.name, cfg, count))
    check_memory([(name, cfg, count.count) for name, cfg, count in plans])
    loaded: list[LoadedModel] = []
    try:
        for name, cfg, count in plans:
            try:
                backend = create(cfg, count.count)
            except BackendError as exc:
                raise _named(exc, name, several) from None
            loaded.append(LoadedModel(name, backend, count.source))
    except BaseException:
        for model in loaded:
            model.backend.close()
        raise
    return loaded


def _named(exc: BackendError, model: str, several: bool) -> BackendError:
    """The error as it was (one model), or naming the model it is about (several)."""
    return type(exc)(f"model {model}: {exc}") if several else exc


class UnknownModel(LookupError):
    """A request named a model this board does not serve."""


def choose(served: dict[str, ServedModel], default: str, name: str, node: str) -> ServedModel:
    """The model a request names ("" = the default), or UnknownModel listing what is served."""
    found = served.get(name or default)
    if found is None:
        names = ", ".join(served)
        raise UnknownModel(f"board {node} serves no model {name!r}: it serves {names} (default {default})")
    return found


@dataclass(eq=False)
class ServedModel:
    """A loaded model and the pool of workers that run its contexts on this board."""

    name: str
    backend: Backend
    pool: WorkerPool
    contexts_source: str
    served: int = 0

    def status(self, default: bool) -> pb.ModelStatus:
        return pb.ModelStatus(
            name=self.name,
            default=default,
            model_sha256=self.backend.model_sha256,
            contexts=self.pool.size,
            contexts_source=self.contexts_source,
            in_flight=self.pool.busy,
            queue_depth=self.pool.waiting,
            served_total=self.served,
            input_size=self.backend.input_size,
            classes=len(self.backend.class_names),
            class_names=self.backend.class_names,
        )
