"""YAML configuration for the agent and the scheduler, validated at start-up.

Every error names the file, the field and what is allowed, so a typo in /etc/npudure/*.yml reads
like ``/etc/npudure/agent.yml: backend: 'rknnn' is not allowed; use one of: rknn, onnx, sim``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

# The one list of each (issue #48): the config fields' types, and the tuples every other user imports.
# The roles' argument specs and vars are checked against them (tests/unit/test_one_place_per_fact.py).
BackendName = Literal["rknn", "onnx", "sim"]
PolicyName = Literal["round_robin", "least_inflight", "p2c", "ect", "heartbeat_least_queue"]
BACKENDS: tuple[str, ...] = get_args(BackendName)
POLICIES: tuple[str, ...] = get_args(PolicyName)

Port = Annotated[int, Field(ge=0, le=65535)]
# Inference contexts one agent may run (AgentConfig.contexts, `npudure local --contexts`).
MIN_CONTEXTS, MAX_CONTEXTS = 1, 64


class ConfigError(Exception):
    """A configuration problem, worded for the person who wrote the file."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_address(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not host:port (for example 0.0.0.0:50051)")
    return value


class TlsConfig(_Strict):
    """Mutual TLS: this service's certificate and key, and the CA its peers must be signed by."""

    ca: str
    cert: str
    key: str
    # The fleet's CRL (npudure pki revoke): peers whose certificate it lists are refused. null: crl.pem
    # beside ``ca``; an absent file revokes nothing. The scheduler re-reads it on reload, the agent at start.
    crl: str | None = None


class AdminConfig(_Strict):
    """Who may call admin RPCs (active set, policy, drain, lease, CPU cap, fault injection).

    With TLS: peers whose certificate CN is in ``identities``. With ``token_file``: callers that send
    ``authorization: Bearer <token>``. With neither, every admin RPC is refused (secure by default);
    ``insecure_open: true`` opens them to anyone who can reach the port (a closed test network only).
    """

    identities: list[str] = ["npudure-admin"]
    # One token per line: every line is accepted, the first is the one this service sends (towards the
    # agents). A rotation writes "old\nnew", then "new\nold", then "new" (docs/security.md).
    token_file: str | None = None
    insecure_open: bool = False


class ShutdownConfig(_Strict):
    """SIGTERM: health NOT_SERVING, ``drain_s`` for health checks and monitors to notice, then at most
    ``grace_s`` for the requests in flight (gRPC sends GOAWAY). TimeoutStopSec covers both."""

    # Two scheduler health intervals (0.5 s) with margin; proxyless clients watch health (immediate).
    drain_s: float = Field(1.5, ge=0, le=60)
    # At least the request deadline: a request accepted before the stop finishes.
    grace_s: float = Field(10.0, ge=0, le=600)


class ServerLimits(_Strict):
    """What one client may hold on a gRPC server (npudure/service/grpc_limits.py; docs/security.md)."""

    # TCP connections at once; beyond it new ones are closed on accept (keep under LimitNOFILE).
    max_connections: int = Field(512, ge=1, le=100_000)
    # HTTP/2 streams (calls) at once on one connection. Well above what one client connection carries
    # (the bench spreads its load over 2): C-core refuses streams near the cap while finished ones
    # are still being released.
    max_streams_per_connection: int = Field(256, ge=1, le=10_000)
    # Calls being received or handled at once, all connections together (each may hold up to
    # max_message_bytes): null = derived from queue_limit. Beyond it RESOURCE_EXHAUSTED.
    max_concurrent_rpcs: int | None = Field(None, ge=1, le=1_000_000)
    # A connection with no call for this long is closed (GOAWAY).
    max_connection_idle_s: float = Field(300.0, gt=0, le=86400)
    # Every connection is closed after this long (+/-10% jitter), after a grace for its calls: the
    # bound on a request body that stops arriving (gRPC has no per-stream body timeout).
    max_connection_age_s: float = Field(600.0, gt=0, le=86400)
    max_connection_age_grace_s: float = Field(30.0, ge=0, le=3600)
    # Streaming calls (health Watch, route follow) open at once, all clients together and from one
    # client address: each holds one of max_concurrent_rpcs while it lives, so a stream flood may take
    # at most these, never the calls frames and status need (npudure/service/stream_cap.py).
    max_streams: int = Field(64, ge=1, le=100_000)
    # With max_concurrent_rpcs null: the share of the host's RAM that request bodies in flight may
    # hold at most (calls at once <= this x RAM / max_message_bytes; npudure/service/grpc_limits.py).
    body_memory_fraction: float = Field(0.25, gt=0, le=1)
    max_streams_per_peer: int = Field(16, ge=1, le=100_000)


class SimConfig(_Strict):
    """The emulated RK3576 NPU (see npudure/backends/sim.py for the calibrated model)."""

    # Stretches every service time: 10 makes a board 10x slower, so one small machine can host many.
    time_scale: float = Field(1.0, gt=0, le=1000)
    # Board CPU clock cap in MHz (the heterogeneity dial); null = no cap.
    cpu_cap_mhz: int | None = Field(None, ge=100, le=5000)
    # Coefficient of variation of a frame's NPU time (lognormal), 0 = none. The CPU phase varies by the
    # model's own spread whatever this says (npudure/backends/sim_npu.py).
    jitter_cv: float = Field(0.03, ge=0, le=1)
    seed: int = 0
    # SYNTHETIC detections: up to this many made-up boxes per frame, seeded by the frame's pixels (the
    # same frame always gets the same boxes), so box handling can be checked end to end. 0 = none
    # (the emulated NPU detects nothing); they are never a model's output.
    synthetic_detections: int = Field(0, ge=0, le=100)


class PostprocessConfig(_Strict):
    score_threshold: float = Field(0.25, gt=0, lt=1)
    iou_threshold: float = Field(0.45, gt=0, le=1)
    max_detections: int = Field(300, ge=1, le=10000)


class AffinityConfig(_Strict):
    # Pin NPU submit workers to the big cores and gRPC I/O to the little ones (no-op on uniform cores).
    pin_workers_to_big: bool = True
    pin_io_to_little: bool = True
    sysfs_root: str = "/sys"


ModelName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
# What a board's single `model:` (or a sim board without models) is called: the HTTP API's default
# model_name, so `/v1/vision/custom/yolov8n` and named gRPC requests keep reaching it.
DEFAULT_MODEL_NAME = "yolov8n"


class ModelEntry(_Strict):
    """One model of a board that serves several (AgentConfig.models, docs/models.md)."""

    # The name requests use (InferRequest.model, /v1/vision/custom/<name>).
    name: ModelName
    # .rknn / .onnx as for AgentConfig.model; the sim backend ignores it (a sim model is a name).
    model: str | None = None
    model_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    class_names: list[str] | None = Field(None, min_length=1, max_length=100000)
    input_size: int | None = Field(None, ge=32, le=4096, multiple_of=32)
    # This model's context pool; null = the agent's `contexts`.
    contexts: int | Literal["auto"] | None = None
    # The model a request that names none gets; none marked: the first.
    default: bool = False

    @field_validator("contexts", mode="before")
    @classmethod
    def _contexts(cls, value: object) -> object:
        if value is None or value == "auto" or (type(value) is int and MIN_CONTEXTS <= value <= MAX_CONTEXTS):
            return value
        raise ValueError(f"contexts is a whole number from {MIN_CONTEXTS} to {MAX_CONTEXTS}, or auto")


class AgentConfig(_Strict):
    node_name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    listen: str = "0.0.0.0:50051"
    # Prometheus on the listen host at this port (0 = off), or at metrics_listen "host:port" when set.
    # Default outside 9100-9999, the common exporter range (docs/metrics.md).
    metrics_port: Port = 50091
    metrics_listen: str | None = None
    backend: BackendName = "sim"
    # .rknn for the rknn backend, .onnx for the onnx backend; unused by sim.
    model: str | None = None
    # If set, the model file must hash to this (the fleet runs one model).
    model_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    # The model's class names by id and input side; null = read from the model (ONNX metadata, the
    # .rknn.json beside an .rknn), else COCO-80 at 640. `npudure model convert` records both.
    class_names: list[str] | None = Field(None, min_length=1, max_length=100000)
    input_size: int | None = Field(None, ge=32, le=4096, multiple_of=32)
    # The board's NPU cores (RK3576 2, RK3588 3): left out, the SoC's count (npudure/board/soc.py),
    # else 2. They bound the core masks; how many contexts run is ``contexts``.
    npu_cores: int = Field(2, ge=1, le=16)
    # Inference contexts, each with its own worker thread: a throughput knob, not the core count (the
    # reference's RK3576: 8 contexts beat 4 by 27%). auto: the count recorded beside the model, else the
    # SoC's default (npudure/backends/contexts.py); onnx: npu_cores CPU sessions.
    contexts: int | Literal["auto"] = "auto"
    # Which NPU cores each rknn context may use: auto (the runtime picks; the reference's best), per_core
    # (context i on core i % npu_cores) or all (every context on every core). See npudure/backends/rknn.py.
    core_mask: Literal["auto", "per_core", "all"] = "auto"
    # Threads per ONNX Runtime session.
    onnx_threads: int = Field(1, ge=1, le=64)
    # Frames waiting for a free context beyond this are refused with RESOURCE_EXHAUSTED.
    queue_limit: int = Field(64, ge=1, le=100000)
    # A worker busy longer than this is hung: health turns NOT_SERVING until it returns.
    hang_timeout_s: float = Field(10.0, gt=0, le=3600)
    # Seconds a context stays hung (NOT_SERVING) past hang_timeout_s before a new context replaces it
    # and the board serves again; null = never (NOT_SERVING until the hung call returns).
    hang_recovery_s: float | None = Field(30.0, gt=0, le=3600)
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    tls: TlsConfig | None = None
    # The scheduler's certificate CN is an admin of the agents (it forwards SetNodeCpuCap).
    admin: AdminConfig = AdminConfig(identities=["npudure-admin", "npudure-scheduler"])
    sim: SimConfig = SimConfig()
    postprocess: PostprocessConfig = PostprocessConfig()
    affinity: AffinityConfig = AffinityConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
    limits: ServerLimits = ServerLimits()
    # Several models on one board, each with its own context pool (npudure/agent/models.py); null = the
    # one `model` above, served as DEFAULT_MODEL_NAME.
    models: list[ModelEntry] | None = Field(None, min_length=1, max_length=32)

    _addr = field_validator("listen")(classmethod(lambda cls, v: _check_address(v)))

    @model_validator(mode="after")
    def _one_model_set(self) -> AgentConfig:
        if self.models is not None and (
            self.model is not None or self.class_names is not None or self.input_size is not None
        ):
            raise ValueError("set either models or model (with class_names, input_size), not both")
        return self

    @field_validator("models")
    @classmethod
    def _named_once(cls, models: list[ModelEntry] | None) -> list[ModelEntry] | None:
        names = [m.name for m in models or ()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed twice: each model needs its own name")
        if sum(m.default for m in models or ()) > 1:
            raise ValueError("more than one marked default: mark one (or none: the first)")
        return models

    @field_validator("contexts", mode="before")
    @classmethod
    def _contexts(cls, value: object) -> object:
        # One clear line instead of pydantic's two union branches (int, literal) each failing.
        if value == "auto" or (type(value) is int and MIN_CONTEXTS <= value <= MAX_CONTEXTS):
            return value
        raise ValueError(f"contexts is a whole number from {MIN_CONTEXTS} to {MAX_CONTEXTS}, or auto")


class HttpApiConfig(_Strict):
    """The DeepStack / CodeProject.AI-compatible HTTP detection API (npudure/scheduler/http_api.py)."""

    # On the scheduler's listen host at this port, or at listen "host:port" when set.
    port: Port = 50080
    listen: str | None = None
    # A file holding the API key clients must send as the form field api_key; null = no key.
    api_key_file: str | None = None
    # Largest request body (the posted image and its form fields); beyond it HTTP 413.
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    # Requests being read or inferred at once; beyond it HTTP 503 with Retry-After.
    max_concurrency: int = Field(64, ge=1, le=100000)
    # Connections open at once (keep-alive ones too); beyond it a new one is answered 503 and closed.
    # Keep it well under the service's LimitNOFILE (65536), which the gRPC port's connections share.
    max_connections: int = Field(4096, ge=1, le=1_000_000)
    # Largest posted image, in pixels (width x height, read from its header; the boards decode it and
    # take at most 40 MP, npudure.vision.frames.MAX_IMAGE_PIXELS, whatever this says).
    max_image_pixels: int = Field(7680 * 4320, ge=1, le=200_000_000)
    # A request body must arrive within this (a slow-loris upload gets HTTP 408).
    read_timeout_s: float = Field(10.0, gt=0, le=3600)
    # With the scheduler's tls: require a client certificate signed by its CA (Frigate and most NVRs
    # cannot present one: set false for server-only TLS, then set an api_key_file).
    tls_client_auth: bool = True
    # A request's deadline: it is dropped wherever it waits past it (a client that hangs up is dropped at
    # once). null = the scheduler's request_timeout_s.
    request_timeout_s: float | None = Field(None, gt=0, le=3600)
    # The name /v1/vision/custom/list gives the default model (Blue Iris then posts to custom/<name>);
    # null = the boards' own name for it (a single-model board's is DEFAULT_MODEL_NAME, yolov8n). The
    # other models are listed by their own names (docs/http-api.md).
    model_name: ModelName | None = None

    _addr = field_validator("listen")(classmethod(lambda cls, v: v if v is None else _check_address(v)))


class ZmqApiConfig(_Strict):
    """Frigate's native remote detector (`type: zmq`; npudure/scheduler/zmq_api.py, docs/frigate-zmq.md)."""

    # On the scheduler's listen host at this port (Frigate's docs use 5555), or at listen "host:port".
    port: Port = 5555
    listen: str | None = None
    # Frigate's own request_timeout_ms: a frame not answered by then is given up by Frigate, so it is
    # dropped here too, wherever it waits (set it to the detector's request_timeout_ms).
    request_timeout_ms: int = Field(200, ge=1, le=600_000)
    # Frames worked on at once; beyond it a frame is answered with zeros at once (Frigate: empty).
    max_concurrency: int = Field(256, ge=1, le=100_000)
    # One more endpoint per model, on the same host: {model: port}. Frigate's zmq detector names no
    # model, so a Frigate detector picks one by its endpoint; the main port serves the default model.
    models: dict[ModelName, Port] = Field(default_factory=dict, max_length=32)

    _addr = field_validator("listen")(classmethod(lambda cls, v: v if v is None else _check_address(v)))

    @model_validator(mode="after")
    def _ports_differ(self) -> ZmqApiConfig:
        ports = [p for p in (self.port, *self.models.values()) if p]  # 0: any free port, each its own
        if len(set(ports)) != len(ports):
            raise ValueError(f"zmq_api: each model needs a port of its own, apart from port {self.port}")
        return self


class BoardConfig(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    address: str
    # The models the board serves, its default first, until it reports them itself (NodeStatus.models);
    # null = what it reports (an agent that reports none serves the cluster's default model only).
    models: list[ModelName] | None = Field(None, min_length=1, max_length=32)

    _addr = field_validator("address")(classmethod(lambda cls, v: _check_address(v)))


class SchedulerConfig(_Strict):
    listen: str = "0.0.0.0:50050"
    # As for the agent: metrics on the listen host at metrics_port, or at metrics_listen "host:port".
    metrics_port: Port = 50090
    metrics_listen: str | None = None
    policy: PolicyName = "least_inflight"
    # gRPC channels per board; 2 was the reference's tuned point at its operating point.
    connections_per_board: int = Field(2, ge=1, le=64)
    # A board's pipeline depth: requests in flight to one board at most.
    board_max_inflight: int = Field(8, ge=1, le=1024)
    # Requests waiting for a free board at most; beyond it RESOURCE_EXHAUSTED.
    queue_limit: int = Field(1024, ge=0, le=1_000_000)
    # Deadline applied when the client sets none.
    request_timeout_s: float = Field(10.0, gt=0, le=3600)
    # One board attempt may take at most this long (an NPU hang costs this, then a retry elsewhere).
    board_timeout_s: float = Field(2.0, gt=0, le=3600)
    # Consecutive failures that mark a board down; good health checks that bring it back.
    failure_threshold: int = Field(3, ge=1, le=100)
    recovery_checks: int = Field(3, ge=1, le=100)
    health_interval_s: float = Field(0.5, gt=0, le=60)
    # How often board status (telemetry, queue depth) is polled; only heartbeat_least_queue scores on it.
    status_interval_s: float = Field(1.0, gt=0, le=60)
    # Boards hotter than this (any thermal zone, deg C) take no new requests; null = no limit.
    thermal_limit_c: float | None = Field(95.0, gt=0, le=150)
    # ECT's moving average of per-board service time.
    ewma_alpha: float = Field(0.2, gt=0, le=1)
    # Seconds to wait at start-up for boards to answer before reporting the unreachable ones.
    startup_wait_s: float = Field(10.0, ge=0, le=600)
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    # Mutual TLS for clients and, with the same certificate as client identity, towards the agents.
    tls: TlsConfig | None = None
    admin: AdminConfig = AdminConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
    # Drains, active set and policy kept across restarts (JSON, written atomically); null: under systemd
    # $STATE_DIRECTORY/state.json (StateDirectory= in the unit), else not kept.
    state_file: str | None = None
    # The DeepStack-compatible HTTP API; null = off.
    http_api: HttpApiConfig | None = None
    # Frigate's zmq detector endpoint; null = off.
    zmq_api: ZmqApiConfig | None = None
    boards: list[BoardConfig] = Field(min_length=1)
    limits: ServerLimits = ServerLimits()

    _addr = field_validator("listen")(classmethod(lambda cls, v: _check_address(v)))

    @field_validator("boards")
    @classmethod
    def _unique_boards(cls, boards: list[BoardConfig]) -> list[BoardConfig]:
        seen: set[str] = set()
        for board in boards:
            if board.name in seen:
                raise ValueError(f"board name {board.name!r} appears twice; names must be unique")
            seen.add(board.name)
        return boards


Model = TypeVar("Model", bound=BaseModel)


def _describe(error: ErrorDetails) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "(top level)"
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    if kind == "literal_error":
        return f"{where}: {given!r} is not allowed; use one of: {ctx.get('expected', '')}"
    if kind == "extra_forbidden":
        return f"{where}: unknown field (check the spelling; see the example config in the README)"
    if kind == "missing":
        return f"{where}: required field is missing"
    message = error["msg"].removeprefix("Value error, ")  # our validators' own words need no label
    if not error["loc"]:  # a rule across fields: the whole file is no help
        return f"{where}: {message}"
    return f"{where}: {message} (got {given!r})"


def parse(model: type[Model], data: Any, source: str) -> Model:
    """Validate ``data`` against ``model``; raise ConfigError naming ``source`` and every bad field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of fields at the top level, got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = "\n  ".join(_describe(e) for e in exc.errors())
        raise ConfigError(f"{source}: invalid configuration\n  {lines}") from None


def load(model: type[Model], path: str | Path) -> Model:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found (pass --config with the right path)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse(model, data, str(path))
